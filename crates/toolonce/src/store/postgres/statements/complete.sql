-- Records a result: $1 key, $2 owner, $3 result JSON, $4 retention ms; fenced as renew.sql.
-- Placeholder: table.
-- The owner stays: which attempt settled the row, what a removal compares (remove_settled.sql).
UPDATE {{table}} SET state = 'done', lease_until = NULL, result = $3::text::json,
    settled_at = now(), expires_at = now() + $4::bigint * interval '1 millisecond'
WHERE key = $1 AND state = 'running' AND owner = $2 AND expires_at > now()
