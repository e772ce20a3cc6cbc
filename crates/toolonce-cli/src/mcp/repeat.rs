//! The repeat ordinal over MCP (see [`toolonce::repeat`]): the proxy adds the optional
//! argument to the listed `inputSchema` of every write tool the client sees, takes it out of
//! each write call's arguments before keying and forwarding (the server never sees it), and
//! tells the model of every replay, in an added text content item and in `_meta`, when the
//! identical call took effect and how to repeat it on purpose ([`note`](super::note)).
//!
//! A tool whose schema already has a property of that name keeps its own and gets none (the
//! proxy logs a warning naming it), and its calls keep the member; a tool that passes through
//! (`readOnlyHint`, `idempotentHint`, `kind = "read"`) gets none either.

use serde_json::Value;
use toolonce::repeat::{self, InvalidRepeat, Repeat};

use super::jsonrpc;
use super::tools::Tools;

/// A write call's ordinal, taken out of its arguments.
#[derive(Debug)]
pub(super) struct Taken {
    /// The tool's repeat argument, if it has one (see [`Tools::repeat_argument`]).
    pub(super) argument: Option<String>,
    /// The ordinal, or why the value given is not one.
    pub(super) repeat: Result<Repeat, InvalidRepeat>,
    /// The request to forward, when the member was there to take out (else the client's own
    /// bytes are forwarded as they came).
    pub(super) forwarded: Option<Vec<u8>>,
}

/// Takes the repeat argument of `tool` out of `arguments` and, if it was there, out of the
/// request `message` that is forwarded.
pub(super) fn take(tools: &Tools, tool: &str, arguments: &mut Value, message: &Value) -> Taken {
    let Some(argument) = tools.repeat_argument(tool) else {
        return Taken {
            argument: None,
            repeat: Ok(Repeat::FIRST),
            forwarded: None,
        };
    };
    let given = arguments.get(&argument).is_some();
    let repeat = repeat::take(arguments, &argument);
    let forwarded = given.then(|| {
        let mut message = message.clone();
        if let Some(args) = message.pointer_mut("/params/arguments") {
            *args = arguments.clone();
        }
        jsonrpc::line(&message)
    });
    Taken {
        argument: Some(argument),
        repeat,
        forwarded,
    }
}

/// Adds the repeat argument to the `inputSchema` of every write tool in the `tools/list`
/// `response`; whether it changed anything.
pub(super) fn add_to_listing(tools: &Tools, response: &mut Value) -> bool {
    let Some(listed) = response
        .pointer_mut("/result/tools")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let mut changed = false;
    for tool in listed {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            continue;
        };
        let Some(argument) = tools.repeat_argument(name) else {
            continue;
        };
        if let Some(schema) = tool.get_mut("inputSchema") {
            changed |= repeat::add_to_schema(schema, &argument);
        }
    }
    changed
}
