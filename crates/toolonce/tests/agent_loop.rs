//! The Rust quickstart (docs/rust.md): `examples/agent_loop.rs` runs here, its outcomes are
//! checked, and the document's copy of it is checked against the file so the two cannot drift
//! apart.

#[path = "../examples/agent_loop.rs"]
#[allow(dead_code, unreachable_pub)]
mod agent_loop;

use std::sync::Arc;

use agent_loop::{FakeModel, Payments, run_agent};
use toolonce::{MemoryStore, Outcome, Store};

#[tokio::test]
async fn the_quickstart_charges_once_replays_the_duplicate_and_reports_the_decline() {
    let payments = Payments::default();
    let replies = run_agent(
        Arc::new(MemoryStore::new()),
        payments.clone(),
        FakeModel::scripted(),
    )
    .await
    .unwrap();
    let outcomes: Vec<Outcome> = replies.iter().map(|r| r.outcome()).collect();
    assert_eq!(
        outcomes,
        [Outcome::Executed, Outcome::Replayed, Outcome::Executed]
    );
    // The duplicate got the first answer under its own tool_use id.
    assert_eq!(replies[0].json["tool_use_id"], "toolu_01");
    assert_eq!(replies[1].json["tool_use_id"], "toolu_02");
    // Its recorded result first, as the first answer had it, then the note for the model.
    assert_eq!(
        replies[1].json["content"][0]["text"],
        replies[0].json["content"]
    );
    let note = replies[1].json["content"][1]["text"].as_str().unwrap();
    assert!(note.starts_with("Already done: "), "{note}");
    assert!(replies[0].json.get("is_error").is_none());
    // The payment provider charged once, under the operation key.
    let key = replies[0].key().expect("a write call has a key");
    assert_eq!(replies[1].key(), Some(key));
    assert_eq!(payments.charged_keys(), [key.as_str()]);
    // The decline is a permanent error, shown to the model as one.
    assert_eq!(replies[2].json["is_error"], true);
    assert!(
        replies[2].result.content.contains("card declined"),
        "{}",
        replies[2].result.content
    );
}

#[tokio::test]
async fn the_quickstart_resumed_on_its_store_replays_everything_and_charges_nothing_more() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let payments = Payments::default();
    let first = run_agent(store.clone(), payments.clone(), FakeModel::scripted())
        .await
        .unwrap();
    // The same run again on the same store, as after a crash and resume.
    let resumed = run_agent(store, payments.clone(), FakeModel::scripted())
        .await
        .unwrap();
    let outcomes: Vec<Outcome> = resumed.iter().map(|r| r.outcome()).collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Replayed,
            Outcome::Replayed,
            Outcome::ReplayedFailure
        ]
    );
    // Every answer replays the recorded text, with the note after it.
    for (before, after) in first.iter().zip(&resumed) {
        assert_eq!(before.result.content, after.result.content);
        assert_eq!(after.json["content"][0]["text"], after.result.content);
        let note = after.result.replay.as_ref().expect("a replay has a note");
        assert_eq!(after.json["content"][1]["text"], note.text);
    }
    assert_eq!(payments.charged_keys().len(), 1);
}

const EXAMPLE: &str = include_str!("../examples/agent_loop.rs");

/// The body of the first fenced block of `lang` in docs/rust.md's Quickstart section.
fn quickstart_block(lang: &str) -> &'static str {
    let readme = include_str!("../../../docs/rust.md");
    let section = readme
        .split_once("\n## Quickstart (library)\n")
        .expect("docs/rust.md has a \"## Quickstart (library)\" section")
        .1;
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .split_once(&format!("\n```{lang}\n"))
        .unwrap_or_else(|| panic!("the Quickstart has a ```{lang} block"))
        .1
        .split_once("\n```\n")
        .unwrap_or_else(|| panic!("the ```{lang} block is closed"))
        .0
}

#[test]
fn the_rust_quickstart_is_the_example_file_verbatim() {
    let example = EXAMPLE;
    let quoted = quickstart_block("rust");
    if quoted.trim_end() != example.trim_end() {
        let line = quoted
            .lines()
            .zip(example.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "at the end".to_owned(), |i| format!("at line {}", i + 1));
        panic!(
            "docs/rust.md's Quickstart differs from crates/toolonce/examples/agent_loop.rs {line}: \
             paste the file into its ```rust block"
        );
    }
}

#[test]
fn the_rust_quickstart_lists_every_crate_the_example_uses() {
    let dependencies = quickstart_block("toml");
    let listed: Vec<String> = dependencies
        .lines()
        .filter_map(|line| line.split_once(" = "))
        .map(|(name, _)| name.trim().replace('-', "_"))
        .collect();
    // The roots of the paths the example names (`serde_json::json`, `tokio::main`): every one
    // but `std` and the example's own types must be a dependency docs/rust.md lists.
    let mut missing = Vec::new();
    for (i, _) in EXAMPLE.match_indices("::") {
        let before = &EXAMPLE[..i];
        let root_start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |j| j + 1);
        let root = &before[root_start..];
        let is_path_root = !before[..root_start].ends_with("::");
        if is_path_root
            && root.starts_with(|c: char| c.is_ascii_lowercase())
            && root != "std"
            && !listed.iter().any(|name| name == root)
            && !missing.contains(&root)
        {
            missing.push(root);
        }
    }
    assert!(
        missing.is_empty(),
        "the example uses {missing:?}, which docs/rust.md's [dependencies] do not list"
    );
}
