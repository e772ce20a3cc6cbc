//! The scripted model: the turns of each scenario and the tool calls they ask for.

use serde_json::{Value, json};

/// One `tool_use` block of a model reply.
pub(super) struct ToolCall {
    /// A new one for every attempt: the operation key deliberately ignores it.
    pub(super) id: &'static str,
    pub(super) tool: &'static str,
    pub(super) args: Value,
}

/// One turn of the scripted model: the tool calls it asks for, and whether the request that
/// carries their results back to the model provider times out once.
pub(super) struct Turn {
    pub(super) calls: Vec<ToolCall>,
    pub(super) times_out_once: bool,
}

pub(super) fn turn(calls: Vec<ToolCall>) -> Turn {
    Turn {
        calls,
        times_out_once: false,
    }
}

pub(super) fn charge(id: &'static str, card: &str) -> ToolCall {
    ToolCall {
        id,
        tool: "charge_card",
        args: json!({"payment": {"card": card, "cents": 4200}}),
    }
}

pub(super) fn email(id: &'static str) -> ToolCall {
    ToolCall {
        id,
        tool: "send_email",
        args: json!({"to": "ada@example.com", "subject": "Your receipt"}),
    }
}
