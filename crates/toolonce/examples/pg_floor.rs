//! Profiling aid: the raw floor of `toolonce bench` on PostgreSQL (an `INSERT … ON CONFLICT DO
//! NOTHING` then an `UPDATE`, prepared, on one connection), N first-time operations or N
//! replays (one `SELECT`), on the same 2-worker runtime as `drive`, so a profiler compares
//! toolonce's client against the floor's. `pg_floor URL first|replay N`.
//!
//! It makes a table of its own, `toolonce_floor_<pid>`, and drops it at the end.

#[path = "support/profiling.rs"]
mod profiling;

use toolonce::store::postgres::connect_client;

fn main() {
    let profiling::Run { url, first, n } = profiling::args("pg_floor");
    profiling::runtime().block_on(async move {
        let client = connect_client(&url).await.expect("connect");
        let table = format!("toolonce_floor_{:x}", std::process::id());
        client
            .batch_execute(&format!(
                "CREATE TABLE \"{table}\" (key text COLLATE \"C\" PRIMARY KEY, state text NOT NULL, \
                 value json NOT NULL, expires_at timestamptz NOT NULL)"
            ))
            .await
            .expect("create");
        let insert = client
            .prepare(&format!(
                "INSERT INTO \"{table}\" VALUES ($1, 'running', $2::text::json, now() + interval '1 minute') ON CONFLICT DO NOTHING"
            ))
            .await
            .unwrap();
        let update = client
            .prepare(&format!(
                "UPDATE \"{table}\" SET state = 'done', value = $2::text::json, expires_at = now() + interval '10 minutes' WHERE key = $1"
            ))
            .await
            .unwrap();
        let select = client
            .prepare(&format!(
                "SELECT state, value::text FROM \"{table}\" WHERE key = $1 AND expires_at > now()"
            ))
            .await
            .unwrap();
        let running = r#"{"state":"running"}"#.to_owned();
        let done = |n: u64| format!(r#"{{"receipt":"re_{n:012}","cents":500,"status":"succeeded"}}"#);
        client
            .execute(&update, &[&"replay", &done(0)])
            .await
            .unwrap();
        client
            .execute(&insert, &[&"replay", &running])
            .await
            .unwrap();
        // Spawned, as `drive` and the bench spawn their callers: the loop and the connection's
        // task then share a worker, instead of waking one from the runtime's own thread.
        let client = std::sync::Arc::new(client);
        let c = std::sync::Arc::clone(&client);
        let took = tokio::spawn(async move {
            let client = c;
            let start = std::time::Instant::now();
            for i in 0..n {
                if first {
                    let key = format!("first:{i}");
                    let won = client.execute(&insert, &[&key, &running]).await.unwrap();
                    assert_eq!(won, 1);
                    client.execute(&update, &[&key, &done(i)]).await.unwrap();
                } else {
                    let row = client.query_opt(&select, &[&"replay"]).await.unwrap();
                    assert!(row.is_some());
                }
            }
            start.elapsed()
        })
        .await
        .unwrap();
        client
            .batch_execute(&format!("DROP TABLE \"{table}\""))
            .await
            .unwrap();
        profiling::report("floor operations", n, took);
    });
}
