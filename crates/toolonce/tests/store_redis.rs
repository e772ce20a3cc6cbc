//! The Redis store against real `redis-server` processes: the conformance suite, the wire
//! format shared with TypeScript workers and with the previous version (lease deadline and
//! what an entry says it is inside the value), `resolve` on entries of other writers, round
//! trips per operation, eight processes contending for the same operations, a process killed
//! between claim and complete (its entry becomes `unknown`: held, then taken over), and a
//! server killed while write calls are in flight.

mod conformance;
mod redis_round_trips;

use conformance::{ClaimFresh, Fresh};

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use toolonce::store::redis::RedisStore;
use toolonce::{
    About, Claim, ClaimRequest, EntryState, Error, Fenced, Layer, ListQuery, OnExpired, Outcome,
    OwnerToken, Resolution, Resolved, State, Store, ToolError, Verified, WriteOptions, key,
};
use toolonce_testsupport::{RedisServer, shared_redis};

/// A key prefix no other test (or test process) uses, so listings see only their own entries.
fn unique_prefix() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "test-{}-{}:",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

async fn store_on(url: &str) -> RedisStore {
    RedisStore::builder(url)
        .prefix(unique_prefix())
        .connect()
        .await
        .unwrap()
}

store_conformance!(async { Arc::new(store_on(&shared_redis().url()).await) });

/// The raw Redis key of an operation key in `store`.
fn raw_key(store: &RedisStore, key: &toolonce::OperationKey) -> String {
    store.redis_key(key)
}

