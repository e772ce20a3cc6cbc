-- The server's clock in whole milliseconds since the epoch. TIME is allowed before writes
-- because scripts are replicated by their effects (the default since Redis 5), so replicas and
-- the AOF get the resulting SET, never a re-run of TIME.
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

