-- resolve: KEYS[1] the entry's key; ARGV[1] the retention in ms; ARGV[2] the start of the
-- settled entry, built by the client (`{"status":"done","result":…` or
-- `{"status":"failed","error":…`), or '' to release (delete) the entry; ARGV[3] its settling
-- time's member, `completedAt` or `failedAt`.
--
-- For operators: settles a running entry, live or unknown, whoever holds it (ours in today's
-- shape or the previous ones, another writer's), in the same script that checks it is still running, so it
-- never overwrites an entry that settled meanwhile. Returns 1 when applied, 0 when there is no
-- live entry, else {value, PTTL, now} of the entry found (settled, or not an entry at all).
local now = now_ms()
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
local e = ours(value)
if e == nil then
  -- Our shape before `leaseUntil` (the key expired with the lease), then any other writer's:
  -- what matters is only whether it says running.
  local started, fingerprint = string.match(value,
    '^{"status":"running","startedAt":(%d+),"owner":"%x+","fingerprint":"(%x+)"}$')
  local running = started ~= nil
  if not running then
    -- Decoded only to read it: nothing decoded here is written back.
    local ok, decoded = pcall(cjson.decode, value)
    running = ok and type(decoded) == 'table' and decoded.status == 'running'
      and (decoded.owner == nil or type(decoded.owner) == 'string')
      and (decoded.fingerprint == nil or type(decoded.fingerprint) == 'string')
    started = string.match(value, '^{"status":"running","startedAt":(%d+)[,}]')
  end
  if not running then
    return existing(KEYS[1], value, nil, now)
  end
  if ARGV[2] == '' then
    redis.call('DEL', KEYS[1])
    return 1
  end
  local settled = ARGV[2]
  if started then
    settled = settled .. ',"startedAt":' .. started
  end
  settled = settled .. ',"' .. ARGV[3] .. '":' .. fmt(now) .. ',"settledAt":' .. fmt(now)
  if fingerprint then
    settled = settled .. ',"fingerprint":"' .. fingerprint .. '"'
  end
  redis.call('SET', KEYS[1], settled .. '}', 'PX', ARGV[1])
  return 1
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], settled_value(ARGV[2], e, ARGV[3], now), 'PX', ARGV[1])
end
return 1
