-- Deletes a key whatever its state, saying whether its row was live: $1 key. Placeholder: table.
DELETE FROM {{table}} WHERE key = $1 RETURNING expires_at > now()
