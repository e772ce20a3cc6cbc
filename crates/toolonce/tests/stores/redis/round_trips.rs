//! Round trips.

use super::*;

#[tokio::test]
async fn a_first_time_write_costs_two_round_trips_and_a_replay_one() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let (write, replay) =
        redis_round_trips::commands_of_a_write_and_its_replay(&server, store, "run-rt").await;
    // The claim is one native `SET … NX GET PX`, the complete one EVALSHA (its own GET, a
    // comparison with the whole value the claim wrote, and SET; no TIME, nothing parsed): two
    // round trips. No script had to be loaded, since `connect` loaded them all.
    assert_eq!(write, ["evalsha=1", "get=1", "set=2"]);
    // One native `SET … NX GET`, which wrote nothing and answered the settled entry.
    assert_eq!(replay, ["set=1"]);
}

#[tokio::test]
async fn on_the_script_path_a_first_time_write_and_a_replay_cost_the_same_round_trips() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .native_claim(false)
        .connect()
        .await
        .unwrap();
    let (write, replay) =
        redis_round_trips::commands_of_a_write_and_its_replay(&server, store, "run-rt-script")
            .await;
    // Two EVALSHA: the claim (GET, SET) and the complete (GET, TIME, SET).
    assert_eq!(write, ["evalsha=2", "get=2", "set=2", "time=1"]);
    // One EVALSHA: the claim script (GET, PTTL), which wrote nothing.
    assert_eq!(replay, ["evalsha=1", "get=1", "pttl=1"]);
}

#[tokio::test]
async fn holding_an_unknown_operation_costs_two_round_trips_and_a_rerun_three() {
    let server = RedisServer::start();
    let store = Arc::new(RedisStore::connect(&server.url()).await.unwrap());
    let op = key::derive("run-rt-unknown", "charge", &json!({"amount": 9}), None).unwrap();
    // An owner that claimed and vanished: its lease runs out unsettled.
    let gone = OwnerToken::generate();
    let req = ClaimRequest::new(&op.key, &op.fingerprint, &gone, Duration::from_millis(100));
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    conformance::until_unknown(store.as_ref(), &op.key).await;
    let layer = Layer::new(store);

    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    let held = layer
        .run("charge", &op, &WriteOptions::new(), |_| async {
            panic!("a held operation ran")
        })
        .await;
    assert_eq!(held.outcome, Outcome::Unknown);
    // The native claim found a running value, which only the claim script can judge (GET,
    // PTTL: its lease is over when the key's TTL is down to its retention). No clock is read.
    assert_eq!(
        server.commands_run(),
        ["evalsha=1", "get=1", "pttl=1", "set=1"]
    );

    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    let rerun = WriteOptions::new().on_expired(OnExpired::Rerun);
    let answer = layer
        .run("charge", &op, &rerun, |_| async { Ok(json!("ch_2")) })
        .await;
    assert_eq!(answer.outcome, Outcome::Executed);
    // The native claim, then the claim script that took it over (GET, PTTL, SET), then the
    // complete (GET, TIME, SET).
    assert_eq!(
        server.commands_run(),
        ["evalsha=2", "get=2", "pttl=1", "set=3", "time=1"]
    );
}
