//! The layer's log is for operators: every write call logs what happened, the tool, the key,
//! the outcome and the tool's own error (or the store's) — never the text written for the
//! model ("you must not retry it… continue with other work"), which stays in the answer.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolonce::{
    Claim, ClaimRequest, Entry, Error, Fenced, Layer, ListQuery, MemoryStore, OperationKey,
    Outcome, OwnerToken, Page, Resolution, Resolved, Seen, Store, ToolError, WriteOptions, key,
};

/// Collects what the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Runs `f` on a current-thread runtime with every event of the thread captured.
fn logged<F: std::future::Future>(f: impl FnOnce() -> F) -> (F::Output, String) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = rt.block_on(f());
    (out, captured.text())
}

/// Phrases only the model's text has.
const FOR_THE_MODEL: [&str; 6] = [
    "you must not retry",
    "Continue with other work",
    "safe to try again",
    "Not executed",
    "If you meant",
    "a later identical call",
];

fn assert_operator_wording(log: &str) {
    for phrase in FOR_THE_MODEL {
        assert!(!log.contains(phrase), "{phrase:?} in the log:\n{log}");
    }
}

/// A store whose server is gone; its driver repeats its cause, as redis-rs does.
#[derive(Debug)]
struct Down;

fn refused() -> Error {
    let io = std::io::Error::from_raw_os_error(111);
    Error::unavailable(Repeating(io))
}

#[derive(Debug)]
struct Repeating(std::io::Error);

