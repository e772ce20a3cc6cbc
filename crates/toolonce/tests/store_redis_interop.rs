//! Interoperation with a real TypeScript worker of the reference design
//! (`tests/interop/reference_worker.ts`: `SET NX PX` to claim, `GET` to replay, `SET PX` to
//! complete, through `ioredis`), compiled with `tsc` and run with Node against a real
//! `redis-server`: it replays toolonce's `done` entries and reads its `running` and `unknown`
//! entries as in flight (never running them again), and toolonce replays its `done` entries.
//! The npm packages are installed on first use into the target directory. Node.js and npm must
//! be installed: without them these tests fail (they are never skipped), naming what is
//! missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolonce::store::redis::RedisStore;
use toolonce::{
    About, Claim, ClaimRequest, EntryState, Layer, OperationKey, Outcome, OwnerToken, State, Store,
    WriteOptions, key,
};
use toolonce_testsupport::shared_redis;

/// The versions the worker was written against; bump them deliberately.
const PACKAGES: [&str; 3] = ["ioredis@5.9.2", "typescript@5.9.3", "@types/node@20.19.43"];

const SOURCE: &str = include_str!("interop/reference_worker.ts");

fn require(program: &str) {
    let found = Command::new(program).arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "`{program}` is required by this test (it runs a TypeScript worker of the reference \
         design) but cannot be run: install Node.js and npm (e.g. `apt-get install nodejs npm`)"
    );
}

