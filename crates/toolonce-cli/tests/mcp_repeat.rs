//! The repeat ordinal through `toolonce mcp` (issue 43), in front of the test MCP server: the
//! listing shows write tools the optional argument, the proxy takes it out before keying and
//! forwarding (the server never sees it), a repeat on purpose runs once more and its retry
//! replays, every refusal vector of the shared data is refused with nothing sent, a tool with a
//! `repeat` of its own keeps it, and every replay tells the model when and how to repeat.

#[path = "support/mcp_peer.rs"]
mod mcp_peer;

use mcp_peer::{Peer, Spawn, is_error, text};
use serde_json::{Value, json};
use toolonce::repeat::Repeat;

fn ready(spawn: Spawn) -> Peer {
    let mut peer = spawn
        .arg("--scope")
        .arg("run-1")
        .arg("--server-id")
        .arg("test")
        .start();
    peer.initialize();
    peer
}

fn listed(peer: &mut Peer, name: &str) -> Value {
    let tools = peer.list_tools();
    tools
        .into_iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("{name} is listed"))
}

fn key_of(args: &Value, repeat: u64) -> String {
    let repeat = Repeat::new(repeat).unwrap();
    let derived = toolonce::key::derive_repeat("run-1", "test/charge", args, None, repeat);
    derived.unwrap().key.to_string()
}

/// Whether any line the server received holds `"repeat"`.
fn server_saw_repeat(peer: &Peer) -> bool {
    peer.server_received()
        .iter()
        .any(|line| String::from_utf8_lossy(line).contains("\"repeat\""))
}

#[test]
fn the_listing_shows_the_argument_on_write_tools_only_and_a_tool_keeps_its_own() {
    let mut peer = ready(Spawn::proxy());
    let charge = listed(&mut peer, "charge");
    let shown = &charge["inputSchema"]["properties"]["repeat"];
    assert_eq!(shown, &toolonce::repeat::schema_property(), "{charge}");
    // The server's own properties are kept beside it.
    assert_eq!(
        charge["inputSchema"]["properties"]["amount"],
        json!({"type": "number"})
    );
    for pass_through in ["lookup", "idem_tool"] {
        let tool = listed(&mut peer, pass_through);
        assert!(
            tool["inputSchema"].pointer("/properties/repeat").is_none(),
            "{tool}"
        );
    }
    let plain = listed(&mut peer, "plain");
    assert_eq!(
        plain["inputSchema"]["properties"]["repeat"]["type"],
        "integer"
    );
    let tally = listed(&mut peer, "tally");
    assert_eq!(
        tally["inputSchema"]["properties"]["repeat"],
        json!({"type": "integer"})
    );
    peer.eventually("the proxy warns about tally's own repeat", |p| {
        p.stderr()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("tally") && l.contains("keeps its own"))
    });
}

#[test]
fn a_repeat_on_purpose_is_forwarded_once_more_without_the_argument_and_its_retry_replays() {
    let mut peer = ready(Spawn::proxy());
    let args = json!({"amount": 500, "to": "bob"});
    let first = peer.call("charge", args.clone());
    let mut twice = args.clone();
    twice["repeat"] = json!(2);
    let second = peer.call("charge", twice.clone());
    let retry = peer.call("charge", twice);
    assert!(!is_error(&first) && !is_error(&second), "{first} {second}");
    assert_eq!(
        second["result"]["_meta"].get("toolonce/outcome"),
        None,
        "{second}"
    );
    assert_eq!(retry["result"]["_meta"]["toolonce/outcome"], "replayed");
    // Run twice, with the arguments as the client gave them minus the ordinal, under the key of
    // each ordinal; the server never saw `repeat`.
    let executions = peer.executions();
    assert_eq!(executions.len(), 2, "{executions:?}");
    assert_eq!((&executions[0].1, &executions[1].1), (&args, &args));
    assert_eq!(executions[0].2, key_of(&args, 1));
    assert_eq!(executions[1].2, key_of(&args, 2));
    assert!(!server_saw_repeat(&peer));
    // The replay: the recorded content, then the note; the time in `_meta`.
    let content = retry["result"]["content"].as_array().unwrap();
    assert_eq!(content[0], second["result"]["content"][0]);
    let note = content.last().unwrap()["text"].as_str().unwrap();
    let at = retry["result"]["_meta"]["toolonce/recorded_at"]
        .as_str()
        .expect("recorded_at");
    let key = key_of(&args, 2);
    assert!(
        note.starts_with(&format!(
            "Already done: an identical call of `charge` in this scope took effect at {at} \
             (operation {key})."
        )),
        "{note}"
    );
    assert!(
        note.ends_with("call `charge` with the same arguments and \"repeat\": 3."),
        "{note}"
    );
    assert_eq!(at.len(), "2026-12-07T12:30:01Z".len(), "{at}");
}

