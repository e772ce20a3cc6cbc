//! The drift test of the shared limits: the Rust core keeps its constants (they are typed, and
//! used in `const` contexts), and this test checks each equals data/limits.json, the file the
//! TypeScript package reads and the Python package's test checks its copies against.

use serde_json::Value;

use crate::canonical::{DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH};
use crate::policy::{MAX_DURATION, MIN_LEASE};
use crate::store::{DEFAULT_UNKNOWN_RETENTION, MAX_STORED_DEPTH};
use crate::{WriteOptions, meta};

fn file() -> Value {
    serde_json::from_str(include_str!("../data/limits.json")).expect("data/limits.json is JSON")
}

fn ms(d: std::time::Duration) -> Value {
    Value::from(u64::try_from(d.as_millis()).expect("a duration in ms fits"))
}

#[test]
fn the_rust_constants_equal_the_shared_limits_file() {
    let f = file();
    let defaults = WriteOptions::default();
    assert_eq!(f["lease_ms"]["default"], ms(defaults.lease));
    assert_eq!(f["lease_ms"]["min"], ms(MIN_LEASE));
    assert_eq!(f["retention_ms"]["default"], ms(defaults.retention));
    assert_eq!(f["retention_ms"]["min"], ms(crate::policy::MIN_RETENTION));
    assert_eq!(f["unknown_retention_ms"], ms(DEFAULT_UNKNOWN_RETENTION));
    assert_eq!(f["max_duration_ms"], ms(MAX_DURATION));
    assert_eq!(f["canonical"]["max_depth"], Value::from(DEFAULT_MAX_DEPTH));
    assert_eq!(f["canonical"]["max_bytes"], Value::from(DEFAULT_MAX_BYTES));
    assert_eq!(f["max_stored_depth"], Value::from(MAX_STORED_DEPTH));
    assert_eq!(f["key_prefix"], crate::key::KEY_PREFIX);
    assert_eq!(
        f["idempotency_key_header"],
        crate::key::IDEMPOTENCY_KEY_HEADER
    );
    assert_eq!(f["meta"]["key"], meta::KEY);
    assert_eq!(f["meta"]["outcome"], meta::OUTCOME);
    assert_eq!(f["meta"]["notice"], meta::NOTICE);
    assert_eq!(f["meta"]["recorded_at"], meta::RECORDED_AT);
    assert_eq!(f["repeat"]["max"], Value::from(crate::repeat::MAX));
    assert_eq!(f["repeat"]["default_name"], crate::repeat::DEFAULT_NAME);
}

#[cfg(feature = "postgres")]
#[test]
fn the_postgres_names_equal_the_shared_limits_file() {
    use crate::store::postgres::{DEFAULT_TABLE, MAX_TABLE_NAME, VERSION_TABLE};
    let f = file();
    assert_eq!(f["tables"]["entries"], DEFAULT_TABLE);
    assert_eq!(f["tables"]["postgres_version"], VERSION_TABLE);
    assert_eq!(
        f["tables"]["postgres_max_name"],
        Value::from(MAX_TABLE_NAME)
    );
}

#[cfg(feature = "sqlite")]
#[test]
fn the_sqlite_statements_name_the_shared_table() {
    let table = file()["tables"]["entries"].as_str().unwrap().to_owned();
    for text in [
        include_str!("store/sqlite/statements/claim.sql"),
        include_str!("store/sqlite/statements/list.sql"),
        include_str!("store/sqlite/migrations/002_entries.sql"),
    ] {
        assert!(text.contains(&table), "{text}");
    }
}
