//! The SQLite store: the conformance suite (on a file with inline reads and writes, on a file
//! without inline writes, on one without either, and in memory), several OS processes sharing
//! one file, a real crash between claim and complete met by a duplicate under each policy for
//! `unknown` entries, the schema versioning and the migration of version-1 files, and the
//! mapping of SQLite's errors.

use crate::blocking;
use crate::conformance::{self, ClaimFresh, Fresh};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use tempfile::TempDir;
use toolonce::key::{self, Fingerprint, OperationKey};
use toolonce::store::sqlite::{SCHEMA_VERSION, SqliteOptions, SqliteStore};
use toolonce::{
    About, Claim, ClaimRequest, Entry, EntryState, Error, Fenced, Layer, ListQuery, OnExpired,
    Outcome, OwnerToken, Page, Resolution, Resolved, State, Store, ToolError, Verified,
    WriteOptions,
};

/// A store on a file in its own temporary directory, removed when the store is dropped.
#[derive(Debug)]
struct TempStore {
    store: SqliteStore,
    _dir: TempDir,
}

fn temp_store_with(options: SqliteOptions) -> Arc<dyn Store> {
    let dir = tempfile::tempdir().unwrap();
    let store = options.open(dir.path().join("toolonce.db")).unwrap();
    Arc::new(TempStore { store, _dir: dir })
}

#[async_trait]
impl Store for TempStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> toolonce::Result<Claim> {
        self.store.claim(req).await
    }
    async fn renew(
        &self,
        key: &OperationKey,
        owner: &OwnerToken,
        lease: Duration,
    ) -> toolonce::Result<bool> {
        self.store.renew(key, owner, lease).await
    }
    async fn complete(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> toolonce::Result<Fenced> {
        self.store.complete(key, owner, result, retention).await
    }
    async fn fail(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> toolonce::Result<Fenced> {
        self.store.fail(key, owner, error, sticky).await
    }
    async fn get(&self, key: &OperationKey) -> toolonce::Result<Option<Entry>> {
        self.store.get(key).await
    }
    async fn list(&self, query: &ListQuery) -> toolonce::Result<Page> {
        self.store.list(query).await
    }
    async fn resolve(
        &self,
        key: &OperationKey,
        resolution: &Resolution,
        retention: Duration,
    ) -> toolonce::Result<Resolved> {
        self.store.resolve(key, resolution, retention).await
    }
    async fn delete(&self, key: &OperationKey) -> toolonce::Result<bool> {
        self.store.delete(key).await
    }
    async fn purge_expired(&self) -> toolonce::Result<u64> {
        self.store.purge_expired().await
    }
}

store_conformance!(async { temp_store_with(SqliteOptions::new()) });

/// The same suite with every write on the connection thread (inline reads only).

fn raw(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

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
mod processes;
mod unknown;
