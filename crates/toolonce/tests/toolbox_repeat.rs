//! The repeat ordinal through the toolbox (issue 43): the argument in both providers' tool
//! definitions, taken out before the tool sees the arguments, a repeat on purpose run once more
//! and its retries replayed, every refusal vector of `tests/data/key_repeats.json` refused
//! with nothing run, and the note every replay tells the model, in both formats.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolonce::repeat::{self, Repeat};
use toolonce::{MemoryStore, Outcome, ToolError, Toolbox, WriteContext, WriteOptions, WriteTool};

/// A payment tool that takes any arguments and keeps what it was called with.
#[derive(Clone, Default)]
struct Pay {
    calls: Arc<Mutex<Vec<Value>>>,
}

impl Pay {
    fn calls(&self) -> Vec<Value> {
        self.calls.lock().unwrap().clone()
    }
}

impl WriteTool for Pay {
    type Args = Value;
    type Output = Value;
    fn name(&self) -> &str {
        "pay"
    }
    fn description(&self) -> &str {
        "Pay someone."
    }
    async fn call(&self, ctx: WriteContext, args: Value) -> Result<Value, ToolError> {
        self.calls.lock().unwrap().push(args.clone());
        if args["to"] == "nobody" {
            return Err(ToolError::permanent("no such payee"));
        }
        Ok(json!({"paid": args, "key": ctx.key().as_str()}))
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Counter {
    /// How many times to count: the tool's own `repeat`.
    repeat: u32,
}

/// A tool whose schema has a property named `repeat` of its own.
#[derive(Clone, Default)]
struct Count {
    calls: Arc<Mutex<Vec<u32>>>,
}

impl WriteTool for Count {
    type Args = Counter;
    type Output = u32;
    fn name(&self) -> &str {
        "count"
    }
    fn description(&self) -> &str {
        "Count."
    }
    async fn call(&self, _: WriteContext, args: Counter) -> Result<u32, ToolError> {
        self.calls.lock().unwrap().push(args.repeat);
        Ok(args.repeat)
    }
}

fn toolbox(pay: &Pay, options: WriteOptions) -> Toolbox {
    Toolbox::builder(Arc::new(MemoryStore::new()))
        .scope("run-1")
        .write_with(pay.clone(), options)
        .write(Count::default())
        .build()
        .unwrap()
}

fn tool_use(id: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": "pay", "input": input})
}

fn tool_call(id: &str, arguments: Value) -> Value {
    json!({"id": id, "type": "function",
           "function": {"name": "pay", "arguments": arguments.to_string()}})
}

#[test]
fn both_formats_show_write_tools_the_repeat_argument_unless_it_is_off_or_their_own() {
    let pay = Pay::default();
    let tb = toolbox(&pay, WriteOptions::new());
    let anthropic = tb.anthropic_tools();
    let openai = tb.openai_tools();
    assert_eq!(
        anthropic[0]["input_schema"]["properties"]["repeat"],
        repeat::schema_property()
    );
    let shown = &openai[0]["function"]["parameters"]["properties"]["repeat"];
    assert_eq!(shown["type"], "integer");
    assert!(
        shown["description"]
            .as_str()
            .unwrap()
            .starts_with("Leave this out the first time.")
    );
    // Optional: never required.
    assert!(anthropic[0]["input_schema"].get("required").is_none());
    // The tool with a `repeat` of its own keeps it as it declared it.
    let own = &anthropic[1]["input_schema"]["properties"]["repeat"];
    assert_eq!(
        own["description"],
        "How many times to count: the tool's own `repeat`."
    );

    let off = toolbox(&pay, WriteOptions::new().repeat_argument(None));
    assert!(
        off.anthropic_tools()[0]["input_schema"]["properties"]
            .get("repeat")
            .is_none()
    );
    let renamed = toolbox(&pay, WriteOptions::new().repeat_argument(Some("again")));
    let properties = &renamed.openai_tools()[0]["function"]["parameters"]["properties"];
    assert!(properties.get("again").is_some() && properties.get("repeat").is_none());
}

#[tokio::test]
async fn a_repeat_on_purpose_runs_once_more_and_its_retry_replays_it() {
    let pay = Pay::default();
    let tb = toolbox(&pay, WriteOptions::new());
    let bob = json!({"to": "bob", "cents": 500});
    let first = tb
        .call_anthropic_with_outcome(&tool_use("t1", bob.clone()))
        .await;
    let mut twice = bob.clone();
    twice["repeat"] = json!(2);
    let second = tb
        .call_anthropic_with_outcome(&tool_use("t2", twice.clone()))
        .await;
    let retry = tb.call_anthropic_with_outcome(&tool_use("t3", twice)).await;
    let plain_retry = tb
        .call_anthropic_with_outcome(&tool_use("t4", bob.clone()))
        .await;
    let outcomes: Vec<Outcome> = [&first, &second, &retry, &plain_retry]
        .iter()
        .map(|r| r.outcome())
        .collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Executed,
            Outcome::Executed,
            Outcome::Replayed,
            Outcome::Replayed
        ]
    );
    // The tool never sees the ordinal: it ran twice with the same arguments, under two keys.
    assert_eq!(pay.calls(), [bob.clone(), bob.clone()]);
    assert_ne!(first.key(), second.key());
    assert_eq!(retry.key(), second.key());
    assert_eq!(plain_retry.key(), first.key());
    let want = toolonce::key::derive_repeat("run-1", "pay", &bob, None, Repeat::new(2).unwrap());
    assert_eq!(second.key(), Some(&want.unwrap().key));
    // Each retry is told how to go one further on purpose.
    let hint = |reply: &toolonce::Reply| reply.result.replay.clone().unwrap().text;
    assert!(
        hint(&retry).ends_with("the same arguments and \"repeat\": 3."),
        "{}",
        hint(&retry)
    );
    assert!(
        hint(&plain_retry).ends_with("\"repeat\": 2."),
        "{}",
        hint(&plain_retry)
    );
}

