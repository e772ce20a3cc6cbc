//! Listing beyond the conformance suite.

use super::*;

#[tokio::test]
async fn listing_pages_through_more_entries_than_one_scan_batch_holds() {
    let store = store_on(&shared_redis().url()).await;
    let mut keys = Vec::new();
    for _ in 0..250 {
        let (key, fp) = conformance::op("many");
        let owner = conformance::won(
            store
                .claim_fresh(&key, &fp, conformance::LONG)
                .await
                .unwrap(),
        );
        let _ = store
            .complete(&key, owner, &json!(1), conformance::LONG)
            .await
            .unwrap();
        keys.push(key);
    }
    for limit in [1, 7, 100] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..1_000 {
            let mut q = ListQuery::new().state(State::Done).limit(limit);
            if let Some(c) = cursor.take() {
                q = q.cursor(c);
            }
            let page = store.list(&q).await.unwrap();
            assert!(page.entries.len() <= limit);
            seen.extend(page.entries.into_iter().map(|e| e.key));
            match page.next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        seen.sort();
        keys.sort();
        assert_eq!(seen, keys, "limit {limit}");
    }
}

#[tokio::test]
async fn huge_or_zero_timeouts_never_panic_and_huge_ones_work() {
    let url = shared_redis().url();
    for timeout in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_secs_f64(1e19),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ] {
        let connected = RedisStore::builder(&url)
            .prefix(unique_prefix())
            .response_timeout(timeout)
            .connection_timeout(timeout)
            .connect()
            .await;
        let store = match connected {
            Ok(store) => store,
            // Too short to connect: an error, not a panic.
            Err(e) if timeout < Duration::from_millis(1) => {
                assert!(e.is_retryable(), "{}", e.report());
                continue;
            }
            Err(e) => panic!("{timeout:?}: {}", e.report()),
        };
        let op = key::derive("timeouts", "t", &json!({}), None).unwrap();
        let options = WriteOptions::new()
            .lease(toolonce::layer::MAX_DURATION)
            .retention(toolonce::layer::MAX_DURATION);
        let answer = Layer::new(Arc::new(store))
            .run("t", &op, &options, |_| async { Ok(json!(1)) })
            .await;
        if timeout >= Duration::from_millis(1) {
            assert_eq!(answer.outcome, Outcome::Executed, "{timeout:?}: {answer:?}");
        }
    }
}

/// The calls of `command` the server has counted since the last `CONFIG RESETSTAT`.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.command(&["INFO", "commandstats"]);
    info.lines()
        .find(|l| l.starts_with(&format!("cmdstat_{command}:")))
        .and_then(|l| l.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_one_native_command_and_a_running_entry_is_judged_by_its_ttl_not_a_clock() {
    // A server of its own: the counts are of this test's commands only.
    let server = RedisServer::start();
    let store: Arc<dyn Store> = Arc::new(store_on(&server.url()).await);
    let layer = Layer::new(Arc::clone(&store));
    let op = key::derive("s", "t", &json!({"n": 1}), None).unwrap();
    let options = WriteOptions::new().lease(Duration::from_secs(60));
    let first = layer
        .run("t", &op, &options, |_| async { Ok(json!({"ok": true})) })
        .await;
    assert_eq!(first.outcome, Outcome::Executed);

    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    for _ in 0..5 {
        let again = layer
            .run("t", &op, &options, |_| async { Ok(json!({"ok": false})) })
            .await;
        assert_eq!(again.outcome, Outcome::Replayed);
        assert_eq!(again.result.unwrap(), json!({"ok": true}));
    }
    assert_eq!(calls(&server, "set"), 5, "one SET … NX GET per replay");
    assert_eq!(calls(&server, "evalsha"), 0, "a replay ran a script");

    // A running entry of ours: a duplicate judges its lease by the key's TTL, in the claim
    // script, and no clock is read anywhere.
    let running = key::derive("s", "t", &json!({"n": 2}), None).unwrap();
    let owner = OwnerToken::generate();
    let claim = store
        .claim(&ClaimRequest::new(
            &running.key,
            &running.fingerprint,
            &owner,
            Duration::from_secs(60),
        ))
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Won));
    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    let other = OwnerToken::generate();
    let seen = store
        .claim(&ClaimRequest::new(
            &running.key,
            &running.fingerprint,
            &other,
            Duration::from_secs(60),
        ))
        .await
        .unwrap();
    let Claim::Existing(entry) = seen else {
        panic!("the duplicate won: {seen:?}");
    };
    assert!(
        matches!(entry.state, EntryState::Running { .. }),
        "{entry:?}"
    );
    assert_eq!((calls(&server, "evalsha"), calls(&server, "pttl")), (1, 1));
    // And a plain read of it too.
    assert!(matches!(
        store.get(&running.key).await.unwrap().unwrap().state,
        EntryState::Running { .. }
    ));
    assert_eq!(calls(&server, "time"), 0, "a clock was read");
}

