-- claim: KEYS[1] the entry's key; ARGV[1] the lease in ms; ARGV[2] the retention in ms (how
-- long an entry whose lease expired unsettled is kept as unknown); ARGV[3] the caller's owner
-- token; ARGV[4] its fingerprint; ARGV[5] the new running entry, built by the client (the
-- digest of the token, its clock's start, 1 attempt, ARGV[2] as `retention`, the about
-- members): what `SET … NX GET PX` would write; ARGV[6] '1' to take over an unknown entry;
-- ARGV[7] the client's clock in ms, the start of a takeover.
--
-- The whole claim on servers without `SET … NX GET` (before Redis 7), and elsewhere the claim
-- of a key found running (by a lost claim reply of this very caller, another caller in flight,
-- or an unknown entry that may be taken over), which needs the key's PTTL and a fenced write.
--
-- Returns 1 when the key was absent (or expired: Redis treats it as absent) and is now
-- running, or when our running entry holds the caller's own token, live or unknown (an earlier
-- attempt of this claim applied and its reply was lost): then only the lease is renewed.
-- Returns 2 when it took over an unknown entry of the same fingerprint: new owner, start and
-- lease, one more attempt, the first start and about kept. Otherwise {value, PTTL} (plus the
-- server's clock for the previous version's shape: see `existing`), read in this same script.
-- Scripts run one at a time, so deciding the winner and reading the existing entry are one
-- atomic step: two callers can never both win, and a loser always sees the entry that beat it.
local keep = tonumber(ARGV[1]) + tonumber(ARGV[2])
local value = redis.call('GET', KEYS[1])
if not value then
  redis.call('SET', KEYS[1], ARGV[5], 'PX', keep)
  return 1
end
local e = ours(value)
if e == nil then
  -- Not ours (settled, or another writer's).
  return existing(KEYS[1], value, nil, nil)
end
local digest = redis.sha1hex(ARGV[3])
if not e.legacy and e.owner == digest then
  e.retention = tonumber(ARGV[2])
  redis.call('SET', KEYS[1], running_value(e), 'PX', keep)
  return 1
end
local pttl = redis.call('PTTL', KEYS[1])
local now = nil
local live
if e.legacy then
  now = now_ms()
  live = now < e.lease_until
else
  live = pttl > e.retention
end
if live or ARGV[6] ~= '1' or e.fingerprint ~= ARGV[4] then
  return existing(KEYS[1], value, pttl, now)
end
e.started = ARGV[7]
e.owner = digest
e.attempts = e.attempts + 1
e.retention = tonumber(ARGV[2])
redis.call('SET', KEYS[1], running_value(e), 'PX', keep)
return 2
