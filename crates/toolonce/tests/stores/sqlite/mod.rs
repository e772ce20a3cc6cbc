//! The SQLite store: the conformance suite (on a file with inline reads and writes, on a file
//! without inline writes, on one without either, and in memory), several OS processes sharing
//! one file, a real crash between claim and complete met by a duplicate under each policy for
//! `unknown` entries, the schema versioning and the migration of version-1 files, the
//! mapping of SQLite's errors, and a store many pages and purge batches large.

use crate::blocking;
use crate::conformance::{self, ClaimFresh, Fresh};
use toolonce_testsupport::{Intercept, Intercepted};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;
use toolonce::key::{self, Fingerprint, OperationKey};
use toolonce::store::sqlite::{SCHEMA_VERSION, SqliteOptions, SqliteStore};
use toolonce::{
    About, Claim, ClaimRequest, EntryState, Error, Fenced, Layer, ListQuery, OnExpired, Outcome,
    OwnerToken, Resolution, Resolved, State, Store, ToolError, Verified, WriteOptions,
};

/// A store on a file in its own temporary directory, removed when the store is dropped: the
/// directory rides along as the interceptor, which intercepts nothing.
type TempStore = Intercepted<KeepDir>;

#[derive(Debug)]
struct KeepDir {
    _dir: TempDir,
}

impl Intercept for KeepDir {}

fn temp_store_with(options: SqliteOptions) -> Arc<dyn Store> {
    let dir = tempfile::tempdir().unwrap();
    let store = options.open(dir.path().join("toolonce.db")).unwrap();
    Arc::new(TempStore::new(Arc::new(store), KeepDir { _dir: dir }))
}

store_conformance!(async { temp_store_with(SqliteOptions::new()) });

/// A connection of its own to the database file at `path`, for what the store does not expose.
fn raw(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

/// The same suite with every write on the connection thread (inline reads only).
mod without_inline_writes {
    use super::*;
    store_conformance!(async { temp_store_with(SqliteOptions::new().inline_writes(false)) });
}

/// The same suite with every statement on the connection thread (no inline reads).
mod without_inline_reads {
    use super::*;
    store_conformance!(async { temp_store_with(SqliteOptions::new().readers(0)) });
}

/// The same suite on a private in-memory database (one connection, no readers).
mod in_memory {
    use super::*;
    store_conformance!(async {
        Arc::new(SqliteStore::open(":memory:").unwrap()) as Arc<dyn Store>
    });
}

mod crash;
mod errors;
mod files;
mod migration;
mod paging;
mod processes;
mod unknown;
