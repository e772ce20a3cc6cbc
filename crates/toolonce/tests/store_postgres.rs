//! `PostgresStore` against a real PostgreSQL from `toolonce-testsupport`: the conformance suite,
//! round trips per call, multi-process contention, a server killed mid-call, and migrations.
//! Tests on the shared server each use a table of their own; the ones that kill the server or
//! count statements get a server or a database of their own.

mod conformance;

use conformance::{ClaimFresh, Fresh};

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

// ---------------------------------------------------------------------------------------------
// Round trips

/// A TCP proxy in front of the server that counts the client's round trips: each ends with a
/// `Sync` (the extended protocol that prepared statements use) or is a simple `Query`. While
/// frozen, it holds the client's bytes back, as a server that stopped answering would.
struct CountingProxy {
    port: u16,
    round_trips: Arc<AtomicU64>,
    frozen: Arc<std::sync::atomic::AtomicBool>,
}

impl CountingProxy {
    async fn start(server: std::net::SocketAddr) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let round_trips = Arc::new(AtomicU64::new(0));
        let frozen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let counter = round_trips.clone();
        let freeze = frozen.clone();
        tokio::spawn(async move {
            loop {
                let (client, _) = listener.accept().await.unwrap();
                let server = TcpStream::connect(server).await.unwrap();
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_rx, &mut client_tx).await;
                });
                let (counter, freeze) = (counter.clone(), freeze.clone());
                tokio::spawn(async move {
                    let mut parser = MessageCounter::default();
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match client_rx.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        while freeze.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        let trips = parser.feed(&buf[..n]);
                        counter.fetch_add(trips, Ordering::SeqCst);
                        if server_tx.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        CountingProxy {
            port,
            round_trips,
            frozen,
        }
    }

    fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::SeqCst)
    }
}

/// Splits the client's byte stream into protocol messages: untyped ones (SSL request, startup)
/// until the startup message, then `type byte + length + body`.
#[derive(Default)]
struct MessageCounter {
    pending: Vec<u8>,
    started: bool,
}

impl MessageCounter {
    fn feed(&mut self, bytes: &[u8]) -> u64 {
        self.pending.extend_from_slice(bytes);
        let mut trips = 0;
        loop {
            let header = if self.started { 5 } else { 4 };
            if self.pending.len() < header {
                return trips;
            }
            let len_at = header - 4;
            let len = u32::from_be_bytes(self.pending[len_at..header].try_into().unwrap()) as usize;
            let total = len_at + len;
            if self.pending.len() < total {
                return trips;
            }
            if self.started {
                if matches!(self.pending[0], b'S' | b'Q') {
                    trips += 1;
                }
            } else {
                let code = u32::from_be_bytes(self.pending[4..8].try_into().unwrap());
                // 80877103: SSL request, 80877104: GSS encryption request; else the startup.
                self.started = !matches!(code, 80_877_103 | 80_877_104);
            }
            self.pending.drain(..total);
        }
    }
}

