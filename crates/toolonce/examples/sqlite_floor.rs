//! Profiling aid: the raw floor of `toolonce bench` on SQLite (an `INSERT … ON CONFLICT DO
//! NOTHING` then an `UPDATE`, each its own transaction, on one connection set up as the store's
//! inline writer: WAL, `synchronous=NORMAL`, no automatic checkpoint), N first-time operations
//! or N replays (one `SELECT`), on the same 2-worker runtime as `drive`, so a profiler compares
//! toolonce's client against the floor's. `sqlite_floor sqlite://PATH first|replay N`.
//!
//! It makes a table of its own, `toolonce_floor_<pid>`, in the given file and drops it at the
//! end. It runs no checkpoint (a few thousand operations stay well inside the log).

#[path = "support/profiling.rs"]
mod profiling;

fn main() {
    let profiling::Run { url, first, n } = profiling::args("sqlite_floor");
    let path = url
        .strip_prefix("sqlite://")
        .expect("a sqlite:// URL")
        .to_owned();
    profiling::runtime().block_on(async move {
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        let table = format!("toolonce_floor_{:x}", std::process::id());
        conn.execute_batch(&format!(
            "CREATE TABLE \"{table}\" (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires INTEGER NOT NULL)"
        ))
        .unwrap();
        let insert = format!(
            "INSERT INTO \"{table}\" (key, value, expires) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING"
        );
        let update = format!("UPDATE \"{table}\" SET value = ?2, expires = ?3 WHERE key = ?1");
        let select = format!("SELECT value FROM \"{table}\" WHERE key = ?1");
        let running = r#"{"state":"running"}"#;
        let done = |n: u64| format!(r#"{{"receipt":"re_{n:012}","cents":500,"status":"succeeded"}}"#);
        conn.execute(&insert, rusqlite::params!["replay", done(0), i64::MAX])
            .unwrap();
        let conn = std::sync::Arc::new(std::sync::Mutex::new(conn));
        let c = std::sync::Arc::clone(&conn);
        let took = tokio::spawn(async move {
            let start = std::time::Instant::now();
            for i in 0..n {
                let conn = c.lock().unwrap();
                if first {
                    let key = format!("first:{i}");
                    let won = conn
                        .prepare_cached(&insert)
                        .unwrap()
                        .execute(rusqlite::params![key, running, 1_764_400_060_000i64])
                        .unwrap();
                    assert_eq!(won, 1);
                    conn.prepare_cached(&update)
                        .unwrap()
                        .execute(rusqlite::params![key, done(i), 1_764_400_120_000i64])
                        .unwrap();
                } else {
                    let value: String = conn
                        .prepare_cached(&select)
                        .unwrap()
                        .query_row(["replay"], |r| r.get(0))
                        .unwrap();
                    std::hint::black_box(value);
                }
            }
            start.elapsed()
        })
        .await
        .unwrap();
        let conn = conn.lock().unwrap();
        conn.execute_batch(&format!("DROP TABLE \"{table}\"")).unwrap();
        profiling::report("floor operations", n, took);
    });
}
