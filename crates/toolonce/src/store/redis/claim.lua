-- claim: KEYS[1] the entry's key; ARGV[1] the lease in ms; ARGV[2] the rest of the running
-- entry after startedAt, built by the client (`,"owner":"…","fingerprint":"…"}`); ARGV[3] the
-- caller's owner token.
--
-- Returns 1 when the key was absent (or expired: Redis treats it as absent) and is now
-- running for the lease, or when it is running with the caller's own token (an earlier attempt
-- of this claim applied and its reply was lost, or the client re-sent the script): then only
-- the lease is renewed. Otherwise {value, PTTL}, read in this same script. Scripts run one at a
-- time, so deciding the winner and reading the existing entry are one atomic step: two callers
-- can never both win, and a loser always sees the entry that beat it (there is no "set if
-- absent, then read" gap in which it could vanish).
local value = redis.call('GET', KEYS[1])
if value then
  if held(value, ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    return 1
  end
  return {value, redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[1], '{"status":"running","startedAt":' .. string.format('%d', now_ms())
  .. ARGV[2], 'PX', ARGV[1])
return 1
