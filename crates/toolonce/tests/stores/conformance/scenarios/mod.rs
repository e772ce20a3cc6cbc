//! The layer's conformance scenarios (`tests/data/scenarios/scenarios.json`, described in its
//! README), run through [`toolonce::Layer`] on every store configuration of the conformance
//! suite: the same file the TypeScript and Python packages run. Every scenario runs, at once
//! and each in a scope of its own; the test fails naming each scenario that failed, and when a
//! scenario is neither run nor listed as unsupported here with a reason.

mod caller;
mod format;
mod steps;

use std::sync::Arc;

use toolonce::Store;

use format::{File, Scenario};

/// The runner's name in the file's `unsupported` and `unchecked` maps.
pub const RUNNER: &str = "rust";

fn load() -> File {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/scenarios/scenarios.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Runs every scenario of the file on `store`.
pub async fn layer_scenarios(store: Arc<dyn Store>) {
    let file = Arc::new(load());
    assert!(
        file.scenarios.len() >= 15,
        "the scenario file lost its scenarios"
    );
    let mut ids: Vec<&str> = file.scenarios.iter().map(|s| s.id.as_str()).collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(before, ids.len(), "two scenarios share an id");
    let mut tasks = Vec::new();
    let mut skipped = Vec::new();
    for (index, scenario) in file.scenarios.iter().enumerate() {
        if let Some(why) = scenario.unsupported.get(RUNNER) {
            assert!(
                !why.trim().is_empty(),
                "{}: unsupported without a reason",
                scenario.id
            );
            skipped.push(scenario.id.clone());
            continue;
        }
        let (store, file) = (store.clone(), file.clone());
        tasks.push(tokio::spawn(async move {
            let scenario: &Scenario = &file.scenarios[index];
            (
                scenario.id.clone(),
                steps::run(store, &file.defaults, scenario).await,
            )
        }));
    }
    let mut ran = skipped;
    let mut failures = Vec::new();
    for task in tasks {
        let (id, outcome) = task.await.expect("a scenario panicked");
        if let Err(why) = outcome {
            failures.push(format!("{id}: {why}"));
        }
        ran.push(id);
    }
    ran.sort_unstable();
    assert_eq!(ran, ids, "every scenario is run or listed as unsupported");
    assert!(
        failures.is_empty(),
        "scenarios failed:\n{}",
        failures.join("\n")
    );
}
