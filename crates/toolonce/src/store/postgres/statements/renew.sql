-- Extends the lease of an entry its owner holds: $1 key, $2 owner, $3 lease ms. The final
-- expiry moves with it: expires_at - lease_until is the retention the claim asked for (the SET
-- reads the row's old values). The fence of every owner's write: the entry is still running
-- (its lease live or run out, that is unknown), held by this owner, and not past its final
-- expiry. Placeholder: table.
UPDATE {{table}} SET lease_until = now() + $3::bigint * interval '1 millisecond',
    expires_at = now() + $3::bigint * interval '1 millisecond' + (expires_at - lease_until)
WHERE key = $1 AND state = 'running' AND owner = $2 AND expires_at > now()