async fn statements_executed(pg: &'static PostgresServer, database: &str) -> u64 {
    let sql = format!(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '{database}')"
    );
    tokio::task::spawn_blocking(move || pg.psql(&sql))
        .await
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_time_call_costs_two_round_trips_and_a_replay_one() {
    let pg = tokio::task::spawn_blocking(shared_postgres).await.unwrap();
    let db_url = tokio::task::spawn_blocking(|| shared_postgres().create_unique_database())
        .await
        .unwrap();
    let database = database_of(&db_url).to_owned();
    let proxy = CountingProxy::start(pg.addr()).await;
    let url = format!("postgres://postgres@127.0.0.1:{}/{database}", proxy.port);
    let store = PostgresStore::builder(url)
        .table(unique_table())
        .pool_size(1)
        .connect()
        .await
        .unwrap();
    let layer = Layer::new(Arc::new(store));
    let options = WriteOptions::new();
    let call = |n: u64| {
        let layer = layer.clone();
        let options = options.clone();
        async move {
            let op = key::derive("round-trips", "charge", &json!({"n": n}), None).unwrap();
            layer
                .run("charge", &op, &options, |_| async move {
                    Ok(json!({"receipt": n}))
                })
                .await
                .outcome
        }
    };

    // Connecting, migrating and preparing happen once per connection, before any call.
    let pgss = pg.has_pg_stat_statements();
    if pgss {
        tokio::task::spawn_blocking(move || {
            pg.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        })
        .await
        .unwrap();
    } else {
        eprintln!("pg_stat_statements is not installed: counting round trips only");
    }
    for n in 0..3 {
        let trips = proxy.round_trips();
        let statements = if pgss {
            statements_executed(pg, &database).await
        } else {
            0
        };
        assert_eq!(call(n).await, Outcome::Executed);
        assert_eq!(
            proxy.round_trips() - trips,
            2,
            "first-time call {n}: claim + complete"
        );
        if pgss {
            assert_eq!(statements_executed(pg, &database).await - statements, 2);
        }

        let trips = proxy.round_trips();
        let statements = if pgss {
            statements_executed(pg, &database).await
        } else {
            0
        };
        assert_eq!(call(n).await, Outcome::Replayed);
        assert_eq!(proxy.round_trips() - trips, 1, "replay {n}: claim only");
        if pgss {
            assert_eq!(statements_executed(pg, &database).await - statements, 1);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Races the claim function resolves on the server

/// A claim that takes over an `unknown` entry (a policy that reruns), with a fresh token; it
/// is only ever called on an existing entry, so it never simply wins.
async fn claim_takeover(
    store: &dyn Store,
    key: &key::OperationKey,
    fp: &key::Fingerprint,
    lease: Duration,
) -> Fresh {
    let owner = OwnerToken::generate();
    match store
        .claim(&ClaimRequest::new(key, fp, &owner, lease).takeover(true))
        .await
        .unwrap()
    {
        Claim::TookOver => Fresh::Won(owner),
        Claim::Won => panic!("won an existing entry without taking it over"),
        Claim::Existing(entry) => Fresh::Existing(entry),
    }
}

/// Before `unknown`, an expired lease made the entry absent and any claim took it; now it is
/// `unknown`, and only claims that ask for a takeover race for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_takeovers_on_a_pool_of_connections_have_one_winner_and_fence_the_old_owner() {
    let store = fresh_store().await;
    for round in 0..50 {
        let (key, fp) = conformance::op("takeover");
        let stale = conformance::won(
            store
                .claim_fresh(&key, &fp, Duration::from_millis(1))
                .await
                .unwrap(),
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(32));
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let (store, key, fp, barrier) =
                    (store.clone(), key.clone(), fp.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    claim_takeover(&*store, &key, &fp, conformance::LONG).await
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut seen = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Fresh::Won(owner) => winners.push(owner.as_str().to_owned()),
                Fresh::Existing(e) => match e.state {
                    toolonce::EntryState::Running { owner: Some(o) } => seen.push(o),
                    other => panic!("round {round}: {other:?}"),
                },
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {} winners", winners.len());
        assert!(
            seen.iter().all(|o| *o == winners[0]),
            "round {round}: a loser saw the stale owner"
        );
        let entry = store.get(&key).await.unwrap().unwrap();
        assert_eq!(entry.attempts, 2, "round {round}: one takeover");
        assert_eq!(
            store
                .complete(&key, stale, &json!("late"), conformance::LONG)
                .await
                .unwrap(),
            toolonce::Fenced::NotOwner,
            "round {round}: the owner that was taken over cannot settle"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_racing_a_transient_failure_never_win_without_their_entry_written() {
    let store = fresh_store().await;
    for round in 0..50 {
        let (key, fp) = conformance::op("vanish");
        let first = conformance::won(
            store
                .claim_fresh(&key, &fp, conformance::LONG)
                .await
                .unwrap(),
        );
        let first_owner = first.as_str().to_owned();
        let barrier = Arc::new(tokio::sync::Barrier::new(17));
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (store, key, fp, barrier) =
                    (store.clone(), key.clone(), fp.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .claim_fresh(&key, &fp, conformance::LONG)
                        .await
                        .unwrap()
                })
            })
            .collect();
        barrier.wait().await;
        let failed = store
            .fail(
                &key,
                first,
                &toolonce::ToolError::transient("timeout"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(failed, toolonce::Fenced::Applied);
        let mut winners = Vec::new();
        let mut seen = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Fresh::Won(owner) => winners.push(owner),
                Fresh::Existing(e) => match e.state {
                    toolonce::EntryState::Running { owner: Some(o) } => seen.push(o),
                    other => panic!("round {round}: {other:?}"),
                },
            }
        }
        assert!(
            winners.len() <= 1,
            "round {round}: {} winners",
            winners.len()
        );
        let winner = winners.pop();
        let winner_name = winner.as_ref().map(|w| w.as_str().to_owned());
        for o in &seen {
            assert!(
                *o == first_owner || Some(o) == winner_name.as_ref(),
                "round {round}: a loser saw an owner that never won: {o}"
            );
        }
        match winner {
            // The winner's entry is really there, and it can settle it.
            Some(owner) => assert_eq!(
                store
                    .complete(&key, owner, &json!(round), conformance::LONG)
                    .await
                    .unwrap(),
                toolonce::Fenced::Applied,
                "round {round}"
            ),
            // Everybody claimed before the delete: the key is free now.
            None => assert!(store.get(&key).await.unwrap().is_none(), "round {round}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Multi-process contention

#[test]
fn eight_processes_running_the_same_500_operations_execute_each_exactly_once() {
    conformance::multiprocess::run_workers(
        "multi_process_worker",
        &[
            ("TOOLONCE_PG_URL", database_url()),
            ("TOOLONCE_PG_TABLE", unique_table()),
        ],
        8,
        500,
    );
}

/// The body of each worker process of the test above; a no-op when run as a test.
#[test]
fn multi_process_worker() {
    if !conformance::multiprocess::is_worker() {
        return;
    }
    let url = std::env::var("TOOLONCE_PG_URL").unwrap();
    let table = std::env::var("TOOLONCE_PG_TABLE").unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // All eight processes migrate the same fresh table at once.
        let store = PostgresStore::builder(url)
            .table(table)
            .pool_size(4)
            .connect()
            .await
            .unwrap();
        conformance::multiprocess::worker(Arc::new(store)).await;
    });
}

/// An operator's resolve racing the owner's complete on a running entry: both are fenced on
/// the row, so exactly one settles it and the other is told (the owner `NotOwner`, the
/// operator `Settled` with what the owner recorded).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resolve_racing_the_owners_complete_lets_exactly_one_settle() {
    let store = fresh_store().await;
    let (mut by_owner, mut by_operator) = (0, 0);
    for round in 0..50 {
        let (key, fp) = conformance::op("resolve-race");
        let owner = conformance::won(
            store
                .claim_fresh(&key, &fp, conformance::LONG)
                .await
                .unwrap(),
        );
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let completing = {
            let (store, key, barrier) = (store.clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .complete(&key, owner, &json!("owner"), conformance::LONG)
                    .await
                    .unwrap()
            })
        };
        let resolving = {
            let (store, key, barrier) = (store.clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .resolve(
                        &key,
                        &Resolution::Done(json!("operator")),
                        conformance::LONG,
                    )
                    .await
                    .unwrap()
            })
        };
        let (completed, resolved) = (completing.await.unwrap(), resolving.await.unwrap());
        let result = |entry: &toolonce::Entry| match &entry.state {
            EntryState::Done { result, .. } => result.clone(),
            other => panic!("round {round}: {other:?}"),
        };
        let stored = result(&store.get(&key).await.unwrap().unwrap());
        match (completed, resolved) {
            (toolonce::Fenced::Applied, Resolved::Settled(seen)) => {
                assert_eq!(result(&seen), json!("owner"), "round {round}");
                assert_eq!(stored, json!("owner"), "round {round}");
                by_owner += 1;
            }
            (toolonce::Fenced::NotOwner, Resolved::Applied) => {
                assert_eq!(stored, json!("operator"), "round {round}");
                by_operator += 1;
            }
            other => panic!("round {round}: {other:?}"),
        }
    }
    eprintln!("settled by the owner {by_owner} times, by the operator {by_operator} times");
}

/// `unknown` entries live in the table past their lease: purge must leave them until their
/// retention ends (its index is on the final expiry), and only then remove them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_keeps_an_unknown_entry_until_its_retention_ends() {
    let table = unique_table();
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let store = PostgresStore::builder(url)
        .table(&table)
        .connect()
        .await
        .unwrap();
    let (key, fp) = conformance::op("purge");
    let owner = OwnerToken::generate();
    let req =
        ClaimRequest::new(&key, &fp, &owner, conformance::SHORT).retention(Duration::from_secs(2));
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    tokio::time::sleep(conformance::PAST_SHORT).await;
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    let entry = store.get(&key).await.unwrap().expect("kept as unknown");
    assert_eq!(entry.state(), State::Unknown);
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.get(&key).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the retention never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(store.purge_expired().await.unwrap(), 1);
    assert_eq!(
        shared_psql(format!(
            "SELECT count(*) FROM \"{}\" WHERE key = '{}'",
            table,
            key.as_str()
        ))
        .await,
        "0"
    );
}

// ---------------------------------------------------------------------------------------------
// A crash between claim and complete

const CRASH_URL: &str = "TOOLONCE_PG_CRASH_URL";
const CRASH_TABLE: &str = "TOOLONCE_PG_CRASH_TABLE";
const CRASH_MARKER: &str = "TOOLONCE_PG_CRASH_MARKER";
const CRASH_SCOPE: &str = "TOOLONCE_PG_CRASH_SCOPE";
const CRASH_LEASE: Duration = Duration::from_secs(1);

fn charge_args() -> serde_json::Value {
    json!({"customer": "cus_1", "payment": {"amount": 4200, "currency": "eur"}})
}

fn charge_about(scope: &str) -> About {
    About::new(scope, "charge").detail("payments.example")
}

/// The child of the next test: claims the charge through the layer, "charges" (writes the key
/// it was given to the marker file), then hangs until it is killed. A no-op in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_worker_charges_then_hangs() {
    let Ok(url) = std::env::var(CRASH_URL) else {
        return;
    };
    let marker = std::path::PathBuf::from(std::env::var(CRASH_MARKER).unwrap());
    let scope = std::env::var(CRASH_SCOPE).unwrap();
    let store = PostgresStore::builder(url)
        .table(std::env::var(CRASH_TABLE).unwrap())
        .connect()
        .await
        .unwrap();
    let op = key::derive(&scope, "charge", &charge_args(), None).unwrap();
    let options = WriteOptions::new().lease(CRASH_LEASE);
    let _ = Layer::new(Arc::new(store))
        .run_with_about(
            "charge",
            &op,
            &charge_about(&scope),
            &options,
            |ctx| async move {
                // Write then rename, so the parent never reads half a marker.
                let tmp = marker.with_extension("tmp");
                std::fs::write(&tmp, ctx.key().as_str()).unwrap();
                std::fs::rename(&tmp, &marker).unwrap();
                std::future::pending::<()>().await;
                unreachable!()
            },
        )
        .await;
    unreachable!("the tool never returns");
}

