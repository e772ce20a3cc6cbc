//! Added latency of `toolonce mcp` per `tools/call`, in its three shapes, each against calling
//! the server directly over the same server transport in the same run:
//!
//! | shape          | through toolonce                                   | direct                       |
//! |----------------|----------------------------------------------------|------------------------------|
//! | stdio → stdio  | stdio client → `toolonce mcp -- server`            | stdio client → stdio server  |
//! | stdio → HTTP   | stdio client → `toolonce mcp --upstream URL`       | HTTP client → HTTP server    |
//! | HTTP → stdio   | HTTP client → `toolonce mcp --listen … -- server`  | stdio client → stdio server  |
//!
//! on the memory store and on SQLite (with the `sqlite` feature). The stdio server is the
//! `mcp_test_server` example; the HTTP server is a minimal Streamable HTTP server in this file
//! (JSON answers, one thread per connection) and the HTTP client a minimal keep-alive client,
//! so that neither adds more than the protocol needs. Every write call has fresh arguments, so
//! each is a first-time call: claim, forward, record. Calls are taken in interleaved rounds, and
//! a table of p50 and p99 per shape and store is printed after criterion's own estimates.
//!
//! `cargo bench -p toolonce-cli --bench mcp`

#[path = "../tests/support/mcp_peer.rs"]
mod mcp_peer;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use mcp_peer::{Peer, Spawn, test_server, toolonce};
use serde_json::{Value, json};

/// One HTTP/1.1 message: its start line, headers (names lowercased) and body.
struct Message {
    start: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one message with a `Content-Length` body, a chunked one, or none; `None` at the end
/// of the stream.
fn read_message(reader: &mut BufReader<TcpStream>) -> Option<Message> {
    let mut start = String::new();
    if reader.read_line(&mut start).ok()? == 0 {
        return None;
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let mut message = Message {
        start: start.trim_end().to_owned(),
        headers,
        body: Vec::new(),
    };
    if message
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        // An event stream (the gateway's answer to a client that accepts one): read the chunks
        // up to the last, which comes once the answer has been sent.
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            message.body.extend_from_slice(&chunk[..size]);
        }
        return Some(message);
    }
    let length: usize = message
        .header("content-length")
        .map_or(0, |v| v.parse().expect("a Content-Length"));
    message.body.resize(length, 0);
    reader.read_exact(&mut message.body).ok()?;
    Some(message)
}

/// The JSON-RPC answer in `message`: its body, or in an event stream the event that has an id.
fn answer_of(message: &Message) -> Value {
    if !message
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"))
    {
        return serde_json::from_slice(&message.body).expect("a JSON answer");
    }
    let text = String::from_utf8_lossy(&message.body);
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            serde_json::from_str::<Value>(&data.join("\n")).ok()
        })
        .find(|m| m.get("id").is_some())
        .expect("an event stream carrying the answer")
}

/// The bench's Streamable HTTP server: `charge` (a write) and `lookup` (a read), answered
/// with JSON on the POST, a session id with the `initialize` answer, 202 for notifications,
/// 405 for GET and DELETE. Returns its port; it runs until the bench exits.
fn http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the bench HTTP server");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || serve_connection(stream));
        }
    });
    port
}

fn serve_connection(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut writer = stream.try_clone().expect("clone the connection");
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_message(&mut reader) {
        let (status, extra, body) = if !request.start.starts_with("POST ") {
            ("405 Method Not Allowed", "", Vec::new())
        } else {
            let message: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            match (message.get("id"), message["method"].as_str()) {
                (Some(id), Some(method)) => {
                    let result = match method {
                        "initialize" => json!({
                            "protocolVersion": "2025-06-18",
                            "capabilities": {"tools": {}},
                            "serverInfo": {"name": "bench-http", "version": "1"}}),
                        "tools/list" => json!({"tools": [
                            {"name": "charge", "inputSchema": {"type": "object"},
                             "annotations": {"destructiveHint": true, "readOnlyHint": false}},
                            {"name": "lookup", "inputSchema": {"type": "object"},
                             "annotations": {"readOnlyHint": true}}]}),
                        "tools/call" => json!({"content": [{"type": "text", "text": "done"}]}),
                        _ => json!({}),
                    };
                    let extra = if method == "initialize" {
                        "Mcp-Session-Id: bench-session\r\n"
                    } else {
                        ""
                    };
                    let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
                    ("200 OK", extra, serde_json::to_vec(&answer).unwrap())
                }
                _ => ("202 Accepted", "", Vec::new()),
            }
        };
        let mut response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        response.extend_from_slice(&body);
        if writer.write_all(&response).is_err() {
            return;
        }
    }
}

