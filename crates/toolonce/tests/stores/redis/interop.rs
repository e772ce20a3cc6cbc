//! Interoperation with TypeScript workers of the reference design (`docs/contract.md`, "Wire format").

use super::*;

#[tokio::test]
async fn a_done_entry_written_by_a_typescript_worker_is_replayed_by_the_layer() {
    let redis = shared_redis();
    let store = Arc::new(store_on(&redis.url()).await);
    // Flat arguments: the reference design derives the same key.
    let args = json!({"amount": 500, "currency": "eur", "customer": "cus_1"});
    let op = key::derive("run-ts-1", "charge", &args, None).unwrap();
    let started = now_ms() - 1_000;
    let value = format!(
        r#"{{"status":"done","result":{{"chargeId":"ch_1","amount":500,"big":12345678901234567890}},"startedAt":{started}}}"#
    );
    assert_eq!(
        redis.command(&["SET", &raw_key(&store, &op.key), &value, "PX", "60000"]),
        "OK"
    );

    let entry = match store
        .claim_fresh(&op.key, &op.fingerprint, conformance::LONG)
        .await
        .unwrap()
    {
        Fresh::Existing(entry) => entry,
        Fresh::Won(_) => panic!("claimed over a done entry"),
    };
    assert_eq!(entry.fingerprint, None, "the reference design records none");
    assert_eq!(
        entry.started_at,
        UNIX_EPOCH + Duration::from_millis(started)
    );
    let expected = json!({"chargeId": "ch_1", "amount": 500, "big": 12345678901234567890u64});
    match &entry.state {
        EntryState::Done { result, .. } => assert_eq!(result, &expected),
        other => panic!("expected done, got {other:?}"),
    }
    // The native claim answers a settled entry without its key's TTL; a read has it.
    let read = store.get(&op.key).await.unwrap().unwrap();
    assert!(read.expires_at.unwrap() > SystemTime::now());

    let ran = Arc::new(AtomicU32::new(0));
    let counter = ran.clone();
    let answer = Layer::new(store)
        .run("charge", &op, &WriteOptions::new(), |_| async move {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(json!("ran again"))
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Replayed);
    assert_eq!(answer.result, Ok(expected));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_running_entry_written_by_a_typescript_worker_is_in_flight_for_us() {
    let redis = shared_redis();
    let store = Arc::new(store_on(&redis.url()).await);
    let op = key::derive(
        "run-ts-2",
        "send_email",
        &json!({"to": "a@example.com"}),
        None,
    )
    .unwrap();
    let value = format!(
        r#"{{"status":"running","startedAt":{},"workerId":"ts-7"}}"#,
        now_ms()
    );
    redis.command(&["SET", &raw_key(&store, &op.key), &value, "PX", "30000"]);

    let entry = store.get(&op.key).await.unwrap().expect("entry");
    assert_eq!(entry.state, EntryState::Running { owner: None });
    // Nobody can settle it with a token, and the layer does not run the tool.
    assert!(
        !store
            .renew(&op.key, &OwnerToken::generate(), conformance::LONG)
            .await
            .unwrap()
    );
    let answer = Layer::new(store)
        .run("send_email", &op, &WriteOptions::new(), |_| async move {
            panic!("the tool must not run while another worker runs it")
        })
        .await;
    assert_eq!(answer.outcome, Outcome::InFlight);
}

#[tokio::test]
async fn our_running_entry_holds_the_owner_digest_and_its_retention_and_lives_for_lease_plus_retention()
 {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let op = key::derive("run-ts-3", "charge", &json!({"amount": 1}), None).unwrap();
    let owner = OwnerToken::generate();
    let about = About::new("run-ts-3", "charge").detail("acme \"eu\"\n");
    let before = now_ms();
    let req = ClaimRequest::new(&op.key, &op.fingerprint, &owner, Duration::from_secs(30))
        .retention(Duration::from_secs(3600))
        .about(&about);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let after = now_ms();
    let raw = redis.command(&["GET", &raw_key(&store, &op.key)]);
    let value: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(value["status"], "running");
    let started = value["startedAt"].as_u64().expect("startedAt in ms");
    // The claiming machine's clock: within the claim's window.
    assert!(
        started >= before && started <= after,
        "{started} not in {before}..{after}"
    );
    assert_eq!(value.get("leaseUntil"), None, "the lease is the key's TTL");
    assert_eq!(value["retention"], 3_600_000);
    assert_eq!(value["firstStartedAt"].as_u64(), Some(started));
    assert_eq!(value["attempts"], 1);
    assert_eq!(value["owner"], owner_digest(&owner));
    assert!(
        !raw.contains(owner.as_str()),
        "the token itself is not stored"
    );
    assert_eq!(value["fingerprint"], op.fingerprint.as_str());
    assert_eq!(
        (&value["scope"], &value["tool"], &value["detail"]),
        (
            &json!("run-ts-3"),
            &json!("charge"),
            &json!("acme \"eu\"\n")
        )
    );
    let pttl: i64 = redis
        .command(&["PTTL", &raw_key(&store, &op.key)])
        .parse()
        .unwrap();
    assert!(pttl > 3_625_000 && pttl <= 3_630_000, "PTTL {pttl}");
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(entry.about, about);
    assert_eq!(entry.attempts, 1);
    assert_eq!(entry.state(), State::Running);
    let deadline = entry.expires_at.unwrap();
    assert!(
        deadline > SystemTime::now() + Duration::from_secs(20)
            && deadline <= SystemTime::now() + Duration::from_secs(31),
        "the lease deadline, not the key's expiry: {deadline:?}"
    );
}

#[tokio::test]
async fn a_hostile_scope_cannot_forge_the_members_that_fence_the_entry() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("forged");
    let thief = OwnerToken::generate();
    let forged = format!(
        r#"x","owner":"{}","fingerprint":"{}","leaseUntil":1,"attempts":9}}"#,
        thief.as_str(),
        fp.as_str()
    );
    let about = About::new(forged.clone(), "t").detail("\u{0}\"}\\");
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &owner, conformance::LONG).about(&about);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let entry = store.get(&key).await.unwrap().unwrap();
    assert_eq!(entry.about, about, "read back as written");
    assert_eq!(entry.attempts, 1);
    assert_eq!(entry.state(), State::Running);
    assert!(!store.renew(&key, &thief, conformance::LONG).await.unwrap());
    assert_eq!(
        store
            .complete(&key, thief, &json!("stolen"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    assert_eq!(
        store
            .complete(&key, owner, &json!("mine"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
    let entry = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        entry.about, about,
        "the settle keeps what the entry says it is"
    );
    assert!(
        matches!(entry.state, EntryState::Done { ref result, .. } if *result == serde_json::json!("mine"))
    );
}

#[tokio::test]
async fn renew_moves_the_lease_deadline_and_keeps_the_retention_after_it() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("renew-retention");
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &owner, Duration::from_secs(2))
        .retention(Duration::from_secs(100));
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    assert!(
        store
            .renew(&key, &owner, Duration::from_secs(20))
            .await
            .unwrap()
    );
    let pttl: i64 = redis
        .command(&["PTTL", &raw_key(&store, &key)])
        .parse()
        .unwrap();
    let deadline = store.get(&key).await.unwrap().unwrap().expires_at.unwrap();
    let lease_left = deadline.duration_since(SystemTime::now()).unwrap();
    assert!(
        (Duration::from_secs(15)..=Duration::from_millis(20_100)).contains(&lease_left),
        "lease deadline {lease_left:?} away"
    );
    assert!(
        (115_000..=120_000).contains(&pttl),
        "the key lives for the new lease plus the retention: PTTL {pttl}"
    );
}

#[tokio::test]
async fn entries_written_by_the_previous_version_still_decode_replay_and_expire_with_their_lease() {
    let redis = shared_redis();
    let store = Arc::new(store_on(&redis.url()).await);
    // A running entry of the previous version: no lease deadline inside, the key's PX is the lease.
    let op = key::derive("run-old-1", "charge", &json!({"amount": 7}), None).unwrap();
    let old_owner = OwnerToken::generate();
    let value = format!(
        r#"{{"status":"running","startedAt":{},"owner":"{}","fingerprint":"{}"}}"#,
        now_ms(),
        old_owner.as_str(),
        op.fingerprint.as_str()
    );
    redis.command(&["SET", &raw_key(&store, &op.key), &value, "PX", "1500"]);
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(
        entry.state,
        EntryState::Running {
            owner: Some(old_owner.as_str().to_owned())
        }
    );
    assert_eq!((entry.attempts, entry.first_started_at), (0, None));
    assert!(entry.expires_at.unwrap() <= SystemTime::now() + Duration::from_millis(1500));
    // In flight while its key lives, even to a claim that would take over an unknown entry.
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&op.key, &op.fingerprint, &owner, conformance::LONG).takeover(true);
    match store.claim(&req).await.unwrap() {
        Claim::Existing(e) => assert_eq!(e.state(), State::Running),
        other => panic!("took over a live entry of the previous version: {other:?}"),
    }
    // Its key expires with its lease: then it is absent, as the previous version meant.
    let start = Instant::now();
    while store.get(&op.key).await.unwrap().is_some() {
        assert!(start.elapsed() < Duration::from_secs(30), "never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));

    // A done entry of the previous version replays, with its completion time as settled.
    let op = key::derive("run-old-1", "charge", &json!({"amount": 8}), None).unwrap();
    let value = format!(
        r#"{{"status":"done","result":{{"charge":"ch_old"}},"startedAt":1764400000000,"completedAt":1764400001000,"fingerprint":"{}"}}"#,
        op.fingerprint.as_str()
    );
    redis.command(&["SET", &raw_key(&store, &op.key), &value, "PX", "60000"]);
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(
        entry.settled_at,
        Some(UNIX_EPOCH + Duration::from_millis(1_764_400_001_000))
    );
    let answer = Layer::new(store)
        .run("charge", &op, &WriteOptions::new(), |_| async {
            panic!("ran over a done entry of the previous version")
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Replayed);
    assert_eq!(answer.result, Ok(json!({"charge": "ch_old"})));
}

#[tokio::test]
async fn resolve_settles_running_entries_of_other_writers_and_leaves_settled_ones_alone() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    // A TypeScript worker's running entry, stuck (its worker died: it stays until its PX).
    let (key, _) = conformance::op("resolve-ts");
    let raw = raw_key(&store, &key);
    redis.command(&[
        "SET",
        &raw,
        r#"{"status":"running","startedAt":1764400000000}"#,
        "PX",
        "60000",
    ]);
    // It never turns unknown (it has no lease of its own): only a forced resolve acts on it.
    let seen = conformance::seen_while_running(&store, &key).await;
    assert_eq!(
        store
            .resolve(
                &key,
                &seen,
                &Resolution::Done(json!({"sent": true})),
                conformance::LONG
            )
            .await
            .unwrap(),
        Resolved::Applied
    );
    let value: Value = serde_json::from_str(&redis.command(&["GET", &raw])).unwrap();
    assert_eq!(value["status"], "done");
    assert_eq!(
        value["result"],
        json!({"sent": true}),
        "what the worker replays"
    );
    assert_eq!(value["startedAt"], 1_764_400_000_000u64);
    assert!(value["settledAt"].is_u64() && value["completedAt"] == value["settledAt"]);
    // Settled meanwhile: nothing is written.
    match store
        .resolve(&key, &seen, &Resolution::Release, conformance::LONG)
        .await
        .unwrap()
    {
        Resolved::Settled(entry) => assert_eq!(entry.state(), State::Done),
        other => panic!("expected settled, got {other:?}"),
    }
    assert!(redis.command(&["GET", &raw]).contains("\"sent\""));

    // The previous version's running entry: failed, with its fingerprint kept.
    let (key, fp) = conformance::op("resolve-old");
    let raw = raw_key(&store, &key);
    let value = format!(
        r#"{{"status":"running","startedAt":1764400000000,"owner":"{}","fingerprint":"{}"}}"#,
        OwnerToken::generate().as_str(),
        fp.as_str()
    );
    redis.command(&["SET", &raw, &value, "PX", "60000"]);
    let error = ToolError::permanent("mailbox full");
    let seen = conformance::seen_while_running(&store, &key).await;
    assert_eq!(
        store
            .resolve(
                &key,
                &seen,
                &Resolution::Failed(error.clone()),
                conformance::LONG
            )
            .await
            .unwrap(),
        Resolved::Applied
    );
    let entry = store.get(&key).await.unwrap().unwrap();
    assert_eq!(entry.fingerprint, Some(fp));
    assert!(matches!(entry.state, EntryState::Failed { error: ref e, .. } if *e == error));

    // Released: gone, and the next claim wins.
    let (key, fp) = conformance::op("resolve-release");
    redis.command(&[
        "SET",
        &raw_key(&store, &key),
        r#"{"status":"running","startedAt":1764400000000,"workerId":"ts-1"}"#,
        "PX",
        "60000",
    ]);
    let seen = conformance::seen_while_running(&store, &key).await;
    assert_eq!(
        store
            .resolve(&key, &seen, &Resolution::Release, conformance::LONG)
            .await
            .unwrap(),
        Resolved::Applied
    );
    assert_eq!(
        store
            .resolve(&key, &seen, &Resolution::Release, conformance::LONG)
            .await
            .unwrap(),
        Resolved::Absent
    );
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &owner, conformance::LONG);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
}

#[tokio::test]
async fn our_done_and_failed_entries_keep_the_result_and_error_byte_for_byte() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let op = key::derive("run-ts-4", "charge", &json!({"amount": 2}), None).unwrap();
    let owner = conformance::won(
        store
            .claim_fresh(&op.key, &op.fingerprint, conformance::LONG)
            .await
            .unwrap(),
    );
    let result = json!({"id": 18446744073709551615u64, "ratio": 0.30000000000000004, "tiny": 5e-324, "s": "\u{2028}/\"é"});
    let token = owner.as_str().to_owned();
    assert_eq!(
        store
            .complete(&op.key, owner, &result, Duration::from_secs(3600))
            .await
            .unwrap(),
        Fenced::Applied
    );
    let raw = redis.command(&["GET", &raw_key(&store, &op.key)]);
    let value: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(value["status"], "done");
    assert_eq!(
        value["result"], result,
        "what a TypeScript worker reads is the exact result"
    );
    assert!(
        raw.contains(r#""result":{"id":18446744073709551615,"ratio":0.30000000000000004"#),
        "the result is stored as serde_json wrote it, never re-encoded by cjson: {raw}"
    );
    assert!(value["startedAt"].as_u64().unwrap() <= value["completedAt"].as_u64().unwrap());
    assert_eq!(value["fingerprint"], op.fingerprint.as_str());
    // Which attempt settled it, as the running entry kept it: the owner's digest, never the
    // token (a removal compares it; it fences nothing).
    let settled_by = value["owner"]
        .as_str()
        .expect("the settling attempt's digest");
    assert!(
        settled_by.len() == 40 && settled_by.bytes().all(|b| b.is_ascii_hexdigit()),
        "{settled_by}"
    );
    assert!(
        !raw.contains(&token),
        "the owner token is never stored: {raw}"
    );
    let pttl: i64 = redis
        .command(&["PTTL", &raw_key(&store, &op.key)])
        .parse()
        .unwrap();
    assert!(pttl > 3_500_000 && pttl <= 3_600_000, "PTTL {pttl}");

    let op = key::derive("run-ts-4", "charge", &json!({"amount": 3}), None).unwrap();
    let owner = conformance::won(
        store
            .claim_fresh(&op.key, &op.fingerprint, conformance::LONG)
            .await
            .unwrap(),
    );
    let error = ToolError::permanent("card declined").with_detail(json!({"code": "do_not_honor"}));
    let _ = store
        .fail(&op.key, owner, &error, Some(conformance::LONG))
        .await
        .unwrap();
    let value: Value =
        serde_json::from_str(&redis.command(&["GET", &raw_key(&store, &op.key)])).unwrap();
    assert_eq!(value["status"], "failed");
    assert_eq!(
        value["error"],
        json!({"message": "card declined", "class": "permanent", "detail": {"code": "do_not_honor"}})
    );
    assert!(value["failedAt"].is_u64());
}

#[tokio::test]
async fn a_value_that_is_not_an_entry_is_corrupt_and_fenced_writes_leave_it_alone() {
    // What an operator may have seen before the value was garbled: the store must refuse
    // whatever it was, since the value is not an entry at all.
    let anything = toolonce::Seen::of(&toolonce::Entry::new(
        conformance::op("anything").0,
        None,
        std::time::SystemTime::now(),
        None,
        EntryState::Running { owner: None },
    ))
    .expect("a running entry is unsettled")
    .even_if_live();
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("corrupt");
    let raw = raw_key(&store, &key);
    for garbage in [
        "not json",
        "[1,2]",
        "null",
        r#"{"status":"paused"}"#,
        r#"{"status":"running","owner":7}"#,
    ] {
        redis.command(&["SET", &raw, garbage, "PX", "60000"]);
        assert!(
            matches!(store.get(&key).await, Err(Error::Corrupt { .. })),
            "get of {garbage}"
        );
        assert!(
            matches!(
                store.claim_fresh(&key, &fp, conformance::LONG).await,
                Err(Error::Corrupt { .. })
            ),
            "claim of {garbage}"
        );
        // No script error, just "not yours".
        assert!(
            !store
                .renew(&key, &OwnerToken::generate(), conformance::LONG)
                .await
                .unwrap()
        );
        assert_eq!(
            store
                .complete(&key, OwnerToken::generate(), &json!(1), conformance::LONG)
                .await
                .unwrap(),
            Fenced::NotOwner
        );
        assert_eq!(
            store
                .fail(
                    &key,
                    OwnerToken::generate(),
                    &ToolError::transient("x"),
                    None
                )
                .await
                .unwrap(),
            Fenced::NotOwner
        );
        assert!(
            matches!(
                store
                    .resolve(&key, &anything, &Resolution::Release, conformance::LONG)
                    .await,
                Err(Error::Corrupt { .. })
            ),
            "resolve of {garbage}"
        );
        assert_eq!(redis.command(&["GET", &raw]), garbage, "left as it was");
    }
    assert!(
        store.delete(&key).await.unwrap(),
        "an operator can still remove it"
    );
}
