-- renew: KEYS[1] the entry's key; ARGV[1] the owner token; ARGV[2] the lease in ms.
-- Moves the lease deadline to ARGV[2] from now if our running entry (live or unknown) still
-- holds that owner (fencing: a stale owner cannot keep alive an entry somebody else took
-- over), keeping the retention the claim gave after the lease: the key's expiry minus the old
-- deadline. Returns 1 or 0.
local e = owned(KEYS[1], ARGV[1])
if not e then
  return 0
end
local now = now_ms()
local pttl = redis.call('PTTL', KEYS[1])
local after = 0
if pttl > 0 then
  after = math.max(0, now + pttl - e.lease_until)
end
local lease = tonumber(ARGV[2])
e.lease_until = now + lease
redis.call('SET', KEYS[1], running_value(e), 'PX', lease + after)
return 1
