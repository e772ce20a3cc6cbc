-- Shared helpers: reading our running entry by its exact shape, and writing entries.
--
-- A running entry that toolonce can fence has exactly this shape, whether the client wrote it
-- (the one-command claim, `SET … NX GET PX`) or a script did:
--
--   {"status":"running","startedAt":S,"owner":"<SHA-1 of the owner token, 40 hex>",
--    "retention":R,"fingerprint":"<hex>","firstStartedAt":F,"attempts":N<about>
--
-- where <about> is `}` or `,"scope":…,"tool":…,"detail":…}` as the client encoded it (JSON
-- strings, so nothing in it can reach back into the fixed members before it). The key lives
-- for the lease plus R ms: the lease is live while the key's PTTL is above R, on the server's
-- clock, with no timestamp in the value. The owner is stored as a digest, so a duplicate that
-- reads the value (every loser of a claim does) cannot settle the entry: the fenced scripts
-- hash the token they are given and compare digests.
--
-- The previous version's running entry (`"leaseUntil":L,"owner":"<token>"` after `startedAt`,
-- no `retention`) is read too, its lease judged by `leaseUntil` on the server's clock, so it
-- can be taken over or resolved; nobody running this version holds its token, so the fenced
-- scripts never match it. One anchored pattern per shape both checks the status and reads the
-- fields; anything else (a settled entry, another writer's, garbage) is simply not ours.
-- Reading the fields as text keeps the numbers exact and needs no cjson, which would round
-- numbers to 14 digits and could raise on odd values.

local function fmt(n)
  return string.format('%d', n)
end

local function about_ok(about)
  local lead = string.sub(about, 1, 1)
  return string.sub(about, -1) == '}' and (lead == ',' or about == '}')
end

-- Our running entry taken apart (`legacy` set for the previous version's shape), or nil.
local function ours(value)
  local started, owner, retention, fingerprint, first, attempts, about = string.match(value,
    '^{"status":"running","startedAt":(%d+),"owner":"(%x+)","retention":(%d+),'
    .. '"fingerprint":"(%x+)","firstStartedAt":(%d+),"attempts":(%d+)(.*)$')
  if started ~= nil then
    if not about_ok(about) then
      return nil
    end
    return {
      started = started,
      owner = owner,
      fingerprint = fingerprint,
      first = first,
      attempts = tonumber(attempts),
      retention = tonumber(retention),
      about = about,
    }
  end
  local lease_until
  started, lease_until, owner, fingerprint, first, attempts, about = string.match(value,
    '^{"status":"running","startedAt":(%d+),"leaseUntil":(%d+),"owner":"(%x+)",'
    .. '"fingerprint":"(%x+)","firstStartedAt":(%d+),"attempts":(%d+)(.*)$')
  if started == nil or not about_ok(about) then
    return nil
  end
  return {
    legacy = true,
    started = started,
    lease_until = tonumber(lease_until),
    owner = owner,
    fingerprint = fingerprint,
    first = first,
    attempts = tonumber(attempts),
    about = about,
  }
end

-- The running entry `e` as text, in today's shape (`e.owner` is the digest).
local function running_value(e)
  return '{"status":"running","startedAt":' .. e.started .. ',"owner":"' .. e.owner
    .. '","retention":' .. fmt(e.retention) .. ',"fingerprint":"' .. e.fingerprint
    .. '","firstStartedAt":' .. e.first .. ',"attempts":' .. fmt(e.attempts) .. e.about
end

-- A settled entry: `head` (`{"status":"done","result":…` or `{"status":"failed","error":…`,
-- built by the client), then what it keeps of its running entry `e`, the settling time under
-- `at_field` (`completedAt` or `failedAt`, which today's readers know), `settledAt` and the
-- owner's digest (`owner`: which attempt settled it, what a removal compares).
local function settled_value(head, e, at_field, now)
  return head .. ',"startedAt":' .. e.started .. ',"' .. at_field .. '":' .. fmt(now)
    .. ',"settledAt":' .. fmt(now) .. ',"owner":"' .. e.owner .. '","fingerprint":"'
    .. e.fingerprint .. '","firstStartedAt":' .. e.first .. ',"attempts":' .. fmt(e.attempts)
    .. e.about
end

-- What the read, claim and resolve scripts answer for an existing entry: the value and its
-- PTTL (which tells a running entry of today's shape from an unknown one), plus the server's
-- clock when the value carries a `leaseUntil` (the previous version's shape, judged by it).
local function existing(key, value, pttl, now)
  if pttl == nil then
    pttl = redis.call('PTTL', key)
  end
  if now == nil and string.find(value, '"leaseUntil"', 1, true) then
    now = now_ms()
  end
  if now == nil then
    return {value, pttl}
  end
  return {value, pttl, now}
end
