-- A claim: $1 key, $2 owner, $3 fingerprint, $4 lease ms, $5 retention ms, $6 whether an
-- unknown entry may be taken over, $7 scope, $8 tool, $9 detail. Placeholders: table, claim
-- (the claim function of the migrations).
--
-- A settled live row is answered by a plain SELECT (UNION ALL ... LIMIT 1: the function is
-- called only when that finds nothing); otherwise the claim function decides and reads in one
-- atomic step (crates/toolonce/src/store/postgres/sql.rs says why it is atomic). The function is
-- called in a select list (OFFSET 0 keeps the subquery from being flattened, which would call it
-- once per column) rather than in FROM, which would build its result type on every execution.
-- The row: won, took_over, then the columns of entry_columns.sql in its order.
(SELECT false, false, state, owner, fingerprint, started_at, expires_at, settled_at,
        result::text, error::text, scope, tool, detail, first_started_at, attempts
 FROM {{table}} WHERE key = $1 AND expires_at > now() AND state <> 'running')
UNION ALL
(SELECT (c).won, (c).took_over, (c).state, (c).owner, (c).fingerprint, (c).started_at,
        (c).expires_at, (c).settled_at, (c).result, (c).error, (c).scope, (c).tool, (c).detail,
        (c).first_started_at, (c).attempts
 FROM (SELECT {{claim}}($1, $2, $3, $4::bigint, $5::bigint, $6::boolean, $7, $8, $9) AS c
       OFFSET 0) AS called)
LIMIT 1