/// The compiled worker: the packages installed with npm into a folder of the target directory
/// that belongs to their versions (once), and the source compiled by `tsc` in strict mode into
/// a folder named after its content (once per change).
fn worker() -> &'static Path {
    static WORKER: OnceLock<PathBuf> = OnceLock::new();
    WORKER.get_or_init(|| {
        require("node");
        require("npm");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("npm-interop-ioredis-5.9.2-ts-5.9.3");
        let tsc = dir.join("node_modules/typescript/bin/tsc");
        let installed = ["ioredis", "typescript", "@types/node"].iter().all(|p| {
            dir.join("node_modules")
                .join(p)
                .join("package.json")
                .exists()
        });
        if !installed {
            let status = Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .args(PACKAGES)
                .status()
                .expect("run npm");
            assert!(status.success(), "npm install {PACKAGES:?} failed");
        }
        assert!(
            tsc.exists(),
            "{} is missing after npm install",
            tsc.display()
        );
        let digest = Sha256::digest(SOURCE.as_bytes());
        let tag: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let build = dir.join(format!("build-{tag}"));
        let script = build.join("reference_worker.js");
        if !script.exists() {
            // Compiled next to node_modules (so `ioredis` resolves), in a folder of this process
            // first: test processes running at once never see half a build.
            let tmp = dir.join(format!("build-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&tmp).unwrap();
            std::fs::write(tmp.join("reference_worker.ts"), SOURCE).unwrap();
            let out = Command::new("node")
                .arg(&tsc)
                .args([
                    "--strict",
                    "--target",
                    "es2022",
                    "--module",
                    "commonjs",
                    "--esModuleInterop",
                    "--types",
                    "node",
                    "reference_worker.ts",
                ])
                .current_dir(&tmp)
                .output()
                .expect("run tsc");
            assert!(
                out.status.success(),
                "tsc refused reference_worker.ts:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if std::fs::rename(&tmp, &build).is_err() {
                // Another process finished the same build first.
                let _ = std::fs::remove_dir_all(&tmp);
            }
        }
        assert!(script.exists(), "{} was not built", script.display());
        script
    })
}

/// One call through the TypeScript worker: its answer, `{"key","outcome","ran","result"?}`.
fn ts_call(run_id: &str, tool: &str, args: &Value, result: &Value) -> Value {
    let out = Command::new("node")
        .arg(worker())
        .arg(shared_redis().url())
        .arg(run_id)
        .arg(tool)
        .arg(args.to_string())
        .arg(result.to_string())
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "the TypeScript worker failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the worker printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A run id no other test (or test process) uses: the reference design has no key prefix, so
/// the scope keeps the tests apart.
fn run_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "interop-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The store as the reference design keys it: no prefix.
async fn store() -> Arc<RedisStore> {
    Arc::new(RedisStore::connect(&shared_redis().url()).await.unwrap())
}

fn raw(store: &RedisStore, key: &OperationKey) -> String {
    shared_redis().command(&["GET", &store.redis_key(key)])
}

#[tokio::test]
async fn the_typescript_worker_replays_a_done_entry_written_by_toolonce() {
    let store = store().await;
    let run = run_id();
    // Flat arguments: both sides derive the same key.
    let args = json!({"to": "ada@example.com", "subject": "Invoice 7", "copies": 2});
    let op = key::derive(&run, "send_email", &args, None).unwrap();
    let sent = json!({"messageId": "m-1", "accepted": ["ada@example.com"], "size": 1234});
    let answer = Layer::new(store.clone())
        .run("send_email", &op, &WriteOptions::new(), {
            let sent = sent.clone();
            |_| async move { Ok(sent) }
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Executed, "{answer:?}");

    let ts = ts_call(&run, "send_email", &args, &json!({"messageId": "m-2"}));
    assert_eq!(
        ts["key"],
        op.key.as_str(),
        "the reference design derives our key"
    );
    assert_eq!(ts["outcome"], "replayed", "{ts}");
    assert_eq!(ts["ran"], false, "{ts}");
    assert_eq!(ts["result"], sent);
}

#[tokio::test]
async fn the_typescript_worker_reads_our_running_entry_as_in_flight() {
    let store = store().await;
    let run = run_id();
    let args = json!({"amount": 500, "customer": "cus_1"});
    let op = key::derive(&run, "charge", &args, None).unwrap();
    let owner = OwnerToken::generate();
    let about = About::new(run.clone(), "charge").detail("provider \"acme\"");
    let req =
        ClaimRequest::new(&op.key, &op.fingerprint, &owner, Duration::from_secs(60)).about(&about);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let before = raw(&store, &op.key);

    let ts = ts_call(&run, "charge", &args, &json!({"charge": "ch_ts"}));
    assert_eq!(ts["key"], op.key.as_str());
    assert_eq!(ts["outcome"], "in_flight", "{ts}");
    assert_eq!(ts["ran"], false, "{ts}");
    assert_eq!(raw(&store, &op.key), before, "the worker wrote nothing");

    // Still ours to complete, and then the worker replays it.
    assert_eq!(
        store
            .complete(
                &op.key,
                owner,
                &json!({"charge": "ch_1"}),
                Duration::from_secs(60)
            )
            .await
            .unwrap(),
        toolonce::Fenced::Applied
    );
    let ts = ts_call(&run, "charge", &args, &json!({"charge": "ch_ts"}));
    assert_eq!(
        (ts["outcome"].clone(), ts["result"].clone()),
        (json!("replayed"), json!({"charge": "ch_1"}))
    );
}

#[tokio::test]
async fn the_typescript_worker_reads_our_unknown_entry_as_in_flight_and_never_runs_it() {
    let store = store().await;
    let run = run_id();
    let args = json!({"to": "bob@example.com", "body": "hello"});
    let op = key::derive(&run, "send_email", &args, None).unwrap();
    let owner = OwnerToken::generate();
    let about = About::new(run.clone(), "send_email");
    let lease = Duration::from_millis(300);
    let req = ClaimRequest::new(&op.key, &op.fingerprint, &owner, lease)
        .retention(Duration::from_secs(3600))
        .about(&about);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    // The owner "dies": nobody settles, and the lease runs out on the server's clock.
    let start = Instant::now();
    loop {
        let entry = store
            .get(&op.key)
            .await
            .unwrap()
            .expect("kept past its lease");
        if entry.state() == State::Unknown {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never became unknown"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = raw(&store, &op.key);

    let ts = ts_call(&run, "send_email", &args, &json!({"messageId": "second"}));
    assert_eq!(ts["key"], op.key.as_str());
    assert_eq!(ts["outcome"], "in_flight", "{ts}");
    assert_eq!(ts["ran"], false, "the second email was never sent: {ts}");
    assert_eq!(raw(&store, &op.key), before, "the worker wrote nothing");
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert!(
        matches!(entry.state, EntryState::Unknown { .. }),
        "{entry:?}"
    );
    let pttl: i64 = shared_redis()
        .command(&["PTTL", &store.redis_key(&op.key)])
        .parse()
        .unwrap();
    assert!(pttl > 3_000_000, "kept for the retention, {pttl} ms left");
}

#[tokio::test]
async fn toolonce_replays_a_done_entry_written_by_the_typescript_worker() {
    let store = store().await;
    let run = run_id();
    let args = json!({"sku": "A-1", "quantity": 3, "note": "gift"});
    let result = json!({"orderId": "o-9", "total": 29.97, "items": [{"sku": "A-1"}], "gift": true});
    let ts = ts_call(&run, "place_order", &args, &result);
    assert_eq!(
        (ts["outcome"].clone(), ts["ran"].clone()),
        (json!("executed"), json!(true)),
        "{ts}"
    );

    let op = key::derive(&run, "place_order", &args, None).unwrap();
    assert_eq!(ts["key"], op.key.as_str());
    let entry = store
        .get(&op.key)
        .await
        .unwrap()
        .expect("the worker's entry");
    assert_eq!(entry.fingerprint, None, "the reference design records none");
    assert_eq!((entry.attempts, entry.first_started_at), (0, None));
    assert!(entry.about.is_empty());

    let ran = Arc::new(AtomicU32::new(0));
    let counter = ran.clone();
    let answer = Layer::new(store.clone())
        .run("place_order", &op, &WriteOptions::new(), |_| async move {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(json!("ordered again"))
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Replayed, "{answer:?}");
    assert_eq!(answer.result, Ok(result));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}
