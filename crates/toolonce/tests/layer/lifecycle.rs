//! A call's life beyond its answer: the owner token kept secret, panics and cancellations that
//! leave a running entry to expire, the heartbeat, and the toolbox's formats and checks.

use super::*;

#[tokio::test]
async fn the_owner_token_never_reaches_a_duplicate_or_the_model() {
    let store = Arc::new(MemoryStore::new());
    let layer = Layer::new(store.clone());
    let op = key::derive("token", "charge", &json!({"n": 1}), None).unwrap();
    let release = Arc::new(tokio::sync::Notify::new());
    let (held, go) = (release.clone(), op.clone());
    let owner_call = {
        let layer = layer.clone();
        tokio::spawn(async move {
            layer
                .run("charge", &go, &WriteOptions::new(), |_| async move {
                    held.notified().await;
                    Ok(json!({"ok": true}))
                })
                .await
        })
    };
    let token = loop {
        if let Some(entry) = store.get(&op.key).await.unwrap()
            && let toolonce::EntryState::Running { owner: Some(t) } = entry.state
        {
            break t;
        }
        tokio::task::yield_now().await;
    };
    let duplicate = layer
        .run("charge", &op, &WriteOptions::new(), |_| async {
            Ok(json!({"ran": "twice"}))
        })
        .await;
    assert_eq!(duplicate.outcome, Outcome::InFlight);
    let shown = format!(
        "{duplicate:?} {}",
        serde_json::to_string(&duplicate.result).unwrap()
    );
    assert!(!shown.contains(&token), "{shown}");
    release.notify_one();
    let executed = owner_call.await.unwrap();
    assert_eq!(executed.outcome, Outcome::Executed);
    assert!(!format!("{executed:?}").contains(&token));
}

