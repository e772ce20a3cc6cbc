//! The toolbox's provider-format calls (`call_anthropic`, `call_openai`) and what they tell the
//! caller besides the JSON for the model: the outcome and the operation key. Also how common
//! error types become [`ToolError`]s through `?`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use toolonce::{
    ErrorClass, MemoryStore, Outcome, ToolError, Toolbox, WriteContext, WriteTool, key,
};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Args {
    to: String,
}

/// Counts its runs; fails permanently for `"bounce@example.com"`, with an I/O error for
/// `"down@example.com"` and with a timeout for `"slow@example.com"`.
#[derive(Clone, Default)]
struct SendEmail {
    runs: Arc<AtomicU32>,
}

impl WriteTool for SendEmail {
    type Args = Args;
    type Output = Value;
    fn name(&self) -> &str {
        "send_email"
    }
    fn description(&self) -> &str {
        "Send an email."
    }
    async fn call(&self, ctx: WriteContext, args: Args) -> Result<Value, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        match args.to.as_str() {
            "bounce@example.com" => Err(ToolError::permanent("the address does not exist")),
            "down@example.com" => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "the mail server reset the connection",
            ))?,
            "slow@example.com" => {
                tokio::time::timeout(Duration::from_millis(1), std::future::pending::<()>())
                    .await?;
                unreachable!("a pending future never finishes")
            }
            _ => Ok(json!({"message_id": ctx.key().as_str()})),
        }
    }
}

fn toolbox(tool: SendEmail) -> Toolbox {
    Toolbox::builder(Arc::new(MemoryStore::new()))
        .scope("run-1")
        .write(tool)
        .build()
        .unwrap()
}

fn tool_use(id: &str, to: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": "send_email", "input": {"to": to}})
}

fn tool_call(id: &str, to: &str) -> Value {
    json!({
        "id": id, "type": "function",
        "function": {"name": "send_email", "arguments": json!({"to": to}).to_string()}
    })
}

