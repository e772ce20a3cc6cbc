-- Schema version 2: a claim that finds the caller's own running entry wins and renews its
-- lease, so a claim whose reply was lost can be retried (the caller now makes the owner
-- token). Same arguments and columns as version 1, so `CREATE OR REPLACE` swaps the
-- body in place, and processes of this version and the last agree on every other case.
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

CREATE OR REPLACE FUNCTION {{claim}}(
    p_key text, p_owner text, p_fingerprint text, p_lease_ms bigint,
    OUT won boolean, OUT state text, OUT owner text, OUT fingerprint text,
    OUT started_at timestamptz, OUT expires_at timestamptz, OUT settled_at timestamptz,
    OUT result text, OUT error text)
LANGUAGE plpgsql VOLATILE AS $claim$
#variable_conflict use_column
DECLARE
    e {{table}}%ROWTYPE;
BEGIN
    LOOP
        SELECT * INTO e FROM {{table}} AS t WHERE t.key = p_key AND t.expires_at > now();
        IF FOUND THEN
            IF e.state <> 'running' OR e.owner IS DISTINCT FROM p_owner THEN
                -- Somebody else's live entry: the caller loses, and nothing is written.
                won := false;
                EXIT;
            END IF;
            -- The caller's own running entry (an earlier attempt of this claim applied):
            -- renew it, fenced like every owner's write. No row means it changed meanwhile.
            UPDATE {{table}} AS t SET expires_at = now() + p_lease_ms * interval '1 millisecond'
            WHERE t.key = p_key AND t.state = 'running' AND t.owner = p_owner
                AND t.expires_at > now()
            RETURNING * INTO e;
            IF FOUND THEN
                won := true;
                EXIT;
            END IF;
            CONTINUE;
        END IF;
        -- Absent, or expired: take it. The unique index decides between concurrent takers.
        INSERT INTO {{table}} AS t (key, state, owner, fingerprint, started_at, expires_at)
        VALUES (p_key, 'running', p_owner, p_fingerprint, now(),
                now() + p_lease_ms * interval '1 millisecond')
        ON CONFLICT (key) DO UPDATE
            SET state = EXCLUDED.state, owner = EXCLUDED.owner,
                fingerprint = EXCLUDED.fingerprint, started_at = EXCLUDED.started_at,
                expires_at = EXCLUDED.expires_at, settled_at = NULL, result = NULL, error = NULL
            WHERE t.expires_at <= now()
        RETURNING * INTO e;
        IF FOUND THEN
            won := true;
            EXIT;
        END IF;
        -- A live entry committed after the SELECT's snapshot: read it with a new one.
    END LOOP;
    state := e.state;
    owner := e.owner;
    fingerprint := e.fingerprint;
    started_at := e.started_at;
    expires_at := e.expires_at;
    settled_at := e.settled_at;
    result := e.result::text;
    error := e.error::text;
END
$claim$;
