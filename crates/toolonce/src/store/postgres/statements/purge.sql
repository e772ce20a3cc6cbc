-- Deletes up to $1 expired rows, each by its own expiry through the expires_at index; rows
-- locked by a claim taking them over are skipped rather than waited for. Placeholder: table.
DELETE FROM {{table}} WHERE key IN (
    SELECT key FROM {{table}} WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)
