//! The schema of a PostgreSQL entries table: the versioned migration steps, applied in one
//! transaction under an advisory lock, and the version recorded in the version table.

use deadpool_postgres::Object;
use deadpool_postgres::tokio_postgres::{self, Row};

use super::constants::{MIGRATION_LOCK, SCHEMA_VERSION, VERSION_TABLE};
use super::sql::{quote, schema_text};
use crate::{Error, Result};

/// Applies the missing migration steps in one transaction. The outer error is the database's,
/// the inner one a refusal (a newer schema).
pub(super) async fn migrate_on(
    client: &mut Object,
    table: &str,
    target: u32,
) -> std::result::Result<Result<u32>, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.execute(schema_text::MIGRATION_LOCK, &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(&versioned(schema_text::CREATE_VERSION_TABLE))
        .await?;
    let row = tx
        .query_opt(&versioned(schema_text::READ_VERSION), &[&table])
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
        tx.execute(&versioned(schema_text::WRITE_VERSION), &[&table, &version])
            .await?;
    }
    tx.commit().await?;
    Ok(Ok(target.saturating_sub(from)))
}

/// A statement of the version table (`statements/*.sql`) with its name filled in.
pub(super) fn versioned(text: &str) -> String {
    text.replace("{{version_table}}", VERSION_TABLE)
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

/// The migration steps, one `.sql` file per schema version in order: step `n` brings a table
/// from version `n - 1` to `n`. Each file's top says what the version changes and names the
/// placeholders [`migration`] fills in.
const MIGRATIONS: [&str; 3] = [
    include_str!("migrations/001_entries.sql"),
    include_str!("migrations/002_reclaim_own_entry.sql"),
    include_str!("migrations/003_unknown_state_and_about.sql"),
];

/// The statements of one migration step, for the (already validated) table name.
pub(super) fn migration(version: u32, table: &str) -> String {
    let step = version
        .checked_sub(1)
        .and_then(|i| MIGRATIONS.get(i as usize))
        .unwrap_or_else(|| unreachable!("no migration to schema version {version}"));
    step.replace("{{table}}", &quote(table))
        .replace(
            "{{expires_at_index}}",
            &quote(&format!("{table}_expires_at")),
        )
        .replace("{{claim}}", &quote(&format!("{table}_claim")))
        .replace("{{lease_check}}", &quote(&format!("{table}_lease")))
        .replace("{{table_literal}}", &literal(table))
        .replace("{{version_table}}", VERSION_TABLE)
}

/// A checked table name as an SQL string literal (nothing in it needs escaping, but a doubled
/// quote is still the rule).
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

// One step per version: a version without its file (or a file without its version) fails the
// build rather than a migration.
const _: () = assert!(MIGRATIONS.len() == SCHEMA_VERSION as usize);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_of_every_migration_step_is_filled() {
        for version in 1..=SCHEMA_VERSION {
            let sql = migration(version, "My_Table");
            assert!(!sql.contains("{{"), "step {version} keeps a placeholder");
            assert!(
                sql.contains("\"My_Table\""),
                "step {version} names no table"
            );
        }
        assert!(migration(3, "My_Table").contains("'My_Table'"));
        assert!(migration(1, "My_Table").contains("\"My_Table_expires_at\""));
    }
}
