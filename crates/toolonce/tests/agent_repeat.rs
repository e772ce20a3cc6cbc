//! An agent loop whose scripted model pays Bob 5 EUR twice on purpose and retries another
//! payment (issue 43): the payments reach a real HTTP service on a loopback port, which
//! charges once per `Idempotency-Key` as real providers do. The model learns how to repeat on
//! purpose from the note of the replay its first attempt at the second payment got.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolonce::{MemoryStore, Outcome, Reply, ToolError, Toolbox, WriteContext, WriteTool};

/// What the payment service received: (Idempotency-Key, body), in order.
type Received = Arc<Mutex<Vec<(String, Value)>>>;

/// A payment service on a loopback port: answers every `POST` with a receipt, the same one for
/// a key it has seen.
fn payment_service() -> (u16, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let received: Received = Arc::default();
    let log = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            serve(stream, &log);
        }
    });
    (port, received)
}

/// Answers one request (`Connection: close`).
fn serve(stream: TcpStream, log: &Received) {
    let mut reader = BufReader::new(stream);
    let (mut key, mut length) = (String::new(), 0);
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(": ") {
            match name.to_ascii_lowercase().as_str() {
                "idempotency-key" => key = value.to_owned(),
                "content-length" => length = value.parse().unwrap(),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    let receipt = {
        let mut log = log.lock().unwrap();
        let first = log.iter().position(|(k, _)| *k == key);
        log.push((key.clone(), body));
        format!("pay_{}", first.unwrap_or(log.len() - 1) + 1)
    };
    let answer = json!({"receipt": receipt}).to_string();
    let mut stream = reader.into_inner();
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{answer}",
        answer.len()
    )
    .unwrap();
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Payment {
    to: String,
    cents: u64,
}

/// Pays through the service, with the operation key as the `Idempotency-Key`.
struct Pay {
    port: u16,
}

impl WriteTool for Pay {
    type Args = Payment;
    type Output = Value;
    fn name(&self) -> &str {
        "pay"
    }
    fn description(&self) -> &str {
        "Pay someone, in cents."
    }
    async fn call(&self, ctx: WriteContext, args: Payment) -> Result<Value, ToolError> {
        let (header, key) = ctx.idempotency_header();
        let request = format!(
            "POST /payments HTTP/1.1\r\nHost: localhost\r\n{header}: {key}\r\nContent-Type: \
             application/json\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n{body}",
            len = json!({"to": args.to, "cents": args.cents})
                .to_string()
                .len(),
            body = json!({"to": args.to, "cents": args.cents}),
        );
        let port = self.port;
        let answer = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
            let mut stream = TcpStream::connect(("127.0.0.1", port))?;
            stream.write_all(request.as_bytes())?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer)?;
            Ok(answer)
        })
        .await
        .map_err(|e| ToolError::transient(e.to_string()))??;
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
        serde_json::from_str(body).map_err(|e| ToolError::permanent(e.to_string()))
    }
}

/// The model: a script of payments, each sent as a `tool_use`. `Again` is the same payment
/// again on purpose, with the ordinal the last replay's note offered (or none, if none came).
enum Turn {
    Pay(&'static str, u64),
    Again(&'static str, u64),
    Retry,
}

struct ScriptedModel {
    turns: std::vec::IntoIter<Turn>,
    last_input: Value,
    n: u32,
}

impl ScriptedModel {
    fn respond(&mut self, last_results: &[Value]) -> Option<Value> {
        let input = match self.turns.next()? {
            Turn::Pay(to, cents) => json!({"to": to, "cents": cents}),
            Turn::Again(to, cents) => {
                let mut input = json!({"to": to, "cents": cents});
                if let Some(next) = offered_ordinal(last_results) {
                    input["repeat"] = json!(next);
                }
                input
            }
            Turn::Retry => self.last_input.clone(),
        };
        self.n += 1;
        self.last_input = input.clone();
        let id = format!("toolu_{:02}", self.n);
        Some(json!([{"type": "tool_use", "id": id, "name": "pay", "input": input}]))
    }
}

/// The ordinal a replay's note offers (`… "repeat": N.`), as a model reads it.
fn offered_ordinal(results: &[Value]) -> Option<u64> {
    let note = results.last()?["content"].as_array()?.last()?["text"].as_str()?;
    let (_, after) = note.rsplit_once("\"repeat\": ")?;
    after.trim_end_matches('.').parse().ok()
}

async fn run(toolbox: &Toolbox, mut model: ScriptedModel) -> Vec<Reply> {
    let mut replies = Vec::new();
    let mut results: Vec<Value> = Vec::new();
    while let Some(content) = model.respond(&results) {
        results.clear();
        for tool_use in content.as_array().unwrap() {
            let reply = toolbox.call_anthropic_with_outcome(tool_use).await;
            results.push(reply.json.clone());
            replies.push(reply);
        }
    }
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_pays_bob_twice_on_purpose_and_a_retry_of_either_pays_nothing_more() {
    let (port, received) = payment_service();
    let toolbox = Toolbox::builder(Arc::new(MemoryStore::new()))
        .scope("run-43")
        .write(Pay { port })
        .build()
        .unwrap();
    let script = vec![
        Turn::Pay("bob", 500),
        // The model means a second payment, but sends the identical call: a replay, whose
        // note tells it how to say so.
        Turn::Again("bob", 500),
        Turn::Again("bob", 500),
        // The loop retries that call (a lost answer): the same ordinal, the same operation.
        Turn::Retry,
        Turn::Pay("carol", 700),
        Turn::Retry,
    ];
    let model = ScriptedModel {
        turns: script.into_iter(),
        last_input: Value::Null,
        n: 0,
    };
    let replies = run(&toolbox, model).await;
    let outcomes: Vec<Outcome> = replies.iter().map(Reply::outcome).collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Executed,
            Outcome::Replayed,
            Outcome::Executed,
            Outcome::Replayed,
            Outcome::Executed,
            Outcome::Replayed
        ]
    );
    assert_eq!(replies[2].json["tool_use_id"], "toolu_03");
    // Bob was paid twice, under two keys; Carol once; no retry reached the service.
    let received = received.lock().unwrap().clone();
    let bodies: Vec<&Value> = received.iter().map(|(_, body)| body).collect();
    let bob = json!({"to": "bob", "cents": 500});
    let carol = json!({"to": "carol", "cents": 700});
    assert_eq!(bodies, [&bob, &bob, &carol]);
    let keys: Vec<&str> = received.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys[0], replies[0].key().unwrap().as_str());
    assert_eq!(keys[1], replies[2].key().unwrap().as_str());
    assert_ne!(keys[0], keys[1]);
    assert_eq!(replies[3].key(), replies[2].key());
    // The retried repeat was told the next ordinal; the receipts are the service's own.
    let note = &replies[3].result.replay.as_ref().unwrap().text;
    assert!(note.ends_with("\"repeat\": 3."), "{note}");
    let receipts: Vec<Value> = replies
        .iter()
        .map(|r| r.result.value.clone().unwrap().into())
        .collect();
    assert_eq!(receipts[0], json!({"receipt": "pay_1"}));
    assert_eq!(receipts[2], json!({"receipt": "pay_2"}));
    assert_eq!(receipts[3], receipts[2]);
}