#[tokio::test]
async fn a_panicking_tool_leaves_a_running_entry_that_expires_and_is_then_reclaimed() {
    let clock = ManualClock::new(SystemTime::now());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let crashing = Charge {
        panic: true,
        ..Charge::default()
    };
    let healthy = Charge::default();
    let lease = Duration::from_secs(60);
    let tb = toolbox(
        store.clone(),
        crashing.clone(),
        WriteOptions::new().lease(lease),
    );
    let answer = tb.call("charge_card", args("A")).await;
    assert!(answer.is_error);
    assert!(answer.content.contains("panicked"), "{}", answer.content);
    let key = answer.key.clone().unwrap();
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Running
    );

    // Under `rerun` (the tool's downstream honours the key); `hold` refuses to run it again.
    let tb2 = toolbox(
        store.clone(),
        healthy.clone(),
        WriteOptions::new()
            .lease(lease)
            .on_expired(OnExpired::Rerun),
    );
    assert_eq!(
        tb2.call("charge_card", args("A")).await.outcome,
        Outcome::InFlight
    );
    clock.advance(lease + Duration::from_secs(1));
    let holding = toolbox(
        store.clone(),
        healthy.clone(),
        WriteOptions::new().lease(lease),
    );
    assert_eq!(
        holding.call("charge_card", args("A")).await.outcome,
        Outcome::Unknown
    );
    assert_eq!(healthy.charges.load(Ordering::SeqCst), 0);
    let resumed = tb2.call("charge_card", args("A")).await;
    assert_eq!(resumed.outcome, Outcome::Executed);
    assert_eq!(
        resumed.key.as_ref(),
        Some(&key),
        "the same key goes downstream again"
    );
    assert_eq!(healthy.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_cancelled_call_leaves_a_running_entry_that_expires_and_is_then_reclaimed() {
    let clock = ManualClock::new(SystemTime::now());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let slow = Charge {
        delay: Some(Duration::from_secs(3600)),
        ..Charge::default()
    };
    let lease = Duration::from_secs(60);
    let tb = toolbox(
        store.clone(),
        slow.clone(),
        WriteOptions::new().lease(lease),
    );
    let cancelled =
        tokio::time::timeout(Duration::from_millis(50), tb.call("charge_card", args("A"))).await;
    assert!(cancelled.is_err(), "the call was cancelled by the timeout");
    let key = key::derive("run-1", "charge_card", &args("A"), None)
        .unwrap()
        .key;
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Running
    );

    let healthy = Charge::default();
    let tb2 = toolbox(
        store.clone(),
        healthy.clone(),
        WriteOptions::new()
            .lease(lease)
            .on_expired(OnExpired::Rerun),
    );
    assert_eq!(
        tb2.call("charge_card", args("A")).await.outcome,
        Outcome::InFlight
    );
    clock.advance(lease + Duration::from_secs(1));
    let holding = toolbox(
        store.clone(),
        healthy.clone(),
        WriteOptions::new().lease(lease),
    );
    assert_eq!(
        holding.call("charge_card", args("A")).await.outcome,
        Outcome::Unknown
    );
    assert_eq!(healthy.charges.load(Ordering::SeqCst), 0);
    assert_eq!(
        tb2.call("charge_card", args("A")).await.outcome,
        Outcome::Executed
    );
    assert_eq!(healthy.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn the_heartbeat_keeps_a_long_running_tool_claimed_past_its_lease() {
    // The paused tokio clock drives the heartbeat; the store's clock follows it.
    #[derive(Debug)]
    struct TokioClock(SystemTime, tokio::time::Instant);
    impl toolonce::store::memory::Clock for TokioClock {
        fn now(&self) -> SystemTime {
            self.0 + self.1.elapsed()
        }
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(TokioClock(
        SystemTime::now(),
        tokio::time::Instant::now(),
    ))));
    let slow = Charge {
        delay: Some(Duration::from_secs(10)),
        ..Charge::default()
    };
    let options = WriteOptions::new().lease(Duration::from_secs(3));
    let tb = Arc::new(toolbox(store.clone(), slow.clone(), options));
    let running = tokio::spawn({
        let tb = tb.clone();
        async move { tb.call("charge_card", args("A")).await }
    });
    tokio::time::sleep(Duration::from_secs(7)).await;
    let dup = tb.call("charge_card", args("A")).await;
    assert_eq!(
        dup.outcome,
        Outcome::InFlight,
        "lease was renewed, not expired"
    );
    let first = running.await.unwrap();
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(
        tb.call("charge_card", args("A")).await.outcome,
        Outcome::Replayed
    );
    assert_eq!(slow.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn tool_definitions_come_in_the_anthropic_and_openai_formats() {
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        Charge::default(),
        WriteOptions::new(),
    );
    let anthropic = tb.anthropic_tools();
    let charge = &anthropic[1];
    assert_eq!(charge["name"], "charge_card");
    assert_eq!(charge["input_schema"]["type"], "object");
    assert!(charge["input_schema"]["properties"]["payment"].is_object());
    assert!(charge["input_schema"].get("$schema").is_none());
    let openai = tb.openai_tools();
    assert_eq!(openai[1]["type"], "function");
    assert_eq!(openai[1]["function"]["name"], "charge_card");
    assert_eq!(openai[1]["function"]["parameters"], charge["input_schema"]);
}

#[tokio::test]
async fn anthropic_and_openai_tool_calls_are_answered_in_their_own_format() {
    let tool = Charge::default();
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let first = tb
        .call_anthropic(&json!({
            "type": "tool_use", "id": "toolu_1", "name": "charge_card", "input": args("A")
        }))
        .await;
    assert_eq!(first["type"], "tool_result");
    assert_eq!(first["tool_use_id"], "toolu_1");
    assert!(first.get("is_error").is_none());
    // The model calls again with a new id, and OpenAI-style with the arguments as text.
    let again = tb
        .call_openai(&json!({
            "id": "call_9", "type": "function",
            "function": {"name": "charge_card", "arguments": args("A").to_string()}
        }))
        .await;
    assert_eq!(again["role"], "tool");
    assert_eq!(again["tool_call_id"], "call_9");
    // The recorded result, then the replay's note, as two text parts.
    assert_eq!(again["content"][0]["text"], first["content"]);
    assert_eq!(again["content"][1]["type"], "text");
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
    let bad = tb
        .call_anthropic(&json!({"type": "tool_use", "id": "toolu_2", "name": "nope", "input": {}}))
        .await;
    assert_eq!(bad["is_error"], true);
}

#[test]
fn a_toolbox_without_a_scope_or_with_a_nul_in_a_name_is_refused() {
    let err = Toolbox::builder(Arc::new(MemoryStore::new()))
        .write(Charge::default())
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("scope"), "{err}");
    let err = Toolbox::builder(Arc::new(MemoryStore::new()))
        .scope("a\0b")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("NUL"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_blocking_its_thread_keeps_its_lease_on_the_memory_store() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    blocking::a_tool_blocking_its_thread_for_three_leases_runs_once(store.clone(), store).await;
}

#[tokio::test(start_paused = true)]
async fn dropping_a_running_call_stops_its_heartbeat_and_the_lease_expires() {
    #[derive(Debug)]
    struct TokioClock(SystemTime, tokio::time::Instant);
    impl toolonce::store::memory::Clock for TokioClock {
        fn now(&self) -> SystemTime {
            self.0 + self.1.elapsed()
        }
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(TokioClock(
        SystemTime::now(),
        tokio::time::Instant::now(),
    ))));
    let stuck = Charge {
        delay: Some(Duration::from_secs(3600)),
        ..Charge::default()
    };
    // `rerun`, so the retry below may take over once the lease is gone.
    let options = WriteOptions::new()
        .lease(Duration::from_secs(3))
        .on_expired(OnExpired::Rerun);
    let tb = Arc::new(toolbox(store, stuck.clone(), options));
    let running = tokio::spawn({
        let tb = tb.clone();
        async move { tb.call("charge_card", args("A")).await }
    });
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        tb.call("charge_card", args("A")).await.outcome,
        Outcome::InFlight,
        "the heartbeat renews while the call runs"
    );
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    // Past a full lease with nobody renewing it, the operation can be taken over.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let retry = tokio::spawn({
        let tb = tb.clone();
        async move { tb.call("charge_card", args("A")).await }
    });
    let taken_over = tokio::time::timeout(Duration::from_secs(60), async {
        while stuck.charges.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    retry.abort();
    assert!(
        taken_over.is_ok(),
        "the dropped call's lease was still renewed a minute later"
    );
}
