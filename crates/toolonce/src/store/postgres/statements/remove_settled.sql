-- An operator's removal of the settled entry it read, and no other: $1 key, $2 the state seen
-- (done or failed), $3 its attempts, $4 its start, $5 its settling time (NULL for none), $6
-- the owner of the attempt that settled it (NULL for none). A row deleted and claimed again
-- since the read (running, or settled anew by another attempt) matches nothing. Placeholder: table.
DELETE FROM {{table}} WHERE key = $1 AND expires_at > now() AND state = $2
    AND attempts = $3::integer AND started_at = $4::timestamptz
    AND settled_at IS NOT DISTINCT FROM $5::timestamptz AND owner IS NOT DISTINCT FROM $6::text
