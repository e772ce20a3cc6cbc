-- resolve: KEYS[1] the entry's key; ARGV[1] the retention in ms; ARGV[2] the start of the
-- settled entry, built by the client (`{"status":"done","result":…` or
-- `{"status":"failed","error":…`), or '' to release (delete) the entry; ARGV[3] its settling
-- time's member, `completedAt` or `failedAt`; ARGV[4] the owner seen, as the entry holds it,
-- after a '=' ('' when the entry was seen without one); ARGV[5] the attempts seen (0: not
-- recorded); ARGV[6] '1' to act while the lease is live (forced), else '0'.
--
-- For operators and verify probes: settles a running entry (ours in today's shape or the
-- previous one, another writer's) only if it is the attempt the caller saw (the same owner
-- and attempts) and its lease has passed unless forced, in the same script that checks it,
-- so it never overwrites an entry that settled meanwhile, a live claim, or a claim made after
-- the caller looked. Returns 1 when applied, 0 when there is no live entry, else {value,
-- PTTL, now} of the entry found (settled, refused, or not an entry at all), which the client
-- judges again to say why.
local now = now_ms()
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
local seen_owner = nil
if ARGV[4] ~= '' then
  seen_owner = string.sub(ARGV[4], 2)
end
local seen_attempts = tonumber(ARGV[5])
local forced = ARGV[6] == '1'
local pttl = redis.call('PTTL', KEYS[1])

-- Whether a lease kept as `retention` ms below the key's PTTL, or ending at `lease_until` on
-- the server's clock, is still live (as the client's decoder judges it).
local function live(retention, lease_until)
  if retention ~= nil then
    return pttl > retention
  end
  if lease_until ~= nil then
    return lease_until > now
  end
  return true
end

local e = ours(value)
if e ~= nil then
  if e.owner ~= seen_owner or e.attempts ~= seen_attempts
    or (not forced and live(e.retention, e.lease_until)) then
    return existing(KEYS[1], value, pttl, nil)
  end
  if ARGV[2] == '' then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], settled_value(ARGV[2], e, ARGV[3], now), 'PX', ARGV[1])
  end
  return 1
end

-- Our shape before `leaseUntil` (the key expired with the lease), then any other writer's:
-- decoded only to read its status, owner, attempts and lease; nothing decoded is written back.
local started, fingerprint = string.match(value,
  '^{"status":"running","startedAt":(%d+),"owner":"%x+","fingerprint":"(%x+)"}$')
local ok, decoded = pcall(cjson.decode, value)
local running = ok and type(decoded) == 'table' and decoded.status == 'running'
  and (decoded.owner == nil or type(decoded.owner) == 'string')
  and (decoded.fingerprint == nil or type(decoded.fingerprint) == 'string')
if not running then
  return existing(KEYS[1], value, pttl, nil)
end
if started == nil then
  started = string.match(value, '^{"status":"running","startedAt":(%d+)[,}]')
end
local attempts = 0
if type(decoded.attempts) == 'number' then
  attempts = decoded.attempts
end
local retention, lease_until = nil, nil
if type(decoded.retention) == 'number' then
  retention = decoded.retention
elseif type(decoded.leaseUntil) == 'number' then
  lease_until = decoded.leaseUntil
end
if decoded.owner ~= seen_owner or attempts ~= seen_attempts
  or (not forced and live(retention, lease_until)) then
  return existing(KEYS[1], value, pttl, nil)
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
