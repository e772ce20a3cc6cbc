//! Test support for `toolonce mcp`: starts the test MCP server (the `mcp_test_server` example)
//! directly or behind the real `toolonce mcp` binary, and drives it over stdio as an MCP client
//! would. Shared by the tests and the bench.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long a test waits for any one message before failing.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// Waits (up to [`PATIENCE`]) for a test HTTP server started as `child` to say its port as its
/// first line of stdout (`PORT=<n>`), and returns it; `what` names the server in a failure.
pub fn port_line(child: &mut Child, what: &str) -> u16 {
    let stdout = child.stdout.take().expect("the server's stdout is piped");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(PATIENCE)
        .unwrap_or_else(|_| panic!("{what} says its port"));
    line.trim()
        .strip_prefix("PORT=")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{what} said {line:?}"))
}

/// The `toolonce` binary under test.
pub fn toolonce() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_toolonce"))
}

/// The test MCP server, built once per test binary with the same profile and features as the
/// binary under test (`cargo test --test NAME` does not build examples by itself).
pub fn test_server() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| example("mcp_test_server")).clone()
}

/// The strict protocol 2026-07-28 test server (the `mcp_modern_server` example), built as
/// [`test_server`] is.
pub fn modern_server() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| example("mcp_modern_server")).clone()
}

/// Builds the example `name` with the profile and features of the binary under test.
fn example(name: &str) -> PathBuf {
    let exe = toolonce();
    let profile_dir = exe.parent().expect("the binary is in a profile directory");
    let target_dir = profile_dir
        .parent()
        .expect("the profile is in a target directory");
    let mut features = Vec::new();
    if cfg!(feature = "sqlite") {
        features.push("sqlite");
    }
    if cfg!(feature = "redis") {
        features.push("redis");
    }
    if cfg!(feature = "postgres") {
        features.push("postgres");
    }
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args([
            "build",
            "--quiet",
            "--example",
            name,
            "--no-default-features",
        ])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    if !features.is_empty() {
        cargo.arg("--features").arg(features.join(","));
    }
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cargo.args(["--profile", "bench"]);
    }
    let status = cargo
        .status()
        .expect("run cargo to build the test MCP server");
    assert!(status.success(), "cannot build the {name} example");
    profile_dir.join("examples").join(name)
}

/// How to start a peer.
pub struct Spawn {
    proxy: bool,
    proxy_args: Vec<String>,
    config: Option<String>,
    env: Vec<(String, String)>,
    server: Option<Vec<OsString>>,
    files: bool,
    upstream: Option<String>,
}

impl Spawn {
    /// `toolonce mcp --store memory:// -- mcp_test_server`.
    pub fn proxy() -> Self {
        Spawn {
            proxy: true,
            proxy_args: vec!["--store".into(), "memory://".into()],
            config: None,
            env: Vec::new(),
            server: None,
            files: true,
            upstream: None,
        }
    }

    /// The test server alone, for comparisons.
    pub fn direct() -> Self {
        Spawn {
            proxy: false,
            ..Spawn::proxy()
        }
    }

    /// An argument of `toolonce mcp` (before `--`); `--store` replaces the default.
    pub fn arg(mut self, arg: &str) -> Self {
        if let Some(prev) = self.proxy_args.last()
            && prev == "memory://"
            && arg == "--store"
        {
            self.proxy_args.clear();
        }
        self.proxy_args.push(arg.to_owned());
        self
    }

    /// A configuration file with this TOML.
    pub fn config(mut self, toml: &str) -> Self {
        self.config = Some(toml.to_owned());
        self
    }

    /// An environment variable of the proxy and the server.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// No execution counter and no log: the server does no file I/O (for benches).
    pub fn without_files(mut self) -> Self {
        self.files = false;
        self
    }

    /// Another server command than the test server.
    pub fn server<S: Into<OsString>>(mut self, command: impl IntoIterator<Item = S>) -> Self {
        self.server = Some(command.into_iter().map(Into::into).collect());
        self
    }

    /// A Streamable HTTP server at `url` instead of a server command (`--upstream`).
    pub fn upstream(mut self, url: &str) -> Self {
        self.upstream = Some(url.to_owned());
        self
    }

