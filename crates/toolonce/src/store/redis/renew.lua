-- renew: KEYS[1] the entry's key; ARGV[1] the owner token; ARGV[2] the lease in ms.
-- Extends the lease to ARGV[2] from now if the entry is still running with that owner
-- (fencing: a stale owner cannot keep alive an entry somebody else reclaimed). Returns 1 or 0.
if owned(KEYS[1], ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