/// A keep-alive Streamable HTTP client: one connection, JSON answers.
struct HttpClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    host: String,
    session: Option<String>,
    next_id: u64,
}

impl HttpClient {
    fn connect(port: u16) -> HttpClient {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_nodelay(true).unwrap();
        HttpClient {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
            host: format!("127.0.0.1:{port}"),
            session: None,
            next_id: 1,
        }
    }

    fn post(&mut self, message: &Value) -> Message {
        let body = serde_json::to_vec(message).unwrap();
        let session = self
            .session
            .as_ref()
            .map(|s| format!("Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-06-18\r\n"))
            .unwrap_or_default();
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{session}Content-Length: {}\r\n\r\n",
            self.host,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(&body);
        self.writer.write_all(&request).expect("send a request");
        read_message(&mut self.reader).expect("an answer")
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let answer = self.post(
            &json!({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                       "params": params}),
        );
        assert!(answer.start.contains(" 200 "), "{}", answer.start);
        if let Some(session) = answer.header("mcp-session-id") {
            self.session = Some(session.to_owned());
        }
        answer_of(&answer)
    }

    fn initialize(&mut self) {
        self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "toolonce-bench", "version": "0"}}),
        );
        let answer = self.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert!(answer.start.contains(" 202 "), "{}", answer.start);
        self.request("tools/list", json!({}));
    }
}

/// `toolonce mcp --listen 127.0.0.1:0` in front of the test server; killed when dropped.
struct Gateway {
    child: Child,
    port: u16,
}