#[tokio::test]
async fn an_anthropic_call_tells_executed_then_replayed_under_one_key() {
    let tool = SendEmail::default();
    let tb = toolbox(tool.clone());
    let first = tb
        .call_anthropic_with_outcome(&tool_use("toolu_1", "ada@example.com"))
        .await;
    let again = tb
        .call_anthropic_with_outcome(&tool_use("toolu_2", "ada@example.com"))
        .await;
    assert_eq!(first.outcome(), Outcome::Executed);
    assert_eq!(again.outcome(), Outcome::Replayed);
    let expected = key::derive(
        "run-1",
        "send_email",
        &json!({"to": "ada@example.com"}),
        None,
    )
    .unwrap()
    .key;
    assert_eq!(first.key(), Some(&expected));
    assert_eq!(again.key(), Some(&expected));
    // The JSON is the very block call_anthropic gives, under each call's own id.
    assert_eq!(first.json["type"], "tool_result");
    assert_eq!(first.json["tool_use_id"], "toolu_1");
    assert_eq!(again.json["tool_use_id"], "toolu_2");
    // The replay's first text block is the first answer's content; the note follows it.
    assert_eq!(first.json["content"], again.json["content"][0]["text"]);
    assert_eq!(first.json, first.result.to_anthropic("toolu_1"));
    assert_eq!(
        first.result.value.clone().map(Into::into),
        Some(json!({"message_id": expected.as_str()}))
    );
    assert_eq!(tool.runs.load(Ordering::SeqCst), 1);
    // call_anthropic answers the same JSON as the richer call, and runs nothing more.
    let plain = tb
        .call_anthropic(&tool_use("toolu_3", "ada@example.com"))
        .await;
    assert_eq!(plain, again.result.to_anthropic("toolu_3"));
    assert_eq!(tool.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_openai_call_tells_the_error_its_message_cannot_flag() {
    let tool = SendEmail::default();
    let tb = toolbox(tool.clone());
    let first = tb
        .call_openai_with_outcome(&tool_call("call_1", "bounce@example.com"))
        .await;
    assert_eq!(first.outcome(), Outcome::Executed);
    assert!(first.result.is_error);
    assert_eq!(first.json["role"], "tool");
    assert_eq!(first.json["tool_call_id"], "call_1");
    assert!(first.json.get("is_error").is_none(), "{}", first.json);
    let again = tb
        .call_openai_with_outcome(&tool_call("call_2", "bounce@example.com"))
        .await;
    assert_eq!(again.outcome(), Outcome::ReplayedFailure);
    assert!(again.result.is_error);
    assert_eq!(again.key(), first.key());
    assert!(first.key().is_some());
    assert_eq!(tool.runs.load(Ordering::SeqCst), 1);
    let plain = tb
        .call_openai(&tool_call("call_3", "bounce@example.com"))
        .await;
    assert_eq!(plain, again.result.to_openai("call_3"));
}

#[tokio::test]
async fn calls_that_never_reach_the_layer_have_an_outcome_and_no_key() {
    let tb = toolbox(SendEmail::default());
    let unknown = tb
        .call_anthropic_with_outcome(
            &json!({"type": "tool_use", "id": "toolu_1", "name": "nope", "input": {}}),
        )
        .await;
    assert_eq!(unknown.outcome(), Outcome::UnknownTool);
    assert_eq!(unknown.key(), None);
    assert_eq!(unknown.json["is_error"], true);
    let nameless = tb
        .call_openai_with_outcome(&json!({"id": "call_1", "function": {"arguments": "{}"}}))
        .await;
    assert_eq!(nameless.outcome(), Outcome::InvalidArguments);
    assert_eq!(nameless.key(), None);
    let invalid = tb
        .call_openai_with_outcome(&json!({"id": "call_2", "function": {"name": "send_email", "arguments": "{\"to\": 5}"}}))
        .await;
    assert_eq!(invalid.outcome(), Outcome::InvalidArguments);
    assert!(
        invalid.result.content.contains("to"),
        "{}",
        invalid.result.content
    );
}

#[tokio::test]
async fn an_io_error_raised_with_question_mark_is_transient_and_runs_again() {
    let tool = SendEmail::default();
    let tb = toolbox(tool.clone());
    for round in 1..=2 {
        let reply = tb
            .call_anthropic_with_outcome(&tool_use("toolu_1", "down@example.com"))
            .await;
        assert_eq!(reply.outcome(), Outcome::Executed, "round {round}");
        assert_eq!(reply.json["is_error"], true);
        assert!(
            reply.result.content.contains("reset the connection"),
            "{}",
            reply.result.content
        );
    }
    // Transient: the entry was released, so the duplicate ran the tool again.
    assert_eq!(tool.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_timeout_raised_with_question_mark_is_transient_and_runs_again() {
    let tool = SendEmail::default();
    let tb = toolbox(tool.clone());
    for _ in 1..=2 {
        let reply = tb
            .call("send_email", json!({"to": "slow@example.com"}))
            .await;
        assert_eq!(reply.outcome, Outcome::Executed);
        assert!(reply.is_error);
        assert!(reply.content.contains("timed out"), "{}", reply.content);
    }
    assert_eq!(tool.runs.load(Ordering::SeqCst), 2);
}

#[test]
fn conversions_keep_the_message_and_class_the_error_transient() {
    let io: ToolError = std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer").into();
    assert_eq!(io.class, ErrorClass::Transient);
    assert_eq!(io.message, "no answer");
}

/// Echoes a result it is given, to check how results read as text.
struct Echo;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    result: Value,
}

impl WriteTool for Echo {
    type Args = EchoArgs;
    type Output = Value;
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Returns its argument."
    }
    async fn call(&self, _ctx: WriteContext, args: EchoArgs) -> Result<Value, ToolError> {
        Ok(args.result)
    }
}

#[tokio::test]
async fn a_result_reads_as_compact_json_first_and_on_replay_and_a_string_as_itself() {
    let store = Arc::new(MemoryStore::new());
    let tb = Toolbox::builder(store)
        .scope("run-1")
        .write(Echo)
        .build()
        .unwrap();
    let results = [
        json!({"b": [1, 2.5, -0.0, 1e300, null, true], "a": "é \"q\" \\ \n \u{1}", "c": {}}),
        json!([]),
        json!(12345678901234567u64),
        json!("plain text, not quoted"),
    ];
    for result in results {
        let expected = match &result {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let first = tb.call("echo", json!({"result": result})).await;
        let again = tb.call("echo", json!({"result": result})).await;
        assert_eq!(first.outcome, Outcome::Executed);
        assert_eq!(again.outcome, Outcome::Replayed);
        assert_eq!(first.content, expected);
        assert_eq!(again.content, expected);
        assert_eq!(first.value.map(Into::into), Some(result.clone()));
        assert_eq!(again.value.map(Into::into), Some(result));
    }
}

#[tokio::test]
async fn an_entry_records_the_scope_its_call_was_made_in() {
    let store = Arc::new(MemoryStore::new());
    let tb = Toolbox::builder(store.clone())
        .scope("run-1")
        .write(SendEmail::default())
        .build()
        .unwrap();
    let own = tb
        .call("send_email", json!({"to": "ada@example.com"}))
        .await;
    let other = tb
        .call_in("session-9", "send_email", json!({"to": "ada@example.com"}))
        .await;
    for (answer, scope) in [(own, "run-1"), (other, "session-9")] {
        let key = answer.key.expect("a write call has a key");
        let entry = toolonce::Store::get(&*store, &key).await.unwrap().unwrap();
        assert_eq!(entry.about.scope.as_deref(), Some(scope));
        assert_eq!(entry.about.tool.as_deref(), Some("send_email"));
    }
}

#[tokio::test]
async fn a_field_the_tool_ignores_does_not_make_another_operation() {
    let tool = SendEmail::default();
    let runs = tool.runs.clone();
    let toolbox = toolbox(tool);
    let first = toolbox
        .call("send_email", json!({"to": "ada@example.com"}))
        .await;
    // The model adds a field the tool's type does not have: the tool cannot tell the calls
    // apart, so they are one operation.
    let second = toolbox
        .call(
            "send_email",
            json!({"to": "ada@example.com", "note": "retrying"}),
        )
        .await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(second.outcome, Outcome::Replayed);
    assert_eq!(second.key, first.key);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // A field the tool reads still makes another operation.
    let other = toolbox
        .call(
            "send_email",
            json!({"to": "bob@example.com", "note": "retrying"}),
        )
        .await;
    assert_eq!(other.outcome, Outcome::Executed);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
