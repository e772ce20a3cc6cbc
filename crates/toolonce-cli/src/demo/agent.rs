//! The agent loop that runs the scripted model's turns, with its checkpoint file.

use std::path::Path;

use anyhow::Context;
use serde_json::{Value, json};
use toolonce::{OperationKey, Outcome};

use super::model::Turn;
use super::tools::Tools;

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
