-- Drops an owned entry after a transient error: $1 key, $2 owner; fenced as renew.sql.
-- Placeholder: table.
DELETE FROM {{table}} WHERE key = $1 AND state = 'running' AND owner = $2 AND expires_at > now()
