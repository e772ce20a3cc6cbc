//! A `toolonce console` (or `toolonce mcp --console`) process for the console's tests: started
//! on port 0, its URL and token read from the first line it prints, killed when dropped; and
//! plain HTTP/1.1 requests to it over a socket.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Process {
    pub child: Child,
    pub port: u16,
    /// The token of the printed URL (empty when the console was given one).
    pub token: String,
    pub url: String,
    pub log: std::path::PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `toolonce <command[0]> --store STORE --listen 127.0.0.1:0 <command[1..]>` with `env`;
/// its stderr goes to `log`.
pub fn start(
    command: &[&str],
    store: &str,
    env: &[(&str, &str)],
    log: &std::path::Path,
) -> Process {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolonce"))
        .args(&command[..1])
        .args(["--store", store, "--listen", "127.0.0.1:0"])
        .args(&command[1..])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        // To a file, never a pipe nobody reads: a full pipe would stall the console.
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().to_owned();
    let rest = url
        .strip_prefix("http://127.0.0.1:")
        .unwrap_or_else(|| panic!("no URL printed: {line:?}"));
    let (port, token) = rest.split_once("/console/").unwrap();
    Process {
        child,
        port: port.parse().unwrap(),
        token: token.strip_prefix("#token=").unwrap_or("").to_owned(),
        url,
        log: log.to_owned(),
    }
}

pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// One request on a connection of its own (`Connection: close`), answered within 30 s.
pub fn send(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Reply {
        status: head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no answer: {text:?}")),
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// Opens a session as the page does: the cookie (`name=value`).
pub fn login(port: u16, token: &str) -> String {
    session(port, token).0
}

/// Opens a session as the page does: the cookie (`name=value`, HttpOnly and SameSite=Strict)
/// and the CSRF token.
pub fn session(port: u16, token: &str) -> (String, String) {
    let bearer = format!("Bearer {token}");
    let origin = format!("http://127.0.0.1:{port}");
    let r = send(
        port,
        "POST",
        "/console/api/session",
        &[("Authorization", &bearer), ("Origin", &origin)],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.head);
    let cookie = r
        .head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let csrf = r.json()["csrf"].as_str().unwrap().to_owned();
    (cookie.split(';').next().unwrap().to_owned(), csrf)
}
