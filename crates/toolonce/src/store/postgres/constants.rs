//! The names, the schema version and the limits every part of the PostgreSQL store shares: the
//! tables, the advisory lock of migrations, and the caps on names, durations and retries.

/// The table the entries live in unless [`PostgresStoreBuilder::table`](super::PostgresStoreBuilder::table) says otherwise.
pub const DEFAULT_TABLE: &str = "toolonce_entries";

/// The schema version this build creates and understands. [`PostgresStore::migrate`](super::PostgresStore::migrate) brings an
/// older table up to it; a table of a newer version is refused, since an older build could
/// misread or damage it.
pub const SCHEMA_VERSION: u32 = 3;

/// The table that records the schema version of each entries table of the database (in the
/// same schema as the entries table, the first of the `search_path`).
pub(crate) const VERSION_TABLE: &str = "toolonce_schema";

/// The longest table name accepted: PostgreSQL cuts identifiers at 63 bytes, and the index and
/// function names append up to 11 bytes (`_expires_at`) to the table name.
pub(crate) const MAX_TABLE_NAME: usize = 52;

/// Durations beyond this are capped (100 years, in milliseconds): far enough to mean "forever",
/// near enough that `now() + interval` cannot overflow a timestamp.
pub(super) const MAX_MILLIS: i64 = 100 * 365 * 24 * 60 * 60 * 1000;

/// Serialization failures and deadlocks roll the statement back, so it is safe to run it again;
/// they only happen when the database runs sessions at `REPEATABLE READ` or `SERIALIZABLE` by
/// default. This many attempts in all before the error is reported.
pub(super) const ATTEMPTS: u32 = 3;

/// Advisory lock that serializes migrations across processes: `"toolonce"` in ASCII.
pub(super) const MIGRATION_LOCK: i64 = i64::from_be_bytes(*b"toolonce");
