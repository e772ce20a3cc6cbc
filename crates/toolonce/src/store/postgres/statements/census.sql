-- How many live entries are in each state and how long ago the oldest unknown one's lease
-- ended, in milliseconds on the database's clock: one aggregate over the rows, no entry read
-- out (a metrics scrape). No parameters. Columns: running, unknown, done, failed (bigint), the
-- oldest unknown's wait (bigint, NULL: none). Placeholders: table.
SELECT count(*) FILTER (WHERE state = 'running' AND lease_until > now()),
       count(*) FILTER (WHERE state = 'running' AND lease_until <= now()),
       count(*) FILTER (WHERE state = 'done'),
       count(*) FILTER (WHERE state = 'failed'),
       (extract(epoch FROM now() - min(lease_until)
           FILTER (WHERE state = 'running' AND lease_until <= now())) * 1000)::bigint
FROM {{table}}
WHERE expires_at > now()
