-- complete: KEYS[1] the entry's key; ARGV[1] the owner token; ARGV[2] the retention in ms;
-- ARGV[3] the start of the done entry, built by the client: `{"status":"done","result":<json>`.
-- The result is spliced in as the client encoded it and never passes through cjson, which would
-- round numbers to 14 digits. Writes only if our running entry (live or unknown) still holds
-- that owner, in the same script as the check (fencing). Returns 1 when written, 0 when not
-- the owner.
--
-- ARGV[4] and ARGV[5], optional: the running value the owner's claim wrote, byte for byte, and
-- the whole done entry the client built from it (see native.rs). When the key holds exactly
-- ARGV[4] the entry is still the one this owner claimed (a takeover, a resolve or another
-- claim rewrites it), so ARGV[5] is written with nothing to parse; otherwise the fence below
-- decides by the owner's digest.
if ARGV[5] and redis.call('GET', KEYS[1]) == ARGV[4] then
  redis.call('SET', KEYS[1], ARGV[5], 'PX', ARGV[2])
  return 1
end
local e = owned(KEYS[1], ARGV[1])
if not e then
  return 0
end
redis.call('SET', KEYS[1], settled(ARGV[3], e, 'completedAt', now_ms()), 'PX', ARGV[2])
return 1
