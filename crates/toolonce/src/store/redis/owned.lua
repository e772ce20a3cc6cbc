-- The fence of complete, fail and renew: our running entry under `key` if the holder of
-- `token` owns it, live or unknown (the owner is fenced, not the lease), checked in the same
-- script as the write it guards. Returns its start (`started`, text), its retention in ms and
-- `rest`, the value from `,"fingerprint":` to its end, or nil.
--
-- Only the members that fence are checked, at fixed places and as plain text, because this
-- runs on every settle and needs no more (the whole-entry pattern of entry.lua, with its seven
-- captures, is kept for the rare claim paths): the value must start with `{"status":"running","startedAt":<digits>`, followed at
-- once by `,"owner":"<digest of token>","retention":<digits>,"fingerprint":"`, which only a
-- claim with this token writes (see entry.lua). What follows the fingerprint is kept as the
-- claim wrote it: the fingerprint, first start, attempts and the JSON-encoded about members,
-- which is exactly the tail a settled entry keeps.
local RUNNING = '{"status":"running","startedAt":'

local function owned(key, token)
  local value = redis.call('GET', key)
  if not value or string.sub(value, 1, 32) ~= RUNNING then
    return nil
  end
  local started_end = string.find(value, '%D', 33)
  if started_end == nil or started_end == 33 then
    return nil
  end
  local owner = ',"owner":"' .. redis.sha1hex(token) .. '","retention":'
  local retention_start = started_end + #owner
  if string.sub(value, started_end, retention_start - 1) ~= owner then
    return nil
  end
  local retention_end = string.find(value, '%D', retention_start)
  if retention_end == nil or retention_end == retention_start
    or string.sub(value, retention_end, retention_end + 15) ~= ',"fingerprint":"'
    or string.sub(value, -1) ~= '}' then
    return nil
  end
  return {
    started = string.sub(value, 33, started_end - 1),
    owner = string.sub(owner, 11, 50),
    retention = tonumber(string.sub(value, retention_start, retention_end - 1)),
    rest = string.sub(value, retention_end),
  }
end

-- The settled entry of `e` (from `owned`): `head` (`{"status":"done","result":…` or
-- `{"status":"failed","error":…`, built by the client), its start, the settling time under
-- `at_field` (`completedAt` or `failedAt`) and `settledAt`, the digest of the owner that
-- settled it (`owner`, which a removal compares), then the rest of the running entry.
local function settled(head, e, at_field, now)
  local at = string.format('%d', now)
  return head .. ',"startedAt":' .. e.started .. ',"' .. at_field .. '":' .. at
    .. ',"settledAt":' .. at .. ',"owner":"' .. e.owner .. '"' .. e.rest
end
