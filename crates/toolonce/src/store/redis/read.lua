-- read: KEYS[1] the entry's key. Returns {value, PTTL}, or nil if the key is absent or
-- expired. One script so the value and its expiry are read at the same instant.
local value = redis.call('GET', KEYS[1])
if not value then
  return false
end
return {value, redis.call('PTTL', KEYS[1])}
