//! Migrations.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrating_twice_is_a_no_op_that_keeps_the_entries() {
    let table = unique_table();
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let store = PostgresStore::builder(&url)
        .table(&table)
        .connect()
        .await
        .unwrap();
    assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
    let (k, fp) = conformance::op("m");
    let _owner = conformance::won(store.claim_fresh(&k, &fp, conformance::LONG).await.unwrap());

    assert_eq!(store.migrate().await.unwrap(), 0);
    assert_eq!(store.migrate().await.unwrap(), 0);
    let again = PostgresStore::builder(&url)
        .table(&table)
        .connect()
        .await
        .unwrap();
    assert_eq!(again.migrate().await.unwrap(), 0);
    assert!(store.get(&k).await.unwrap().is_some(), "the entry survives");
    assert_eq!(
        shared_psql(format!(
            "SELECT version FROM toolonce_schema WHERE table_name = '{table}'"
        ))
        .await,
        SCHEMA_VERSION.to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_with_a_newer_schema_version_is_refused_with_a_clear_error() {
    let table = unique_table();
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let store = PostgresStore::builder(&url)
        .table(&table)
        .connect()
        .await
        .unwrap();
    shared_psql(format!(
        "UPDATE toolonce_schema SET version = 99 WHERE table_name = '{table}'"
    ))
    .await;

    for err in [
        store.migrate().await.unwrap_err(),
        PostgresStore::builder(&url)
            .table(&table)
            .connect()
            .await
            .unwrap_err(),
        PostgresStore::builder(&url)
            .table(&table)
            .migrate_on_connect(false)
            .connect()
            .await
            .unwrap_err(),
    ] {
        let text = err.report().to_string();
        assert!(matches!(err, Error::Store(_)), "{text}");
        assert!(!err.is_retryable());
        assert!(
            text.contains("schema version 99") && text.contains("upgrade toolonce"),
            "{text}"
        );
    }
    // Nothing was changed by the refused migrations.
    assert_eq!(
        shared_psql(format!(
            "SELECT version FROM toolonce_schema WHERE table_name = '{table}'"
        ))
        .await,
        "99"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_table_name_is_created_quoted_and_used() {
    let table = format!("Custom_{}", unique_table());
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let store = PostgresStore::builder(&url)
        .table(&table)
        .connect()
        .await
        .unwrap();
    assert_eq!(store.table(), table);
    let (k, fp) = conformance::op("custom");
    let owner = conformance::won(store.claim_fresh(&k, &fp, conformance::LONG).await.unwrap());
    let _ = store
        .complete(
            &k,
            owner,
            &json!({"ok": 1.0, "nul": "a\u{0}b"}),
            conformance::LONG,
        )
        .await
        .unwrap();
    assert_eq!(
        shared_psql(format!(
            "SELECT state || ' ' || result::text FROM \"{table}\" WHERE key = '{}'",
            k.as_str()
        ))
        .await,
        r#"done {"nul":"a\u0000b","ok":1.0}"#,
        "the result is kept as written"
    );
    match store.get(&k).await.unwrap().unwrap().state {
        toolonce::EntryState::Done { result, .. } => {
            assert_eq!(result, json!({"ok": 1.0, "nul": "a\u{0}b"}))
        }
        other => panic!("{other:?}"),
    }
    // No default table was created alongside.
    assert_eq!(
        shared_psql("SELECT to_regclass('toolonce_entries') IS NULL".into()).await,
        "t"
    );
}

#[tokio::test]
async fn invalid_table_names_are_refused_before_connecting() {
    for bad in ["", "1st", "a-b", "x\"; DROP TABLE y; --", "toolonce_schema"] {
        // No server at this address: the name is checked first.
        let err = PostgresStore::builder("postgres://nobody@127.0.0.1:1/none")
            .table(bad)
            .connect()
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{bad:?}: {}", err.report());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_migration_on_connect_the_schema_waits_for_migrate() {
    let table = unique_table();
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let store = PostgresStore::builder(&url)
        .table(&table)
        .migrate_on_connect(false)
        .connect()
        .await
        .unwrap();
    assert_eq!(store.schema_version().await.unwrap(), 0);
    assert_eq!(
        shared_psql(format!("SELECT to_regclass('\"{table}\"') IS NULL")).await,
        "t"
    );
    let (k, fp) = conformance::op("lazy");
    let err = store
        .claim_fresh(&k, &fp, conformance::LONG)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Store(_)), "{}", err.report());

    assert_eq!(store.migrate().await.unwrap(), SCHEMA_VERSION);
    assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
    conformance::won(store.claim_fresh(&k, &fp, conformance::LONG).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_stores_migrating_one_new_table_at_once_all_succeed() {
    let table = unique_table();
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (url, table) = (url.clone(), table.clone());
            tokio::spawn(async move {
                PostgresStore::builder(url)
                    .table(table)
                    .pool_size(1)
                    .connect()
                    .await
                    .map(|_| ())
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn huge_or_zero_timeouts_never_panic_and_huge_ones_work() {
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    for timeout in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_secs_f64(1e19),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ] {
        let connected = PostgresStore::builder(&url)
            .table(unique_table())
            .connect_timeout(timeout)
            .wait_timeout(timeout)
            .operation_timeout(timeout)
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

/// Calls of the statements inside the store's claim function (they name its parameters
/// `p_…`) in `database` whose text starts with `verb` (`""` for all of them), as
/// pg_stat_statements counts nested statements.
async fn claim_function_calls_of(pg: &'static PostgresServer, database: &str, verb: &str) -> u64 {
    let sql = format!(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '{database}') \
         AND query LIKE '{verb}%p_key%' AND query NOT LIKE '%pg_stat_statements%'"
    );
    tokio::task::spawn_blocking(move || pg.psql(&sql))
        .await
        .unwrap()
        .parse()
        .unwrap()
}

/// A new database whose sessions have pg_stat_statements count the statements PL/pgSQL
/// functions run, and a store with one connection on it: the server, the database's name and
/// the store.
async fn store_with_statements_tracked() -> (&'static PostgresServer, String, PostgresStore) {
    let pg = tokio::task::spawn_blocking(shared_postgres).await.unwrap();
    assert!(
        pg.has_pg_stat_statements(),
        "pg_stat_statements is needed (Debian: part of the postgresql package)"
    );
    let db_url = tokio::task::spawn_blocking(|| shared_postgres().create_unique_database())
        .await
        .unwrap();
    let database = database_of(&db_url).to_owned();
    let db = database.clone();
    tokio::task::spawn_blocking(move || {
        // Once per process: two concurrent `CREATE EXTENSION IF NOT EXISTS` race on the
        // catalog's unique index, and the loser fails.
        static EXTENSION: std::sync::Once = std::sync::Once::new();
        EXTENSION.call_once(|| {
            pg.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        });
        pg.psql(&format!(
            "ALTER DATABASE \"{db}\" SET pg_stat_statements.track = 'all'"
        ));
    })
    .await
    .unwrap();
    let store = PostgresStore::builder(db_url.as_str())
        .table(unique_table())
        .pool_size(1)
        .connect()
        .await
        .unwrap();
    (pg, database, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_a_settled_entry_is_a_plain_read_without_the_claim_function() {
    let (pg, database, store) = store_with_statements_tracked().await;
    let layer = Layer::new(Arc::new(store));
    let op = key::derive("s", "t", &json!({"n": 1}), None).unwrap();
    let options = WriteOptions::new();
    let first = layer
        .run("t", &op, &options, |_| async { Ok(json!({"ok": true})) })
        .await;
    assert_eq!(first.outcome, Outcome::Executed);
    let after_first = claim_function_calls_of(pg, &database, "").await;
    assert!(after_first > 0, "the first claim ran the function");
    for _ in 0..5 {
        let again = layer
            .run("t", &op, &options, |_| async { Ok(json!({"ok": false})) })
            .await;
        assert_eq!(again.outcome, Outcome::Replayed);
        assert_eq!(again.result.unwrap(), json!({"ok": true}));
    }
    assert_eq!(
        claim_function_calls_of(pg, &database, "").await,
        after_first,
        "a replay called the claim function"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_time_claim_calls_the_claim_function_exactly_once() {
    let (pg, database, store) = store_with_statements_tracked().await;
    let (reads, inserts) = (
        claim_function_calls_of(pg, &database, "SELECT").await,
        claim_function_calls_of(pg, &database, "INSERT").await,
    );
    // The function's row is read column by column: called once per column, a claim would
    // read the key again and renew its own entry instead of inserting it once.
    for n in 0..3 {
        let (key, fp) = conformance::op(&format!("once{n}"));
        let owner = conformance::won(
            store
                .claim_fresh(&key, &fp, conformance::LONG)
                .await
                .unwrap(),
        );
        let entry = store.get(&key).await.unwrap().expect("the claimed entry");
        assert_eq!(entry.attempts, 1);
        assert!(
            matches!(entry.state, EntryState::Running { owner: Some(ref o) } if o == owner.as_str())
        );
    }
    assert_eq!(
        claim_function_calls_of(pg, &database, "SELECT").await - reads,
        3
    );
    assert_eq!(
        claim_function_calls_of(pg, &database, "INSERT").await - inserts,
        3
    );
}
