//! The gateway's HTTP server is bounded: a client cannot hold a connection with half a
//! header, a body that never ends or one too large, nor keep a token holder out by holding
//! sockets open; `--max-sessions` bounds the servers alive, not just the session ids.

use super::*;

/// A gateway with `--require-token` in front of the stdio test server, started by a shell
/// that first sets the file-descriptor limit to `nofile` (soft and hard).
fn gateway_with_fd_limit(nofile: u32, extra: &[&str]) -> Gateway {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!("ulimit -n {nofile} && exec \"$@\""))
        .arg("sh")
        .arg(toolonce())
        .args(["mcp", "--store", "memory://", "--scope", "gateway-test"])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--require-token",
            "GATEWAY_TOKEN",
        ])
        .args(extra)
        .arg("--")
        .arg(test_server())
        .env("GATEWAY_TOKEN", GATEWAY_TOKEN)
        .env_remove("MCP_TEST_LOG");
    Gateway::spawn(command)
}

/// A socket that sent half a request head and nothing more.
fn half_head(port: u16) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        .unwrap();
    stream
}

#[test]
fn under_200_half_open_sockets_a_token_holder_is_still_answered_within_a_second() {
    // The limit makes 200 sockets more than the gateway may hold: today's failure mode was
    // running out of descriptors, answering nobody, and logging a warning every 50 ms.
    let mut gateway = gateway_with_fd_limit(150, &[]);
    let port = gateway.port;
    let held: Vec<TcpStream> = (0..200).map(|_| half_head(port)).collect();
    // Let the gateway take in what it will.
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let answer = raw(
        port,
        "POST",
        &format!("{JSON_ONLY}Authorization: Bearer {GATEWAY_TOKEN}\r\n"),
        INITIALIZE,
    );
    let took = started.elapsed();
    assert_eq!(answer.status(), 200, "{}", answer.body);
    assert!(took < Duration::from_secs(1), "answered after {took:?}");
    drop(held);
    let log = gateway.stop();
    let warnings = log.matches("cannot accept").count();
    assert!(warnings <= 3, "{warnings} accept warnings: {log}");
}

/// One answer on a keep-alive connection: its head, then as many bytes as its
/// `Content-Length` says, and no more (the connection stays open).
fn read_one_answer(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "the connection closed");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .expect("a Content-Length");
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    head
}

/// A keep-alive connection that sent one whole request, read its answer and was left open.
fn idle_after_one_answer(port: u16) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream
        .write_all(b"GET /elsewhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let head = read_one_answer(&mut stream);
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    stream
}

/// Whether the gateway closed `stream` (it reads the end, not data or a timeout).
fn closed_by_the_gateway(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    matches!(stream.read(&mut [0u8; 1]), Ok(0))
}

/// The token holder's `initialize`, timed.
fn timed_initialize(port: u16) -> (Raw, Duration) {
    let started = Instant::now();
    let answer = raw(
        port,
        "POST",
        &format!("{JSON_ONLY}Authorization: Bearer {GATEWAY_TOKEN}\r\n"),
        INITIALIZE,
    );
    (answer, started.elapsed())
}

#[test]
fn at_the_connection_cap_idle_keep_alive_connections_make_room_for_a_new_client() {
    // The header timeout is far longer than the test's patience: the room must not come from
    // idle connections timing out.
    let mut gateway =
        gateway_with_fd_limit(1024, &["--max-connections", "3", "--header-timeout", "60"]);
    let port = gateway.port;
    let mut idle: Vec<TcpStream> = (0..3).map(|_| idle_after_one_answer(port)).collect();
    let (answer, took) = timed_initialize(port);
    assert_eq!(answer.status(), 200, "{}", answer.body);
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    // The oldest idle one gave up its slot; the others were not needed.
    assert!(closed_by_the_gateway(&mut idle[0]));
    assert!(!closed_by_the_gateway(&mut idle[2]));
    drop(idle);
    gateway.stop();
}

#[test]
fn a_connection_with_a_request_in_progress_is_never_closed_to_make_room() {
    let mut gateway =
        gateway_with_fd_limit(1024, &["--max-connections", "2", "--header-timeout", "60"]);
    let port = gateway.port;
    let token = format!("Authorization: Bearer {GATEWAY_TOKEN}\r\n");
    // The oldest connection is mid-request (its call takes a while), the other idle.
    let busy = modern_send(
        port,
        &token,
        "tools/call",
        Some(json!(1)),
        json!({"name": "slow", "arguments": {"ms": 2500}}),
    );
    std::thread::sleep(Duration::from_millis(300));
    let mut idle = idle_after_one_answer(port);
    let (answer, took) = timed_initialize(port);
    assert_eq!(answer.status(), 200, "{}", answer.body);
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    assert!(closed_by_the_gateway(&mut idle));
    let busy = read_raw(busy);
    let answer = busy
        .messages()
        .pop()
        .expect("the busy connection got its answer");
    assert_eq!(answer["id"], json!(1), "{answer}");
    assert!(
        result_text(&answer["result"]).contains("slow done"),
        "{answer}"
    );
    // With every connection busy, a new client waits instead of cutting one.
    let first = modern_send(
        port,
        &token,
        "tools/call",
        Some(json!(2)),
        json!({"name": "slow", "arguments": {"ms": 1500}}),
    );
    let second = modern_send(
        port,
        &token,
        "tools/call",
        Some(json!(3)),
        // Not the same call as the first (that one would be answered "in progress" at once).
        json!({"name": "slow", "arguments": {"ms": 1600}}),
    );
    std::thread::sleep(Duration::from_millis(300));
    let (answer, took) = timed_initialize(port);
    assert_eq!(answer.status(), 200, "{}", answer.body);
    assert!(took > Duration::from_millis(700), "answered after {took:?}");
    for (call, id) in [(first, 2), (second, 3)] {
        let answer = read_raw(call).messages().pop().unwrap();
        assert_eq!(answer["id"], json!(id), "{answer}");
        assert!(
            result_text(&answer["result"]).contains("slow done"),
            "{answer}"
        );
    }
    gateway.stop();
}

