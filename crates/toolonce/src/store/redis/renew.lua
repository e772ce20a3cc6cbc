-- renew: KEYS[1] the entry's key; ARGV[1] the owner token; ARGV[2] the lease in ms.
-- If our running entry (live or unknown) still holds that owner (fencing: a stale owner cannot
-- keep alive an entry somebody else took over), the key's expiry becomes the new lease plus
-- the entry's retention, which moves the lease deadline to ARGV[2] from now on the server's
-- clock and keeps the retention after it. Returns 1 or 0.
local e = owned(KEYS[1], ARGV[1])
if not e then
  return 0
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + e.retention)
return 1