    pub fn start(self) -> Peer {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let server = self
            .server
            .clone()
            .unwrap_or_else(|| vec![test_server().into_os_string()]);
        let mut command = if self.proxy {
            let mut c = Command::new(toolonce());
            c.arg("mcp").args(&self.proxy_args);
            if let Some(toml) = &self.config {
                let path = dir.path().join("toolonce-mcp.toml");
                std::fs::write(&path, toml).expect("write the configuration");
                c.arg("--config").arg(path);
            }
            match &self.upstream {
                Some(url) => c.arg("--upstream").arg(url),
                None => c.arg("--").args(&server),
            };
            c
        } else {
            let mut c = Command::new(&server[0]);
            c.args(&server[1..]);
            c
        };
        let counter = dir.path().join("executions");
        let log = dir.path().join("server.log");
        let stderr = std::fs::File::create(dir.path().join("stderr")).expect("stderr file");
        command
            .env_remove("TOOLONCE_SCOPE")
            .env_remove("TOOLONCE_STORE")
            .env_remove("TOOLONCE_MCP_CONFIG")
            .env_remove("TOOLONCE_SERVER_ID")
            .env_remove("MCP_TEST_COUNTER")
            .env_remove("MCP_TEST_LOG");
        if self.files {
            command
                .env("MCP_TEST_COUNTER", &counter)
                .env("MCP_TEST_LOG", &log);
        }
        command
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let mut child = command.spawn().expect("start the peer");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match stdout.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Peer {
            child,
            stdin,
            lines,
            next_id: 1,
            stash: Vec::new(),
            counter,
            log,
            dir,
        }
    }
}

/// A running peer (the proxy in front of a server, or a server) driven as an MCP client.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Vec<u8>>,
    next_id: u64,
    /// Messages received while waiting for another one.
    stash: Vec<Vec<u8>>,
    counter: PathBuf,
    log: PathBuf,
    dir: tempfile::TempDir,
}

