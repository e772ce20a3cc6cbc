-- An operator deletes the settled entry it read, and no other (toolonce rm): ?1 key, ?2 now,
-- ?3 the state seen (done or failed), ?4 the attempts seen, ?5 the start seen, ?6 the settling
-- time seen (IS: NULL matches a row without one), ?7 the owner of the attempt that settled it
-- (IS, as ?6). A row deleted and claimed again since the read (running, or settled anew by
-- another attempt, even within the same millisecond) matches nothing.
DELETE FROM toolonce_entries
WHERE key = ?1 AND kept_until > ?2 AND state = ?3 AND attempts = ?4 AND started_at = ?5
    AND settled_at IS ?6 AND owner IS ?7
