//! A replayed result reads exactly as the first call showed it, through a toolbox on each
//! store. Code, not a store case (tests/data/store_cases/README.md): it runs a toolbox, not
//! the `Store` API.

use super::*;

/// A unique scope for the toolbox, so that its entries meet no other test's.
fn unique_scope(name: &str) -> String {
    format!(
        "{name}-{}-{}",
        std::process::id(),
        OwnerToken::generate().as_str()
    )
}

/// Returns the result it is asked for, to see how each result reads when it is replayed.
struct Echo;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    result: serde_json::Value,
}

impl toolonce::WriteTool for Echo {
    type Args = EchoArgs;
    type Output = serde_json::Value;
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Returns its argument."
    }
    async fn call(
        &self,
        _ctx: toolonce::WriteContext,
        args: EchoArgs,
    ) -> Result<serde_json::Value, ToolError> {
        Ok(args.result)
    }
}

/// A store may hand a replayed result back as the text it kept or as a value; through a
/// toolbox either way reads exactly as the first call did, for results in the form serde_json
/// writes plainly (sorted members, integers, strings without escapes, as deep as a result may
/// nest) and for every other (fractions, escapes, numbers past 15 digits, `-0.0`).
pub async fn a_replayed_result_reads_exactly_as_the_first_call_showed_it(store: Arc<dyn Store>) {
    let nested = |levels: usize, inner: serde_json::Value| {
        (0..levels - 1).fold(json!([inner]), |v, _| json!([v]))
    };
    let results = [
        json!({"cents": 500, "receipt": "re_000000000001", "status": "succeeded"}),
        json!("sent"),
        json!(""),
        json!(-42),
        json!(null),
        json!({"a": [true, false, {}, []], "é": "✓ 🦀 / \u{7f}"}),
        nested(toolonce::store::MAX_STORED_DEPTH, json!(1)),
        json!({"ratio": 0.1, "text": "a \"quoted\" \\ line\n\u{1}"}),
        json!([123456789012345678u64, -9007199254740993i64, -0.0, 1e300]),
        nested(toolonce::store::MAX_STORED_DEPTH, json!(2.5)),
    ];
    let toolbox = toolonce::Toolbox::builder(store)
        .scope(unique_scope("replayed-text"))
        .write(Echo)
        .build()
        .unwrap();
    for result in results {
        let shown = match &result {
            serde_json::Value::String(s) => s.clone(),
            other => serde_json::to_string(other).unwrap(),
        };
        let first = toolbox.call("echo", json!({"result": result})).await;
        let again = toolbox.call("echo", json!({"result": result})).await;
        assert_eq!(first.outcome, toolonce::Outcome::Executed, "{shown}");
        assert_eq!(again.outcome, toolonce::Outcome::Replayed, "{shown}");
        assert_eq!(first.content, shown);
        assert_eq!(again.content, shown, "the replay reads as the first call");
        let value = again.value.expect("a replayed result");
        assert_eq!(value.to_json(), serde_json::to_string(&result).unwrap());
        assert_eq!(value.into_value(), result);
    }
}
