-- renew: KEYS[1] the entry's key; ARGV[1] the owner token; ARGV[2] the lease in ms.
-- If our running entry (live or unknown) still holds that owner (fencing: a stale owner cannot
-- keep alive an entry somebody else took over), the key's expiry becomes the new lease plus
-- the entry's retention, which moves the lease deadline to ARGV[2] from now on the server's
-- clock and keeps the retention after it. Returns 1 or 0.
--
-- ARGV[3] and ARGV[4], optional: the running value the owner's claim wrote, byte for byte, and
-- its retention in ms: when the key holds exactly ARGV[3] it is renewed with nothing to parse
-- (see complete.lua).
if ARGV[4] and redis.call('GET', KEYS[1]) == ARGV[3] then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + tonumber(ARGV[4]))
  return 1
end
local e = owned(KEYS[1], ARGV[1])
if not e then
  return 0
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + e.retention)
return 1
