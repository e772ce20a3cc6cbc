//! The store contract's cases (`tests/data/store_cases/store_cases.json`, described in its
//! README), run on every store configuration of the conformance suite: the same file the
//! TypeScript package runs on each of its stores. Every case runs on a fresh store of its own
//! from the backend's factory (as each hand-written case did), a few at a time; the test fails
//! naming each case that failed, and when a case is neither run nor listed as unsupported here
//! with a reason.

mod entry;
mod format;
mod names;
mod steps;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use toolonce::Store;

use format::File;

/// The runner's name in the file's `unsupported` and `unchecked` maps.
pub const RUNNER: &str = "rust";

/// How many cases run at once: each holds a store (a PostgreSQL pool, a Redis connection) of
/// its own, and most of its time waits out leases.
const AT_ONCE: usize = 8;

/// Makes a fresh, isolated store, as `store_conformance!`'s factory does.
pub type MakeStore<'a> = &'a dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn Store>>>>;

fn load() -> File {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/store_cases/store_cases.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The ids of the file's cases, checked to be unique.
fn ids(file: &File) -> Vec<String> {
    let mut ids: Vec<String> = file.cases.iter().map(|c| c.id.clone()).collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(before, ids.len(), "two store cases share an id");
    ids
}

/// Runs every case of the file, each on a fresh store from `make`.
pub async fn store_cases(make: MakeStore<'_>) {
    let file = Arc::new(load());
    assert!(file.cases.len() >= 40, "the store-case file lost its cases");
    let ids = ids(&file);
    let permits = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let mut tasks = Vec::new();
    let mut ran = Vec::new();
    for (index, case) in file.cases.iter().enumerate() {
        if let Some(why) = case.unsupported.get(RUNNER) {
            assert!(
                !why.trim().is_empty(),
                "{}: unsupported without a reason",
                case.id
            );
            ran.push(case.id.clone());
            continue;
        }
        let permit = permits.clone().acquire_owned().await.expect("open");
        let store = make().await;
        let file = file.clone();
        tasks.push(tokio::spawn(async move {
            let case = &file.cases[index];
            let outcome = steps::run(store, &file, case).await;
            drop(permit);
            (case.id.clone(), outcome)
        }));
    }
    let mut failures = Vec::new();
    for task in tasks {
        let (id, outcome) = task.await.expect("a store case panicked");
        if let Err(why) = outcome {
            failures.push(format!("{id}: {why}"));
        }
        ran.push(id);
    }
    ran.sort_unstable();
    assert_eq!(ran, ids, "every store case is run or listed as unsupported");
    assert!(
        failures.is_empty(),
        "store cases failed:\n{}",
        failures.join("\n")
    );
}
