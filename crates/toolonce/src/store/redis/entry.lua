-- Shared helpers: reading our running entry by its exact shape, and writing entries.
--
-- Only the scripts here write entries that have an owner, always in exactly this shape:
--
--   {"status":"running","startedAt":S,"leaseUntil":L,"owner":"<hex>","fingerprint":"<hex>",
--    "firstStartedAt":F,"attempts":N<about>
--
-- where <about> is `}` or `,"scope":…,"tool":…,"detail":…}` as the client encoded it (JSON
-- strings, so nothing in it can reach back into the fixed members before it). One anchored
-- pattern both checks the status and reads the fields. Anything else (a settled entry, another
-- writer's, garbage) is simply not ours. Reading the fields as text keeps the numbers exact
-- and needs no cjson, which would round numbers to 14 digits and could raise on odd values.

local function fmt(n)
  return string.format('%d', n)
end

-- Our running entry taken apart, or nil.
local function ours(value)
  local started, lease_until, owner, fingerprint, first, attempts, about = string.match(value,
    '^{"status":"running","startedAt":(%d+),"leaseUntil":(%d+),"owner":"(%x+)",'
    .. '"fingerprint":"(%x+)","firstStartedAt":(%d+),"attempts":(%d+)(.*)$')
  if started == nil then
    return nil
  end
  local lead = string.sub(about, 1, 1)
  if string.sub(about, -1) ~= '}' or (lead ~= ',' and about ~= '}') then
    return nil
  end
  return {
    started = started,
    lease_until = tonumber(lease_until),
    owner = owner,
    fingerprint = fingerprint,
    first = first,
    attempts = tonumber(attempts),
    about = about,
  }
end

-- The running entry of `ours` as text.
local function running_value(e)
  return '{"status":"running","startedAt":' .. e.started .. ',"leaseUntil":' .. fmt(e.lease_until)
    .. ',"owner":"' .. e.owner .. '","fingerprint":"' .. e.fingerprint .. '","firstStartedAt":'
    .. e.first .. ',"attempts":' .. fmt(e.attempts) .. e.about
end

-- A settled entry: `head` (`{"status":"done","result":…` or `{"status":"failed","error":…`,
-- built by the client), then what it keeps of its running entry `e`, the settling time under
-- `at_field` (`completedAt` or `failedAt`, which today's readers know) and `settledAt`.
local function settled_value(head, e, at_field, now)
  return head .. ',"startedAt":' .. e.started .. ',"' .. at_field .. '":' .. fmt(now)
    .. ',"settledAt":' .. fmt(now) .. ',"fingerprint":"' .. e.fingerprint .. '","firstStartedAt":'
    .. e.first .. ',"attempts":' .. fmt(e.attempts) .. e.about
end

-- Our running entry under `key` if `owner` holds it, whether its lease is live or expired
-- (unknown): the owner is fenced, not the lease. Checked in the same script as the write it
-- guards, so no other client can run between the check and the write.
local function owned(key, owner)
  local value = redis.call('GET', key)
  if not value then
    return nil
  end
  local e = ours(value)
  if e == nil or e.owner ~= owner then
    return nil
  end
  return e
end

-- What the read and claim scripts answer for an existing entry: the value, its PTTL and the
-- server's clock, so the client tells running from unknown by the server's time. The clock is
-- read (with `now` nil) only when the value carries a `leaseUntil`, the one field the client
-- compares with it: a settled entry, the common replay, is answered as {value, PTTL} without
-- the `TIME` call, about a quarter of the script's cost (measured with redis-benchmark on
-- Redis 7.0: 4.2 against 3.2-3.5 µs per call in INFO commandstats).
local function existing(key, value, now)
  if now == nil and string.find(value, '"leaseUntil"', 1, true) then
    now = now_ms()
  end
  if now == nil then
    return {value, redis.call('PTTL', key)}
  end
  return {value, redis.call('PTTL', key), now}
end