impl std::fmt::Display for Repeating {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Repeating {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[async_trait]
impl Store for Down {
    async fn claim(&self, _: &ClaimRequest<'_>) -> toolonce::Result<Claim> {
        Err(refused())
    }
    async fn renew(&self, _: &OperationKey, _: &OwnerToken, _: Duration) -> toolonce::Result<bool> {
        Err(refused())
    }
    async fn complete(
        &self,
        _: &OperationKey,
        _: OwnerToken,
        _: &Value,
        _: Duration,
    ) -> toolonce::Result<Fenced> {
        Err(refused())
    }
    async fn fail(
        &self,
        _: &OperationKey,
        _: OwnerToken,
        _: &ToolError,
        _: Option<Duration>,
    ) -> toolonce::Result<Fenced> {
        Err(refused())
    }
    async fn get(&self, _: &OperationKey) -> toolonce::Result<Option<Entry>> {
        Err(refused())
    }
    async fn list(&self, _: &ListQuery) -> toolonce::Result<Page> {
        Err(refused())
    }
    async fn resolve(
        &self,
        _: &OperationKey,
        _: &Seen,
        _: &Resolution,
        _: Duration,
    ) -> toolonce::Result<Resolved> {
        Err(refused())
    }
    async fn delete(&self, _: &OperationKey) -> toolonce::Result<bool> {
        Err(refused())
    }
    async fn purge_expired(&self) -> toolonce::Result<u64> {
        Err(refused())
    }
}

#[test]
fn an_in_flight_duplicate_and_a_conflict_are_logged_for_the_operator() {
    let ((dup, conflict), log) = logged(|| async {
        let layer = Layer::new(Arc::new(MemoryStore::new()));
        let options = WriteOptions::new();
        let fields = toolonce::KeyFields::new(["/order"]).unwrap();
        let op = key::derive("run", "charge", &json!({"order": 1}), Some(&fields)).unwrap();
        let other =
            key::derive("run", "charge", &json!({"order": 1, "x": 2}), Some(&fields)).unwrap();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let first = layer.run("charge", &op, &options, |_| async move {
            let _ = released.await;
            Ok(json!("charged"))
        });
        let duplicates = async {
            tokio::task::yield_now().await;
            let dup = layer
                .run("charge", &op, &options, |_| async { Ok(json!(2)) })
                .await;
            let _ = release.send(());
            dup
        };
        let (_, dup) = tokio::join!(first, duplicates);
        let conflict = layer
            .run("charge", &other, &options, |_| async { Ok(json!(3)) })
            .await;
        (dup, conflict)
    });
    assert_eq!(dup.outcome, Outcome::InFlight);
    assert_eq!(conflict.outcome, Outcome::Conflict);
    // The model still gets its instructions.
    assert!(dup.result.unwrap_err().message.contains("must not retry"));
    assert_operator_wording(&log);
    assert!(log.contains("outcome=\"in_flight\""), "{log}");
    assert!(log.contains("outcome=\"conflict\""), "{log}");
    assert!(log.contains("running elsewhere"), "{log}");
    assert!(log.contains(&format!("key={}", dup.key)), "{log}");
    assert!(log.contains("tool=\"charge\""), "{log}");
}

#[test]
fn a_store_outage_logs_the_stores_error_once_not_the_models_text() {
    let (answer, log) = logged(|| async {
        let op = key::derive("run", "charge", &json!({}), None).unwrap();
        Layer::new(Arc::new(Down))
            .run("charge", &op, &WriteOptions::new(), |_| async {
                Ok(json!(1))
            })
            .await
    });
    assert_eq!(answer.outcome, Outcome::StoreUnavailable);
    let refused = std::io::Error::from_raw_os_error(111).to_string();
    let model = answer.result.unwrap_err();
    assert!(
        model.message.contains("safe to try again"),
        "{}",
        model.message
    );
    assert_eq!(
        model.message.matches(&refused).count(),
        1,
        "{}",
        model.message
    );
    assert_operator_wording(&log);
    assert!(log.contains("outcome=\"store_unavailable\""), "{log}");
    assert!(log.contains("the store could not be used"), "{log}");
    assert_eq!(log.matches(&refused).count(), 1, "{log}");
}

#[test]
fn a_tools_own_error_and_a_panic_are_logged_without_the_models_text() {
    let ((failed, panicked), log) = logged(|| async {
        let layer = Layer::new(Arc::new(MemoryStore::new()));
        let options = WriteOptions::new();
        let op = key::derive("run", "charge", &json!({"n": 1}), None).unwrap();
        let failed = layer
            .run("charge", &op, &options, |_| async {
                Err(ToolError::permanent("card declined"))
            })
            .await;
        let op = key::derive("run", "charge", &json!({"n": 2}), None).unwrap();
        let panicked = layer
            .run("charge", &op, &options, |_| async {
                panic!("the client crashed");
            })
            .await;
        (failed, panicked)
    });
    assert_eq!(failed.outcome, Outcome::Executed);
    assert_eq!(panicked.outcome, Outcome::Executed);
    assert_operator_wording(&log);
    assert!(log.contains("tool_error=\"card declined\""), "{log}");
    assert!(log.contains("the tool panicked"), "{log}");
}

#[test]
fn an_unknown_outcome_is_logged_at_warn_with_scope_tool_and_key() {
    let (answer, log) = logged(|| async {
        let clock = toolonce::ManualClock::new(std::time::SystemTime::now());
        let store = Arc::new(MemoryStore::with_clock(clock.clone()));
        let op = key::derive("run-7", "send_email", &json!({"to": "ada"}), None).unwrap();
        let crashed = OwnerToken::generate();
        let lease = Duration::from_secs(60);
        let request = ClaimRequest::new(&op.key, &op.fingerprint, &crashed, lease);
        assert!(matches!(store.claim(&request).await.unwrap(), Claim::Won));
        clock.advance(lease * 2);
        let about = toolonce::About::new("run-7", "send_email");
        Layer::new(store)
            .run_with_about("send_email", &op, &about, &WriteOptions::new(), |_| async {
                Ok(json!("sent twice"))
            })
            .await
    });
    assert_eq!(answer.outcome, Outcome::Unknown);
    assert_operator_wording(&log);
    let line = log
        .lines()
        .find(|l| l.contains("outcome=\"unknown\""))
        .unwrap_or_else(|| panic!("no unknown event in {log}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("scope=\"run-7\""), "{line}");
    assert!(line.contains("tool=\"send_email\""), "{line}");
    assert!(line.contains(&format!("key={}", answer.key)), "{line}");
    assert!(line.contains("toolonce resolve"), "{line}");
}