/// Kills the child on drop, so a failing assertion does not leave it hanging.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs [`crash_worker_charges_then_hangs`] as a child process on `table` in `scope`, waits
/// until it has charged, SIGKILLs it (no destructor, no complete, no fail), and returns the key
/// it charged with.
async fn charge_then_crash(url: &str, table: &str, scope: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("charged");
    let mut child = KillOnDrop(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash_worker_charges_then_hangs",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CRASH_URL, url)
            .env(CRASH_TABLE, table)
            .env(CRASH_MARKER, &marker)
            .env(CRASH_SCOPE, scope)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while !marker.exists() {
        if let Some(status) = child.0.try_wait().unwrap() {
            panic!("the child exited ({status}) before charging");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the child did not charge within a minute"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    std::fs::read_to_string(&marker).unwrap()
}

/// Waits until the entry of `key` is `unknown` (polled: the lease is timed by the server).
async fn wait_until_unknown(store: &dyn Store, key: &key::OperationKey) -> toolonce::Entry {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let entry = store.get(key).await.unwrap().expect("kept past its lease");
        if entry.state() == State::Unknown {
            return entry;
        }
        assert_eq!(entry.state(), State::Running);
        assert!(Instant::now() < deadline, "the lease never ran out");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A process SIGKILLed after its tool took effect and before it could complete leaves its
/// entry `running` while the lease lives, then `unknown`, not absent: a duplicate under `hold`
/// does not run and answers `unknown`; one under `rerun` takes it over and runs once more,
/// with the same key, told it may have run before; after that, duplicates replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_after_charging_leaves_unknown_held_by_hold_and_rerun_once_by_rerun() {
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let table = unique_table();
    let scope = format!("crash-{}", std::process::id());
    let charged_with = charge_then_crash(&url, &table, &scope).await;

    let store = Arc::new(
        PostgresStore::builder(&url)
            .table(&table)
            .connect()
            .await
            .unwrap(),
    );
    let layer = Layer::new(store.clone());
    let op = key::derive(&scope, "charge", &charge_args(), None).unwrap();
    assert_eq!(charged_with, op.key.as_str());
    let about = charge_about(&scope);
    let hold = WriteOptions::new()
        .lease(CRASH_LEASE)
        .on_expired(OnExpired::Hold);
    let rerun = WriteOptions::new()
        .lease(CRASH_LEASE)
        .on_expired(OnExpired::Rerun);

    // The claim survived the crash, and says what it is.
    let entry = store
        .get(&op.key)
        .await
        .unwrap()
        .expect("the crashed claim");
    assert_eq!(entry.about, about);
    assert_eq!(entry.attempts, 1);
    assert!(entry.first_started_at.is_some());

    // Once the lease has run out the entry is `unknown`.
    let entry = wait_until_unknown(&*store, &op.key).await;
    assert!(matches!(
        entry.state,
        EntryState::Unknown { owner: Some(_) }
    ));

    // hold: not run, answered `unknown`, the entry left as it is.
    let held = layer
        .run_with_about("charge", &op, &about, &hold, |_| async {
            panic!("ran under hold")
        })
        .await;
    assert_eq!(held.outcome, Outcome::Unknown, "{held:?}");
    let listed = store
        .list(&ListQuery::new().state(State::Unknown).scope(&scope))
        .await
        .unwrap();
    assert_eq!(listed.entries.len(), 1);
    assert_eq!(listed.entries[0].key, op.key);
    assert_eq!(listed.entries[0].attempts, 1);

    // rerun: taken over and run once more, with the crashed run's key.
    let runs = Arc::new(Mutex::new(Vec::new()));
    let seen = runs.clone();
    let answer = layer
        .run_with_about("charge", &op, &about, &rerun, |ctx| async move {
            seen.lock()
                .unwrap()
                .push((ctx.key().as_str().to_owned(), ctx.may_have_run_before()));
            Ok(json!({"charge": "ch_2", "idempotency_key": ctx.key().as_str()}))
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Executed, "{answer:?}");
    assert_eq!(
        *runs.lock().unwrap(),
        vec![(charged_with.clone(), true)],
        "one more run, with the same key, told it may have run before"
    );
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(entry.state(), State::Done);
    assert_eq!(entry.attempts, 2);
    assert_eq!(entry.about, about);
    assert!(entry.settled_at.is_some());

    for options in [&hold, &rerun] {
        let replay = layer
            .run_with_about("charge", &op, &about, options, |_| async {
                panic!("ran twice")
            })
            .await;
        assert_eq!(replay.outcome, Outcome::Replayed);
        assert_eq!(replay.result, answer.result);
    }
}

/// The same crash under `verify`: the probe gets the crashed run's key; "cannot tell" holds
/// (not run, `unknown`); "done" records the probe's result and replays it without running;
/// on a second crashed charge, "not done" runs it once more with the same key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_after_charging_is_settled_by_what_the_verify_probe_says() {
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let table = unique_table();
    let (done_scope, not_done_scope) = (
        format!("verify-done-{}", std::process::id()),
        format!("verify-not-done-{}", std::process::id()),
    );
    let (done_key, not_done_key) = tokio::join!(
        charge_then_crash(&url, &table, &done_scope),
        charge_then_crash(&url, &table, &not_done_scope),
    );
    let store = Arc::new(
        PostgresStore::builder(&url)
            .table(&table)
            .connect()
            .await
            .unwrap(),
    );
    let layer = Layer::new(store.clone());
    let verify = WriteOptions::new()
        .lease(CRASH_LEASE)
        .on_expired(OnExpired::Verify);
    let probe = |answer: toolonce::Verified, asked: Arc<Mutex<Vec<String>>>| {
        move |ctx: toolonce::WriteContext| async move {
            asked.lock().unwrap().push(ctx.key().as_str().to_owned());
            answer
        }
    };

    // Charged, and the provider says so, once it can tell.
    let op = key::derive(&done_scope, "charge", &charge_args(), None).unwrap();
    assert_eq!(done_key, op.key.as_str());
    let about = charge_about(&done_scope);
    wait_until_unknown(&*store, &op.key).await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let held = layer
        .run_with_verify(
            "charge",
            &op,
            &about,
            &verify,
            probe(toolonce::Verified::CannotTell, asked.clone()),
            |_| async { panic!("ran although the probe could not tell") },
        )
        .await;
    assert_eq!(held.outcome, Outcome::Unknown, "{held:?}");
    assert_eq!(
        store.get(&op.key).await.unwrap().unwrap().state(),
        State::Unknown
    );
    let receipt = json!({"charge": "ch_1", "idempotency_key": done_key});
    let found = layer
        .run_with_verify(
            "charge",
            &op,
            &about,
            &verify,
            probe(toolonce::Verified::Done(receipt.clone()), asked.clone()),
            |_| async { panic!("ran although the probe found the charge") },
        )
        .await;
    assert_eq!(found.outcome, Outcome::Replayed, "{found:?}");
    assert_eq!(found.result.as_ref().ok(), Some(&receipt));
    assert_eq!(
        *asked.lock().unwrap(),
        vec![done_key.clone(), done_key.clone()]
    );
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(entry.state(), State::Done);
    assert_eq!(entry.attempts, 1, "settled without another attempt");
    let replay = layer
        .run_with_about("charge", &op, &about, &verify, |_| async {
            panic!("ran after it was recorded")
        })
        .await;
    assert_eq!(replay.outcome, Outcome::Replayed);
    assert_eq!(replay.result.as_ref().ok(), Some(&receipt));

    // Not charged: run once more, with the same key.
    let op = key::derive(&not_done_scope, "charge", &charge_args(), None).unwrap();
    assert_eq!(not_done_key, op.key.as_str());
    let about = charge_about(&not_done_scope);
    wait_until_unknown(&*store, &op.key).await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let runs = Arc::new(Mutex::new(Vec::new()));
    let seen = runs.clone();
    let answer = layer
        .run_with_verify(
            "charge",
            &op,
            &about,
            &verify,
            probe(toolonce::Verified::NotDone, asked.clone()),
            |ctx| async move {
                seen.lock().unwrap().push(ctx.key().as_str().to_owned());
                Ok(json!({"charge": "ch_2"}))
            },
        )
        .await;
    assert_eq!(answer.outcome, Outcome::Executed, "{answer:?}");
    assert_eq!(*asked.lock().unwrap(), vec![not_done_key.clone()]);
    assert_eq!(*runs.lock().unwrap(), vec![not_done_key]);
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!((entry.state(), entry.attempts), (State::Done, 2));
}

// ---------------------------------------------------------------------------------------------
// Outage

#[derive(Debug)]
struct Call {
    op: usize,
    outcome: Outcome,
    ran: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_server_mid_call_runs_nothing_twice_and_the_same_store_recovers_after_restart()
{
    let pg = Arc::new(
        tokio::task::spawn_blocking(PostgresServer::start)
            .await
            .unwrap(),
    );
    let store = PostgresStore::builder(pg.url())
        .table("outage_entries")
        .pool_size(8)
        .connect_timeout(Duration::from_secs(2))
        .wait_timeout(Duration::from_secs(2))
        .operation_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let store = Arc::new(store);
    let layer = Layer::new(store.clone());
    let options = WriteOptions::new().lease(Duration::from_secs(30));
    let runs: Arc<Mutex<HashMap<usize, u32>>> = Arc::default();
    let next_op = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));

    let call = {
        let (layer, options, runs) = (layer.clone(), options.clone(), runs.clone());
        move |op: usize| {
            let (layer, options, runs) = (layer.clone(), options.clone(), runs.clone());
            async move {
                let derived = key::derive("outage", "charge", &json!({"op": op}), None).unwrap();
                let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let flag = ran.clone();
                let answer = layer
                    .run("charge", &derived, &options, move |_| async move {
                        flag.store(true, Ordering::SeqCst);
                        *runs.lock().unwrap().entry(op).or_default() += 1;
                        // Long enough that calls are mid-run when the server dies.
                        tokio::time::sleep(Duration::from_millis(40)).await;
                        Ok(json!({"receipt": op}))
                    })
                    .await;
                Call {
                    op,
                    outcome: answer.outcome,
                    ran: ran.load(Ordering::SeqCst),
                }
            }
        }
    };

    let body = async {
        // Eight callers issue write calls on fresh operations until told to stop.
        let callers: Vec<_> = (0..8)
            .map(|_| {
                let (call, next_op, stopped) = (call.clone(), next_op.clone(), stopped.clone());
                tokio::spawn(async move {
                    let mut calls = Vec::new();
                    while !stopped.load(Ordering::SeqCst) {
                        calls.push(call(next_op.fetch_add(1, Ordering::SeqCst)).await);
                    }
                    calls
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let killer = pg.clone();
        tokio::task::spawn_blocking(move || killer.kill())
            .await
            .unwrap();
        let killed_at = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        stopped.store(true, Ordering::SeqCst);
        let mut calls = Vec::new();
        for c in callers {
            calls.extend(c.await.unwrap());
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(15),
            "calls against a dead server must end in seconds"
        );

        // Each call either ran its tool once (executed) or did not run it at all because the
        // store was unavailable; no operation ran twice.
        let runs_now = runs.lock().unwrap().clone();
        let mut executed = 0;
        let mut unavailable = 0;
        for c in &calls {
            match c.outcome {
                Outcome::Executed => {
                    assert!(c.ran, "{c:?}");
                    executed += 1;
                }
                Outcome::StoreUnavailable => {
                    assert!(!c.ran, "{c:?}: the store was unavailable, yet the tool ran");
                    assert!(!runs_now.contains_key(&c.op), "{c:?}");
                    unavailable += 1;
                }
                other => panic!("unexpected outcome {other:?} for a fresh operation: {c:?}"),
            }
        }
        assert!(
            runs_now.values().all(|n| *n == 1),
            "an operation ran twice: {runs_now:?}"
        );
        assert!(executed > 0, "no call ran before the kill");
        assert!(unavailable > 0, "no call saw the outage");

        // Restart: the same store recovers, without being rebuilt.
        let restarter = pg.clone();
        tokio::task::spawn_blocking(move || restarter.restart())
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let first = loop {
            let c = call(next_op.fetch_add(1, Ordering::SeqCst)).await;
            if c.outcome == Outcome::Executed {
                break c;
            }
            assert_eq!(c.outcome, Outcome::StoreUnavailable);
            assert!(
                Instant::now() < deadline,
                "the store did not recover after the restart"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(first.ran);
        for _ in 0..20 {
            let c = call(next_op.fetch_add(1, Ordering::SeqCst)).await;
            assert_eq!(c.outcome, Outcome::Executed, "{c:?}");
        }
        // Calls completed before the kill were committed: their duplicates replay.
        let completed_before: Vec<usize> = calls
            .iter()
            .filter(|c| c.outcome == Outcome::Executed)
            .map(|c| c.op)
            .collect();
        let mut replayed = 0;
        for op in completed_before {
            let c = call(op).await;
            assert!(!c.ran, "{c:?} ran again");
            if c.outcome == Outcome::Replayed {
                replayed += 1;
            } else {
                // Its complete was lost with the server: the entry is running until its lease
                // expires, and the duplicate is told so.
                assert_eq!(c.outcome, Outcome::InFlight, "{c:?}");
            }
        }
        assert!(
            replayed > 0,
            "no result recorded before the kill survived it"
        );
        eprintln!(
            "outage: {executed} calls executed and {unavailable} refused while the server died, \
             {replayed} replayed after the restart"
        );
    };
    tokio::time::timeout(Duration::from_secs(120), body)
        .await
        .expect("the outage test took more than two minutes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_answering_is_reported_unavailable_after_the_operation_timeout() {
    let pg = tokio::task::spawn_blocking(shared_postgres).await.unwrap();
    let db_url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let proxy = CountingProxy::start(pg.addr()).await;
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/{}",
        proxy.port,
        database_of(&db_url)
    );
    let store = PostgresStore::builder(url)
        .table(unique_table())
        .pool_size(1)
        .operation_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let (k, fp) = conformance::op("frozen");
    proxy.frozen.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let err = store
        .claim_fresh(&k, &fp, conformance::LONG)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{}", err.report());
    assert!(started.elapsed() < Duration::from_secs(3));
    // The silent connection was dropped: the next operation opens a fresh one and succeeds.
    // The held-back claim may still have reached the server when the proxy let it through:
    // after an error the outcome of a write is unknown, so the retry may find its entry.
    proxy.frozen.store(false, Ordering::SeqCst);
    match store.claim_fresh(&k, &fp, conformance::LONG).await.unwrap() {
        Fresh::Won(_) => {}
        Fresh::Existing(e) => assert_eq!(e.state(), toolonce::State::Running),
    }
}

#[tokio::test]
async fn connecting_to_a_server_that_is_down_reports_unavailable_within_the_connect_timeout() {
    let port = toolonce_testsupport::free_port();
    let started = Instant::now();
    let err = PostgresStore::builder(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{}", err.report());
    assert!(err.is_retryable());
    assert!(started.elapsed() < Duration::from_secs(5));
}

// ---------------------------------------------------------------------------------------------
// Migrations

async fn shared_psql(sql: String) -> String {
    let database = database_of(&database_url()).to_owned();
    tokio::task::spawn_blocking(move || shared_postgres().psql_in(&database, &sql))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrating_twice_is_a_no_op_that_keeps_the_entries() {
    let table = unique_table();
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let store = PostgresStore::builder(&url)
        .table(&table)
        .connect()
        .await
        .unwrap();
    assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
    let (k, fp) = conformance::op("m");
    let _owner = conformance::won(store.claim_fresh(&k, &fp, conformance::LONG).await.unwrap());

    assert_eq!(store.migrate().await.unwrap(), 0);
    assert_eq!(store.migrate().await.unwrap(), 0);
    let again = PostgresStore::builder(&url)
        .table(&table)
        .connect()
        .await
        .unwrap();
    assert_eq!(again.migrate().await.unwrap(), 0);
    assert!(store.get(&k).await.unwrap().is_some(), "the entry survives");
    assert_eq!(
        shared_psql(format!(
            "SELECT version FROM toolonce_schema WHERE table_name = '{table}'"
        ))
        .await,
        SCHEMA_VERSION.to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_with_a_newer_schema_version_is_refused_with_a_clear_error() {
    let table = unique_table();
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let store = PostgresStore::builder(&url)
        .table(&table)
        .connect()
        .await
        .unwrap();
    shared_psql(format!(
        "UPDATE toolonce_schema SET version = 99 WHERE table_name = '{table}'"
    ))
    .await;

    for err in [
        store.migrate().await.unwrap_err(),
        PostgresStore::builder(&url)
            .table(&table)
            .connect()
            .await
            .unwrap_err(),
        PostgresStore::builder(&url)
            .table(&table)
            .migrate_on_connect(false)
            .connect()
            .await
            .unwrap_err(),
    ] {
        let text = err.report().to_string();
        assert!(matches!(err, Error::Store(_)), "{text}");
        assert!(!err.is_retryable());
        assert!(
            text.contains("schema version 99") && text.contains("upgrade toolonce"),
            "{text}"
        );
    }
    // Nothing was changed by the refused migrations.
    assert_eq!(
        shared_psql(format!(
            "SELECT version FROM toolonce_schema WHERE table_name = '{table}'"
        ))
        .await,
        "99"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_table_name_is_created_quoted_and_used() {
    let table = format!("Custom_{}", unique_table());
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let store = PostgresStore::builder(&url)
        .table(&table)
        .connect()
        .await
        .unwrap();
    assert_eq!(store.table(), table);
    let (k, fp) = conformance::op("custom");
    let owner = conformance::won(store.claim_fresh(&k, &fp, conformance::LONG).await.unwrap());
    let _ = store
        .complete(
            &k,
            owner,
            &json!({"ok": 1.0, "nul": "a\u{0}b"}),
            conformance::LONG,
        )
        .await
        .unwrap();
    assert_eq!(
        shared_psql(format!(
            "SELECT state || ' ' || result::text FROM \"{table}\" WHERE key = '{}'",
            k.as_str()
        ))
        .await,
        r#"done {"nul":"a\u0000b","ok":1.0}"#,
        "the result is kept as written"
    );
    match store.get(&k).await.unwrap().unwrap().state {
        toolonce::EntryState::Done { result, .. } => {
            assert_eq!(result, json!({"ok": 1.0, "nul": "a\u{0}b"}))
        }
        other => panic!("{other:?}"),
    }
    // No default table was created alongside.
    assert_eq!(
        shared_psql("SELECT to_regclass('toolonce_entries') IS NULL".into()).await,
        "t"
    );
}

#[tokio::test]
async fn invalid_table_names_are_refused_before_connecting() {
    for bad in ["", "1st", "a-b", "x\"; DROP TABLE y; --", "toolonce_schema"] {
        // No server at this address: the name is checked first.
        let err = PostgresStore::builder("postgres://nobody@127.0.0.1:1/none")
            .table(bad)
            .connect()
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{bad:?}: {}", err.report());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_migration_on_connect_the_schema_waits_for_migrate() {
    let table = unique_table();
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let store = PostgresStore::builder(&url)
        .table(&table)
        .migrate_on_connect(false)
        .connect()
        .await
        .unwrap();
    assert_eq!(store.schema_version().await.unwrap(), 0);
    assert_eq!(
        shared_psql(format!("SELECT to_regclass('\"{table}\"') IS NULL")).await,
        "t"
    );
    let (k, fp) = conformance::op("lazy");
    let err = store
        .claim_fresh(&k, &fp, conformance::LONG)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Store(_)), "{}", err.report());

    assert_eq!(store.migrate().await.unwrap(), SCHEMA_VERSION);
    assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
    conformance::won(store.claim_fresh(&k, &fp, conformance::LONG).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_stores_migrating_one_new_table_at_once_all_succeed() {
    let table = unique_table();
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (url, table) = (url.clone(), table.clone());
            tokio::spawn(async move {
                PostgresStore::builder(url)
                    .table(table)
                    .pool_size(1)
                    .connect()
                    .await
                    .map(|_| ())
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn huge_or_zero_timeouts_never_panic_and_huge_ones_work() {
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    for timeout in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_secs_f64(1e19),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ] {
        let connected = PostgresStore::builder(&url)
            .table(unique_table())
            .connect_timeout(timeout)
            .wait_timeout(timeout)
            .operation_timeout(timeout)
            .connect()
            .await;
        let store = match connected {
            Ok(store) => store,
            // Too short to connect: an error, not a panic.
            Err(e) if timeout < Duration::from_millis(1) => {
                assert!(e.is_retryable(), "{}", e.report());
                continue;
            }
            Err(e) => panic!("{timeout:?}: {}", e.report()),
        };
        let op = key::derive("timeouts", "t", &json!({}), None).unwrap();
        let options = WriteOptions::new()
            .lease(toolonce::layer::MAX_DURATION)
            .retention(toolonce::layer::MAX_DURATION);
        let answer = Layer::new(Arc::new(store))
            .run("t", &op, &options, |_| async { Ok(json!(1)) })
            .await;
        if timeout >= Duration::from_millis(1) {
            assert_eq!(answer.outcome, Outcome::Executed, "{timeout:?}: {answer:?}");
        }
    }
}

/// Calls of the statements inside the store's claim function (they name its parameters
/// `p_…`) in `database` whose text starts with `verb` (`""` for all of them), as
/// pg_stat_statements counts nested statements.
async fn claim_function_calls_of(pg: &'static PostgresServer, database: &str, verb: &str) -> u64 {
    let sql = format!(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '{database}') \
         AND query LIKE '{verb}%p_key%' AND query NOT LIKE '%pg_stat_statements%'"
    );
    tokio::task::spawn_blocking(move || pg.psql(&sql))
        .await
        .unwrap()
        .parse()
        .unwrap()
}

/// A new database whose sessions have pg_stat_statements count the statements PL/pgSQL
/// functions run, and a store with one connection on it: the server, the database's name and
/// the store.
async fn store_with_statements_tracked() -> (&'static PostgresServer, String, PostgresStore) {
    let pg = tokio::task::spawn_blocking(shared_postgres).await.unwrap();
    assert!(
        pg.has_pg_stat_statements(),
        "pg_stat_statements is needed (Debian: part of the postgresql package)"
    );
    let db_url = tokio::task::spawn_blocking(|| shared_postgres().create_unique_database())
        .await
        .unwrap();
    let database = database_of(&db_url).to_owned();
    let db = database.clone();
    tokio::task::spawn_blocking(move || {
        // Once per process: two concurrent `CREATE EXTENSION IF NOT EXISTS` race on the
        // catalog's unique index, and the loser fails.
        static EXTENSION: std::sync::Once = std::sync::Once::new();
        EXTENSION.call_once(|| {
            pg.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        });
        pg.psql(&format!(
            "ALTER DATABASE \"{db}\" SET pg_stat_statements.track = 'all'"
        ));
    })
    .await
    .unwrap();
    let store = PostgresStore::builder(db_url.as_str())
        .table(unique_table())
        .pool_size(1)
        .connect()
        .await
        .unwrap();
    (pg, database, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_a_settled_entry_is_a_plain_read_without_the_claim_function() {
    let (pg, database, store) = store_with_statements_tracked().await;
    let layer = Layer::new(Arc::new(store));
    let op = key::derive("s", "t", &json!({"n": 1}), None).unwrap();
    let options = WriteOptions::new();
    let first = layer
        .run("t", &op, &options, |_| async { Ok(json!({"ok": true})) })
        .await;
    assert_eq!(first.outcome, Outcome::Executed);
    let after_first = claim_function_calls_of(pg, &database, "").await;
    assert!(after_first > 0, "the first claim ran the function");
    for _ in 0..5 {
        let again = layer
            .run("t", &op, &options, |_| async { Ok(json!({"ok": false})) })
            .await;
        assert_eq!(again.outcome, Outcome::Replayed);
        assert_eq!(again.result.unwrap(), json!({"ok": true}));
    }
    assert_eq!(
        claim_function_calls_of(pg, &database, "").await,
        after_first,
        "a replay called the claim function"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_time_claim_calls_the_claim_function_exactly_once() {
    let (pg, database, store) = store_with_statements_tracked().await;
    let (reads, inserts) = (
        claim_function_calls_of(pg, &database, "SELECT").await,
        claim_function_calls_of(pg, &database, "INSERT").await,
    );
    // The function's row is read column by column: called once per column, a claim would
    // read the key again and renew its own entry instead of inserting it once.
    for n in 0..3 {
        let (key, fp) = conformance::op(&format!("once{n}"));
        let owner = conformance::won(
            store
                .claim_fresh(&key, &fp, conformance::LONG)
                .await
                .unwrap(),
        );
        let entry = store.get(&key).await.unwrap().expect("the claimed entry");
        assert_eq!(entry.attempts, 1);
        assert!(
            matches!(entry.state, EntryState::Running { owner: Some(ref o) } if o == owner.as_str())
        );
    }
    assert_eq!(
        claim_function_calls_of(pg, &database, "SELECT").await - reads,
        3
    );
    assert_eq!(
        claim_function_calls_of(pg, &database, "INSERT").await - inserts,
        3
    );
}
