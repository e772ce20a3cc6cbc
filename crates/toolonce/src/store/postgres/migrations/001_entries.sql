-- Schema version 1 of a PostgreSQL entries table: the table, its expiry index, and the claim
-- function (one round trip that takes an absent or expired key, or reports the live entry).
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

CREATE TABLE IF NOT EXISTS {{table}} (
    key         text COLLATE "C" PRIMARY KEY,
    state       text NOT NULL CHECK (state IN ('running', 'done', 'failed')),
    owner       text,
    fingerprint text,
    started_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    settled_at  timestamptz,
    result      json,
    error       json
);
COMMENT ON TABLE {{table}} IS 'toolonce operation entries; schema version in {{version_table}}';
CREATE INDEX IF NOT EXISTS {{expires_at_index}} ON {{table}} (expires_at);

-- claim(key, owner, fingerprint, lease_ms): see PostgresStore's Sql::new for why this is atomic.
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
        -- A live entry: the caller loses, and nothing is written.
        SELECT * INTO e FROM {{table}} AS t WHERE t.key = p_key AND t.expires_at > now();
        IF FOUND THEN
            won := false;
            EXIT;
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
