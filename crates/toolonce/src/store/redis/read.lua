-- read: KEYS[1] the entry's key. Returns {value, PTTL} ({value, PTTL, now} for the previous
-- version's shape: see `existing`), or nil if the key is absent or expired. One script so the
-- value and its expiry, which tells running from unknown, are read at the same instant.
local value = redis.call('GET', KEYS[1])
if not value then
  return false
end
return existing(KEYS[1], value, nil, nil)