/// Writes `value` under `key`'s raw key with `px` ms to live.
fn put(
    redis: &RedisServer,
    store: &RedisStore,
    key: &toolonce::OperationKey,
    value: &str,
    px: u64,
) {
    assert_eq!(
        redis.command(&["SET", &raw_key(store, key), value, "PX", &px.to_string()]),
        "OK"
    );
}

#[tokio::test]
async fn the_lease_is_live_while_the_key_outlives_its_retention_whatever_the_start_says() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("ttl-lease");
    let holder = OwnerToken::generate();
    // Started "in 1970" and "in 2100" by clocks far off: only the TTL against the retention
    // (an hour) counts.
    for started in [1u64, 4_102_444_800_000] {
        let value = format!(
            r#"{{"status":"running","startedAt":{started},"owner":"{}","retention":3600000,"fingerprint":"{}","firstStartedAt":{started},"attempts":1}}"#,
            owner_digest(&holder),
            fp.as_str()
        );
        // A minute of lease left: running, even to a claim that asks to take over.
        put(redis, &store, &key, &value, 3_660_000);
        let taker = OwnerToken::generate();
        let req = ClaimRequest::new(&key, &fp, &taker, conformance::LONG).takeover(true);
        match store.claim(&req).await.unwrap() {
            Claim::Existing(e) => {
                assert_eq!(e.state(), State::Running, "{started}");
                let left = e
                    .expires_at
                    .unwrap()
                    .duration_since(SystemTime::now())
                    .unwrap();
                assert!(left > Duration::from_secs(50), "{left:?}");
            }
            other => panic!("{started}: a live lease was taken: {other:?}"),
        }
        // The TTL below the retention: the lease is over, the entry unknown, and taken over.
        put(redis, &store, &key, &value, 3_000_000);
        assert_eq!(
            store.get(&key).await.unwrap().unwrap().state(),
            State::Unknown
        );
        assert!(matches!(store.claim(&req).await.unwrap(), Claim::TookOver));
        assert_eq!(
            store
                .complete(&key, holder.duplicate(), &json!(1), conformance::LONG)
                .await
                .unwrap(),
            Fenced::NotOwner,
            "the first holder lost it to the takeover"
        );
        assert_eq!(
            store
                .complete(&key, taker, &json!(2), conformance::LONG)
                .await
                .unwrap(),
            Fenced::Applied
        );
    }
}

