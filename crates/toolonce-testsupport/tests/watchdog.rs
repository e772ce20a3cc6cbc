//! The shared servers live in statics that are never dropped: a watchdog
//! must end them when the test process is gone. This test runs a copy of
//! its own binary that starts them, SIGKILLs it, and checks.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "TOOLONCE_TESTSUPPORT_WATCHDOG_CHILD";

/// Run by the copy only (a no-op otherwise): starts the shared servers,
/// prints where they are, and waits to be killed.
#[test]
fn child_holding_shared_servers() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let redis = toolonce_testsupport::shared_redis();
    let pg = toolonce_testsupport::shared_postgres();
    assert_eq!(redis.command(&["PING"]), "PONG");
    assert_eq!(pg.psql("SELECT 1"), "1");
    println!(
        "\nSERVERS {} {} {} {} {}",
        redis.port(),
        redis.dir().display(),
        pg.port(),
        pg.pid().unwrap(),
        pg.data_dir().parent().unwrap().display()
    );
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(120));
}

fn port_open(port: u16) -> bool {
    TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).is_ok()
}

fn process_gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |stat| stat.split_whitespace().nth(2) == Some("Z"))
}

fn eventually(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn shared_servers_die_with_the_test_process() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_holding_shared_servers", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let line = stdout
        .lines()
        .map(Result::unwrap)
        .find_map(|l| l.split_once("SERVERS ").map(|(_, rest)| rest.to_owned()))
        .expect("the child process printed no SERVERS line");
    let fields: Vec<&str> = line.split_whitespace().collect();
    let redis_port: u16 = fields[0].parse().unwrap();
    let redis_dir = PathBuf::from(fields[1]);
    let pg_port: u16 = fields[2].parse().unwrap();
    let pg_pid: u32 = fields[3].parse().unwrap();
    let pg_dir = PathBuf::from(fields[4]);
    assert!(port_open(redis_port) && port_open(pg_port));
    assert!(redis_dir.exists() && pg_dir.exists());

    child.kill().unwrap();
    child.wait().unwrap();

    eventually("redis-server gone", Duration::from_secs(5), || {
        !port_open(redis_port) && !redis_dir.exists()
    });
    eventually("postgres gone", Duration::from_secs(20), || {
        !port_open(pg_port) && process_gone(pg_pid) && !pg_dir.exists()
    });
}
