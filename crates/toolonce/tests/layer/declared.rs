//! The toolbox's wiring of each tool's declared policy, the metrics of `unknown` operations,
//! and concurrent takeovers under `rerun`.

use super::*;

use super::unknown::unknown_op;

/// A write tool declaring its downstream's behaviour, for the toolbox's wiring.
#[derive(Clone, Default)]
struct Declared {
    name: &'static str,
    honours_key: bool,
    probe: Option<toolonce::Verified>,
    runs: Arc<AtomicU32>,
    probed_with: Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EmailArgs {
    to: String,
}

impl WriteTool for Declared {
    type Args = EmailArgs;
    type Output = Value;
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "A tool with a declared downstream."
    }
    fn honours_key(&self) -> bool {
        self.honours_key
    }
    fn on_expired(&self) -> OnExpired {
        match (&self.probe, self.honours_key) {
            (Some(_), _) => OnExpired::Verify,
            (None, true) => OnExpired::Rerun,
            (None, false) => OnExpired::Hold,
        }
    }
    async fn verify(&self, ctx: &WriteContext, args: &EmailArgs) -> toolonce::Verified {
        self.probed_with
            .lock()
            .unwrap()
            .push((ctx.key().as_str().to_owned(), args.to.clone()));
        self.probe.clone().unwrap_or(toolonce::Verified::CannotTell)
    }
    async fn call(&self, _: WriteContext, args: EmailArgs) -> Result<Value, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"to": args.to}))
    }
}

/// Makes the toolbox call of `tool` with `to` unknown in `store`: claimed, lease expired.
async fn crash_through_the_toolbox(
    store: &Arc<MemoryStore>,
    clock: &ManualClock,
    tool: &str,
    to: &str,
) {
    let op = key::derive("run-1", tool, &json!({"to": to}), None).unwrap();
    let owner = OwnerToken::generate();
    let about = toolonce::About::new("run-1", tool);
    let request =
        ClaimRequest::new(&op.key, &op.fingerprint, &owner, Duration::from_secs(60)).about(&about);
    assert!(matches!(store.claim(&request).await.unwrap(), Claim::Won));
    clock.advance(Duration::from_secs(61));
}

#[tokio::test]
async fn the_toolbox_takes_each_tools_declared_policy_unless_its_options_say_otherwise() {
    let clock = ManualClock::new(SystemTime::now());
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let charge = Declared {
        name: "charge",
        honours_key: true,
        ..Declared::default()
    };
    let email = Declared {
        name: "email",
        ..Declared::default()
    };
    let checked = Declared {
        name: "checked_email",
        probe: Some(toolonce::Verified::Done(json!({"to": "found"}))),
        ..Declared::default()
    };
    let overridden = Declared {
        name: "overridden",
        honours_key: true,
        ..Declared::default()
    };
    let tb = Toolbox::builder(store.clone())
        .scope("run-1")
        .write(charge.clone())
        .write(email.clone())
        .write(checked.clone())
        .write_with(
            overridden.clone(),
            WriteOptions::new().on_expired(OnExpired::Hold),
        )
        .build()
        .unwrap();
    for tool in ["charge", "email", "checked_email", "overridden"] {
        crash_through_the_toolbox(&store, &clock, tool, "ada").await;
    }
    let answer = tb.call("charge", json!({"to": "ada"})).await;
    assert_eq!(answer.outcome, Outcome::Executed, "honours the key: rerun");
    assert_eq!(charge.runs.load(Ordering::SeqCst), 1);

    let answer = tb.call("email", json!({"to": "ada"})).await;
    assert_eq!(answer.outcome, Outcome::Unknown, "no downstream key: hold");
    assert!(answer.is_error);
    assert!(
        answer.content.contains("must not retry"),
        "{}",
        answer.content
    );
    assert_eq!(email.runs.load(Ordering::SeqCst), 0);

    let answer = tb.call("checked_email", json!({"to": "ada"})).await;
    assert_eq!(answer.outcome, Outcome::Replayed, "verified done");
    assert_eq!(answer.value.map(Into::into), Some(json!({"to": "found"})));
    assert_eq!(checked.runs.load(Ordering::SeqCst), 0);
    let probed = checked.probed_with.lock().unwrap().clone();
    let key = answer.key.unwrap();
    assert_eq!(probed, vec![(key.as_str().to_owned(), "ada".to_owned())]);
    // A first call of another operation runs it and never asks the probe.
    let answer = tb.call("checked_email", json!({"to": "bob"})).await;
    assert_eq!(answer.outcome, Outcome::Executed);
    assert_eq!(checked.runs.load(Ordering::SeqCst), 1);
    assert_eq!(checked.probed_with.lock().unwrap().len(), 1);

    let answer = tb.call("overridden", json!({"to": "ada"})).await;
    assert_eq!(
        answer.outcome,
        Outcome::Unknown,
        "the options win over the tool"
    );
    assert_eq!(overridden.runs.load(Ordering::SeqCst), 0);

    // The entries the toolbox writes say what they are.
    let entry = store
        .list(&ListQuery::new().tool("charge"))
        .await
        .unwrap()
        .entries;
    assert_eq!(entry.len(), 1);
    let fresh = tb.call("email", json!({"to": "bob"})).await;
    let entry = store.get(&fresh.key.unwrap()).await.unwrap().unwrap();
    assert_eq!(entry.about, toolonce::About::new("run-1", "email"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_of_an_unknown_operation_under_rerun_take_it_over_once() {
    for round in 0..20 {
        let (store, _clock, op, _) = unknown_op("send_email").await;
        let layer = Layer::new(store.clone());
        let runs = Arc::new(AtomicU32::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let options = WriteOptions::new().on_expired(OnExpired::Rerun);
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let (layer, op, runs, release, barrier, options) = (
                    layer.clone(),
                    op.clone(),
                    runs.clone(),
                    release.clone(),
                    barrier.clone(),
                    options.clone(),
                );
                tokio::spawn(async move {
                    barrier.wait().await;
                    layer
                        .run("send_email", &op, &options, move |_| async move {
                            runs.fetch_add(1, Ordering::SeqCst);
                            release.notified().await;
                            Ok(json!("sent"))
                        })
                        .await
                })
            })
            .collect();
        // Let every duplicate reach the store before the one that took over finishes.
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        release.notify_one();
        let mut outcomes = Vec::new();
        for call in calls {
            outcomes.push(call.await.unwrap().outcome);
        }
        let executed = outcomes.iter().filter(|o| **o == Outcome::Executed).count();
        assert_eq!(executed, 1, "round {round}: {outcomes:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "round {round}");
        assert_eq!(
            store.get(&op.key).await.unwrap().unwrap().attempts,
            2,
            "round {round}"
        );
    }
}
