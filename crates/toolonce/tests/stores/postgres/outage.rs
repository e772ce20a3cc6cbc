//! Outage.

use super::round_trips::CountingProxy;
use super::*;

#[derive(Debug)]
struct Call {
    op: usize,
    outcome: Outcome,
    ran: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_server_mid_call_runs_nothing_twice_and_the_same_store_recovers_after_restart()
{
    let pg = Arc::new(
        tokio::task::spawn_blocking(PostgresServer::start)
            .await
            .unwrap(),
    );
    let store = PostgresStore::builder(pg.url())
        .table("outage_entries")
        .pool_size(8)
        .connect_timeout(Duration::from_secs(2))
        .wait_timeout(Duration::from_secs(2))
        .operation_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let store = Arc::new(store);
    let layer = Layer::new(store.clone());
    let options = WriteOptions::new().lease(Duration::from_secs(30));
    let runs: Arc<Mutex<HashMap<usize, u32>>> = Arc::default();
    let next_op = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));

    let call = {
        let (layer, options, runs) = (layer.clone(), options.clone(), runs.clone());
        move |op: usize| {
            let (layer, options, runs) = (layer.clone(), options.clone(), runs.clone());
            async move {
                let derived = key::derive("outage", "charge", &json!({"op": op}), None).unwrap();
                let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let flag = ran.clone();
                let answer = layer
                    .run("charge", &derived, &options, move |_| async move {
                        flag.store(true, Ordering::SeqCst);
                        *runs.lock().unwrap().entry(op).or_default() += 1;
                        // Long enough that calls are mid-run when the server dies.
                        tokio::time::sleep(Duration::from_millis(40)).await;
                        Ok(json!({"receipt": op}))
                    })
                    .await;
                Call {
                    op,
                    outcome: answer.outcome,
                    ran: ran.load(Ordering::SeqCst),
                }
            }
        }
    };

    let body = async {
        // Eight callers issue write calls on fresh operations until told to stop.
        let callers: Vec<_> = (0..8)
            .map(|_| {
                let (call, next_op, stopped) = (call.clone(), next_op.clone(), stopped.clone());
                tokio::spawn(async move {
                    let mut calls = Vec::new();
                    while !stopped.load(Ordering::SeqCst) {
                        calls.push(call(next_op.fetch_add(1, Ordering::SeqCst)).await);
                    }
                    calls
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let killer = pg.clone();
        tokio::task::spawn_blocking(move || killer.kill())
            .await
            .unwrap();
        let killed_at = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        stopped.store(true, Ordering::SeqCst);
        let mut calls = Vec::new();
        for c in callers {
            calls.extend(c.await.unwrap());
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(15),
            "calls against a dead server must end in seconds"
        );

        // Each call either ran its tool once (executed) or did not run it at all because the
        // store was unavailable; no operation ran twice.
        let runs_now = runs.lock().unwrap().clone();
        let mut executed = 0;
        let mut unavailable = 0;
        for c in &calls {
            match c.outcome {
                Outcome::Executed => {
                    assert!(c.ran, "{c:?}");
                    executed += 1;
                }
                Outcome::StoreUnavailable => {
                    assert!(!c.ran, "{c:?}: the store was unavailable, yet the tool ran");
                    assert!(!runs_now.contains_key(&c.op), "{c:?}");
                    unavailable += 1;
                }
                other => panic!("unexpected outcome {other:?} for a fresh operation: {c:?}"),
            }
        }
        assert!(
            runs_now.values().all(|n| *n == 1),
            "an operation ran twice: {runs_now:?}"
        );
        assert!(executed > 0, "no call ran before the kill");
        assert!(unavailable > 0, "no call saw the outage");

        // Restart: the same store recovers, without being rebuilt.
        let restarter = pg.clone();
        tokio::task::spawn_blocking(move || restarter.restart())
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let first = loop {
            let c = call(next_op.fetch_add(1, Ordering::SeqCst)).await;
            if c.outcome == Outcome::Executed {
                break c;
            }
            assert_eq!(c.outcome, Outcome::StoreUnavailable);
            assert!(
                Instant::now() < deadline,
                "the store did not recover after the restart"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(first.ran);
        for _ in 0..20 {
            let c = call(next_op.fetch_add(1, Ordering::SeqCst)).await;
            assert_eq!(c.outcome, Outcome::Executed, "{c:?}");
        }
        // Calls completed before the kill were committed: their duplicates replay.
        let completed_before: Vec<usize> = calls
            .iter()
            .filter(|c| c.outcome == Outcome::Executed)
            .map(|c| c.op)
            .collect();
        let mut replayed = 0;
        for op in completed_before {
            let c = call(op).await;
            assert!(!c.ran, "{c:?} ran again");
            if c.outcome == Outcome::Replayed {
                replayed += 1;
            } else {
                // Its complete was lost with the server: the entry is running until its lease
                // expires, and the duplicate is told so.
                assert_eq!(c.outcome, Outcome::InFlight, "{c:?}");
            }
        }
        assert!(
            replayed > 0,
            "no result recorded before the kill survived it"
        );
        eprintln!(
            "outage: {executed} calls executed and {unavailable} refused while the server died, \
             {replayed} replayed after the restart"
        );
    };
    tokio::time::timeout(Duration::from_secs(120), body)
        .await
        .expect("the outage test took more than two minutes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_answering_is_reported_unavailable_after_the_operation_timeout() {
    let pg = tokio::task::spawn_blocking(shared_postgres).await.unwrap();
    let db_url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let proxy = CountingProxy::start(pg.addr()).await;
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/{}",
        proxy.port,
        database_of(&db_url)
    );
    let store = PostgresStore::builder(url)
        .table(unique_table())
        .pool_size(1)
        .operation_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let (k, fp) = conformance::op("frozen");
    proxy.frozen.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let err = store
        .claim_fresh(&k, &fp, conformance::LONG)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{}", err.report());
    assert!(started.elapsed() < Duration::from_secs(3));
    // The silent connection was dropped: the next operation opens a fresh one and succeeds.
    // The held-back claim may still have reached the server when the proxy let it through:
    // after an error the outcome of a write is unknown, so the retry may find its entry.
    proxy.frozen.store(false, Ordering::SeqCst);
    match store.claim_fresh(&k, &fp, conformance::LONG).await.unwrap() {
        Fresh::Won(_) => {}
        Fresh::Existing(e) => assert_eq!(e.state(), toolonce::State::Running),
    }
}

#[tokio::test]
async fn connecting_to_a_server_that_is_down_reports_unavailable_within_the_connect_timeout() {
    let port = toolonce_testsupport::free_port();
    let started = Instant::now();
    let err = PostgresStore::builder(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{}", err.report());
    assert!(err.is_retryable());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_refused_login_or_a_missing_database_is_a_configuration_error() {
    let server = shared_postgres();
    server.create_user_with_password("toolonce_refused_login", "right-secret");
    let wrong = format!(
        "postgres://toolonce_refused_login:wrong-secret@127.0.0.1:{}/postgres",
        server.port()
    );
    let missing = server.url_for("toolonce_no_such_database");
    for (url, words) in [(wrong, "refused the login"), (missing, "no such database")] {
        match PostgresStore::connect(&url).await {
            Err(Error::Config(message)) => {
                assert!(message.contains(words), "{message}");
                assert!(!message.contains("wrong-secret"), "{message}");
            }
            Err(other) => panic!("expected a configuration error, got {}", other.report()),
            Ok(_) => panic!("connected with {words:?}"),
        }
    }
}
