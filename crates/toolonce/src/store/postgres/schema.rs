//! The schema of a PostgreSQL entries table: the versioned migration steps, applied in one
//! transaction under an advisory lock, and the version recorded in the version table.

use deadpool_postgres::Object;
use deadpool_postgres::tokio_postgres::{self, Row};

use super::{MIGRATION_LOCK, SCHEMA_VERSION, VERSION_TABLE, quote};
use crate::{Error, Result};

/// Applies the missing migration steps in one transaction. The outer error is the database's,
/// the inner one a refusal (a newer schema).
pub(super) async fn migrate_on(
    client: &mut Object,
    table: &str,
    target: u32,
) -> std::result::Result<Result<u32>, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
             table_name text PRIMARY KEY,
             version integer NOT NULL,
             migrated_at timestamptz NOT NULL DEFAULT now()
         )"
    ))
    .await?;
    let row = tx
        .query_opt(
            &format!("SELECT version FROM {VERSION_TABLE} WHERE table_name = $1 FOR UPDATE"),
            &[&table],
        )
        .await?;
    let from = match row.map_or(Ok(0), |r| version_of(&r)) {
        Ok(v) => v,
        Err(e) => return Ok(Err(e)),
    };
    if from > SCHEMA_VERSION {
        // Dropping the transaction rolls it back.
        return Ok(Err(too_new(table, from)));
    }
    for version in from + 1..=target {
        tx.batch_execute(&migration(version, table)).await?;
    }
    if from < target {
        let version = i32::try_from(target).expect("a small version number");
        tx.execute(
            &format!(
                "INSERT INTO {VERSION_TABLE} (table_name, version) VALUES ($1, $2)
                 ON CONFLICT (table_name)
                 DO UPDATE SET version = EXCLUDED.version, migrated_at = now()"
            ),
            &[&table, &version],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(Ok(target.saturating_sub(from)))
}

pub(super) fn version_of(row: &Row) -> Result<u32> {
    let v: i32 = row
        .try_get(0)
        .map_err(|e| Error::store(format!("unreadable {VERSION_TABLE}.version: {e}")))?;
    u32::try_from(v).map_err(|_| Error::store(format!("negative schema version {v}")))
}

pub(super) fn too_new(table: &str, version: u32) -> Error {
    Error::store(format!(
        "table {table:?} has schema version {version}, newer than version {SCHEMA_VERSION} that \
         this build of toolonce knows: upgrade toolonce, or use another table"
    ))
}

/// The statements of one migration step, for the (already validated) table name.
pub(super) fn migration(version: u32, table: &str) -> String {
    let t = quote(table);
    let index = quote(&format!("{table}_expires_at"));
    let claim = quote(&format!("{table}_claim"));
    match version {
        1 => format!(
            r#"
CREATE TABLE IF NOT EXISTS {t} (
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
COMMENT ON TABLE {t} IS 'toolonce operation entries; schema version in {VERSION_TABLE}';
CREATE INDEX IF NOT EXISTS {index} ON {t} (expires_at);

-- claim(key, owner, fingerprint, lease_ms): see PostgresStore's Sql::new for why this is atomic.
CREATE OR REPLACE FUNCTION {claim}(
    p_key text, p_owner text, p_fingerprint text, p_lease_ms bigint,
    OUT won boolean, OUT state text, OUT owner text, OUT fingerprint text,
    OUT started_at timestamptz, OUT expires_at timestamptz, OUT settled_at timestamptz,
    OUT result text, OUT error text)
LANGUAGE plpgsql VOLATILE AS $claim$
#variable_conflict use_column
DECLARE
    e {t}%ROWTYPE;
BEGIN
    LOOP
        -- A live entry: the caller loses, and nothing is written.
        SELECT * INTO e FROM {t} AS t WHERE t.key = p_key AND t.expires_at > now();
        IF FOUND THEN
            won := false;
            EXIT;
        END IF;
        -- Absent, or expired: take it. The unique index decides between concurrent takers.
        INSERT INTO {t} AS t (key, state, owner, fingerprint, started_at, expires_at)
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
"#
        ),
        // Version 2: a claim that finds the caller's own running entry wins and renews its
        // lease, so a claim whose reply was lost can be retried (the caller now makes the owner
        // token). Same arguments and columns as version 1, so `CREATE OR REPLACE` swaps the
        // body in place, and processes of this version and the last agree on every other case.
        2 => format!(
            r#"
CREATE OR REPLACE FUNCTION {claim}(
    p_key text, p_owner text, p_fingerprint text, p_lease_ms bigint,
    OUT won boolean, OUT state text, OUT owner text, OUT fingerprint text,
    OUT started_at timestamptz, OUT expires_at timestamptz, OUT settled_at timestamptz,
    OUT result text, OUT error text)
LANGUAGE plpgsql VOLATILE AS $claim$
#variable_conflict use_column
DECLARE
    e {t}%ROWTYPE;
BEGIN
    LOOP
        SELECT * INTO e FROM {t} AS t WHERE t.key = p_key AND t.expires_at > now();
        IF FOUND THEN
            IF e.state <> 'running' OR e.owner IS DISTINCT FROM p_owner THEN
                -- Somebody else's live entry: the caller loses, and nothing is written.
                won := false;
                EXIT;
            END IF;
            -- The caller's own running entry (an earlier attempt of this claim applied):
            -- renew it, fenced like every owner's write. No row means it changed meanwhile.
            UPDATE {t} AS t SET expires_at = now() + p_lease_ms * interval '1 millisecond'
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
        INSERT INTO {t} AS t (key, state, owner, fingerprint, started_at, expires_at)
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
"#
        ),
        3 => version_3(table),
        other => unreachable!("no migration to schema version {other}"),
    }
}

/// Version 3: entries say what they are (scope, tool, detail, first start, attempts), and a
/// running entry whose lease ran out unsettled is kept as `unknown` instead of counting as
/// absent.
///
/// `expires_at` becomes the row's final expiry for every state (so `get`, `purge` and the
/// index keep their meaning: past it, the row is absent), and the new `lease_until` holds the
/// lease deadline of a running row. `expires_at - lease_until` is the retention the claim
/// asked for, which renewals keep. `unknown` is not stored: it is a `running` row whose
/// `lease_until` has passed, judged on the database's clock by every statement that reads it.
///
/// Running rows of version 2 keep their lease as `lease_until` and, if still live, are kept
/// 24 hours (the default retention) past it, so an owner that dies after the upgrade leaves an
/// `unknown` entry rather than one that silently runs again. Their `attempts` stay 0 (not
/// recorded) and `first_started_at` NULL.
///
/// The claim function takes new arguments, so it is a new overload; the old signature is kept
/// with a body that refuses, so a process of an older build still connected says why its
/// claims fail instead of "function does not exist", and never claims with rules it does not
/// know (its renewals would not move `lease_until`).
fn version_3(table: &str) -> String {
    let t = quote(table);
    let claim = quote(&format!("{table}_claim"));
    let lease_check = quote(&format!("{table}_lease"));
    format!(
        r#"
ALTER TABLE {t}
    ADD COLUMN lease_until      timestamptz,
    ADD COLUMN scope            text,
    ADD COLUMN tool             text,
    ADD COLUMN detail           text,
    ADD COLUMN first_started_at timestamptz,
    ADD COLUMN attempts         integer NOT NULL DEFAULT 0;
UPDATE {t} SET lease_until = expires_at,
    expires_at = CASE WHEN expires_at > now() THEN expires_at + interval '24 hours'
                      ELSE expires_at END
WHERE state = 'running';
ALTER TABLE {t} ADD CONSTRAINT {lease_check}
    CHECK (state <> 'running' OR lease_until IS NOT NULL);

CREATE OR REPLACE FUNCTION {claim}(
    p_key text, p_owner text, p_fingerprint text, p_lease_ms bigint,
    OUT won boolean, OUT state text, OUT owner text, OUT fingerprint text,
    OUT started_at timestamptz, OUT expires_at timestamptz, OUT settled_at timestamptz,
    OUT result text, OUT error text)
LANGUAGE plpgsql VOLATILE AS $claim$
BEGIN
    RAISE EXCEPTION 'table % is at toolonce schema version 3, which this process''s build of toolonce does not know: upgrade it', {table_literal}
        USING ERRCODE = 'feature_not_supported';
END
$claim$;

-- claim(key, owner, fingerprint, lease_ms, retention_ms, takeover, scope, tool, detail): see
-- PostgresStore's Sql::new for why this is atomic.
CREATE FUNCTION {claim}(
    p_key text, p_owner text, p_fingerprint text, p_lease_ms bigint, p_retention_ms bigint,
    p_takeover boolean, p_scope text, p_tool text, p_detail text,
    OUT won boolean, OUT took_over boolean, OUT state text, OUT owner text, OUT fingerprint text,
    OUT started_at timestamptz, OUT expires_at timestamptz, OUT settled_at timestamptz,
    OUT result text, OUT error text, OUT scope text, OUT tool text, OUT detail text,
    OUT first_started_at timestamptz, OUT attempts integer)
LANGUAGE plpgsql VOLATILE AS $claim$
#variable_conflict use_column
DECLARE
    e {t}%ROWTYPE;
    lease_end timestamptz := now() + p_lease_ms * interval '1 millisecond';
    keep_end timestamptz := lease_end + p_retention_ms * interval '1 millisecond';
BEGIN
    took_over := false;
    LOOP
        SELECT * INTO e FROM {t} AS t WHERE t.key = p_key AND t.expires_at > now();
        IF NOT FOUND THEN
            -- Absent, or expired: take it. The unique index decides between concurrent takers.
            INSERT INTO {t} AS t (key, state, owner, fingerprint, started_at, expires_at,
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
            UPDATE {t} AS t SET lease_until = lease_end,
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
            UPDATE {t} AS t SET owner = p_owner, started_at = now(), lease_until = lease_end,
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
"#,
        table_literal = literal(table),
    )
}

/// A checked table name as an SQL string literal (nothing in it needs escaping, but a doubled
/// quote is still the rule).
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}
