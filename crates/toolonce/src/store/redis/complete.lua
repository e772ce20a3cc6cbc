-- complete: KEYS[1] the entry's key; ARGV[1] the owner token; ARGV[2] the retention in ms;
-- ARGV[3] the start of the done entry, built by the client: `{"status":"done","result":<json>`.
-- The result is spliced in as the client encoded it and never passes through cjson, which would
-- round numbers to 14 digits. Writes only if our running entry (live or unknown) still holds
-- that owner, in the same script as the check (fencing). Returns 1 when written, 0 when not
-- the owner.
local e = owned(KEYS[1], ARGV[1])
if not e then
  return 0
end
redis.call('SET', KEYS[1], settled(ARGV[3], e, 'completedAt', now_ms()), 'PX', ARGV[2])
return 1
