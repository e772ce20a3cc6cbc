-- Schema version 3: entries say what they are (scope, tool, detail, first start, attempts), and a
-- running entry whose lease ran out unsettled is kept as `unknown` instead of counting as
-- absent.
--
-- `expires_at` becomes the row's final expiry for every state (so `get`, `purge` and the
-- index keep their meaning: past it, the row is absent), and the new `lease_until` holds the
-- lease deadline of a running row. `expires_at - lease_until` is the retention the claim
-- asked for, which renewals keep. `unknown` is not stored: it is a `running` row whose
-- `lease_until` has passed, judged on the database's clock by every statement that reads it.
--
-- Running rows of version 2 keep their lease as `lease_until` and, if still live, are kept
-- 24 hours (the default retention) past it, so an owner that dies after the upgrade leaves an
-- `unknown` entry rather than one that silently runs again. Their `attempts` stay 0 (not
-- recorded) and `first_started_at` NULL.
--
-- The claim function takes new arguments, so it is a new overload; the old signature is kept
-- with a body that refuses, so a process of an older build still connected says why its
-- claims fail instead of "function does not exist", and never claims with rules it does not
-- know (its renewals would not move `lease_until`).
--
-- Placeholders, replaced by the store (schema.rs, `render`) before the step runs, for a table
-- name already checked to be ASCII letters, digits and underscores:
--   {{table}}            the entries table, as a quoted identifier ("toolonce_entries")
--   {{expires_at_index}} its expiry index, quoted ("toolonce_entries_expires_at")
--   {{claim}}            its claim function, quoted ("toolonce_entries_claim")
--   {{lease_check}}      its lease constraint, quoted ("toolonce_entries_lease")
--   {{table_literal}}    the table name as a string literal ('toolonce_entries')
--   {{version_table}}    the schema version table (toolonce_schema)
-- Every step runs in the migration's one transaction, under its advisory lock, after the steps
-- numbered before it; the version table then records the last step's number.

ALTER TABLE {{table}}
    ADD COLUMN lease_until      timestamptz,
    ADD COLUMN scope            text,
    ADD COLUMN tool             text,
    ADD COLUMN detail           text,
    ADD COLUMN first_started_at timestamptz,
    ADD COLUMN attempts         integer NOT NULL DEFAULT 0;
UPDATE {{table}} SET lease_until = expires_at,
    expires_at = CASE WHEN expires_at > now() THEN expires_at + interval '24 hours'
                      ELSE expires_at END
WHERE state = 'running';
ALTER TABLE {{table}} ADD CONSTRAINT {{lease_check}}
    CHECK (state <> 'running' OR lease_until IS NOT NULL);

CREATE OR REPLACE FUNCTION {{claim}}(
    p_key text, p_owner text, p_fingerprint text, p_lease_ms bigint,
    OUT won boolean, OUT state text, OUT owner text, OUT fingerprint text,
    OUT started_at timestamptz, OUT expires_at timestamptz, OUT settled_at timestamptz,
    OUT result text, OUT error text)
LANGUAGE plpgsql VOLATILE AS $claim$
BEGIN
    RAISE EXCEPTION 'table % is at toolonce schema version 3, which this process''s build of toolonce does not know: upgrade it', {{table_literal}}
        USING ERRCODE = 'feature_not_supported';
END
$claim$;

-- claim(key, owner, fingerprint, lease_ms, retention_ms, takeover, scope, tool, detail): see
-- PostgresStore's Sql::new for why this is atomic.
CREATE FUNCTION {{claim}}(
    p_key text, p_owner text, p_fingerprint text, p_lease_ms bigint, p_retention_ms bigint,
    p_takeover boolean, p_scope text, p_tool text, p_detail text,
    OUT won boolean, OUT took_over boolean, OUT state text, OUT owner text, OUT fingerprint text,
    OUT started_at timestamptz, OUT expires_at timestamptz, OUT settled_at timestamptz,
    OUT result text, OUT error text, OUT scope text, OUT tool text, OUT detail text,
    OUT first_started_at timestamptz, OUT attempts integer)