impl Gateway {
    fn start(store: &str) -> Gateway {
        let mut child = Command::new(toolonce())
            .args(["mcp", "--store", store, "--scope", "bench"])
            .args(["--listen", "127.0.0.1:0", "--"])
            .arg(test_server())
            .env_remove("MCP_TEST_COUNTER")
            .env_remove("MCP_TEST_LOG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start toolonce mcp --listen");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let port = loop {
            let mut line = String::new();
            assert!(
                stderr.read_line(&mut line).unwrap() > 0,
                "the gateway exited"
            );
            if let Some(port) = line
                .trim()
                .strip_prefix("toolonce mcp: listening on http://127.0.0.1:")
                .and_then(|rest| rest.strip_suffix("/mcp"))
            {
                break port.parse().expect("a port");
            }
        };
        // Keep draining its stderr so that it never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Gateway { child, port }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

enum Client {
    Stdio(Peer),
    Http(HttpClient),
}

/// One peer to measure, with a counter that makes every call's arguments new.
struct Subject {
    shape: &'static str,
    store: &'static str,
    client: Client,
    n: u64,
    // Keep a gateway running and a SQLite store's directory alive.
    _gateway: Option<Gateway>,
    _dir: Option<tempfile::TempDir>,
}

impl Subject {
    fn stdio(shape: &'static str, store: &'static str, spawn: Spawn) -> Self {
        let mut peer = spawn.without_files().start();
        peer.initialize();
        peer.list_tools();
        Subject {
            shape,
            store,
            client: Client::Stdio(peer),
            n: 0,
            _gateway: None,
            _dir: None,
        }
    }

    fn http(shape: &'static str, store: &'static str, port: u16) -> Self {
        let mut client = HttpClient::connect(port);
        client.initialize();
        Subject {
            shape,
            store,
            client: Client::Http(client),
            n: 0,
            _gateway: None,
            _dir: None,
        }
    }

    fn call(&mut self, tool: &str, arguments: Value) {
        let answer = match &mut self.client {
            Client::Stdio(peer) => peer.call(tool, arguments),
            Client::Http(client) => {
                client.request("tools/call", json!({"name": tool, "arguments": arguments}))
            }
        };
        assert!(answer.get("result").is_some(), "{answer}");
    }

    fn write_call(&mut self) {
        self.n += 1;
        let arguments = json!({"amount": 100, "order": self.n});
        self.call("charge", arguments);
    }

    fn read_call(&mut self) {
        self.call("lookup", json!({"q": 1}));
    }
}

const STDIO: &str = "stdio → stdio";
const UPSTREAM: &str = "stdio → HTTP (--upstream)";
const LISTEN: &str = "HTTP → stdio (--listen)";

/// The stores to measure: memory, and SQLite in a directory of its own when built in.
fn stores() -> Vec<(&'static str, String, Option<tempfile::TempDir>)> {
    let mut stores = vec![("memory", "memory://".to_owned(), None)];
    if cfg!(feature = "sqlite") {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
        stores.push(("sqlite", url, Some(dir)));
    }
    stores
}

/// The subjects: first the two direct ones (stdio server, HTTP server), then every shape on
/// every store.
fn subjects(http_port: u16) -> Vec<Subject> {
    let mut subjects = vec![
        Subject::stdio(STDIO, "direct", Spawn::direct()),
        Subject::http(UPSTREAM, "direct", http_port),
    ];
    let upstream = format!("http://127.0.0.1:{http_port}/mcp");
    for (store, url, dir) in stores() {
        let proxy = || {
            Spawn::proxy()
                .arg("--store")
                .arg(&url)
                .arg("--scope")
                .arg("bench")
        };
        subjects.push(Subject::stdio(STDIO, store, proxy()));
        subjects.push(Subject::stdio(UPSTREAM, store, proxy().upstream(&upstream)));
        let gateway = Gateway::start(&url);
        let mut subject = Subject::http(LISTEN, store, gateway.port);
        subject._gateway = Some(gateway);
        subject._dir = dir;
        subjects.push(subject);
    }
    subjects
}

/// Per-call latencies of `calls` calls per subject, taken in interleaved rounds so that drift
/// (CPU frequency, other load) hits every subject alike; each round starts with the next
/// subject, so that none is always the one that follows another.
fn interleaved(subjects: &mut [Subject], call: fn(&mut Subject), calls: usize) -> Vec<Stats> {
    const ROUNDS: usize = 20;
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(calls); subjects.len()];
    for round in 0..ROUNDS {
        for turn in 0..subjects.len() {
            let i = (round + turn) % subjects.len();
            for _ in 0..calls / ROUNDS {
                let started = Instant::now();
                call(&mut subjects[i]);
                samples[i].push(started.elapsed());
            }
        }
    }
    samples.into_iter().map(Stats::of).collect()
}

/// The median and the 99th percentile of some latencies. On a shared machine a few calls
/// stall for a scheduler tick: the median is the figure to compare, the p99 shows the tail.
#[derive(Clone, Copy)]
struct Stats {
    p50: Duration,
    p99: Duration,
}

impl Stats {
    fn of(mut samples: Vec<Duration>) -> Stats {
        samples.sort();
        Stats {
            p50: samples[samples.len() / 2],
            p99: samples[samples.len() * 99 / 100],
        }
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Prints one table row per proxied subject, against the direct subject of its shape (the
/// stdio server for stdio → stdio and HTTP → stdio, the HTTP server for stdio → HTTP).
fn table(what: &str, subjects: &[Subject], stats: &[Stats]) {
    println!("\n{what}, µs per call (p50 / p99):");
    println!(
        "| shape                     | store  | direct p50 | through p50 | added p50 | direct p99 | through p99 | added p99 |"
    );
    println!(
        "|---------------------------|--------|-----------:|------------:|----------:|-----------:|------------:|----------:|"
    );
    let direct_of = |shape: &str| {
        let server_shape = if shape == LISTEN { STDIO } else { shape };
        subjects
            .iter()
            .position(|s| s.shape == server_shape && s.store == "direct")
            .expect("a direct subject")
    };
    for (subject, through) in subjects.iter().zip(stats) {
        if subject.store == "direct" {
            continue;
        }
        let direct = stats[direct_of(subject.shape)];
        println!(
            "| {:<25} | {:<6} | {:>10.1} | {:>11.1} | {:>9.1} | {:>10.1} | {:>11.1} | {:>9.1} |",
            subject.shape,
            subject.store,
            micros(direct.p50),
            micros(through.p50),
            micros(through.p50) - micros(direct.p50),
            micros(direct.p99),
            micros(through.p99),
            micros(through.p99) - micros(direct.p99),
        );
    }
}

fn bench(c: &mut Criterion) {
    let mut subjects = subjects(http_server());

    let mut group = c.benchmark_group("mcp_write_call");
    for subject in &mut subjects {
        let name = format!("{} {}", subject.shape, subject.store);
        group.bench_function(name, |b| b.iter(|| subject.write_call()));
    }
    group.finish();

    let writes = interleaved(&mut subjects, Subject::write_call, 4000);
    table(
        "mcp write call (first call: claim, forward, record)",
        &subjects,
        &writes,
    );
    let reads = interleaved(&mut subjects, Subject::read_call, 2000);
    table("mcp read call (passed through)", &subjects, &reads);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