/// What a running entry stores instead of its owner token: the token's SHA-1, in hex.
fn owner_digest(owner: &OwnerToken) -> String {
    sha1_smol::Sha1::from(owner.as_str()).digest().to_string()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

// ---------------------------------------------------------------------------------------------
// Interoperation with TypeScript workers of the reference design (`docs/contract.md`, "Wire format").

#[tokio::test]
async fn a_done_entry_written_by_a_typescript_worker_is_replayed_by_the_layer() {
    let redis = shared_redis();
    let store = Arc::new(store_on(&redis.url()).await);
    // Flat arguments: the reference design derives the same key.
    let args = json!({"amount": 500, "currency": "eur", "customer": "cus_1"});
    let op = key::derive("run-ts-1", "charge", &args, None).unwrap();
    let started = now_ms() - 1_000;
    let value = format!(
        r#"{{"status":"done","result":{{"chargeId":"ch_1","amount":500,"big":12345678901234567890}},"startedAt":{started}}}"#
    );
    assert_eq!(
        redis.command(&["SET", &raw_key(&store, &op.key), &value, "PX", "60000"]),
        "OK"
    );

    let entry = match store
        .claim_fresh(&op.key, &op.fingerprint, conformance::LONG)
        .await
        .unwrap()
    {
        Fresh::Existing(entry) => entry,
        Fresh::Won(_) => panic!("claimed over a done entry"),
    };
    assert_eq!(entry.fingerprint, None, "the reference design records none");
    assert_eq!(
        entry.started_at,
        UNIX_EPOCH + Duration::from_millis(started)
    );
    let expected = json!({"chargeId": "ch_1", "amount": 500, "big": 12345678901234567890u64});
    match &entry.state {
        EntryState::Done { result, .. } => assert_eq!(result, &expected),
        other => panic!("expected done, got {other:?}"),
    }
    // The native claim answers a settled entry without its key's TTL; a read has it.
    let read = store.get(&op.key).await.unwrap().unwrap();
    assert!(read.expires_at.unwrap() > SystemTime::now());

    let ran = Arc::new(AtomicU32::new(0));
    let counter = ran.clone();
    let answer = Layer::new(store)
        .run("charge", &op, &WriteOptions::new(), |_| async move {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(json!("ran again"))
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Replayed);
    assert_eq!(answer.result, Ok(expected));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_running_entry_written_by_a_typescript_worker_is_in_flight_for_us() {
    let redis = shared_redis();
    let store = Arc::new(store_on(&redis.url()).await);
    let op = key::derive(
        "run-ts-2",
        "send_email",
        &json!({"to": "a@example.com"}),
        None,
    )
    .unwrap();
    let value = format!(
        r#"{{"status":"running","startedAt":{},"workerId":"ts-7"}}"#,
        now_ms()
    );
    redis.command(&["SET", &raw_key(&store, &op.key), &value, "PX", "30000"]);

    let entry = store.get(&op.key).await.unwrap().expect("entry");
    assert_eq!(entry.state, EntryState::Running { owner: None });
    // Nobody can settle it with a token, and the layer does not run the tool.
    assert!(
        !store
            .renew(&op.key, &OwnerToken::generate(), conformance::LONG)
            .await
            .unwrap()
    );
    let answer = Layer::new(store)
        .run("send_email", &op, &WriteOptions::new(), |_| async move {
            panic!("the tool must not run while another worker runs it")
        })
        .await;
    assert_eq!(answer.outcome, Outcome::InFlight);
}

#[tokio::test]
async fn our_running_entry_holds_the_owner_digest_and_its_retention_and_lives_for_lease_plus_retention()
 {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let op = key::derive("run-ts-3", "charge", &json!({"amount": 1}), None).unwrap();
    let owner = OwnerToken::generate();
    let about = About::new("run-ts-3", "charge").detail("acme \"eu\"\n");
    let before = now_ms();
    let req = ClaimRequest::new(&op.key, &op.fingerprint, &owner, Duration::from_secs(30))
        .retention(Duration::from_secs(3600))
        .about(&about);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let after = now_ms();
    let raw = redis.command(&["GET", &raw_key(&store, &op.key)]);
    let value: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(value["status"], "running");
    let started = value["startedAt"].as_u64().expect("startedAt in ms");
    // The claiming machine's clock: within the claim's window.
    assert!(
        started >= before && started <= after,
        "{started} not in {before}..{after}"
    );
    assert_eq!(value.get("leaseUntil"), None, "the lease is the key's TTL");
    assert_eq!(value["retention"], 3_600_000);
    assert_eq!(value["firstStartedAt"].as_u64(), Some(started));
    assert_eq!(value["attempts"], 1);
    assert_eq!(value["owner"], owner_digest(&owner));
    assert!(
        !raw.contains(owner.as_str()),
        "the token itself is not stored"
    );
    assert_eq!(value["fingerprint"], op.fingerprint.as_str());
    assert_eq!(
        (&value["scope"], &value["tool"], &value["detail"]),
        (
            &json!("run-ts-3"),
            &json!("charge"),
            &json!("acme \"eu\"\n")
        )
    );
    let pttl: i64 = redis
        .command(&["PTTL", &raw_key(&store, &op.key)])
        .parse()
        .unwrap();
    assert!(pttl > 3_625_000 && pttl <= 3_630_000, "PTTL {pttl}");
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(entry.about, about);
    assert_eq!(entry.attempts, 1);
    assert_eq!(entry.state(), State::Running);
    let deadline = entry.expires_at.unwrap();
    assert!(
        deadline > SystemTime::now() + Duration::from_secs(20)
            && deadline <= SystemTime::now() + Duration::from_secs(31),
        "the lease deadline, not the key's expiry: {deadline:?}"
    );
}

#[tokio::test]
async fn a_hostile_scope_cannot_forge_the_members_that_fence_the_entry() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("forged");
    let thief = OwnerToken::generate();
    let forged = format!(
        r#"x","owner":"{}","fingerprint":"{}","leaseUntil":1,"attempts":9}}"#,
        thief.as_str(),
        fp.as_str()
    );
    let about = About::new(forged.clone(), "t").detail("\u{0}\"}\\");
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &owner, conformance::LONG).about(&about);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let entry = store.get(&key).await.unwrap().unwrap();
    assert_eq!(entry.about, about, "read back as written");
    assert_eq!(entry.attempts, 1);
    assert_eq!(entry.state(), State::Running);
    assert!(!store.renew(&key, &thief, conformance::LONG).await.unwrap());
    assert_eq!(
        store
            .complete(&key, thief, &json!("stolen"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    assert_eq!(
        store
            .complete(&key, owner, &json!("mine"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
    let entry = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        entry.about, about,
        "the settle keeps what the entry says it is"
    );
    assert!(matches!(entry.state, EntryState::Done { ref result, .. } if result == "mine"));
}

#[tokio::test]
async fn renew_moves_the_lease_deadline_and_keeps_the_retention_after_it() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("renew-retention");
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &owner, Duration::from_secs(2))
        .retention(Duration::from_secs(100));
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    assert!(
        store
            .renew(&key, &owner, Duration::from_secs(20))
            .await
            .unwrap()
    );
    let pttl: i64 = redis
        .command(&["PTTL", &raw_key(&store, &key)])
        .parse()
        .unwrap();
    let deadline = store.get(&key).await.unwrap().unwrap().expires_at.unwrap();
    let lease_left = deadline.duration_since(SystemTime::now()).unwrap();
    assert!(
        (Duration::from_secs(15)..=Duration::from_millis(20_100)).contains(&lease_left),
        "lease deadline {lease_left:?} away"
    );
    assert!(
        (115_000..=120_000).contains(&pttl),
        "the key lives for the new lease plus the retention: PTTL {pttl}"
    );
}

#[tokio::test]
async fn entries_written_by_the_previous_version_still_decode_replay_and_expire_with_their_lease() {
    let redis = shared_redis();
    let store = Arc::new(store_on(&redis.url()).await);
    // A running entry of the previous version: no lease deadline inside, the key's PX is the lease.
    let op = key::derive("run-old-1", "charge", &json!({"amount": 7}), None).unwrap();
    let old_owner = OwnerToken::generate();
    let value = format!(
        r#"{{"status":"running","startedAt":{},"owner":"{}","fingerprint":"{}"}}"#,
        now_ms(),
        old_owner.as_str(),
        op.fingerprint.as_str()
    );
    redis.command(&["SET", &raw_key(&store, &op.key), &value, "PX", "1500"]);
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(
        entry.state,
        EntryState::Running {
            owner: Some(old_owner.as_str().to_owned())
        }
    );
    assert_eq!((entry.attempts, entry.first_started_at), (0, None));
    assert!(entry.expires_at.unwrap() <= SystemTime::now() + Duration::from_millis(1500));
    // In flight while its key lives, even to a claim that would take over an unknown entry.
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&op.key, &op.fingerprint, &owner, conformance::LONG).takeover(true);
    match store.claim(&req).await.unwrap() {
        Claim::Existing(e) => assert_eq!(e.state(), State::Running),
        Claim::Won | Claim::TookOver => panic!("took over a live entry of the previous version"),
    }
    // Its key expires with its lease: then it is absent, as the previous version meant.
    let start = Instant::now();
    while store.get(&op.key).await.unwrap().is_some() {
        assert!(start.elapsed() < Duration::from_secs(30), "never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));

    // A done entry of the previous version replays, with its completion time as settled.
    let op = key::derive("run-old-1", "charge", &json!({"amount": 8}), None).unwrap();
    let value = format!(
        r#"{{"status":"done","result":{{"charge":"ch_old"}},"startedAt":1764400000000,"completedAt":1764400001000,"fingerprint":"{}"}}"#,
        op.fingerprint.as_str()
    );
    redis.command(&["SET", &raw_key(&store, &op.key), &value, "PX", "60000"]);
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(
        entry.settled_at,
        Some(UNIX_EPOCH + Duration::from_millis(1_764_400_001_000))
    );
    let answer = Layer::new(store)
        .run("charge", &op, &WriteOptions::new(), |_| async {
            panic!("ran over a done entry of the previous version")
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Replayed);
    assert_eq!(answer.result, Ok(json!({"charge": "ch_old"})));
}

#[tokio::test]
async fn resolve_settles_running_entries_of_other_writers_and_leaves_settled_ones_alone() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    // A TypeScript worker's running entry, stuck (its worker died: it stays until its PX).
    let (key, _) = conformance::op("resolve-ts");
    let raw = raw_key(&store, &key);
    redis.command(&[
        "SET",
        &raw,
        r#"{"status":"running","startedAt":1764400000000}"#,
        "PX",
        "60000",
    ]);
    assert_eq!(
        store
            .resolve(
                &key,
                &Resolution::Done(json!({"sent": true})),
                conformance::LONG
            )
            .await
            .unwrap(),
        Resolved::Applied
    );
    let value: Value = serde_json::from_str(&redis.command(&["GET", &raw])).unwrap();
    assert_eq!(value["status"], "done");
    assert_eq!(
        value["result"],
        json!({"sent": true}),
        "what the worker replays"
    );
    assert_eq!(value["startedAt"], 1_764_400_000_000u64);
    assert!(value["settledAt"].is_u64() && value["completedAt"] == value["settledAt"]);
    // Settled meanwhile: nothing is written.
    match store
        .resolve(&key, &Resolution::Release, conformance::LONG)
        .await
        .unwrap()
    {
        Resolved::Settled(entry) => assert_eq!(entry.state(), State::Done),
        other => panic!("expected settled, got {other:?}"),
    }
    assert!(redis.command(&["GET", &raw]).contains("\"sent\""));

    // The previous version's running entry: failed, with its fingerprint kept.
    let (key, fp) = conformance::op("resolve-old");
    let raw = raw_key(&store, &key);
    let value = format!(
        r#"{{"status":"running","startedAt":1764400000000,"owner":"{}","fingerprint":"{}"}}"#,
        OwnerToken::generate().as_str(),
        fp.as_str()
    );
    redis.command(&["SET", &raw, &value, "PX", "60000"]);
    let error = ToolError::permanent("mailbox full");
    assert_eq!(
        store
            .resolve(&key, &Resolution::Failed(error.clone()), conformance::LONG)
            .await
            .unwrap(),
        Resolved::Applied
    );
    let entry = store.get(&key).await.unwrap().unwrap();
    assert_eq!(entry.fingerprint, Some(fp));
    assert!(matches!(entry.state, EntryState::Failed { error: ref e, .. } if *e == error));

    // Released: gone, and the next claim wins.
    let (key, fp) = conformance::op("resolve-release");
    redis.command(&[
        "SET",
        &raw_key(&store, &key),
        r#"{"status":"running","startedAt":1764400000000,"workerId":"ts-1"}"#,
        "PX",
        "60000",
    ]);
    assert_eq!(
        store
            .resolve(&key, &Resolution::Release, conformance::LONG)
            .await
            .unwrap(),
        Resolved::Applied
    );
    assert_eq!(
        store
            .resolve(&key, &Resolution::Release, conformance::LONG)
            .await
            .unwrap(),
        Resolved::Absent
    );
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &owner, conformance::LONG);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
}

#[tokio::test]
async fn our_done_and_failed_entries_keep_the_result_and_error_byte_for_byte() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let op = key::derive("run-ts-4", "charge", &json!({"amount": 2}), None).unwrap();
    let owner = conformance::won(
        store
            .claim_fresh(&op.key, &op.fingerprint, conformance::LONG)
            .await
            .unwrap(),
    );
    let result = json!({"id": 18446744073709551615u64, "ratio": 0.30000000000000004, "tiny": 5e-324, "s": "\u{2028}/\"é"});
    assert_eq!(
        store
            .complete(&op.key, owner, &result, Duration::from_secs(3600))
            .await
            .unwrap(),
        Fenced::Applied
    );
    let raw = redis.command(&["GET", &raw_key(&store, &op.key)]);
    let value: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(value["status"], "done");
    assert_eq!(
        value["result"], result,
        "what a TypeScript worker reads is the exact result"
    );
    assert!(
        raw.contains(r#""result":{"id":18446744073709551615,"ratio":0.30000000000000004"#),
        "the result is stored as serde_json wrote it, never re-encoded by cjson: {raw}"
    );
    assert!(value["startedAt"].as_u64().unwrap() <= value["completedAt"].as_u64().unwrap());
    assert_eq!(value["fingerprint"], op.fingerprint.as_str());
    assert!(value.get("owner").is_none(), "a settled entry has no owner");
    let pttl: i64 = redis
        .command(&["PTTL", &raw_key(&store, &op.key)])
        .parse()
        .unwrap();
    assert!(pttl > 3_500_000 && pttl <= 3_600_000, "PTTL {pttl}");

    let op = key::derive("run-ts-4", "charge", &json!({"amount": 3}), None).unwrap();
    let owner = conformance::won(
        store
            .claim_fresh(&op.key, &op.fingerprint, conformance::LONG)
            .await
            .unwrap(),
    );
    let error = ToolError::permanent("card declined").with_detail(json!({"code": "do_not_honor"}));
    let _ = store
        .fail(&op.key, owner, &error, Some(conformance::LONG))
        .await
        .unwrap();
    let value: Value =
        serde_json::from_str(&redis.command(&["GET", &raw_key(&store, &op.key)])).unwrap();
    assert_eq!(value["status"], "failed");
    assert_eq!(
        value["error"],
        json!({"message": "card declined", "class": "permanent", "detail": {"code": "do_not_honor"}})
    );
    assert!(value["failedAt"].is_u64());
}

#[tokio::test]
async fn a_value_that_is_not_an_entry_is_corrupt_and_fenced_writes_leave_it_alone() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("corrupt");
    let raw = raw_key(&store, &key);
    for garbage in [
        "not json",
        "[1,2]",
        "null",
        r#"{"status":"paused"}"#,
        r#"{"status":"running","owner":7}"#,
    ] {
        redis.command(&["SET", &raw, garbage, "PX", "60000"]);
        assert!(
            matches!(store.get(&key).await, Err(Error::Corrupt { .. })),
            "get of {garbage}"
        );
        assert!(
            matches!(
                store.claim_fresh(&key, &fp, conformance::LONG).await,
                Err(Error::Corrupt { .. })
            ),
            "claim of {garbage}"
        );
        // No script error, just "not yours".
        assert!(
            !store
                .renew(&key, &OwnerToken::generate(), conformance::LONG)
                .await
                .unwrap()
        );
        assert_eq!(
            store
                .complete(&key, OwnerToken::generate(), &json!(1), conformance::LONG)
                .await
                .unwrap(),
            Fenced::NotOwner
        );
        assert_eq!(
            store
                .fail(
                    &key,
                    OwnerToken::generate(),
                    &ToolError::transient("x"),
                    None
                )
                .await
                .unwrap(),
            Fenced::NotOwner
        );
        assert!(
            matches!(
                store
                    .resolve(&key, &Resolution::Release, conformance::LONG)
                    .await,
                Err(Error::Corrupt { .. })
            ),
            "resolve of {garbage}"
        );
        assert_eq!(redis.command(&["GET", &raw]), garbage, "left as it was");
    }
    assert!(
        store.delete(&key).await.unwrap(),
        "an operator can still remove it"
    );
}

// ---------------------------------------------------------------------------------------------
// Configuration.

#[tokio::test]
async fn a_prefix_from_the_url_namespaces_the_keys_and_the_listing() {
    let redis = shared_redis();
    let prefix = unique_prefix();
    let url = format!("{}?prefix={}", redis.url(), prefix.replace(':', "%3A"));
    let store = RedisStore::connect(&url).await.unwrap();
    assert_eq!(store.prefix(), prefix);
    let (key, fp) = conformance::op("prefixed");
    let _owner = conformance::won(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
    assert_eq!(redis.command(&["EXISTS", &format!("{prefix}{key}")]), "1");

    let other = store_on(&redis.url()).await;
    assert!(other.get(&key).await.unwrap().is_none());
    assert!(
        other
            .list(&ListQuery::new())
            .await
            .unwrap()
            .entries
            .is_empty()
    );
    let listed = store.list(&ListQuery::new()).await.unwrap();
    assert_eq!(listed.entries.len(), 1);
    assert_eq!(listed.entries[0].key, key);
}

#[tokio::test]
async fn store_open_picks_redis_from_the_url() {
    let store = toolonce::store::open(&format!(
        "{}?prefix={}",
        shared_redis().url(),
        unique_prefix()
    ))
    .await
    .unwrap();
    assert!(format!("{store:?}").contains("RedisStore"));
    let (key, fp) = conformance::op("open");
    conformance::won(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
}

#[tokio::test]
async fn a_password_in_the_url_authenticates_and_a_wrong_one_is_refused() {
    let server = RedisServer::start();
    assert_eq!(
        server.command(&["CONFIG", "SET", "requirepass", "s3cret"]),
        "OK"
    );
    let url = format!("redis://:s3cret@127.0.0.1:{}/", server.port());
    let store = RedisStore::connect(&url).await.unwrap();
    let (key, fp) = conformance::op("auth");
    conformance::won(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
    assert!(!format!("{store:?}").contains("s3cret"), "{store:?}");

    let wrong = format!("redis://:nope@127.0.0.1:{}/", server.port());
    let err = RedisStore::connect(&wrong).await.unwrap_err();
    assert!(
        !err.is_retryable(),
        "a wrong password is not worth retrying: {err:?}"
    );
}

#[tokio::test]
async fn connecting_to_a_server_that_is_not_there_is_unavailable() {
    let port = toolonce_testsupport::free_port();
    let err = RedisStore::builder(format!("redis://127.0.0.1:{port}/"))
        .reconnect_attempts(0)
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
}

// ---------------------------------------------------------------------------------------------
// Round trips.

#[tokio::test]
async fn a_first_time_write_costs_two_round_trips_and_a_replay_one() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let (write, replay) =
        redis_round_trips::commands_of_a_write_and_its_replay(&server, store, "run-rt").await;
    // The claim is one native `SET … NX GET PX`, the complete one EVALSHA (its own GET, TIME
    // and SET): two round trips. No script had to be loaded, since `connect` loaded them all.
    assert_eq!(write, ["evalsha=1", "get=1", "set=2", "time=1"]);
    // One native `SET … NX GET`, which wrote nothing and answered the settled entry.
    assert_eq!(replay, ["set=1"]);
}

#[tokio::test]
async fn on_the_script_path_a_first_time_write_and_a_replay_cost_the_same_round_trips() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .native_claim(false)
        .connect()
        .await
        .unwrap();
    let (write, replay) =
        redis_round_trips::commands_of_a_write_and_its_replay(&server, store, "run-rt-script")
            .await;
    // Two EVALSHA: the claim (GET, SET) and the complete (GET, TIME, SET).
    assert_eq!(write, ["evalsha=2", "get=2", "set=2", "time=1"]);
    // One EVALSHA: the claim script (GET, PTTL), which wrote nothing.
    assert_eq!(replay, ["evalsha=1", "get=1", "pttl=1"]);
}

#[tokio::test]
async fn holding_an_unknown_operation_costs_two_round_trips_and_a_rerun_three() {
    let server = RedisServer::start();
    let store = Arc::new(RedisStore::connect(&server.url()).await.unwrap());
    let op = key::derive("run-rt-unknown", "charge", &json!({"amount": 9}), None).unwrap();
    // An owner that claimed and vanished: its lease runs out unsettled.
    let gone = OwnerToken::generate();
    let req = ClaimRequest::new(&op.key, &op.fingerprint, &gone, Duration::from_millis(100));
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    conformance::until_unknown(store.as_ref(), &op.key).await;
    let layer = Layer::new(store);

    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    let held = layer
        .run("charge", &op, &WriteOptions::new(), |_| async {
            panic!("a held operation ran")
        })
        .await;
    assert_eq!(held.outcome, Outcome::Unknown);
    // The native claim found a running value, which only the claim script can judge (GET,
    // PTTL: its lease is over when the key's TTL is down to its retention). No clock is read.
    assert_eq!(
        server.commands_run(),
        ["evalsha=1", "get=1", "pttl=1", "set=1"]
    );

    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    let rerun = WriteOptions::new().on_expired(OnExpired::Rerun);
    let answer = layer
        .run("charge", &op, &rerun, |_| async { Ok(json!("ch_2")) })
        .await;
    assert_eq!(answer.outcome, Outcome::Executed);
    // The native claim, then the claim script that took it over (GET, PTTL, SET), then the
    // complete (GET, TIME, SET).
    assert_eq!(
        server.commands_run(),
        ["evalsha=2", "get=2", "pttl=1", "set=3", "time=1"]
    );
}

// ---------------------------------------------------------------------------------------------
// Several processes.

const URL_VAR: &str = "TOOLONCE_REDIS_URL";

#[test]
fn eight_processes_running_the_same_500_operations_execute_each_exactly_once() {
    let url = format!("{}?prefix={}", shared_redis().url(), unique_prefix());
    conformance::multiprocess::run_workers("multi_process_worker", &[(URL_VAR, url)], 8, 500);
}

/// The body of each worker process of the test above; does nothing in a normal test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_process_worker() {
    if !conformance::multiprocess::is_worker() {
        return;
    }
    let url = std::env::var(URL_VAR).unwrap();
    let store = RedisStore::connect(&url).await.unwrap();
    conformance::multiprocess::worker(Arc::new(store)).await;
}

// ---------------------------------------------------------------------------------------------
// A crash between claim and complete.

const CRASH_URL: &str = "TOOLONCE_REDIS_CRASH_URL";
const CRASH_MARKER: &str = "TOOLONCE_REDIS_CRASH_MARKER";
const CRASH_SCOPE: &str = "TOOLONCE_REDIS_CRASH_SCOPE";
const CRASH_LEASE: Duration = Duration::from_secs(1);

fn charge_args() -> Value {
    json!({"customer": "cus_1", "amount": 4200, "currency": "eur"})
}

/// The child of the next test: claims the charge through the layer, "charges" (writes the key
/// it was given to the marker file), then hangs until it is killed. A no-op in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_worker_charges_then_hangs() {
    let Ok(url) = std::env::var(CRASH_URL) else {
        return;
    };
    let marker = PathBuf::from(std::env::var(CRASH_MARKER).unwrap());
    let scope = std::env::var(CRASH_SCOPE).unwrap();
    let layer = Layer::new(Arc::new(RedisStore::connect(&url).await.unwrap()));
    let op = key::derive(&scope, "charge", &charge_args(), None).unwrap();
    let options = WriteOptions::new().lease(CRASH_LEASE);
    let about = About::new(scope.clone(), "charge").detail("acme payments");
    let _ = layer
        .run_with_about("charge", &op, &about, &options, |ctx| async move {
            // Write then rename, so the parent never reads half a marker.
            let tmp = marker.with_extension("tmp");
            std::fs::write(&tmp, ctx.key().as_str()).unwrap();
            std::fs::rename(&tmp, &marker).unwrap();
            std::future::pending::<()>().await;
            unreachable!()
        })
        .await;
    unreachable!("the tool never returns");
}

/// Kills the child on drop, so a failing assertion does not leave it hanging.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_after_charging_leaves_an_unknown_entry_held_until_a_rerun_takes_it_over()
{
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("charged");
    let scope = format!("crash-{}-{}", std::process::id(), now_ms());
    let url = format!("{}?prefix={}", shared_redis().url(), unique_prefix());
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash_worker_charges_then_hangs",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CRASH_URL, &url)
            .env(CRASH_MARKER, &marker)
            .env(CRASH_SCOPE, &scope)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
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
            "the child did not charge"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.0.kill().unwrap(); // SIGKILL: no destructor, no complete, no fail.
    child.0.wait().unwrap();
    let charged_with = std::fs::read_to_string(&marker).unwrap();

    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(&url).await.unwrap());
    let layer = Layer::new(store.clone());
    let op = key::derive(&scope, "charge", &charge_args(), None).unwrap();
    assert_eq!(charged_with, op.key.as_str());
    let hold = WriteOptions::new().lease(CRASH_LEASE);
    let about = About::new(scope.clone(), "charge");

    // The claim survived the crash, with what it said it was.
    let entry = store
        .get(&op.key)
        .await
        .unwrap()
        .expect("the crashed claim");
    assert_eq!(
        entry.about,
        About::new(scope.clone(), "charge").detail("acme payments")
    );
    assert_eq!(entry.attempts, 1);
    let first_started_at = entry.first_started_at.expect("recorded");
    if entry.state() == State::Running {
        // Still within the lease (a loaded machine may be past it already): in flight.
        let early = layer
            .run_with_about("charge", &op, &about, &hold, |_| async {
                panic!("ran during the lease")
            })
            .await;
        assert!(
            matches!(early.outcome, Outcome::InFlight | Outcome::Unknown),
            "{early:?}"
        );
    }

    // The lease runs out on the server's clock without a settle: unknown, and kept.
    conformance::until_unknown(store.as_ref(), &op.key).await;

    // hold (the default): not run, answered unknown, the entry left as it was.
    let held = layer
        .run_with_about("charge", &op, &about, &hold, |_| async {
            panic!("a held duplicate ran")
        })
        .await;
    assert_eq!(held.outcome, Outcome::Unknown, "{held:?}");
    // verify that cannot tell: held as well.
    let cannot_tell = layer
        .run_with_verify(
            "charge",
            &op,
            &about,
            &hold.clone().on_expired(OnExpired::Verify),
            |_| async { Verified::CannotTell },
            |_| async { panic!("ran although the probe could not tell") },
        )
        .await;
    assert_eq!(cannot_tell.outcome, Outcome::Unknown, "{cannot_tell:?}");
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!((entry.state(), entry.attempts), (State::Unknown, 1));

    // rerun: taken over and run again with the same key, which the provider deduplicates; the
    // tool is told an earlier attempt may have run.
    let seen = Arc::new(std::sync::Mutex::new(None));
    let seen_in_tool = seen.clone();
    let answer = layer
        .run_with_about(
            "charge",
            &op,
            &about,
            &hold.clone().on_expired(OnExpired::Rerun),
            |ctx| async move {
                *seen_in_tool.lock().unwrap() =
                    Some((ctx.key().clone(), ctx.may_have_run_before()));
                Ok(json!({"charge": "ch_2", "idempotency_key": ctx.key().as_str()}))
            },
        )
        .await;
    assert_eq!(answer.outcome, Outcome::Executed, "{answer:?}");
    let (key, may_have_run_before) = seen.lock().unwrap().take().expect("the tool ran");
    assert_eq!(
        key.as_str(),
        charged_with,
        "the rerun got the crashed run's key"
    );
    assert!(may_have_run_before, "a takeover tells the tool");
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(entry.state(), State::Done);
    assert_eq!(entry.attempts, 2);
    assert_eq!(entry.first_started_at, Some(first_started_at));
    assert!(entry.settled_at.is_some());

    let replay = layer
        .run_with_about("charge", &op, &about, &hold, |_| async {
            panic!("ran twice")
        })
        .await;
    assert_eq!(replay.outcome, Outcome::Replayed);
    assert_eq!(replay.result, answer.result);
}

// ---------------------------------------------------------------------------------------------
// Outage.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_server_mid_flight_runs_nothing_twice_and_the_same_store_recovers() {
    let server = Arc::new(RedisServer::start());
    let store = Arc::new(
        RedisStore::builder(server.url())
            .response_timeout(Duration::from_millis(500))
            .connection_timeout(Duration::from_millis(300))
            .reconnect_attempts(1)
            .connect()
            .await
            .unwrap(),
    );
    let layer = Layer::new(store.clone());
    const CALLS: usize = 60;
    let runs: Arc<Vec<AtomicU32>> = Arc::new((0..CALLS).map(|_| AtomicU32::new(0)).collect());
    let options = WriteOptions::new().lease(Duration::from_secs(5));

    // Calls start every 10 ms and each tool takes 100 ms; the server dies after 250 ms, so
    // some calls finish before, some are inside their tool, and the rest start after.
    let started = Instant::now();
    let tasks: Vec<_> = (0..CALLS)
        .map(|i| {
            let (layer, runs, options) = (layer.clone(), runs.clone(), options.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10 * i as u64)).await;
                let op = key::derive("outage", "charge", &json!({"call": i}), None).unwrap();
                let answer = layer
                    .run("charge", &op, &options, |_| async move {
                        runs[i].fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Ok(json!({"call": i}))
                    })
                    .await;
                (i, answer)
            })
        })
        .collect();
    let killer = {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            std::thread::sleep(Duration::from_millis(250));
            server.kill();
        })
    };
    killer.await.unwrap();
    let mut executed = 0;
    let mut unavailable = 0;
    for task in tasks {
        let (i, answer) = task.await.unwrap();
        let ran = runs[i].load(Ordering::SeqCst);
        match answer.outcome {
            Outcome::Executed => {
                assert_eq!(ran, 1, "call {i}");
                assert_eq!(
                    answer.result,
                    Ok(json!({"call": i})),
                    "call {i} reports its result"
                );
                executed += 1;
            }
            Outcome::StoreUnavailable => {
                assert_eq!(ran, 0, "call {i} was refused yet its tool ran");
                let message = answer.result.unwrap_err().message;
                assert!(message.contains("Not executed"), "call {i}: {message}");
                unavailable += 1;
            }
            other => panic!("call {i}: unexpected outcome {other}"),
        }
    }
    assert!(executed > 0, "no call finished before the kill");
    assert!(unavailable > 0, "no call was refused during the outage");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the outage was not bounded"
    );

    // The same server comes back on the same port (empty: it keeps nothing on disk), and the
    // same store instance serves again once its connection manager has reconnected.
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.get(&conformance::op("probe").0).await {
            Ok(_) => break,
            Err(e) => {
                assert!(e.is_retryable(), "{e:?}");
                assert!(
                    Instant::now() < deadline,
                    "the store did not recover: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let after: Arc<Vec<AtomicU32>> = Arc::new((0..10).map(|_| AtomicU32::new(0)).collect());
    for round in [Outcome::Executed, Outcome::Replayed] {
        for i in 0..10 {
            let op = key::derive("after-outage", "charge", &json!({"call": i}), None).unwrap();
            let after = after.clone();
            let answer = layer
                .run("charge", &op, &options, |_| async move {
                    after[i].fetch_add(1, Ordering::SeqCst);
                    Ok(json!(i))
                })
                .await;
            assert_eq!(answer.outcome, round, "call {i}");
            assert_eq!(answer.result, Ok(json!(i)));
        }
    }
    assert!(after.iter().all(|n| n.load(Ordering::SeqCst) == 1));
}

// ---------------------------------------------------------------------------------------------
// Listing beyond the conformance suite.

#[tokio::test]
async fn listing_pages_through_more_entries_than_one_scan_batch_holds() {
    let store = store_on(&shared_redis().url()).await;
    let mut keys = Vec::new();
    for _ in 0..250 {
        let (key, fp) = conformance::op("many");
        let owner = conformance::won(
            store
                .claim_fresh(&key, &fp, conformance::LONG)
                .await
                .unwrap(),
        );
        let _ = store
            .complete(&key, owner, &json!(1), conformance::LONG)
            .await
            .unwrap();
        keys.push(key);
    }
    for limit in [1, 7, 100] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..1_000 {
            let mut q = ListQuery::new().state(State::Done).limit(limit);
            if let Some(c) = cursor.take() {
                q = q.cursor(c);
            }
            let page = store.list(&q).await.unwrap();
            assert!(page.entries.len() <= limit);
            seen.extend(page.entries.into_iter().map(|e| e.key));
            match page.next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        seen.sort();
        keys.sort();
        assert_eq!(seen, keys, "limit {limit}");
    }
}

#[tokio::test]
async fn huge_or_zero_timeouts_never_panic_and_huge_ones_work() {
    let url = shared_redis().url();
    for timeout in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_secs_f64(1e19),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ] {
        let connected = RedisStore::builder(&url)
            .prefix(unique_prefix())
            .response_timeout(timeout)
            .connection_timeout(timeout)
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

/// The calls of `command` the server has counted since the last `CONFIG RESETSTAT`.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.command(&["INFO", "commandstats"]);
    info.lines()
        .find(|l| l.starts_with(&format!("cmdstat_{command}:")))
        .and_then(|l| l.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_one_native_command_and_a_running_entry_is_judged_by_its_ttl_not_a_clock() {
    // A server of its own: the counts are of this test's commands only.
    let server = RedisServer::start();
    let store: Arc<dyn Store> = Arc::new(store_on(&server.url()).await);
    let layer = Layer::new(Arc::clone(&store));
    let op = key::derive("s", "t", &json!({"n": 1}), None).unwrap();
    let options = WriteOptions::new().lease(Duration::from_secs(60));
    let first = layer
        .run("t", &op, &options, |_| async { Ok(json!({"ok": true})) })
        .await;
    assert_eq!(first.outcome, Outcome::Executed);

    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    for _ in 0..5 {
        let again = layer
            .run("t", &op, &options, |_| async { Ok(json!({"ok": false})) })
            .await;
        assert_eq!(again.outcome, Outcome::Replayed);
        assert_eq!(again.result.unwrap(), json!({"ok": true}));
    }
    assert_eq!(calls(&server, "set"), 5, "one SET … NX GET per replay");
    assert_eq!(calls(&server, "evalsha"), 0, "a replay ran a script");

    // A running entry of ours: a duplicate judges its lease by the key's TTL, in the claim
    // script, and no clock is read anywhere.
    let running = key::derive("s", "t", &json!({"n": 2}), None).unwrap();
    let owner = OwnerToken::generate();
    let claim = store
        .claim(&ClaimRequest::new(
            &running.key,
            &running.fingerprint,
            &owner,
            Duration::from_secs(60),
        ))
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Won));
    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    let other = OwnerToken::generate();
    let seen = store
        .claim(&ClaimRequest::new(
            &running.key,
            &running.fingerprint,
            &other,
            Duration::from_secs(60),
        ))
        .await
        .unwrap();
    let Claim::Existing(entry) = seen else {
        panic!("the duplicate won: {seen:?}");
    };
    assert!(
        matches!(entry.state, EntryState::Running { .. }),
        "{entry:?}"
    );
    assert_eq!((calls(&server, "evalsha"), calls(&server, "pttl")), (1, 1));
    // And a plain read of it too.
    assert!(matches!(
        store.get(&running.key).await.unwrap().unwrap().state,
        EntryState::Running { .. }
    ));
    assert_eq!(calls(&server, "time"), 0, "a clock was read");
}

/// Writes `value` under `key`'s raw key with `px` ms to live.
fn put(
    redis: &RedisServer,
    store: &RedisStore,
    key: &toolonce::OperationKey,
    value: &str,
    px: u64,
) {
    assert_eq!(
        redis.command(&["SET", &raw_key(store, key), value, "PX", &px.to_string()]),
        "OK"
    );
}

#[tokio::test]
async fn the_lease_is_live_while_the_key_outlives_its_retention_whatever_the_start_says() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("ttl-lease");
    let holder = OwnerToken::generate();
    // Started "in 1970" and "in 2100" by clocks far off: only the TTL against the retention
    // (an hour) counts.
    for started in [1u64, 4_102_444_800_000] {
        let value = format!(
            r#"{{"status":"running","startedAt":{started},"owner":"{}","retention":3600000,"fingerprint":"{}","firstStartedAt":{started},"attempts":1}}"#,
            owner_digest(&holder),
            fp.as_str()
        );
        // A minute of lease left: running, even to a claim that asks to take over.
        put(redis, &store, &key, &value, 3_660_000);
        let taker = OwnerToken::generate();
        let req = ClaimRequest::new(&key, &fp, &taker, conformance::LONG).takeover(true);
        match store.claim(&req).await.unwrap() {
            Claim::Existing(e) => {
                assert_eq!(e.state(), State::Running, "{started}");
                let left = e
                    .expires_at
                    .unwrap()
                    .duration_since(SystemTime::now())
                    .unwrap();
                assert!(left > Duration::from_secs(50), "{left:?}");
            }
            other => panic!("{started}: a live lease was taken: {other:?}"),
        }
        // The TTL below the retention: the lease is over, the entry unknown, and taken over.
        put(redis, &store, &key, &value, 3_000_000);
        assert_eq!(
            store.get(&key).await.unwrap().unwrap().state(),
            State::Unknown
        );
        assert!(matches!(store.claim(&req).await.unwrap(), Claim::TookOver));
        assert_eq!(
            store
                .complete(&key, holder.duplicate(), &json!(1), conformance::LONG)
                .await
                .unwrap(),
            Fenced::NotOwner,
            "the first holder lost it to the takeover"
        );
        assert_eq!(
            store
                .complete(&key, taker, &json!(2), conformance::LONG)
                .await
                .unwrap(),
            Fenced::Applied
        );
    }
}

#[tokio::test]
async fn a_duplicate_reads_only_the_owner_digest_which_settles_nothing() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("digest");
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &owner, conformance::LONG);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let raw = redis.command(&["GET", &raw_key(&store, &key)]);
    assert!(
        !raw.contains(owner.as_str()),
        "the token is readable: {raw}"
    );
    // What a duplicate's claim hands back names the holder by digest...
    let seen = match store
        .claim(&ClaimRequest::new(
            &key,
            &fp,
            &OwnerToken::generate(),
            conformance::LONG,
        ))
        .await
        .unwrap()
    {
        Claim::Existing(entry) => entry,
        other => panic!("the duplicate won: {other:?}"),
    };
    let Some(EntryState::Running { owner: Some(shown) }) = Some(seen.state) else {
        panic!("expected a running entry with its holder");
    };
    assert_eq!(shown, owner_digest(&owner));
    // ... and the digest used as a token renews, settles, claims and releases nothing.
    let forged = || OwnerToken::from_stored(shown.clone());
    assert!(
        !store
            .renew(&key, &forged(), conformance::LONG)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .complete(&key, forged(), &json!("forged"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    assert_eq!(
        store
            .fail(
                &key,
                forged(),
                &ToolError::permanent("forged"),
                Some(conformance::LONG)
            )
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    assert_eq!(
        store
            .fail(&key, forged(), &ToolError::transient("forged"), None)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    let forged_token = forged();
    let again = ClaimRequest::new(&key, &fp, &forged_token, conformance::LONG).takeover(true);
    assert!(matches!(
        store.claim(&again).await.unwrap(),
        Claim::Existing(_)
    ));
    // The token itself still does.
    assert_eq!(
        store
            .complete(&key, owner, &json!("mine"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
}

#[tokio::test]
async fn a_claim_applied_whose_reply_was_lost_wins_again_and_keeps_one_attempt() {
    // The native SET … NX GET applied and its reply never arrived: the caller's retry finds its
    // own running entry, which the script recognises by the digest of the caller's token.
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("lost-reply");
    let owner = OwnerToken::generate();
    let short = ClaimRequest::new(&key, &fp, &owner, Duration::from_millis(300))
        .retention(Duration::from_secs(60));
    assert!(matches!(store.claim(&short).await.unwrap(), Claim::Won));
    // The lease runs out before the retry: still the caller's own, and renewed, never a takeover.
    conformance::until_unknown(&store, &key).await;
    let retry = ClaimRequest::new(&key, &fp, &owner, conformance::LONG).takeover(true);
    assert!(matches!(store.claim(&retry).await.unwrap(), Claim::Won));
    let entry = store.get(&key).await.unwrap().unwrap();
    assert_eq!((entry.state(), entry.attempts), (State::Running, 1));
    let pttl: i64 = redis
        .command(&["PTTL", &raw_key(&store, &key)])
        .parse()
        .unwrap();
    assert!(pttl > 60_000, "the lease was renewed: PTTL {pttl}");
}

#[tokio::test]
async fn a_running_entry_of_the_previous_version_is_judged_by_its_deadline_and_can_be_taken_over() {
    // The version before this one stored the server's lease deadline and the token itself.
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("prev-lease");
    let old_owner = OwnerToken::generate();
    let old = |lease_until: u64| {
        format!(
            r#"{{"status":"running","startedAt":1764400000000,"leaseUntil":{lease_until},"owner":"{}","fingerprint":"{}","firstStartedAt":1764300000000,"attempts":2,"scope":"run-9","tool":"charge"}}"#,
            old_owner.as_str(),
            fp.as_str()
        )
    };
    let taker = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &taker, conformance::LONG).takeover(true);
    // Its deadline ahead on the server's clock (this machine's): in flight.
    put(redis, &store, &key, &old(now_ms() + 60_000), 3_600_000);
    match store.claim(&req).await.unwrap() {
        Claim::Existing(e) => assert_eq!(e.state(), State::Running),
        other => panic!("took a live entry of the previous version: {other:?}"),
    }
    // Past: unknown, and a takeover writes today's shape, keeping what the entry was.
    put(redis, &store, &key, &old(now_ms() - 1_000), 3_600_000);
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Unknown
    );
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::TookOver));
    let value: Value =
        serde_json::from_str(&redis.command(&["GET", &raw_key(&store, &key)])).unwrap();
    assert_eq!(value.get("leaseUntil"), None);
    assert_eq!(value["owner"], owner_digest(&taker));
    assert_eq!(
        (
            &value["attempts"],
            &value["firstStartedAt"],
            &value["scope"]
        ),
        (&json!(3), &json!(1_764_300_000_000u64), &json!("run-9"))
    );
    assert_eq!(
        store
            .complete(&key, old_owner, &json!("late"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    assert_eq!(
        store
            .complete(&key, taker, &json!("ok"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
}

#[test]
fn the_native_claim_is_used_from_redis_7_on() {
    // `INFO server` of the machine's Redis says which path `connect` took; the version rule
    // itself is a unit test of the store.
    let server = RedisServer::start();
    let info = server.command(&["INFO", "server"]);
    let major: u32 = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .and_then(|v| v.split('.').next()?.parse().ok())
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let native = rt.block_on(async {
        let store = RedisStore::connect(&server.url()).await.unwrap();
        format!("{store:?}").contains("native_claim: true")
    });
    assert_eq!(native, major >= 7, "Redis {major}");
    let forced = rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .native_claim(false)
            .connect()
            .await
            .unwrap();
        format!("{store:?}").contains("native_claim: true")
    });
    assert!(!forced);
}

#[tokio::test]
async fn the_settling_fence_matches_only_todays_shape_even_with_the_right_digest() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("fence-shape");
    let owner = OwnerToken::generate();
    let digest = owner_digest(&owner);
    let fp = fp.as_str();
    for value in [
        // The shape before `leaseUntil`, and the previous version's, with the digest as owner.
        format!(r#"{{"status":"running","startedAt":1,"owner":"{digest}","fingerprint":"{fp}"}}"#),
        format!(
            r#"{{"status":"running","startedAt":1,"leaseUntil":9999999999999,"owner":"{digest}","fingerprint":"{fp}","firstStartedAt":1,"attempts":1}}"#
        ),
        // Today's, cut short, or without its start, or with the members in another order.
        format!(
            r#"{{"status":"running","startedAt":1,"owner":"{digest}","retention":5,"fingerprint":"{fp}""#
        ),
        format!(
            r#"{{"status":"running","startedAt":,"owner":"{digest}","retention":5,"fingerprint":"{fp}"}}"#
        ),
        format!(
            r#"{{"status":"running","startedAt":1,"retention":5,"owner":"{digest}","fingerprint":"{fp}"}}"#
        ),
        format!(
            r#"{{"status":"done","startedAt":1,"owner":"{digest}","retention":5,"fingerprint":"{fp}"}}"#
        ),
    ] {
        put(redis, &store, &key, &value, 60_000);
        assert_eq!(
            store
                .complete(&key, owner.duplicate(), &json!(1), conformance::LONG)
                .await
                .unwrap(),
            Fenced::NotOwner,
            "{value}"
        );
        assert_eq!(
            store
                .fail(&key, owner.duplicate(), &ToolError::transient("x"), None)
                .await
                .unwrap(),
            Fenced::NotOwner,
            "{value}"
        );
        assert!(
            !store.renew(&key, &owner, conformance::LONG).await.unwrap(),
            "{value}"
        );
        assert_eq!(
            redis.command(&["GET", &raw_key(&store, &key)]),
            value,
            "left alone"
        );
    }
}
