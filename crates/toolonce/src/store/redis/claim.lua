-- claim: KEYS[1] the entry's key; ARGV[1] the lease in ms; ARGV[2] the retention in ms (how
-- long an entry whose lease expired unsettled is kept as unknown); ARGV[3] the caller's owner
-- token; ARGV[4] its fingerprint; ARGV[5] the entry's about members, built by the client (`}`
-- or `,"scope":…}`); ARGV[6] '1' to take over an unknown entry.
--
-- Returns 1 when the key was absent (or expired: Redis treats it as absent) and is now
-- running, or when our running entry holds the caller's own token, live or unknown (an earlier
-- attempt of this claim applied and its reply was lost, or the client re-sent the script):
-- then only the lease is renewed. Returns 2 when it took over an unknown entry of the same
-- fingerprint: new owner, start and lease, one more attempt, the first start and about kept.
-- Otherwise {value, PTTL, now} (or {value, PTTL}: see `existing`), read in this same
-- script. Scripts run one at a time, so deciding the winner and reading the existing entry are one atomic step: two callers can
-- never both win, and a loser always sees the entry that beat it.
--
-- The key lives for the lease plus the retention, so an entry whose lease ran out without a
-- settle stays, as unknown; whether the lease ran out is decided here, on the server's clock,
-- by `leaseUntil`. Running entries of other writers (no `leaseUntil`) are in flight for as
-- long as their key lives, as before.
local lease = tonumber(ARGV[1])
local keep = lease + tonumber(ARGV[2])
local value = redis.call('GET', KEYS[1])
if value then
  local e = ours(value)
  if e == nil then
    -- Not ours (settled, or another writer's): the clock only if the client needs it.
    return existing(KEYS[1], value, nil)
  end
  local now = now_ms()
  if e.owner == ARGV[3] then
    e.lease_until = now + lease
    redis.call('SET', KEYS[1], running_value(e), 'PX', keep)
    return 1
  end
  if now < e.lease_until or ARGV[6] ~= '1' or e.fingerprint ~= ARGV[4] then
    return existing(KEYS[1], value, now)
  end
  e.started = fmt(now)
  e.lease_until = now + lease
  e.owner = ARGV[3]
  e.attempts = e.attempts + 1
  redis.call('SET', KEYS[1], running_value(e), 'PX', keep)
  return 2
end
local now = now_ms()
redis.call('SET', KEYS[1], running_value({
  started = fmt(now),
  lease_until = now + lease,
  owner = ARGV[3],
  fingerprint = ARGV[4],
  first = fmt(now),
  attempts = 1,
  about = ARGV[5],
}), 'PX', keep)
return 1
