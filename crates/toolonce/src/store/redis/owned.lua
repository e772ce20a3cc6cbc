-- The decoded entry under `key` if it is running and held by `owner`, else nil. The owner sits
-- inside the JSON value, so it is read here, in the same script as the write it guards: no
-- other client can run between this check and that write. A value that is not a JSON object
-- (another writer's, or garbage) is simply not owned; pcall keeps cjson from raising on it.
local function owned(key, owner)
  local value = redis.call('GET', key)
  if not value then
    return nil
  end
  local ok, entry = pcall(cjson.decode, value)
  if not ok or type(entry) ~= 'table' or entry.status ~= 'running' or entry.owner ~= owner then
    return nil
  end
  return entry
end

-- The members a settled entry keeps from its running one, then the settling time, then `}`.
-- startedAt is an integer we wrote (13 digits, exact in a Lua number and printed with %d, so
-- nothing goes through cjson's 14-digit number formatting); the fingerprint is re-encoded as a
-- JSON string only.
local function settled_tail(entry, at_field, now)
  local tail = ''
  if type(entry.startedAt) == 'number' then
    tail = ',"startedAt":' .. string.format('%d', entry.startedAt)
  end
  tail = tail .. ',"' .. at_field .. '":' .. string.format('%d', now)
  if type(entry.fingerprint) == 'string' then
    tail = tail .. ',"fingerprint":' .. cjson.encode(entry.fingerprint)
  end
  return tail .. '}'
end