#[test]
fn every_refused_ordinal_is_answered_over_mcp_and_nothing_reaches_the_server() {
    let mut peer = ready(Spawn::proxy());
    let file: Value =
        serde_json::from_str(include_str!("../../toolonce/tests/data/key_repeats.json"))
            .expect("the vectors are JSON");
    let mut refused = 0;
    for vector in file["vectors"].as_array().unwrap() {
        if vector.get("refused").is_none() {
            continue;
        }
        refused += 1;
        // Sent as the vector's own text, so an integer beyond 64 bits arrives as written.
        let id = peer.id();
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"charge","arguments":{}}}}}"#,
            vector["args_json"].as_str().unwrap()
        );
        peer.send_line(line.as_bytes());
        let answer = peer.response(&json!(id));
        assert!(is_error(&answer), "{vector}: {answer}");
        assert_eq!(
            answer["result"]["_meta"]["toolonce/outcome"], "invalid_arguments",
            "{answer}"
        );
        let text = text(&answer);
        assert!(
            text.starts_with("Not executed: `repeat` must be a whole number from 1 to 1000 (got "),
            "{vector}: {text}"
        );
        assert!(text.contains("Call `charge` without it"), "{text}");
    }
    assert!(refused >= 10);
    assert_eq!(peer.count("charge"), 0, "nothing ran");
}

#[test]
fn a_tool_with_its_own_repeat_gets_it_forwarded_and_is_told_it_cannot_repeat() {
    let mut peer = ready(Spawn::proxy());
    peer.list_tools();
    let two = peer.call("tally", json!({"repeat": 2}));
    let three = peer.call("tally", json!({"repeat": 3}));
    let again = peer.call("tally", json!({"repeat": 2}));
    assert!(!is_error(&two) && !is_error(&three));
    assert_eq!(again["result"]["_meta"]["toolonce/outcome"], "replayed");
    let args: Vec<Value> = peer
        .executions()
        .into_iter()
        .map(|(_, args, _)| args)
        .collect();
    assert_eq!(args, [json!({"repeat": 2}), json!({"repeat": 3})]);
    let note = again["result"]["content"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["text"]
        .clone();
    let note = note.as_str().unwrap();
    assert!(
        note.ends_with("It cannot be performed again with identical arguments in this scope."),
        "{note}"
    );
}

#[test]
fn without_the_argument_repeat_is_the_servers_and_a_config_can_rename_it() {
    let mut off = ready(Spawn::proxy().arg("--no-repeat-argument"));
    assert!(
        listed(&mut off, "charge")["inputSchema"]
            .pointer("/properties/repeat")
            .is_none()
    );
    let first = off.call("charge", json!({"amount": 1, "repeat": 2}));
    let again = off.call("charge", json!({"amount": 1, "repeat": 2}));
    assert_eq!(
        again["result"]["_meta"]["toolonce/outcome"], "replayed",
        "{first}"
    );
    assert_eq!(off.executions()[0].1, json!({"amount": 1, "repeat": 2}));

    let mut renamed = ready(Spawn::proxy().config("[tools.charge]\nrepeat_argument = \"again\"\n"));
    let charge = listed(&mut renamed, "charge");
    assert!(
        charge["inputSchema"].pointer("/properties/again").is_some(),
        "{charge}"
    );
    assert!(
        charge["inputSchema"]
            .pointer("/properties/repeat")
            .is_none(),
        "{charge}"
    );
    assert!(
        listed(&mut renamed, "plain")["inputSchema"]
            .pointer("/properties/repeat")
            .is_some()
    );
    renamed.call("charge", json!({"amount": 1}));
    renamed.call("charge", json!({"amount": 1, "again": 2}));
    assert_eq!(renamed.count("charge"), 2);
    let bad = renamed.call("charge", json!({"amount": 1, "again": "2"}));
    assert!(
        text(&bad).starts_with("Not executed: `again` must be"),
        "{bad}"
    );
    assert_eq!(renamed.count("charge"), 2);
}

#[test]
fn deduplicated_idempotent_tools_get_the_argument_and_reads_still_pass_through() {
    let mut peer = ready(Spawn::proxy().arg("--dedupe-idempotent"));
    let idem = listed(&mut peer, "idem_tool");
    assert!(
        idem["inputSchema"].pointer("/properties/repeat").is_some(),
        "{idem}"
    );
    assert!(
        listed(&mut peer, "lookup")["inputSchema"]
            .pointer("/properties/repeat")
            .is_none()
    );
    // v1, v2, v1: the third is the first again, unless said to be on purpose.
    for v in [1, 2, 1] {
        peer.call("idem_tool", json!({"v": v}));
    }
    assert_eq!(peer.count("idem_tool"), 2, "the second v1 replays");
    let again = peer.call("idem_tool", json!({"v": 1, "repeat": 2}));
    assert_eq!(
        again["result"]["_meta"].get("toolonce/outcome"),
        None,
        "{again}"
    );
    assert_eq!(peer.count("idem_tool"), 3);
    peer.call("lookup", json!({}));
    peer.call("lookup", json!({}));
    assert_eq!(peer.count("lookup"), 2, "reads run every time");
}
