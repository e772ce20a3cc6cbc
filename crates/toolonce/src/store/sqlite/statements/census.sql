-- How many live entries are in each state and how long ago the oldest unknown one's lease
-- ended, in milliseconds: one aggregate over the rows, no entry read out (a metrics scrape).
-- ?1 now. Columns: running, unknown, done, failed, the oldest unknown's wait (NULL: none).
SELECT count(*) FILTER (WHERE state = 'running' AND lease_until > ?1),
       count(*) FILTER (WHERE state = 'running' AND lease_until <= ?1),
       count(*) FILTER (WHERE state = 'done'),
       count(*) FILTER (WHERE state = 'failed'),
       ?1 - min(lease_until) FILTER (WHERE state = 'running' AND lease_until <= ?1)
FROM toolonce_entries
WHERE kept_until > ?1
