-- The `startedAt` digits and the fingerprint of the entry text `value` if it is running and
-- held by `owner`, else nil.
--
-- Only claim.lua writes entries that have an owner, always in exactly this shape, so one
-- anchored pattern both checks the status and reads the fields. Anything else (a settled
-- entry, another writer's, garbage) is simply not owned. Reading the fields as text keeps
-- `startedAt` exact and needs no cjson, which is also slower and could raise on odd values.
local function held(value, owner)
  local started, holder, fingerprint = string.match(value,
    '^{"status":"running","startedAt":(%d+),"owner":"(%x+)","fingerprint":"(%x+)"}$')
  if holder == nil or holder ~= owner then
    return nil
  end
  return started, fingerprint
end

-- As `held`, for the entry under `key`. The owner sits inside the value, so it is checked
-- here, in the same script as the write it guards: no other client can run between the check
-- and the write.
local function owned(key, owner)
  local value = redis.call('GET', key)
  if not value then
    return nil
  end
  return held(value, owner)
end

-- The members a settled entry keeps from its running one, then the settling time, then `}`.
local function settled_tail(started, fingerprint, at_field, now)
  return ',"startedAt":' .. started .. ',"' .. at_field .. '":' .. string.format('%d', now)
    .. ',"fingerprint":"' .. fingerprint .. '"}'
end

