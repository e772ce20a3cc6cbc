//! The scripted model (the turns of each scenario, the tool calls they ask for) and the agent
//! loop that runs them, with its checkpoint file.

use std::path::Path;

use anyhow::Context;
use serde_json::{Value, json};
use toolonce::{OperationKey, Outcome};

use super::tools::Tools;

/// One `tool_use` block of a model reply.
pub(super) struct ToolCall {
    /// A new one for every attempt: the operation key deliberately ignores it.
    id: &'static str,
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

/// The agent loop. Each turn runs the model's tool calls (in parallel, as agents do) and sends
/// the results back; when that request times out, the turn is retried. With a checkpoint file,
/// the loop records the turn it is about to run before running its tools, so a resumed run
/// starts again before the tool calls of an unfinished turn.
pub(super) async fn run_agent(
    script: &[Turn],
    tools: &Tools,
    from_turn: usize,
    checkpoint: Option<&Path>,
) -> anyhow::Result<Vec<(Outcome, Option<OperationKey>)>> {
    let mut outcomes = Vec::new();
    let mut timed_out = vec![false; script.len()];
    let mut turn = from_turn;
    while let Some(current) = script.get(turn) {
        if let Some(path) = checkpoint {
            std::fs::write(path, json!({"next_turn": turn}).to_string())?;
        }
        let answers = futures_util::future::join_all(
            current
                .calls
                .iter()
                .map(|c| async move { (c.id, tools.call(c).await) }),
        )
        .await;
        for (id, answer) in answers {
            outcomes.extend(answer.with_context(|| format!("tool call {id}"))?);
        }
        if current.times_out_once && !timed_out[turn] {
            // The model provider timed out on the request carrying the results: retry the turn.
            timed_out[turn] = true;
            continue;
        }
        turn += 1;
    }
    if let Some(path) = checkpoint {
        std::fs::write(path, json!({"next_turn": turn}).to_string())?;
    }
    Ok(outcomes)
}

pub(super) fn load_checkpoint(path: &Path) -> anyhow::Result<usize> {
    let text = std::fs::read_to_string(path).context("the crashed run left no checkpoint")?;
    let doc: Value = serde_json::from_str(&text)?;
    doc["next_turn"]
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .context("the checkpoint has no next_turn")
}
