//! One write call and its duplicates: executed once, replayed, in flight, conflicts, invalid
//! arguments, failures permanent and transient, and read tools that never touch the store.

use super::*;

#[tokio::test]
async fn the_same_call_twice_executes_once_and_both_get_the_same_result() {
    let tool = Charge::default();
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let first = tb.call("charge_card", args("A")).await;
    let second = tb.call("charge_card", args("A")).await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(second.outcome, Outcome::Replayed);
    assert!(!first.is_error && !second.is_error);
    assert_eq!(first.content, second.content);
    assert_eq!(first.key, second.key);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_tool_sees_the_operation_key_as_its_idempotency_key() {
    let tool = Charge::default();
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let answer = tb.call("charge_card", args("A")).await;
    let expected = key::derive("run-1", "charge_card", &args("A"), None)
        .unwrap()
        .key;
    assert_eq!(answer.key.as_ref(), Some(&expected));
    assert_eq!(
        *tool.keys_seen.lock().unwrap(),
        vec![expected.as_str().to_owned()]
    );
}

#[tokio::test]
async fn a_different_scope_is_a_different_operation() {
    let tool = Charge::default();
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    tb.call("charge_card", args("A")).await;
    let other = tb.call_in("run-2", "charge_card", args("A")).await;
    assert_eq!(other.outcome, Outcome::Executed);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn nested_arguments_that_differ_never_share_a_key() {
    let tool = Charge::default();
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let a = tb.call("charge_card", args("A")).await;
    let b = tb.call("charge_card", args("B")).await;
    assert_eq!(a.outcome, Outcome::Executed);
    assert_eq!(b.outcome, Outcome::Executed);
    assert_ne!(a.key, b.key);
    assert!(b.content.contains("\"card\":\"B\""), "{}", b.content);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_duplicates_execute_once_and_the_other_is_told_it_is_in_flight() {
    let tool = Charge {
        delay: Some(Duration::from_millis(200)),
        ..Charge::default()
    };
    let tb = Arc::new(toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    ));
    let (a, b) = tokio::join!(
        tb.call("charge_card", args("A")),
        tb.call("charge_card", args("A"))
    );
    let mut outcomes = [a.outcome, b.outcome];
    outcomes.sort_by_key(|o| o.as_str());
    assert_eq!(outcomes, [Outcome::Executed, Outcome::InFlight]);
    let rejected = if a.outcome == Outcome::InFlight {
        &a
    } else {
        &b
    };
    assert!(rejected.is_error);
    assert!(
        rejected.content.contains("must not retry"),
        "{}",
        rejected.content
    );
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_a_concurrent_duplicate_gets_the_same_result() {
    let tool = Charge {
        delay: Some(Duration::from_millis(200)),
        ..Charge::default()
    };
    let options = WriteOptions::new().in_flight(InFlight::Wait(Duration::from_secs(5)));
    let tb = Arc::new(toolbox(Arc::new(MemoryStore::new()), tool.clone(), options));
    let (a, b) = tokio::join!(
        tb.call("charge_card", args("A")),
        tb.call("charge_card", args("A"))
    );
    let mut outcomes = [a.outcome, b.outcome];
    outcomes.sort_by_key(|o| o.as_str());
    assert_eq!(outcomes, [Outcome::Executed, Outcome::Replayed]);
    assert_eq!(a.content, b.content);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_takes_over_when_the_owner_fails_transiently() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let failing = Charge {
        delay: Some(Duration::from_millis(150)),
        fail_with: Some(ToolError::transient("provider timed out")),
        ..Charge::default()
    };
    let healthy = Charge::default();
    let options = WriteOptions::new().in_flight(InFlight::Wait(Duration::from_secs(5)));
    let owner_box = toolbox(store.clone(), failing.clone(), options.clone());
    let waiter_box = toolbox(store, healthy.clone(), options);
    let owner = owner_box.call("charge_card", args("A"));
    let waiter = async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        waiter_box.call("charge_card", args("A")).await
    };
    let (owner, waiter) = tokio::join!(owner, waiter);
    assert_eq!(owner.outcome, Outcome::Executed);
    assert!(owner.is_error);
    assert_eq!(waiter.outcome, Outcome::Executed, "{}", waiter.content);
    assert!(!waiter.is_error);
    assert_eq!(healthy.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gives_up_with_in_flight_after_its_timeout() {
    let tool = Charge {
        delay: Some(Duration::from_millis(500)),
        ..Charge::default()
    };
    let options = WriteOptions::new().in_flight(InFlight::Wait(Duration::from_millis(100)));
    let tb = Arc::new(toolbox(Arc::new(MemoryStore::new()), tool.clone(), options));
    let (a, b) = tokio::join!(tb.call("charge_card", args("A")), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        tb.call("charge_card", args("A")).await
    });
    assert_eq!(a.outcome, Outcome::Executed);
    assert_eq!(b.outcome, Outcome::InFlight);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn same_key_fields_with_a_different_fingerprint_is_a_conflict_and_not_executed() {
    let tool = Charge {
        key_fields: vec!["/payment/card".into(), "/payment/cents".into()],
        ..Charge::default()
    };
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let mut with_note = args("A");
    with_note["note"] = json!("for the October invoice");
    let first = tb.call("charge_card", with_note.clone()).await;
    let same = tb.call("charge_card", with_note).await;
    let mut reworded = args("A");
    reworded["note"] = json!("October invoice");
    let conflict = tb.call("charge_card", reworded).await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(same.outcome, Outcome::Replayed);
    assert_eq!(conflict.outcome, Outcome::Conflict);
    assert!(conflict.is_error);
    assert!(
        conflict.content.contains("not executed"),
        "{}",
        conflict.content
    );
    assert_eq!(first.key, conflict.key);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn invalid_arguments_name_the_field_and_never_claim() {
    let store = Arc::new(MemoryStore::new());
    let tool = Charge::default();
    let tb = toolbox(store.clone(), tool.clone(), WriteOptions::new());
    let answer = tb
        .call(
            "charge_card",
            json!({"payment": {"card": "A", "cents": "five"}}),
        )
        .await;
    assert_eq!(answer.outcome, Outcome::InvalidArguments);
    assert!(answer.is_error);
    assert!(
        answer.content.contains("payment.cents"),
        "{}",
        answer.content
    );
    assert!(answer.content.contains("Nothing was executed"));
    let missing = tb
        .call("charge_card", json!({"payment": {"card": "A"}}))
        .await;
    assert!(missing.content.contains("cents"), "{}", missing.content);
    let text = tb.call_json("charge_card", "{\"payment\": ").await;
    assert_eq!(text.outcome, Outcome::InvalidArguments);
    assert!(text.content.contains("line 1"), "{}", text.content);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 0);
    assert!(
        store
            .list(&ListQuery::new())
            .await
            .unwrap()
            .entries
            .is_empty()
    );
}

#[tokio::test]
async fn an_unknown_tool_is_a_tool_result_naming_the_available_ones() {
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        Charge::default(),
        WriteOptions::new(),
    );
    let answer = tb.call("refund", json!({})).await;
    assert_eq!(answer.outcome, Outcome::UnknownTool);
    assert!(answer.is_error);
    assert!(
        answer.content.contains("balance, charge_card"),
        "{}",
        answer.content
    );
}

#[tokio::test]
async fn a_permanent_failure_is_stored_and_replayed_without_running_again() {
    let tool = Charge {
        fail_with: Some(ToolError::permanent("card declined")),
        ..Charge::default()
    };
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let first = tb.call("charge_card", args("A")).await;
    let again = tb.call("charge_card", args("A")).await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(again.outcome, Outcome::ReplayedFailure);
    assert!(first.is_error && again.is_error);
    assert_eq!(first.content, "card declined");
    assert_eq!(first.content, again.content);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_transient_failure_is_released_so_a_duplicate_runs_again() {
    let tool = Charge {
        fail_with: Some(ToolError::transient("provider timed out")),
        ..Charge::default()
    };
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let first = tb.call("charge_card", args("A")).await;
    let again = tb.call("charge_card", args("A")).await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(again.outcome, Outcome::Executed);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn read_tools_run_every_time_and_never_touch_the_store() {
    let store = Arc::new(MemoryStore::new());
    let tb = toolbox(store.clone(), Charge::default(), WriteOptions::new());
    for _ in 0..2 {
        let answer = tb.call("balance", json!({})).await;
        assert_eq!(answer.outcome, Outcome::Executed);
        assert_eq!(answer.content, "42");
    }
    assert!(
        store
            .list(&ListQuery::new())
            .await
            .unwrap()
            .entries
            .is_empty()
    );
}
