-- read: KEYS[1] the entry's key. Returns {value, PTTL, now} ({value, PTTL} for a value
-- without `leaseUntil`: see `existing`), or nil if the key is absent or expired. One script so the value, its expiry and the server's clock (which tells running
-- from unknown) are read at the same instant.
local value = redis.call('GET', KEYS[1])
if not value then
  return false
end
return existing(KEYS[1], value, nil)
