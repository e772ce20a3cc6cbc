-- remove: KEYS[1] the entry's key; ARGV[1] the status seen, `done` or `failed`; ARGV[2] the
-- attempts seen (0: not recorded); ARGV[3] the settling time seen, in whole ms since the epoch
-- (`settledAt`, else `completedAt` or `failedAt`), or '' when the entry had none; ARGV[4] the
-- start seen, in whole ms (`startedAt`, else the settling time, else 0); ARGV[5] the digest of
-- the owner whose attempt settled it (`owner`), or '' when the entry had none. Runs after the
-- helpers of now.lua and entry.lua, as resolve.lua does.
--
-- For operators (`toolonce rm`): deletes a settled entry only if it is the one the caller read
-- (the same status, attempts, settling time, start and settling attempt, each read as the client's decoder reads
-- it: a member the writer did not record compares as absent), in the same script that checks
-- it. So a removal never deletes what came after the read: a live claim of the agent's retry,
-- or the entry that claim settled. Returns 1 when deleted, 0 when there is no live entry, else
-- {value, PTTL[, now]} of the entry found, as the read script answers, which the client
-- reports as changed.
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
local ok, decoded = pcall(cjson.decode, value)
if not ok or type(decoded) ~= 'table' or decoded.status ~= ARGV[1] then
  return existing(KEYS[1], value, nil, nil)
end

-- A time member as whole ms, as the client's decoder reads it: nil when absent (or not a
-- number), 0 when not a positive finite number.
local function ms(v)
  if type(v) ~= 'number' then
    return nil
  end
  if v > 0 and v < math.huge then
    return math.floor(v)
  end
  return 0
end

local settled = ms(decoded.settledAt)
if settled == nil then
  settled = ms(decoded.completedAt)
end
if settled == nil then
  settled = ms(decoded.failedAt)
end
local started = ms(decoded.startedAt)
if started == nil then
  started = settled or 0
end
local attempts = 0
if type(decoded.attempts) == 'number' and decoded.attempts >= 0 and decoded.attempts < math.huge then
  attempts = math.floor(math.min(decoded.attempts, 4294967295))
end
local seen_settled = nil
if ARGV[3] ~= '' then
  seen_settled = tonumber(ARGV[3])
end
-- The settling attempt tells apart an entry settled anew within the millisecond of the one read.
local settled_by = ''
if type(decoded.owner) == 'string' then
  settled_by = decoded.owner
end
if attempts ~= tonumber(ARGV[2]) or settled ~= seen_settled or started ~= tonumber(ARGV[4])
  or settled_by ~= ARGV[5] then
  return existing(KEYS[1], value, nil, nil)
end
redis.call('DEL', KEYS[1])
return 1