#[test]
fn a_connection_that_sends_half_a_head_is_closed_after_the_header_timeout() {
    let mut gateway = gateway_with_fd_limit(1024, &["--header-timeout", "0.5"]);
    let mut stream = half_head(gateway.port);
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let read = stream.read_to_end(&mut rest);
    assert!(read.is_ok(), "the connection was left open: {read:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    gateway.stop();
}

#[test]
fn a_body_that_does_not_arrive_in_time_gets_408_and_one_too_large_413_before_it_is_read() {
    let mut gateway = gateway_with_fd_limit(1024, &["--body-timeout", "0.5", "--max-body", "1000"]);
    let port = gateway.port;
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        slow,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json\r\nAuthorization: Bearer {GATEWAY_TOKEN}\r\n\
         Content-Length: 500\r\n\r\n{{\"jsonrpc\":"
    )
    .unwrap();
    let mut answer = [0u8; 12];
    slow.read_exact(&mut answer).unwrap();
    assert_eq!(
        &answer,
        b"HTTP/1.1 408",
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // 5000 bytes declared: refused before they are sent.
    let mut large = TcpStream::connect(("127.0.0.1", port)).unwrap();
    large
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        large,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json\r\nAuthorization: Bearer {GATEWAY_TOKEN}\r\n\
         Content-Length: 5000\r\n\r\n"
    )
    .unwrap();
    large.read_exact(&mut answer).unwrap();
    assert_eq!(
        &answer,
        b"HTTP/1.1 413",
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // A body within the limit is served.
    let ok = raw(
        port,
        "POST",
        &format!("{JSON_ONLY}Authorization: Bearer {GATEWAY_TOKEN}\r\n"),
        INITIALIZE,
    );
    assert_eq!(ok.status(), 200, "{}", ok.body);
    gateway.stop();
}

#[test]
fn the_bounds_flags_are_documented_in_help_and_bad_values_exit_2_naming_the_option() {
    let help = Command::new(toolonce())
        .args(["mcp", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--header-timeout",
        "--body-timeout",
        "--max-body",
        "--max-connections",
    ] {
        assert!(help.contains(flag), "{flag} is not in --help: {help}");
    }
    refused_at_start(
        &[
            ("--header-timeout", "0"),
            ("--body-timeout", "soon"),
            ("--max-body", "0"),
            ("--max-connections", "0"),
        ],
        &[],
    );
}

#[test]
fn max_sessions_counts_a_deleted_sessions_server_until_it_has_exited() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    // Servers that do not exit when their input closes: each lingers until SIGTERM.
    std::fs::write(&config, "[proxy]\nshutdown_timeout = \"1s\"\n").unwrap();
    let mut command = Command::new(toolonce());
    command
        .args(["mcp", "--store", "memory://", "--scope", "gateway-test"])
        .args(["--listen", "127.0.0.1:0", "--max-sessions", "2", "--config"])
        .arg(&config)
        .arg("--")
        .arg(test_server())
        .env("MCP_TEST_IGNORE_EOF", "1")
        .env_remove("MCP_TEST_LOG");
    let mut gateway = Gateway::spawn(command);
    let port = gateway.port;
    let mut most = 0;
    let mut refused = 0;
    for _ in 0..12 {
        let answer = raw(port, "POST", JSON_ONLY, INITIALIZE);
        match answer.status() {
            200 => {
                let session = answer.header("mcp-session-id").unwrap();
                let deleted = raw(
                    port,
                    "DELETE",
                    &format!("Mcp-Session-Id: {session}\r\n"),
                    "",
                );
                assert!(deleted.status() < 300, "{}", deleted.body);
            }
            503 => refused += 1,
            status => panic!("{status}: {}", answer.body),
        }
        most = most.max(live_children(gateway.pid()));
    }
    assert!(
        most <= 2,
        "{most} servers alive at once with --max-sessions 2"
    );
    assert!(refused > 0, "every initialize was let in");
    // Once the ended sessions' servers are gone, there is room again.
    eventually("the servers to exit", || live_children(gateway.pid()) == 0);
    let answer = raw(port, "POST", JSON_ONLY, INITIALIZE);
    assert_eq!(answer.status(), 200, "{}", answer.body);
    gateway.stop();
}
