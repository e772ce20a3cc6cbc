//! Profiling aid: the raw floor of `toolonce bench` on Redis (`SET NX PX` then `SET PX`, with
//! the bench's value sizes; a replay is one `GET`), N first-time operations or N replays, on a
//! connection made by the store's own `connect_client` and on the same 2-worker runtime as
//! `drive`, so a profiler compares toolonce's client against the floor's.
//! `redis_floor URL first|replay N`. Its keys (`drive-floor-<pid>:…`) expire within 10 minutes.

#[path = "support/profiling.rs"]
mod profiling;

use redis::aio::ConnectionLike;

fn main() {
    let profiling::Run { url, first, n } = profiling::args("redis_floor");
    profiling::runtime().block_on(async move {
        let conn = toolonce::store::redis::connect_client(&url)
            .await
            .expect("redis");
        let prefix = format!("drive-floor-{:x}:", std::process::id());
        let replay_key = format!("{prefix}replay");
        let _: () = set(&mut conn.clone(), &replay_key, &done(0), false).await;
        // Spawned, as `drive` and the bench spawn their callers: the loop and the connection's
        // task then share a worker, instead of waking one from the runtime's own thread.
        let took = tokio::spawn(async move {
            let mut conn = conn;
            let running = running();
            let start = std::time::Instant::now();
            for i in 0..n {
                if first {
                    let key = format!("{prefix}{i}");
                    let won: Option<String> = set(&mut conn, &key, &running, true).await;
                    assert!(won.is_some(), "the floor's claim of {key} lost");
                    let () = set(&mut conn, &key, &done(i), false).await;
                } else {
                    let got: Option<String> = redis::cmd("GET")
                        .arg(&replay_key)
                        .query_async(&mut conn)
                        .await
                        .expect("GET");
                    assert!(got.is_some());
                }
            }
            start.elapsed()
        })
        .await
        .unwrap();
        profiling::report("floor operations", n, took);
    });
}

/// `SET key value [NX] PX ms`: a lease of a minute with `NX`, a retention of 10 minutes without.
async fn set<T: redis::FromRedisValue>(
    conn: &mut (impl ConnectionLike + Send),
    key: &str,
    value: &str,
    nx: bool,
) -> T {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(value);
    if nx {
        cmd.arg("NX");
    }
    let ms: u64 = if nx { 60_000 } else { 600_000 };
    cmd.arg("PX").arg(ms).query_async(conn).await.expect("SET")
}

/// The bench's running value (`bench/workload.rs`, `raw_running`).
fn running() -> String {
    format!(
        r#"{{"status":"running","startedAt":1764400000000,"leaseUntil":1764400060000,"owner":"{:032x}","fingerprint":"{:064x}"}}"#,
        1, 2
    )
}

/// The bench's settled value (`raw_done`).
fn done(n: u64) -> String {
    format!(
        r#"{{"status":"done","result":{{"receipt":"re_{n:012}","cents":500,"status":"succeeded"}},"startedAt":1764400000000,"completedAt":1764400000001,"fingerprint":"{:064x}"}}"#,
        2
    )
}