impl Peer {
    /// Sends one line (a newline is added).
    pub fn send_line(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line).expect("write to the peer");
        stdin.write_all(b"\n").expect("write to the peer");
        stdin.flush().expect("flush to the peer");
    }

    pub fn send(&mut self, message: &Value) {
        self.send_line(&serde_json::to_vec(message).unwrap());
    }

    /// A fresh request id.
    pub fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends a request and returns its id.
    pub fn request_async(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.id());
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next line received, in order, without looking at it.
    pub fn recv_line(&mut self) -> Vec<u8> {
        if !self.stash.is_empty() {
            return self.stash.remove(0);
        }
        self.lines.recv_timeout(PATIENCE).unwrap_or_else(|_| {
            panic!("no message within {PATIENCE:?}; stderr:\n{}", self.stderr())
        })
    }

    /// The answer to the numeric request `id`, as the bytes that arrived (a strict parser may
    /// refuse them: the tests of unreadable answers compare bytes); messages before it are
    /// skipped.
    pub fn raw_answer(&mut self, id: u64) -> Vec<u8> {
        let (before_more, last) = (format!(r#""id":{id},"#), format!(r#""id":{id}}}"#));
        for _ in 0..50 {
            let line = self.recv_line();
            let text = String::from_utf8_lossy(&line);
            if text.contains(&before_more) || text.contains(&last) {
                return line;
            }
        }
        panic!("no answer to {id}");
    }

    /// A line if one arrives within `wait`.
    pub fn try_recv_line(&mut self, wait: Duration) -> Option<Vec<u8>> {
        if !self.stash.is_empty() {
            return Some(self.stash.remove(0));
        }
        self.lines.recv_timeout(wait).ok()
    }

    /// The message answering `id`, keeping the others for later.
    pub fn response(&mut self, id: &Value) -> Value {
        if let Some(i) = self
            .stash
            .iter()
            .position(|l| serde_json::from_slice::<Value>(l).is_ok_and(|m| m.get("id") == Some(id)))
        {
            return serde_json::from_slice(&self.stash.remove(i)).unwrap();
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "no answer to {id} within {PATIENCE:?}; stderr:\n{}",
                    self.stderr()
                )
            });
            match serde_json::from_slice::<Value>(&line) {
                Ok(message) if message.get("id") == Some(id) && message.get("method").is_none() => {
                    return message;
                }
                _ => self.stash.push(line),
            }
        }
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.request_async(method, params);
        self.response(&id)
    }

    /// `initialize` plus `notifications/initialized`; returns the initialize result.
    pub fn initialize(&mut self) -> Value {
        let answer = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "toolonce-tests", "version": "0"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        answer["result"].clone()
    }

    /// `tools/list`; returns the tools.
    pub fn list_tools(&mut self) -> Vec<Value> {
        let answer = self.request("tools/list", json!({}));
        answer["result"]["tools"].as_array().expect("tools").clone()
    }

    /// Sends `tools/call` and returns its id.
    pub fn call_async(&mut self, tool: &str, arguments: Value) -> Value {
        self.request_async("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    /// Calls a tool; returns the whole answer.
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let id = self.call_async(tool, arguments);
        self.response(&id)
    }

    /// The lines of the server's execution counter: `(tool, arguments, key)`.
    pub fn executions(&self) -> Vec<(String, Value, String)> {
        let text = std::fs::read_to_string(&self.counter).unwrap_or_default();
        // Only whole lines: the server may be writing the next one right now.
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole
            .lines()
            .map(|l| {
                let mut parts = l.splitn(3, '\t');
                let tool = parts.next().unwrap().to_owned();
                let args = serde_json::from_str(parts.next().unwrap()).unwrap();
                (tool, args, parts.next().unwrap().to_owned())
            })
            .collect()
    }

    /// How many times the server ran `tool`.
    pub fn count(&self, tool: &str) -> usize {
        self.executions().iter().filter(|(t, ..)| t == tool).count()
    }

    /// The server's log: every line received (`<`) and sent (`>`), in order.
    pub fn server_log(&self) -> Vec<(char, Vec<u8>)> {
        let bytes = std::fs::read(&self.log).unwrap_or_default();
        bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| (char::from(l[0]), l[1..].to_vec()))
            .collect()
    }

    /// The lines the server received.
    pub fn server_received(&self) -> Vec<Vec<u8>> {
        self.server_log()
            .into_iter()
            .filter(|(d, _)| *d == '<')
            .map(|(_, l)| l)
            .collect()
    }

    /// What the peer wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// The peer's process id (the proxy's, or the server's when started directly).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The peer's temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Closes the peer's stdin, as a client hanging up.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the peer to exit.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the peer") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the peer did not exit within {timeout:?}; stderr:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until `check` holds (polling the files the server writes), or fails.
    pub fn eventually(&self, what: &str, check: impl Fn(&Peer) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !check(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `message` without its `id`, to compare an answer with a replay of it.
pub fn without_id(message: &Value) -> Value {
    let mut message = message.clone();
    if let Some(object) = message.as_object_mut() {
        object.remove("id");
    }
    message
}

/// `message` without its `id` and without what the proxy adds to a replay
/// (`_meta["toolonce/outcome"]`, `_meta["toolonce/key"]` and `_meta["toolonce/recorded_at"]`,
/// and the `_meta` itself if that leaves it empty; the replay's note, the last text content
/// item), to compare a first answer with a replay of it.
pub fn without_outcome(message: &Value) -> Value {
    let mut message = without_id(message);
    if let Some(result) = message.get_mut("result").and_then(Value::as_object_mut)
        && let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut)
    {
        let outcome = meta.remove("toolonce/outcome");
        meta.remove("toolonce/key");
        meta.remove("toolonce/recorded_at");
        if matches!(
            outcome.as_ref().and_then(Value::as_str),
            Some("replayed" | "replayed_failure")
        ) && let Some(content) = result.get_mut("content").and_then(Value::as_array_mut)
        {
            let note = content.pop().expect("a replay has its note");
            let text = note["text"].as_str().unwrap_or_default();
            assert!(text.starts_with("Already "), "not a replay's note: {note}");
        }
        let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) else {
            unreachable!("the _meta was there")
        };
        if meta.is_empty() {
            result.remove("_meta");
        }
    }
    message
}

/// The text of the first content block of a `tools/call` answer.
pub fn text(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {answer}"))
        .to_owned()
}

/// Whether a `tools/call` answer is an error result.
pub fn is_error(answer: &Value) -> bool {
    answer["result"]["isError"] == json!(true)
}

/// Counts by tool, for readable assertions.
pub fn counts(peer: &Peer) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for (tool, ..) in peer.executions() {
        *counts.entry(tool).or_default() += 1;
    }
    counts
}
