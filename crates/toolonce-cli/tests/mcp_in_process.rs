//! The MCP proxy driven in-process through the library ([`toolonce_cli::mcp_proxy`]): the
//! client's side is a pair of in-memory streams, the server the stdio test server (the
//! `mcp_test_server` example) as the proxy's child, and the store one the test opens itself
//! to look at what the proxy recorded.

#[path = "support/mcp_peer.rs"]
mod mcp_peer;

use std::path::Path;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use toolonce::{ListQuery, State};

/// The client's end of an in-process proxy.
struct Client {
    to_proxy: DuplexStream,
    from_proxy: Lines<BufReader<DuplexStream>>,
    proxy: tokio::task::JoinHandle<anyhow::Result<std::process::ExitStatus>>,
}

impl Client {
    /// Starts the proxy in this runtime, on `store`, in front of the test server, which counts
    /// its executions in `counter`.
    fn start(store: &str, counter: &Path) -> Client {
        // The server command is `env MCP_TEST_COUNTER=FILE SERVER`: each test's server has
        // its own counter without touching this process's environment, which tests running
        // at once share.
        let server = mcp_peer::test_server();
        let args = vec![
            "--store".to_owned(),
            store.to_owned(),
            "--scope".to_owned(),
            "in-process".to_owned(),
            "--".to_owned(),
            "env".to_owned(),
            format!("MCP_TEST_COUNTER={}", counter.display()),
            server.display().to_string(),
        ];
        let (to_proxy, proxy_in) = tokio::io::duplex(1 << 16);
        let (proxy_out, from_proxy) = tokio::io::duplex(1 << 16);
        let proxy = tokio::spawn(toolonce_cli::mcp_proxy(args, proxy_in, proxy_out));
        Client {
            to_proxy,
            from_proxy: BufReader::new(from_proxy).lines(),
            proxy,
        }
    }

    async fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.to_proxy.write_all(line.as_bytes()).await.unwrap();
    }

    /// The next line whose `id` is `id`, as it came (messages before it are skipped).
    async fn answer(&mut self, id: u64) -> String {
        let (more, last) = (format!(r#""id":{id},"#), format!(r#""id":{id}}}"#));
        loop {
            let line = tokio::time::timeout(mcp_peer::PATIENCE, self.from_proxy.next_line())
                .await
                .unwrap_or_else(|_| panic!("no answer to {id}"))
                .unwrap()
                .unwrap_or_else(|| panic!("the proxy hung up before answering {id}"));
            if line.contains(&more) || line.contains(&last) {
                return line;
            }
        }
    }

    async fn initialize(&mut self) {
        self.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                     "clientInfo": {"name": "in-process", "version": "0"}}}))
            .await;
        self.answer(0).await;
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
    }

    async fn call(&mut self, id: u64, tool: &str, arguments: Value) -> String {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}}))
            .await;
        self.answer(id).await
    }

    /// Ends the client's input and waits for the proxy to shut down.
    async fn close(self) -> std::process::ExitStatus {
        drop(self.to_proxy);
        tokio::time::timeout(mcp_peer::PATIENCE, self.proxy)
            .await
            .expect("the proxy ends after its client's input")
            .unwrap()
            .expect("the proxy ran")
    }
}

fn executions(counter: &Path, tool: &str) -> usize {
    std::fs::read_to_string(counter)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split('\t').next() == Some(tool))
        .count()
}

#[tokio::test(flavor = "current_thread")]
async fn a_write_through_the_in_process_proxy_runs_once_and_its_store_holds_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let store_url = format!("sqlite://{}", dir.path().join("toolonce.db").display());
    let mut client = Client::start(&store_url, &counter);
    client.initialize().await;
    let answers = [
        client.call(1, "charge", json!({"order": "o-1"})).await,
        client.call(2, "charge", json!({"order": "o-1"})).await,
        client.call(3, "charge", json!({"order": "o-1"})).await,
    ];
    assert_eq!(executions(&counter, "charge"), 1, "{answers:?}");
    let outcomes: Vec<Value> = answers
        .iter()
        .map(|a| {
            serde_json::from_str::<Value>(a).unwrap()["result"]["_meta"]["toolonce/outcome"].clone()
        })
        .collect();
    assert_eq!(outcomes[1], "replayed", "{answers:?}");
    assert_eq!(outcomes[2], "replayed", "{answers:?}");
    assert!(client.close().await.success());

    // What the proxy recorded, read by the test itself.
    let store = toolonce::store::open(&store_url).await.unwrap();
    let page = store.list(&ListQuery::default()).await.unwrap();
    let done: Vec<_> = page
        .entries
        .iter()
        .filter(|e| e.state() == State::Done)
        .collect();
    assert_eq!(done.len(), 1, "{:?}", page.entries);
    assert_eq!(done[0].about.scope.as_deref(), Some("in-process"));
}

#[tokio::test(flavor = "current_thread")]
async fn an_unreadable_answer_through_the_in_process_proxy_is_recorded_and_never_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut client = Client::start("memory://", &counter);
    client.initialize().await;
    for (how, ids) in [("surrogate", [11_u64, 12, 13]), ("deep", [21, 22, 23])] {
        let mut answers = Vec::new();
        for id in ids {
            answers.push(client.call(id, "garbled", json!({"how": how})).await);
        }
        let first = answers[0].clone();
        assert!(first.contains(r"\ud83d"), "{how}: {first}");
        for (answer, id) in answers.iter().zip(ids) {
            assert_eq!(
                answer.replace(&format!(r#""id":{id}"#), &format!(r#""id":{}"#, ids[0])),
                first,
                "{how}: the duplicate {id} did not get the first answer's bytes"
            );
        }
    }
    assert_eq!(executions(&counter, "garbled"), 2);
    client.close().await;
}

#[tokio::test(flavor = "current_thread")]
async fn the_in_process_proxy_refuses_arguments_the_command_refuses() {
    let (_, input) = tokio::io::duplex(64);
    let (output, _) = tokio::io::duplex(64);
    let listen = toolonce_cli::mcp_proxy(["--listen", "0", "--", "server"], input, output)
        .await
        .expect_err("--listen is a gateway");
    assert!(listen.to_string().contains("--listen"), "{listen}");
    let (_, input) = tokio::io::duplex(64);
    let (output, _) = tokio::io::duplex(64);
    let scope = toolonce_cli::mcp_proxy(["--scope", "", "--", "server"], input, output)
        .await
        .expect_err("an empty scope");
    assert!(scope.to_string().contains("--scope"), "{scope}");
}
