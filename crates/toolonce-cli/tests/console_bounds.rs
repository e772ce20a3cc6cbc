//! The console's connection bound against a real `toolonce console`: at its cap of 64
//! connections, sockets held open with half a request head (a slowloris) or idle after their
//! answers make room for a new client at once, oldest first, instead of keeping the token's
//! holder out until their header timeout (10 s) ends them. (That a connection with a request in
//! progress is never closed for this is `connections.rs`'s unit test.)

#![cfg(unix)]

#[path = "support/console_process.rs"]
mod console_process;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use console_process::{Process, send, start};

/// The console's cap (`console::server::MAX_CONNECTIONS`).
const CAP: usize = 64;

fn console() -> (Process, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("console.log");
    (start(&["console"], "memory://", &[], &log), dir)
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Whether the console closed `s` (end of stream or reset) within its read timeout.
fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            // An answer before the close (a 408 or 503): read on to the end.
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// `/metrics` with the console's token on a connection of its own: the token holder's request.
fn metrics(console: &Process) -> (u16, Duration) {
    let bearer = format!("Bearer {}", console.token);
    let started = Instant::now();
    let reply = send(
        console.port,
        "GET",
        "/metrics",
        &[("Authorization", &bearer)],
        b"",
    );
    (reply.status, started.elapsed())
}

/// Reads one whole answer (head and `Content-Length` body) from a kept-alive connection.
fn read_answer(s: &mut TcpStream) -> String {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed before its answer: {:?}",
            String::from_utf8_lossy(&raw)
        );
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= length {
                return head.to_owned();
            }
        }
    }
}

/// With `open` (the oldest first) filling the cap: the token holder's request is answered at
/// once, not when the 10 s header timeout ends one, and the oldest `what` (only it) was closed
/// for it.
fn assert_room_made_for_the_holder(console: &Process, open: &mut [TcpStream], what: &str) {
    // Every one is accepted before the holder's comes (the server takes them in order).
    std::thread::sleep(Duration::from_millis(300));
    let (status, took) = metrics(console);
    assert_eq!(status, 200);
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    assert!(closed(&mut open[0]), "the oldest {what} is closed for it");
    // The others are still open: one was closed for one new connection.
    open[1]
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert!(!closed(&mut open[1]), "only the oldest {what} is closed");
}

#[test]
fn at_the_cap_sockets_holding_half_a_head_make_room_for_the_tokens_holder_oldest_first() {
    let (console, _dir) = console();
    let mut held: Vec<TcpStream> = (0..CAP)
        .map(|_| {
            let mut s = connect(console.port);
            s.write_all(b"GET /console/api/entries HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .unwrap();
            s
        })
        .collect();
    assert_room_made_for_the_holder(&console, &mut held, "held socket");
}

#[test]
fn at_the_cap_connections_kept_alive_idle_after_their_answers_make_room_oldest_first() {
    let (console, _dir) = console();
    let mut idle: Vec<TcpStream> = (0..CAP)
        .map(|_| {
            let mut s = connect(console.port);
            s.write_all(b"GET /console/api/none HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                .unwrap();
            let head = read_answer(&mut s);
            assert!(head.starts_with("HTTP/1.1 404"), "{head}");
            s
        })
        .collect();
    assert_room_made_for_the_holder(&console, &mut idle, "idle connection");
}