#[tokio::test]
async fn a_duplicate_reads_only_the_owner_digest_which_settles_nothing() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("digest");
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &owner, conformance::LONG);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let raw = redis.command(&["GET", &raw_key(&store, &key)]);
    assert!(
        !raw.contains(owner.as_str()),
        "the token is readable: {raw}"
    );
    // What a duplicate's claim hands back names the holder by digest...
    let seen = match store
        .claim(&ClaimRequest::new(
            &key,
            &fp,
            &OwnerToken::generate(),
            conformance::LONG,
        ))
        .await
        .unwrap()
    {
        Claim::Existing(entry) => entry,
        other => panic!("the duplicate won: {other:?}"),
    };
    let Some(EntryState::Running { owner: Some(shown) }) = Some(seen.state) else {
        panic!("expected a running entry with its holder");
    };
    assert_eq!(shown, owner_digest(&owner));
    // ... and the digest used as a token renews, settles, claims and releases nothing.
    let forged = || OwnerToken::from_stored(shown.clone());
    assert!(
        !store
            .renew(&key, &forged(), conformance::LONG)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .complete(&key, forged(), &json!("forged"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    assert_eq!(
        store
            .fail(
                &key,
                forged(),
                &ToolError::permanent("forged"),
                Some(conformance::LONG)
            )
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    assert_eq!(
        store
            .fail(&key, forged(), &ToolError::transient("forged"), None)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    let forged_token = forged();
    let again = ClaimRequest::new(&key, &fp, &forged_token, conformance::LONG).takeover(true);
    assert!(matches!(
        store.claim(&again).await.unwrap(),
        Claim::Existing(_)
    ));
    // The token itself still does.
    assert_eq!(
        store
            .complete(&key, owner, &json!("mine"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
}

#[tokio::test]
async fn a_claim_applied_whose_reply_was_lost_wins_again_and_keeps_one_attempt() {
    // The native SET … NX GET applied and its reply never arrived: the caller's retry finds its
    // own running entry, which the script recognises by the digest of the caller's token.
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("lost-reply");
    let owner = OwnerToken::generate();
    let short = ClaimRequest::new(&key, &fp, &owner, Duration::from_millis(300))
        .retention(Duration::from_secs(60));
    assert!(matches!(store.claim(&short).await.unwrap(), Claim::Won));
    // The lease runs out before the retry: still the caller's own, and renewed, never a takeover.
    conformance::until_unknown(&store, &key).await;
    let retry = ClaimRequest::new(&key, &fp, &owner, conformance::LONG).takeover(true);
    assert!(matches!(store.claim(&retry).await.unwrap(), Claim::Won));
    let entry = store.get(&key).await.unwrap().unwrap();
    assert_eq!((entry.state(), entry.attempts), (State::Running, 1));
    let pttl: i64 = redis
        .command(&["PTTL", &raw_key(&store, &key)])
        .parse()
        .unwrap();
    assert!(pttl > 60_000, "the lease was renewed: PTTL {pttl}");
}

#[tokio::test]
async fn a_running_entry_of_the_previous_version_is_judged_by_its_deadline_and_can_be_taken_over() {
    // The version before this one stored the server's lease deadline and the token itself.
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("prev-lease");
    let old_owner = OwnerToken::generate();
    let old = |lease_until: u64| {
        format!(
            r#"{{"status":"running","startedAt":1764400000000,"leaseUntil":{lease_until},"owner":"{}","fingerprint":"{}","firstStartedAt":1764300000000,"attempts":2,"scope":"run-9","tool":"charge"}}"#,
            old_owner.as_str(),
            fp.as_str()
        )
    };
    let taker = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &taker, conformance::LONG).takeover(true);
    // Its deadline ahead on the server's clock (this machine's): in flight.
    put(redis, &store, &key, &old(now_ms() + 60_000), 3_600_000);
    match store.claim(&req).await.unwrap() {
        Claim::Existing(e) => assert_eq!(e.state(), State::Running),
        other => panic!("took a live entry of the previous version: {other:?}"),
    }
    // Past: unknown, and a takeover writes today's shape, keeping what the entry was.
    put(redis, &store, &key, &old(now_ms() - 1_000), 3_600_000);
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Unknown
    );
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::TookOver));
    let value: Value =
        serde_json::from_str(&redis.command(&["GET", &raw_key(&store, &key)])).unwrap();
    assert_eq!(value.get("leaseUntil"), None);
    assert_eq!(value["owner"], owner_digest(&taker));
    assert_eq!(
        (
            &value["attempts"],
            &value["firstStartedAt"],
            &value["scope"]
        ),
        (&json!(3), &json!(1_764_300_000_000u64), &json!("run-9"))
    );
    assert_eq!(
        store
            .complete(&key, old_owner, &json!("late"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    assert_eq!(
        store
            .complete(&key, taker, &json!("ok"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
}

#[test]
fn the_native_claim_is_used_from_redis_7_on() {
    // `INFO server` of the machine's Redis says which path `connect` took; the version rule
    // itself is a unit test of the store.
    let server = RedisServer::start();
    let info = server.command(&["INFO", "server"]);
    let major: u32 = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .and_then(|v| v.split('.').next()?.parse().ok())
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let native = rt.block_on(async {
        let store = RedisStore::connect(&server.url()).await.unwrap();
        format!("{store:?}").contains("native_claim: true")
    });
    assert_eq!(native, major >= 7, "Redis {major}");
    let forced = rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .native_claim(false)
            .connect()
            .await
            .unwrap();
        format!("{store:?}").contains("native_claim: true")
    });
    assert!(!forced);
}

#[tokio::test]
async fn the_settling_fence_matches_only_todays_shape_even_with_the_right_digest() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let (key, fp) = conformance::op("fence-shape");
    let owner = OwnerToken::generate();
    let digest = owner_digest(&owner);
    let fp = fp.as_str();
    for value in [
        // The shape before `leaseUntil`, and the previous version's, with the digest as owner.
        format!(r#"{{"status":"running","startedAt":1,"owner":"{digest}","fingerprint":"{fp}"}}"#),
        format!(
            r#"{{"status":"running","startedAt":1,"leaseUntil":9999999999999,"owner":"{digest}","fingerprint":"{fp}","firstStartedAt":1,"attempts":1}}"#
        ),
        // Today's, cut short, or without its start, or with the members in another order.
        format!(
            r#"{{"status":"running","startedAt":1,"owner":"{digest}","retention":5,"fingerprint":"{fp}""#
        ),
        format!(
            r#"{{"status":"running","startedAt":,"owner":"{digest}","retention":5,"fingerprint":"{fp}"}}"#
        ),
        format!(
            r#"{{"status":"running","startedAt":1,"retention":5,"owner":"{digest}","fingerprint":"{fp}"}}"#
        ),
        format!(
            r#"{{"status":"done","startedAt":1,"owner":"{digest}","retention":5,"fingerprint":"{fp}"}}"#
        ),
    ] {
        put(redis, &store, &key, &value, 60_000);
        assert_eq!(
            store
                .complete(&key, owner.duplicate(), &json!(1), conformance::LONG)
                .await
                .unwrap(),
            Fenced::NotOwner,
            "{value}"
        );
        assert_eq!(
            store
                .fail(&key, owner.duplicate(), &ToolError::transient("x"), None)
                .await
                .unwrap(),
            Fenced::NotOwner,
            "{value}"
        );
        assert!(
            !store.renew(&key, &owner, conformance::LONG).await.unwrap(),
            "{value}"
        );
        assert_eq!(
            redis.command(&["GET", &raw_key(&store, &key)]),
            value,
            "left alone"
        );
    }
}