#[tokio::test]
async fn every_refused_ordinal_is_answered_as_invalid_and_nothing_runs() {
    let pay = Pay::default();
    let tb = toolbox(&pay, WriteOptions::new());
    let file: Value =
        serde_json::from_str(include_str!("data/key_repeats.json")).expect("the vectors are JSON");
    let mut refused = 0;
    for vector in file["vectors"].as_array().unwrap() {
        if vector.get("refused").is_none() {
            continue;
        }
        refused += 1;
        let args: Value = serde_json::from_str(vector["args_json"].as_str().unwrap()).unwrap();
        let reply = tb
            .call_anthropic_with_outcome(&tool_use("t", args.clone()))
            .await;
        assert_eq!(reply.outcome(), Outcome::InvalidArguments, "{vector}");
        assert_eq!(reply.json["is_error"], true);
        let text = reply.json["content"].as_str().unwrap();
        assert!(
            text.starts_with("Not executed: `repeat` must be a whole number from 1 to 1000 (got "),
            "{text}"
        );
        assert!(
            text.contains("Nothing was claimed or run. Call `pay` without it"),
            "{text}"
        );
        assert!(reply.key().is_none());
        // The same over OpenAI, where the arguments arrive as text.
        let reply = tb.call_openai_with_outcome(&tool_call("c", args)).await;
        assert_eq!(reply.outcome(), Outcome::InvalidArguments, "{vector}");
    }
    assert!(refused >= 10, "{refused} refusal vectors");
    assert!(pay.calls().is_empty(), "ran: {:?}", pay.calls());
}

