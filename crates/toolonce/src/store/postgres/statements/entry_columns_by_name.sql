-- The columns of an entry read by name with times as text or numbers (the TypeScript store,
-- whose driver reads a timestamp into a Date and so drops its microseconds): the times in ms
-- since the epoch (microseconds kept as the fraction, so equal times read equal and different
-- ones differ), and the start and settling exactly, to the microsecond in UTC (what a removal
-- compares). Filled in for the placeholder entry_columns.
(CASE WHEN state = 'running' AND lease_until <= now() THEN 'unknown' ELSE state END) AS state,
fingerprint, result::text AS result, error::text AS error, owner, attempts, scope, tool, detail,
(extract(epoch from started_at) * 1000)::float8 AS started_ms,
(extract(epoch from first_started_at) * 1000)::float8 AS first_started_ms,
(extract(epoch from settled_at) * 1000)::float8 AS settled_ms,
(extract(epoch from CASE WHEN state = 'running' THEN lease_until ELSE expires_at END) * 1000)::float8 AS expires_ms,
to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS started_mark,
to_char(settled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS settled_mark
