//! Durations given by the user — lease, retention, the in-flight wait — at every entry point of
//! the library, from zero to `Duration::MAX`: each is either refused with an error that names
//! it, the value and the allowed range, or used (a wait of "forever" saturates), and none
//! panics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use toolonce::layer::{MAX_DURATION, MIN_LEASE};
use toolonce::{
    Claim, ClaimRequest, Error, Fenced, InFlight, Layer, MemoryStore, Outcome, OwnerToken, Store,
    ToolError, Toolbox, WriteContext, WriteOptions, WriteTool, key,
};

#[derive(Clone, Default)]
struct Mailer {
    runs: Arc<AtomicU32>,
}

impl WriteTool for Mailer {
    type Args = Value;
    type Output = Value;
    fn name(&self) -> &str {
        "send"
    }
    fn description(&self) -> &str {
        "Sends."
    }
    async fn call(&self, _ctx: WriteContext, _args: Value) -> Result<Value, ToolError> {
        Ok(json!({"sent": self.runs.fetch_add(1, Ordering::SeqCst) + 1}))
    }
}

/// Durations an adversary would try: the edges, the values that overflow `Instant` or
/// `SystemTime` arithmetic, and anything in between.
fn extreme() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::from_millis(29)),
        Just(MIN_LEASE),
        Just(Duration::from_secs(60)),
        Just(MAX_DURATION),
        Just(MAX_DURATION + Duration::from_nanos(1)),
        Just(Duration::from_secs_f64(1e19)),
        Just(Duration::from_secs(u64::MAX)),
        Just(Duration::MAX),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (0u64..10_000_000).prop_map(Duration::from_millis),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn lease_ok(d: Duration) -> bool {
    (MIN_LEASE..=MAX_DURATION).contains(&d)
}

fn retention_ok(d: Duration) -> bool {
    (Duration::from_millis(1)..=MAX_DURATION).contains(&d)
}

/// The error names the field, the value and the range.
fn assert_explains(e: &Error, field: &str) {
    let text = e.report().to_string();
    assert!(matches!(e, Error::Config(_)), "{text}");
    assert!(text.contains(field), "{text}");
    assert!(text.contains("between"), "{text}");
    assert!(text.contains("100 years"), "{text}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn toolbox_options_are_refused_with_a_reason_or_work(
        lease in extreme(),
        retention in extreme(),
        wait in extreme(),
    ) {
        let options = WriteOptions::new()
            .lease(lease)
            .retention(retention)
            .in_flight(InFlight::Wait(wait));
        let tool = Mailer::default();
        let built = Toolbox::builder(Arc::new(MemoryStore::new()))
            .scope("durations")
            .write_with(tool.clone(), options)
            .build();
        match built {
            Err(e) => {
                prop_assert!(!lease_ok(lease) || !retention_ok(retention), "{}", e.report());
                assert_explains(&e, if lease_ok(lease) { "retention" } else { "lease" });
            }
            Ok(tb) => {
                prop_assert!(lease_ok(lease) && retention_ok(retention));
                runtime().block_on(async {
                    let first = tb.call("send", json!({})).await;
                    assert_eq!(first.outcome, Outcome::Executed, "{}", first.content);
                    let again = tb.call("send", json!({})).await;
                    assert_eq!(again.outcome, Outcome::Replayed, "{}", again.content);
                });
                prop_assert_eq!(tool.runs.load(Ordering::SeqCst), 1);
            }
        }
    }

    #[test]
    fn layer_calls_with_any_durations_answer_and_never_panic(
        lease in extreme(),
        retention in extreme(),
        wait in extreme(),
    ) {
        let options = WriteOptions::new()
            .lease(lease)
            .retention(retention)
            .in_flight(InFlight::Wait(wait));
        let layer = Layer::new(Arc::new(MemoryStore::new()));
        let op = key::derive("durations", "send", &json!({}), None).unwrap();
        runtime().block_on(async {
            // A duplicate arrives while the first call runs, so it waits (up to `wait`) for
            // it: the deadline arithmetic is exercised with every value.
            let (release, released) = tokio::sync::oneshot::channel::<()>();
            let first = layer.run("send", &op, &options, |_| async move {
                let _ = released.await;
                Ok(json!("sent"))
            });
            let second = async {
                tokio::task::yield_now().await;
                layer
                    .run("send", &op, &options, |_| async { Ok(json!("sent again")) })
                    .await
            };
            let releaser = async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = release.send(());
            };
            let (first, second, ()) = tokio::join!(first, second, releaser);
            if lease_ok(lease) && retention_ok(retention) {
                assert_eq!(first.outcome, Outcome::Executed);
                assert_eq!(first.result, Ok(json!("sent")));
                // It waited and replays, or a zero wait answered at once, or a retention
                // shorter than the wake-up let the result expire before it was read.
                assert!(
                    matches!(second.outcome, Outcome::Replayed | Outcome::InFlight)
                        || (second.outcome == Outcome::Executed
                            && retention < Duration::from_secs(1)),
                    "{second:?}"
                );
            } else {
                for answer in [first, second] {
                    assert_eq!(answer.outcome, Outcome::InvalidArguments, "{answer:?}");
                    let message = answer.result.unwrap_err().message;
                    assert!(message.contains("between"), "{message}");
                }
            }
        });
    }

    #[test]
    fn the_memory_store_takes_any_duration(lease in extreme(), retention in extreme()) {
        let store = MemoryStore::new();
        let op = key::derive("durations", "send", &json!({}), None).unwrap();
        runtime().block_on(async {
            let owner = OwnerToken::generate();
            let Claim::Won = store.claim(&ClaimRequest::new(&op.key, &op.fingerprint, &owner, lease)).await.unwrap()
            else {
                panic!("a fresh key is won");
            };
            let renewed = store.renew(&op.key, &owner, lease).await.unwrap();
            // A lease below a millisecond may be over already; any other is still held.
            assert!(renewed || lease < Duration::from_millis(1));
            if renewed {
                let done = store
                    .complete(&op.key, owner, &json!(1), retention)
                    .await
                    .unwrap();
                assert_eq!(done, Fenced::Applied);
            }
            let other = key::derive("durations", "fail", &json!({}), None).unwrap();
            let owner = OwnerToken::generate();
            if let Claim::Won =
                store.claim(&ClaimRequest::new(&other.key, &other.fingerprint, &owner, lease)).await.unwrap()
            {
                let _ = store
                    .fail(&other.key, owner, &ToolError::permanent("no"), Some(retention))
                    .await
                    .unwrap();
            }
        });
    }
}

#[test]
fn write_options_explain_what_is_wrong() {
    let e = WriteOptions::new()
        .lease(Duration::ZERO)
        .validate()
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("lease") && text.contains("0"), "{text}");
    assert!(text.contains("between 30ms and 100 years"), "{text}");
    let e = WriteOptions::new()
        .retention(Duration::from_secs_f64(1e19))
        .validate()
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("retention"), "{text}");
    assert!(text.contains("10000000000000000000s"), "{text}");
    // A wait longer than anything representable means "forever": not an error.
    assert!(
        WriteOptions::new()
            .in_flight(InFlight::Wait(Duration::MAX))
            .validate()
            .is_ok()
    );
}
