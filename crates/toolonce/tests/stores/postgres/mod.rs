//! `PostgresStore` against a real PostgreSQL from `toolonce-testsupport`: the conformance suite,
//! round trips per call, multi-process contention, a server killed mid-call, and migrations.
//! Tests on the shared server each use a table of their own; the ones that kill the server or
//! count statements get a server or a database of their own.

use crate::conformance::{self, ClaimFresh, Fresh};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use toolonce::store::postgres::{PostgresStore, SCHEMA_VERSION};
use toolonce::{
    About, Claim, ClaimRequest, EntryState, Error, Layer, ListQuery, OnExpired, Outcome,
    OwnerToken, Resolution, Resolved, State, Store, WriteOptions, key,
};
use toolonce_testsupport::{PostgresServer, shared_postgres};

/// One database on the shared server for the tests that isolate by table.
fn database_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| shared_postgres().create_unique_database())
        .clone()
}

/// The database name at the end of a URL.
fn database_of(url: &str) -> &str {
    url.rsplit('/').next().unwrap()
}

/// A table name no other test of any process uses.
fn unique_table() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "t_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

async fn fresh_store() -> Arc<dyn Store> {
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    Arc::new(
        PostgresStore::builder(url)
            .table(unique_table())
            .pool_size(8)
            .connect()
            .await
            .unwrap(),
    )
}

store_conformance!(fresh_store());

/// Runs `sql` with `psql` in the shared server's database of these tests, returning its output.
async fn shared_psql(sql: String) -> String {
    let database = database_of(&database_url()).to_owned();
    tokio::task::spawn_blocking(move || shared_postgres().psql_in(&database, &sql))
        .await
        .unwrap()
}

mod connections;
mod crash;
mod migrations;
mod outage;
mod processes;
mod races;
mod round_trips;
mod upgrade;
