//! The layer's counters, read through a recorder installed as the `metrics` facade's global one
//! (what an exporter does): calls per tool and outcome, and takeovers of `unknown` operations.
//! Each test uses tool names of its own, since the recorder is shared by the whole binary.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use serde_json::json;
use toolonce::{
    Claim, ClaimRequest, Layer, ManualClock, MemoryStore, OnExpired, OwnerToken, Store, ToolError,
    Toolbox, WriteOptions, key,
};

/// Counters by name and sorted labels: `name{k=v,k=v}`.
#[derive(Default)]
struct Counts(Mutex<HashMap<String, Arc<Count>>>);

#[derive(Default)]
struct Count(AtomicU64);

impl CounterFn for Count {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::SeqCst);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::SeqCst);
    }
}

fn render(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

impl Recorder for &'static Counts {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
        let count = self
            .0
            .lock()
            .unwrap()
            .entry(render(key.name(), &labels))
            .or_default()
            .clone();
        Counter::from_arc(count)
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn counts() -> &'static Counts {
    static COUNTS: OnceLock<&'static Counts> = OnceLock::new();
    COUNTS.get_or_init(|| {
        let counts: &'static Counts = Box::leak(Box::default());
        metrics::set_global_recorder(counts).expect("the only recorder of this binary");
        counts
    })
}

fn read(name: &str, labels: &[(&str, &str)]) -> u64 {
    counts()
        .0
        .lock()
        .unwrap()
        .get(&render(name, labels))
        .map_or(0, |c| c.0.load(Ordering::SeqCst))
}

fn calls(tool: &str, outcome: &str) -> u64 {
    read(
        "toolonce_calls_total",
        &[("tool", tool), ("outcome", outcome)],
    )
}

#[tokio::test]
async fn calls_are_counted_per_tool_and_outcome_and_takeovers_per_tool() {
    counts();
    let clock = ManualClock::new(SystemTime::now());
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let layer = Layer::new(store.clone());
    let tool = "metrics_email";
    let run = |n: u32| key::derive("metrics", tool, &json!({"n": n}), None).unwrap();

    // executed, then replayed.
    for _ in 0..2 {
        let _ = layer
            .run(tool, &run(1), &WriteOptions::new(), |_| async {
                Ok(json!(1))
            })
            .await;
    }
    // A permanent failure, then its replay.
    for _ in 0..2 {
        let _ = layer
            .run(tool, &run(2), &WriteOptions::new(), |_| async {
                Err(ToolError::permanent("declined"))
            })
            .await;
    }
    // Two crashed attempts: one held, one taken over.
    for n in [3, 4] {
        let op = run(n);
        let owner = OwnerToken::generate();
        let request = ClaimRequest::new(&op.key, &op.fingerprint, &owner, Duration::from_secs(60));
        assert!(matches!(store.claim(&request).await.unwrap(), Claim::Won));
    }
    clock.advance(Duration::from_secs(61));
    let held = layer
        .run(tool, &run(3), &WriteOptions::new(), |_| async {
            Ok(json!(3))
        })
        .await;
    assert_eq!(held.outcome, toolonce::Outcome::Unknown);
    let rerun = WriteOptions::new().on_expired(OnExpired::Rerun);
    let taken = layer
        .run(tool, &run(4), &rerun, |_| async { Ok(json!(4)) })
        .await;
    assert_eq!(taken.outcome, toolonce::Outcome::Executed);

    assert_eq!(calls(tool, "executed"), 3);
    assert_eq!(calls(tool, "replayed"), 1);
    assert_eq!(calls(tool, "replayed_failure"), 1);
    assert_eq!(calls(tool, "unknown"), 1);
    assert_eq!(calls(tool, "in_flight"), 0);
    assert_eq!(read("toolonce_takeovers_total", &[("tool", tool)]), 1);
    assert_eq!(read("toolonce_takeovers_total", &[("tool", "another")]), 0);
}

#[tokio::test]
async fn the_toolbox_counts_invalid_arguments_and_unknown_tools_too() {
    counts();
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Args {
        #[allow(dead_code)]
        n: u32,
    }
    struct Tool;
    impl toolonce::WriteTool for Tool {
        type Args = Args;
        type Output = u32;
        fn name(&self) -> &str {
            "metrics_counted"
        }
        fn description(&self) -> &str {
            "Counts."
        }
        async fn call(&self, _: toolonce::WriteContext, a: Args) -> Result<u32, ToolError> {
            Ok(a.n)
        }
    }
    let tb = Toolbox::builder(Arc::new(MemoryStore::new()))
        .scope("metrics")
        .write(Tool)
        .build()
        .unwrap();
    let _ = tb.call("metrics_counted", json!({"n": "x"})).await;
    let _ = tb.call("metrics_missing", json!({})).await;
    let _ = tb.call("metrics_counted", json!({"n": 1})).await;
    assert_eq!(calls("metrics_counted", "invalid_arguments"), 1);
    assert_eq!(calls("metrics_missing", "unknown_tool"), 1);
    assert_eq!(calls("metrics_counted", "executed"), 1);
}

#[tokio::test]
async fn every_one_of_more_tool_names_than_the_layer_keeps_keys_for_is_counted_apart() {
    counts();
    let layer = Layer::new(Arc::new(MemoryStore::new()));
    // The layer keeps the counter keys of 1,024 tool names; the names past them are counted
    // with keys built per call, and must come out the same.
    let names: Vec<String> = (0..1_100).map(|n| format!("metrics_many_{n}")).collect();
    for name in &names {
        let op = key::derive("metrics", name, &json!({}), None).unwrap();
        for _ in 0..2 {
            let _ = layer
                .run(name, &op, &WriteOptions::new(), |_| async { Ok(json!(1)) })
                .await;
        }
    }
    for name in &names {
        assert_eq!(calls(name, "executed"), 1, "{name}");
        assert_eq!(calls(name, "replayed"), 1, "{name}");
    }
}