LANGUAGE plpgsql VOLATILE AS $claim$
#variable_conflict use_column
DECLARE
    e {{table}}%ROWTYPE;
    lease_end timestamptz := now() + p_lease_ms * interval '1 millisecond';
    keep_end timestamptz := lease_end + p_retention_ms * interval '1 millisecond';
BEGIN
    took_over := false;
    LOOP
        SELECT * INTO e FROM {{table}} AS t WHERE t.key = p_key AND t.expires_at > now();
        IF NOT FOUND THEN
            -- Absent, or expired: take it. The unique index decides between concurrent takers.
            INSERT INTO {{table}} AS t (key, state, owner, fingerprint, started_at, expires_at,
                lease_until, scope, tool, detail, first_started_at, attempts)
            VALUES (p_key, 'running', p_owner, p_fingerprint, now(), keep_end,
                lease_end, p_scope, p_tool, p_detail, now(), 1)
            ON CONFLICT (key) DO UPDATE
                SET state = EXCLUDED.state, owner = EXCLUDED.owner,
                    fingerprint = EXCLUDED.fingerprint, started_at = EXCLUDED.started_at,
                    expires_at = EXCLUDED.expires_at, lease_until = EXCLUDED.lease_until,
                    scope = EXCLUDED.scope, tool = EXCLUDED.tool, detail = EXCLUDED.detail,
                    first_started_at = EXCLUDED.first_started_at, attempts = 1,
                    settled_at = NULL, result = NULL, error = NULL
                WHERE t.expires_at <= now()
            RETURNING * INTO e;
        ELSIF e.state <> 'running' THEN
            -- Settled: the caller loses, and nothing is written.
            won := false;
            EXIT;
        ELSIF e.owner = p_owner THEN
            -- The caller's own entry, live or unknown (an earlier attempt of this claim
            -- applied): renew it, fenced like every owner's write.
            UPDATE {{table}} AS t SET lease_until = lease_end,
                expires_at = greatest(t.expires_at, keep_end)
            WHERE t.key = p_key AND t.state = 'running' AND t.owner = p_owner
                AND t.expires_at > now()
            RETURNING * INTO e;
        ELSIF e.lease_until <= now() AND p_takeover
            AND (e.fingerprint IS NULL OR e.fingerprint = p_fingerprint) THEN
            -- Unknown, and the caller takes it over (with the same arguments: a conflicting
            -- call must not run under this key): a new owner and lease, one more attempt;
            -- what the entry is and when it first started stay. Fenced on the owner it saw, so
            -- of concurrent takers one wins and the others read its live entry.
            UPDATE {{table}} AS t SET owner = p_owner, started_at = now(), lease_until = lease_end,
                expires_at = greatest(t.expires_at, keep_end),
                first_started_at = coalesce(t.first_started_at, t.started_at),
                attempts = greatest(t.attempts, 1) + 1
            WHERE t.key = p_key AND t.state = 'running'
                AND t.owner IS NOT DISTINCT FROM e.owner
                AND t.lease_until <= now() AND t.expires_at > now()
            RETURNING * INTO e;
            took_over := FOUND;
        ELSE
            -- Somebody else's live entry, or unknown without a takeover: nothing is written.
            won := false;
            EXIT;
        END IF;
        IF FOUND THEN
            won := true;
            EXIT;
        END IF;
        -- The row changed after the SELECT's snapshot: read it with a new one.
    END LOOP;
    state := CASE WHEN e.state = 'running' AND e.lease_until <= now() THEN 'unknown'
                  ELSE e.state END;
    owner := e.owner;
    fingerprint := e.fingerprint;
    started_at := e.started_at;
    expires_at := CASE WHEN e.state = 'running' THEN e.lease_until ELSE e.expires_at END;
    settled_at := e.settled_at;
    result := e.result::text;
    error := e.error::text;
    scope := e.scope;
    tool := e.tool;
    detail := e.detail;
    first_started_at := e.first_started_at;
    attempts := e.attempts;
END
$claim$;
