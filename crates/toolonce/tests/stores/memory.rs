//! The store conformance suite on `MemoryStore`.

use crate::conformance;

store_conformance!(async { std::sync::Arc::new(toolonce::MemoryStore::new()) });

#[tokio::test]
async fn a_layer_runs_each_of_many_operations_once_across_concurrent_tasks() {
    // The in-memory store is one process's, so this is the in-process analogue of the
    // multi-process test the durable stores run: 8 tasks × the same 500 operations.
    use serde_json::json;
    use std::sync::atomic::{AtomicU32, Ordering};
    use toolonce::{InFlight, Layer, WriteOptions, key};
    let layer = Layer::new(std::sync::Arc::new(toolonce::MemoryStore::new()));
    let counts: std::sync::Arc<Vec<AtomicU32>> =
        std::sync::Arc::new((0..500).map(|_| AtomicU32::new(0)).collect());
    let options = WriteOptions::new().in_flight(InFlight::Wait(std::time::Duration::from_secs(5)));
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let (layer, counts, options) = (layer.clone(), counts.clone(), options.clone());
            tokio::spawn(async move {
                for i in 0..500usize {
                    let op = if t % 2 == 0 { i } else { 499 - i };
                    let d = key::derive("mem", "op", &json!({ "op": op }), None).unwrap();
                    let counts = counts.clone();
                    let a = layer
                        .run("op", &d, &options, move |_| async move {
                            counts[op].fetch_add(1, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            Ok(json!(op))
                        })
                        .await;
                    assert_eq!(a.result, Ok(json!(op)));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert!(counts.iter().all(|c| c.load(Ordering::SeqCst) == 1));
}
