//! Outage.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_server_mid_flight_runs_nothing_twice_and_the_same_store_recovers() {
    let server = Arc::new(RedisServer::start());
    let store = Arc::new(
        RedisStore::builder(server.url())
            .response_timeout(Duration::from_millis(500))
            .connection_timeout(Duration::from_millis(300))
            .reconnect_attempts(1)
            .connect()
            .await
            .unwrap(),
    );
    let layer = Layer::new(store.clone());
    const CALLS: usize = 60;
    let runs: Arc<Vec<AtomicU32>> = Arc::new((0..CALLS).map(|_| AtomicU32::new(0)).collect());
    let options = WriteOptions::new().lease(Duration::from_secs(5));

    // Calls start every 10 ms and each tool takes 100 ms; the server dies after 250 ms, so
    // some calls finish before, some are inside their tool, and the rest start after.
    let started = Instant::now();
    let tasks: Vec<_> = (0..CALLS)
        .map(|i| {
            let (layer, runs, options) = (layer.clone(), runs.clone(), options.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10 * i as u64)).await;
                let op = key::derive("outage", "charge", &json!({"call": i}), None).unwrap();
                let answer = layer
                    .run("charge", &op, &options, |_| async move {
                        runs[i].fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Ok(json!({"call": i}))
                    })
                    .await;
                (i, answer)
            })
        })
        .collect();
    let killer = {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            std::thread::sleep(Duration::from_millis(250));
            server.kill();
        })
    };
    killer.await.unwrap();
    let mut executed = 0;
    let mut unavailable = 0;
    for task in tasks {
        let (i, answer) = task.await.unwrap();
        let ran = runs[i].load(Ordering::SeqCst);
        match answer.outcome {
            Outcome::Executed => {
                assert_eq!(ran, 1, "call {i}");
                assert_eq!(
                    answer.result,
                    Ok(json!({"call": i})),
                    "call {i} reports its result"
                );
                executed += 1;
            }
            Outcome::StoreUnavailable => {
                assert_eq!(ran, 0, "call {i} was refused yet its tool ran");
                let message = answer.result.unwrap_err().message;
                assert!(message.contains("Not executed"), "call {i}: {message}");
                unavailable += 1;
            }
            other => panic!("call {i}: unexpected outcome {other}"),
        }
    }
    assert!(executed > 0, "no call finished before the kill");
    assert!(unavailable > 0, "no call was refused during the outage");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the outage was not bounded"
    );

    // The same server comes back on the same port (empty: it keeps nothing on disk), and the
    // same store instance serves again once its connection manager has reconnected.
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.get(&conformance::op("probe").0).await {
            Ok(_) => break,
            Err(e) => {
                assert!(e.is_retryable(), "{e:?}");
                assert!(
                    Instant::now() < deadline,
                    "the store did not recover: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let after: Arc<Vec<AtomicU32>> = Arc::new((0..10).map(|_| AtomicU32::new(0)).collect());
    for round in [Outcome::Executed, Outcome::Replayed] {
        for i in 0..10 {
            let op = key::derive("after-outage", "charge", &json!({"call": i}), None).unwrap();
            let after = after.clone();
            let answer = layer
                .run("charge", &op, &options, |_| async move {
                    after[i].fetch_add(1, Ordering::SeqCst);
                    Ok(json!(i))
                })
                .await;
            assert_eq!(answer.outcome, round, "call {i}");
            assert_eq!(answer.result, Ok(json!(i)));
        }
    }
    assert!(after.iter().all(|n| n.load(Ordering::SeqCst) == 1));
}