#[tokio::test]
async fn an_anthropic_replay_carries_the_recorded_result_then_the_note() {
    let pay = Pay::default();
    let tb = toolbox(&pay, WriteOptions::new());
    let args = json!({"to": "bob", "cents": 500});
    let before = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
    let first = tb
        .call_anthropic_with_outcome(&tool_use("t1", args.clone()))
        .await;
    let again = tb.call_anthropic_with_outcome(&tool_use("t2", args)).await;
    assert!(first.result.replay.is_none());
    assert_eq!(first.json["content"], first.result.content);
    let content = again.json["content"].as_array().expect("two text blocks");
    assert_eq!(content.len(), 2);
    assert_eq!(
        content[0],
        json!({"type": "text", "text": first.result.content})
    );
    assert_eq!(
        again.result.content, first.result.content,
        "the recorded result is unchanged"
    );
    let note = again.result.replay.clone().unwrap();
    let at = note.recorded_at.expect("the memory store records when");
    assert!(at >= before);
    let key = again.key().unwrap();
    let want = format!(
        "Already done: an identical call of `pay` in this scope took effect at {} (operation \
         {key}). This is its recorded result; nothing ran again. Do not call it again to retry. \
         Only if you mean to perform this same action once more on purpose, call `pay` with the \
         same arguments and \"repeat\": 2.",
        toolonce::layer::utc_seconds(at)
    );
    assert_eq!(note.text, want);
    assert_eq!(content[1], json!({"type": "text", "text": want}));
}

#[tokio::test]
async fn an_openai_replayed_failure_says_it_failed_and_a_tool_without_the_argument_cannot_repeat() {
    let pay = Pay::default();
    let tb = toolbox(&pay, WriteOptions::new().repeat_argument(None));
    let args = json!({"to": "nobody", "repeat": 2});
    let first = tb
        .call_openai_with_outcome(&tool_call("c1", args.clone()))
        .await;
    let again = tb
        .call_openai_with_outcome(&tool_call("c2", args.clone()))
        .await;
    assert_eq!(again.outcome(), Outcome::ReplayedFailure);
    // Off: `repeat` is an ordinary argument, which the tool gets.
    assert_eq!(pay.calls(), [args]);
    assert_eq!(first.json["content"], "no such payee");
    let parts = again.json["content"].as_array().expect("two text parts");
    assert_eq!(parts[0], json!({"type": "text", "text": "no such payee"}));
    let note = parts[1]["text"].as_str().unwrap();
    assert!(
        note.starts_with("Already tried: an identical call of `pay` in this scope failed at "),
        "{note}"
    );
    assert!(
        note.ends_with(
            "This is its recorded error; nothing ran again. It cannot be performed again with \
         identical arguments in this scope."
        ),
        "{note}"
    );
}

#[tokio::test]
async fn a_tool_with_its_own_repeat_property_gets_it_and_no_ordinal() {
    let logs = toolonce_testsupport::Logs::capture();
    let count = Count::default();
    let tb = Toolbox::builder(Arc::new(MemoryStore::new()))
        .scope("run-1")
        .write(count.clone())
        .build()
        .unwrap();
    let call = |n| tb.call("count", json!({"repeat": n}));
    assert_eq!(call(2).await.outcome, Outcome::Executed);
    assert_eq!(call(3).await.outcome, Outcome::Executed);
    let again = call(2).await;
    assert_eq!(again.outcome, Outcome::Replayed);
    assert_eq!(*count.calls.lock().unwrap(), [2, 3]);
    let note = again.replay.unwrap().text;
    assert!(
        note.ends_with("It cannot be performed again with identical arguments in this scope."),
        "{note}"
    );
    // The operator is told, naming the tool.
    let warned = logs.all();
    let line = warned
        .lines()
        .find(|l| l.contains("keeps its own and gets no repeat argument"));
    let line = line.expect("a warning");
    assert!(
        line.contains("WARN") && line.contains("tool=\"count\""),
        "{line}"
    );
}

#[tokio::test]
async fn null_is_the_first_time_as_openai_strict_mode_sends_it() {
    let pay = Pay::default();
    let tb = toolbox(&pay, WriteOptions::new());
    let first = tb.call("pay", json!({"to": "bob", "repeat": null})).await;
    let again = tb.call("pay", json!({"to": "bob", "repeat": 1})).await;
    let plain = tb.call("pay", json!({"to": "bob"})).await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(again.outcome, Outcome::Replayed);
    assert_eq!(plain.outcome, Outcome::Replayed);
    assert_eq!(pay.calls(), [json!({"to": "bob"})]);
}
