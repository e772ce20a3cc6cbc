-- A page of live entries: $1 keys after this one ('' for the first page: one plan that walks
-- the primary key in order, the filters checked on the rows it visits), $2 state (running,
-- unknown, done, failed) or NULL, $3 how many, $4 scope or NULL, $5 tool or NULL.
-- Placeholders: table, entry_columns (as in get.sql).
SELECT key, {{entry_columns}} FROM {{table}}
WHERE key > $1 AND expires_at > now()
    AND ($2::text IS NULL
         OR (CASE WHEN state = 'running' AND lease_until <= now() THEN 'unknown' ELSE state END) = $2)
    AND ($4::text IS NULL OR scope = $4) AND ($5::text IS NULL OR tool = $5)
ORDER BY key LIMIT $3
