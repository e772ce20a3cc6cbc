//! Connections replaced under the store: the statements it holds per connection follow the
//! pool's connections, whichever way one goes (closed by the server and dropped by the pool
//! unseen, or discarded by the store after a failed statement).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_runs_its_own_statement_on_connections_the_server_keeps_closing() {
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let name = format!("toolonce_conn_{}", unique_table());
    let separator = if url.contains('?') { '&' } else { '?' };
    let store = PostgresStore::builder(format!("{url}{separator}application_name={name}"))
        .table(unique_table())
        .pool_size(1)
        .connect()
        .await
        .unwrap();
    // More connections than the store keeps statements for (twice the pool), each closed by
    // the server after it ran every kind of operation once.
    for round in 0..6 {
        let (k, fp) = conformance::op(&format!("conn-{round}"));
        let owner = match store.claim_fresh(&k, &fp, conformance::LONG).await {
            Ok(fresh) => conformance::won(fresh),
            // The pool handed out the connection the server had just closed: that failure
            // discards it, and the next operation gets a fresh one.
            Err(e) if e.is_retryable() => {
                conformance::won(store.claim_fresh(&k, &fp, conformance::LONG).await.unwrap())
            }
            Err(e) => panic!("round {round}: {}", e.report()),
        };
        assert!(store.renew(&k, &owner, conformance::LONG).await.unwrap());
        let result = json!({"round": round});
        let fenced = store
            .complete(&k, owner, &result, conformance::LONG)
            .await
            .unwrap();
        assert!(matches!(fenced, toolonce::store::Fenced::Applied));
        match store.get(&k).await.unwrap().map(|e| e.state) {
            Some(EntryState::Done { result: got, .. }) => assert_eq!(got, result),
            other => panic!("round {round}: {other:?}"),
        }
        let replay = store.claim_fresh(&k, &fp, conformance::LONG).await.unwrap();
        assert!(matches!(replay, Fresh::Existing(_)), "round {round}");
        assert!(store.delete(&k).await.unwrap());
        shared_psql(format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = '{name}'"
        ))
        .await;
        tokio::time::sleep(Duration::from_millis(50 * (round % 2))).await;
    }
}
