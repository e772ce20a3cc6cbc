-- fail: KEYS[1] the entry's key; ARGV[1] the owner token; ARGV[2] the retention in ms, or ''
-- for a transient error; ARGV[3] the start of the failed entry, built by the client:
-- `{"status":"failed","error":<json>`. If our running entry (live or unknown) still holds that
-- owner (checked in the same script as the write: fencing), deletes it (transient) or records
-- the failure for the retention (sticky). Returns 1 when applied, 0 when not the owner.
--
-- ARGV[4] and ARGV[5], optional: the running value the owner's claim wrote, byte for byte, and
-- the whole failed entry the client built from it ('' when transient), compared and written
-- as complete.lua does.
if ARGV[5] and redis.call('GET', KEYS[1]) == ARGV[4] then
  if ARGV[2] == '' then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], ARGV[5], 'PX', ARGV[2])
  end
  return 1
end
local e = owned(KEYS[1], ARGV[1])
if not e then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], settled(ARGV[3], e, 'failedAt', now_ms()), 'PX', ARGV[2])
end
return 1
