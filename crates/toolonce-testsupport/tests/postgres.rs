//! A real PostgreSQL: start, query, kill, crash recovery on restart.

use std::io::ErrorKind;
use std::net::TcpStream;

use toolonce_testsupport::PostgresServer;

fn refused(pg: &PostgresServer) -> bool {
    TcpStream::connect(pg.addr()).is_err_and(|e| e.kind() == ErrorKind::ConnectionRefused)
}

#[test]
fn postgres_starts_answers_dies_and_recovers_on_the_same_port() {
    let pg = PostgresServer::start();
    let port = pg.port();
    assert_ne!(port, 5432, "must never be the machine's own PostgreSQL");
    assert_eq!(
        pg.url(),
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    );
    assert_eq!(pg.psql("SELECT 1"), "1");
    assert_eq!(pg.psql("SHOW fsync"), "off");
    assert_eq!(pg.psql("SHOW listen_addresses"), "127.0.0.1");

    if pg.has_pg_stat_statements() {
        pg.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        pg.psql("SELECT pg_stat_statements_reset()");
        pg.psql("SELECT 41 + 1");
        let calls =
            pg.psql("SELECT sum(calls) FROM pg_stat_statements WHERE query LIKE 'SELECT $1 + $2%'");
        assert_eq!(calls, "1");
    }

    let url = pg.create_database("other_db");
    assert_eq!(
        url,
        format!("postgres://postgres@127.0.0.1:{port}/other_db")
    );
    assert_eq!(
        pg.psql_in("other_db", "SELECT current_database()"),
        "other_db"
    );
    let a = pg.create_unique_database();
    let b = pg.create_unique_database();
    assert_ne!(a, b);
    assert!(
        pg.try_psql_in("postgres", "SELECT * FROM no_such_table")
            .is_err()
    );

    // Acknowledged commits survive a kill: crash recovery on restart.
    pg.psql("CREATE TABLE t (n int); INSERT INTO t SELECT generate_series(1, 100)");
    pg.kill();
    assert!(!pg.is_running());
    assert!(refused(&pg), "a killed server must refuse connections");
    assert!(pg.try_psql_in("postgres", "SELECT 1").is_err());

    pg.restart();
    assert_eq!(pg.port(), port);
    assert_eq!(pg.psql("SELECT count(*) FROM t"), "100");
    assert!(pg.log().contains("database system was interrupted"));

    pg.stop();
    assert!(refused(&pg));
    // Someone holds the port for a moment: restart waits for it.
    let squatter = std::net::TcpListener::bind(pg.addr()).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        drop(squatter);
    });
    pg.restart();
    release.join().unwrap();
    assert!(pg.log().contains("Address already in use"));
    assert_eq!(pg.psql_in("other_db", "SELECT 1"), "1");

    let dir = pg.data_dir().parent().unwrap().to_path_buf();
    let addr = pg.addr();
    drop(pg);
    assert!(!dir.exists(), "drop removes the directory");
    assert!(TcpStream::connect(addr).is_err());
}

#[test]
fn a_killed_server_is_cleaned_up_on_drop() {
    let pg = PostgresServer::start();
    let dir = pg.data_dir().parent().unwrap().to_path_buf();
    pg.kill();
    drop(pg);
    assert!(!dir.exists());
}
