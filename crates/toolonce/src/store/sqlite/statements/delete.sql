-- Deletes a key whatever its state, saying whether its row was live: ?1 key, ?2 now.
DELETE FROM toolonce_entries WHERE key = ?1 RETURNING kept_until > ?2
