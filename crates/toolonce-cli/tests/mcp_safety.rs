//! End-to-end tests of the promises `toolonce mcp` keeps against hostile or unlucky input: a
//! write it cannot key is never forwarded, servers never share keys, classification never
//! depends on the client, failures are kept or released as configured, a store that cannot
//! work stops the proxy, replays say so, and an answer is never stored for another request.

#[path = "support/mcp_peer.rs"]
mod mcp_peer;

use std::time::Duration;

use mcp_peer::{Peer, Spawn, is_error, text, without_outcome};
use serde_json::{Value, json};

fn ready(spawn: Spawn) -> Peer {
    let mut peer = spawn.start();
    peer.initialize();
    peer.list_tools();
    peer
}

/// A `tools/call` of `charge` with `arguments` spliced in as raw bytes.
fn raw_call(id: u64, arguments: &[u8]) -> Vec<u8> {
    let mut line = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"charge","arguments":"#
    )
    .into_bytes();
    line.extend_from_slice(arguments);
    line.extend_from_slice(b"}}");
    line
}

/// What JavaScript and Python parse and serde_json refuses.
fn hostile_arguments() -> Vec<(&'static str, Vec<u8>)> {
    let deep = format!(r#"{{"d":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
    vec![
        ("lone surrogate", br#"{"to":"\ud800"}"#.to_vec()),
        ("number beyond f64", br#"{"amount":1e400}"#.to_vec()),
        ("nesting deeper than 127", deep.into_bytes()),
        ("invalid UTF-8", b"{\"to\":\"\xff\xfe ada\"}".to_vec()),
    ]
}

#[test]
fn unparsable_write_calls_sent_twice_under_two_ids_run_at_most_once() {
    let mut ran_twice = Vec::new();
    for (what, arguments) in hostile_arguments() {
        let mut peer = ready(Spawn::proxy().arg("--scope").arg("hostile"));
        for id in [1001, 1002] {
            peer.send_line(&raw_call(id, &arguments));
            let answer = peer.response(&json!(id));
            // Either a JSON-RPC error or a tool result: never silence.
            assert!(
                answer.get("error").is_some() || answer.get("result").is_some(),
                "{what}: {answer}"
            );
            if let Some(error) = answer.get("error") {
                assert_eq!(error["data"]["toolonce/outcome"], "not_executed", "{what}");
            }
        }
        if peer.count("charge") > 1 {
            ran_twice.push(what);
        }
    }
    assert!(ran_twice.is_empty(), "ran twice: {ran_twice:?}");
}

#[test]
fn unparsable_write_calls_inside_batches_run_at_most_once() {
    let mut ran_twice = Vec::new();
    for (what, arguments) in hostile_arguments() {
        let mut peer = ready(Spawn::proxy().arg("--scope").arg("hostile-batch"));
        for id in [2001u64, 2002] {
            let mut batch = b"[".to_vec();
            batch.extend_from_slice(&raw_call(id, &arguments));
            batch.extend_from_slice(b"]");
            peer.send_line(&batch);
            let line = peer.recv_line();
            let answers: Value = serde_json::from_slice(&line)
                .unwrap_or_else(|e| panic!("{what}: {e}: {}", String::from_utf8_lossy(&line)));
            assert!(answers.is_array(), "{what}: {answers}");
        }
        if peer.count("charge") > 1 {
            ran_twice.push(what);
        }
    }
    assert!(ran_twice.is_empty(), "ran twice: {ran_twice:?}");
}

/// Two ids beyond 64 bits that serde_json reads as one double: keyed as that double, the second
/// call would be answered with the first one's result, although it is another operation.
#[test]
fn integers_beyond_64_bits_are_refused_never_keyed_as_their_nearest_double() {
    let mut peer = ready(Spawn::proxy().arg("--scope").arg("inexact"));
    for (id, digits) in [
        (3001, "123456789012345678901234567890"),
        (3002, "123456789012345678901234567891"),
    ] {
        peer.send_line(&raw_call(id, format!(r#"{{"order":{digits}}}"#).as_bytes()));
        let answer = peer.response(&json!(id));
        let result = &answer["result"];
        assert_eq!(result["isError"], true, "{answer}");
        assert_eq!(
            result["_meta"]["toolonce/outcome"], "not_executed",
            "{answer}"
        );
        let said = text(&answer);
        assert!(
            said.contains(digits) && said.contains("64 bits") && said.contains("as a string"),
            "{said}"
        );
    }
    assert_eq!(peer.count("charge"), 0, "a call that cannot be keyed ran");
    // An id of 64 bits is keyed exactly, and runs.
    peer.send_line(&raw_call(3003, br#"{"order":18446744073709551615}"#));
    let answer = peer.response(&json!(3003));
    assert!(!is_error(&answer), "{answer}");
    assert_eq!(peer.count("charge"), 1);
}

#[test]
fn a_read_tool_call_the_proxy_cannot_parse_still_reaches_the_server() {
    let mut peer = ready(Spawn::proxy());
    let line = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"lookup","arguments":{"q":"\udc00"}}}"#;
    peer.send_line(line);
    let answer = peer.response(&json!(7));
    assert!(!is_error(&answer), "{answer}");
    assert_eq!(peer.count("lookup"), 1);
}

/// A store file shared by several proxies.
fn shared_store() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("toolonce.db").display());
    (dir, url)
}

/// The test server under another command line (it ignores its arguments).
fn server_named(name: &str) -> Vec<std::ffi::OsString> {
    vec![mcp_peer::test_server().into_os_string(), name.into()]
}

#[test]
fn two_servers_behind_two_proxies_sharing_a_store_and_scope_each_run_their_tool() {
    let (_dir, url) = shared_store();
    let proxy = |name: &str| {
        ready(
            Spawn::proxy()
                .arg("--store")
                .arg(&url)
                .arg("--scope")
                .arg("agent")
                .server(server_named(name)),
        )
    };
    let mut github = proxy("github");
    let mut jira = proxy("jira");
    let args = json!({"title": "login broken"});
    let a = github.call("charge", args.clone());
    let b = jira.call("charge", args);
    assert!(!is_error(&a) && !is_error(&b), "{a} {b}");
    assert_eq!(github.count("charge"), 1);
    assert_eq!(jira.count("charge"), 1, "jira's tool ran: {b}");
    assert_ne!(
        a["result"]["_meta"]["received"]["toolonce/key"],
        b["result"]["_meta"]["received"]["toolonce/key"]
    );
}

#[test]
fn the_same_server_restarted_keeps_its_keys_and_server_id_names_it() {
    let (_dir, url) = shared_store();
    let start = |name: &str, id: Option<&str>| {
        let mut spawn = Spawn::proxy()
            .arg("--store")
            .arg(&url)
            .arg("--scope")
            .arg("agent");
        if let Some(id) = id {
            spawn = spawn.arg("--server-id").arg(id);
        }
        ready(spawn.server(server_named(name)))
    };
    let args = json!({"title": "same"});
    let first = start("github", None).call("charge", args.clone());
    let mut restarted = start("github", None);
    let again = restarted.call("charge", args.clone());
    assert_eq!(
        restarted.count("charge"),
        0,
        "replayed after a restart: {again}"
    );
    // The recorded content, then the replay's note.
    let recorded = &without_outcome(&again)["result"]["content"];
    assert_eq!(recorded, &first["result"]["content"]);
    // Another command line for the same server, named alike: the same operations.
    let mut renamed = start("github-v2", Some("github"));
    let named = renamed.call("charge", args.clone());
    let mut renamed_again = start("github-v3", Some("github"));
    renamed_again.call("charge", args);
    assert_eq!(renamed.count("charge"), 1, "{named}");
    assert_eq!(renamed_again.count("charge"), 0);
}

#[test]
fn server_id_must_be_a_usable_name() {
    for bad in ["", "a/b", "x\u{0}y"] {
        let out = std::process::Command::new(mcp_peer::toolonce())
            .args(["mcp", "--store", "memory://", "--server-id", bad, "--"])
            .arg(mcp_peer::test_server())
            .stdin(std::process::Stdio::null())
            .output();
        // A NUL cannot even be passed as an argument: that is refusal enough.
        let Ok(out) = out else { continue };
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--server-id must"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_read_before_the_clients_tools_list_is_fresh() {
    let mut peer = Spawn::proxy().start();
    peer.initialize();
    for _ in 0..2 {
        let answer = peer.call("lookup", json!({"q": 1}));
        assert!(!is_error(&answer), "{answer}");
    }
    assert_eq!(peer.count("lookup"), 2, "a read runs every time");
    // The proxy's own listing never reaches the client: only the client's answers do.
    let id = peer.request_async("tools/list", json!({}));
    let answer = peer.response(&id);
    assert!(answer["result"]["tools"].is_array(), "{answer}");
    assert!(peer.try_recv_line(Duration::from_millis(300)).is_none());
    // The proxy's requests carry ids no client picks.
    let lists: Vec<Value> = peer
        .server_received()
        .iter()
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .filter(|m| m["method"] == "tools/list")
        .collect();
    assert!(lists.len() >= 2, "{lists:?}");
    assert!(
        lists.iter().any(|m| m["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("toolonce-"))),
        "{lists:?}"
    );
}

#[test]
fn a_changed_tool_list_is_learnt_again() {
    let mut peer = ready(Spawn::proxy());
    peer.call("lookup", json!({}));
    peer.call("lookup", json!({}));
    assert_eq!(peer.count("lookup"), 2);
    // The server drops lookup's readOnlyHint and says so; the client does not list again.
    peer.request("test/lookup_writes", json!({}));
    peer.eventually("the proxy to list again", |p| {
        p.server_received()
            .iter()
            .filter(|l| String::from_utf8_lossy(l).contains("\"tools/list\""))
            .count()
            >= 3
    });
    std::thread::sleep(Duration::from_millis(200));
    peer.call("lookup", json!({}));
    peer.call("lookup", json!({}));
    assert_eq!(
        peer.count("lookup"),
        3,
        "now a write: its duplicate is replayed"
    );
}

#[test]
fn idempotent_hint_tools_pass_through_unless_the_configuration_says_write() {
    let mut peer = ready(Spawn::proxy());
    peer.call("idem_tool", json!({"x": 1}));
    peer.call("idem_tool", json!({"x": 1}));
    assert_eq!(peer.count("idem_tool"), 2);
    let mut peer = ready(Spawn::proxy().config("[tools.idem_tool]\nkind = \"write\""));
    peer.call("idem_tool", json!({"x": 1}));
    peer.call("idem_tool", json!({"x": 1}));
    assert_eq!(peer.count("idem_tool"), 1);
}

#[test]
fn calls_refused_before_running_are_never_stored_whatever_the_configuration() {
    let mut peer = ready(Spawn::proxy().config("[defaults]\non_error = \"keep\""));
    for _ in 0..2 {
        let answer = peer.call("no_such_tool", json!({"a": 1}));
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
    }
    let forwarded = peer
        .server_received()
        .iter()
        .filter(|l| String::from_utf8_lossy(l).contains("no_such_tool"))
        .count();
    assert_eq!(forwarded, 2);
}

#[test]
fn an_internal_error_after_the_effect_is_kept_by_default() {
    let mut peer = ready(Spawn::proxy());
    let first = peer.call("crash", json!({"n": 1}));
    let again = peer.call("crash", json!({"n": 1}));
    assert_eq!(first["error"]["code"], -32603, "{first}");
    assert_eq!(again["error"]["code"], first["error"]["code"], "{again}");
    assert_eq!(again["error"]["message"], first["error"]["message"]);
    assert_eq!(
        again["error"]["data"]["toolonce/outcome"],
        "replayed_failure"
    );
    assert_eq!(peer.count("crash"), 1);
}

#[test]
fn an_error_configured_as_release_runs_again() {
    let mut peer = ready(Spawn::proxy().config(
        "[tools.crash]\non_error = \"release\"\n[tools.fail]\non_tool_error = \"release\"",
    ));
    for _ in 0..2 {
        peer.call("crash", json!({}));
        peer.call("fail", json!({}));
    }
    assert_eq!(peer.count("crash"), 2);
    assert_eq!(peer.count("fail"), 2);
}

#[test]
fn a_kept_failure_runs_again_after_the_failure_retention() {
    // Long enough that the immediate retry surely falls within it on a loaded machine.
    let mut peer = ready(Spawn::proxy().config("[defaults]\nfailure_retention = \"4s\""));
    let first = peer.call("fail", json!({"card": 1}));
    let again = peer.call("fail", json!({"card": 1}));
    assert!(is_error(&first) && is_error(&again));
    assert_eq!(peer.count("fail"), 1);
    std::thread::sleep(Duration::from_millis(4500));
    peer.call("fail", json!({"card": 1}));
    assert_eq!(peer.count("fail"), 2);
}

#[test]
fn a_store_that_can_never_work_stops_the_proxy_at_start_with_exit_code_2() {
    let missing = tempfile::tempdir()
        .unwrap()
        .path()
        .join("no/such/dir/toolonce.db");
    let url = format!("sqlite://{}", missing.display());
    let out = std::process::Command::new(mcp_peer::toolonce())
        .args(["mcp", "--store", &url, "--scope", "s", "--"])
        .arg(mcp_peer::test_server())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("store"), "{stderr}");
}

#[test]
fn a_redis_store_with_a_wrong_password_stops_the_proxy_at_start() {
    let redis = toolonce_testsupport::shared_redis();
    let url = format!("redis://nobody:wrong-secret@127.0.0.1:{}", redis.port());
    let out = std::process::Command::new(mcp_peer::toolonce())
        .args(["mcp", "--store", &url, "--scope", "s", "--"])
        .arg(mcp_peer::test_server())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("store"), "{stderr}");
    assert!(!stderr.contains("wrong-secret"), "{stderr}");
}

#[test]
fn a_postgres_store_with_a_missing_database_stops_the_proxy_at_start() {
    let postgres = toolonce_testsupport::shared_postgres();
    let url = postgres.url_for("toolonce_no_such_database");
    let out = std::process::Command::new(mcp_peer::toolonce())
        .args(["mcp", "--store", &url, "--scope", "s", "--"])
        .arg(mcp_peer::test_server())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot use the store"), "{stderr}");
}

#[test]
fn a_store_that_is_down_keeps_fail_closed_answers_and_reads() {
    let url = format!("redis://127.0.0.1:{}", toolonce_testsupport::free_port());
    let mut peer = ready(Spawn::proxy().arg("--store").arg(&url));
    let answer = peer.call("charge", json!({"amount": 5}));
    assert!(is_error(&answer), "{answer}");
    assert!(text(&answer).contains("Not executed"), "{answer}");
    assert_eq!(peer.count("charge"), 0);
    assert!(!is_error(&peer.call("lookup", json!({}))));
}

#[test]
fn a_replayed_answer_says_so_in_meta_and_keeps_content_and_is_error() {
    let mut peer = ready(Spawn::proxy());
    let first = peer.call("charge", json!({"n": 1}));
    let again = peer.call("charge", json!({"n": 1}));
    let meta = &again["result"]["_meta"];
    assert_eq!(meta["toolonce/outcome"], "replayed", "{again}");
    assert_eq!(
        meta["toolonce/key"],
        first["result"]["_meta"]["received"]["toolonce/key"]
    );
    // The recorded content as it was, then the replay's note for the model.
    let content = again["result"]["content"].as_array().unwrap();
    assert_eq!(
        content[..1],
        first["result"]["content"].as_array().unwrap()[..]
    );
    let note = content[1]["text"].as_str().unwrap();
    assert!(
        note.starts_with("Already done: an identical call of `charge`"),
        "{note}"
    );
    assert!(meta["toolonce/recorded_at"].is_string(), "{again}");
    assert_eq!(again["result"]["isError"], first["result"]["isError"]);
    assert_eq!(first["result"]["_meta"].get("toolonce/outcome"), None);
    let failed = peer.call("fail", json!({}));
    let failed_again = peer.call("fail", json!({}));
    assert_eq!(
        failed_again["result"]["_meta"]["toolonce/outcome"],
        "replayed_failure"
    );
    let content = failed_again["result"]["content"].as_array().unwrap();
    assert_eq!(content[0], failed["result"]["content"][0]);
    let note = content[1]["text"].as_str().unwrap();
    assert!(
        note.starts_with("Already tried: an identical call of `fail`"),
        "{note}"
    );
    assert_eq!(failed_again["result"]["isError"], json!(true));
}

#[test]
fn a_read_reusing_the_id_of_a_write_in_flight_never_becomes_its_answer() {
    let mut peer = ready(Spawn::proxy());
    let id = peer.call_async("slow", json!({"ms": 3000}));
    peer.eventually("the slow call to start", |p| p.count("slow") == 1);
    peer.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "lookup", "arguments": {}}}));
    let mut answers = vec![peer.response(&id), peer.response(&id)];
    answers.sort_by_key(|a| a.get("error").is_none());
    assert!(answers[0].get("error").is_some(), "{answers:?}");
    assert!(text(&answers[1]).contains("slow done"), "{answers:?}");
    // What was stored is the write's own answer.
    let replay = peer.call("slow", json!({"ms": 3000}));
    assert!(text(&replay).contains("slow done"), "{replay}");
    assert_eq!(peer.count("lookup"), 0);
}

#[test]
fn a_write_reusing_the_id_of_a_call_given_up_is_refused() {
    let mut peer = ready(Spawn::proxy().config("[defaults]\ncall_timeout = \"300ms\""));
    let id = json!(4242);
    let call = |tool: &str, args: Value| {
        json!({"jsonrpc": "2.0", "id": 4242, "method": "tools/call",
               "params": {"name": tool, "arguments": args}})
    };
    peer.send(&call("slow", json!({"ms": 1500})));
    let timed_out = peer.response(&id);
    assert!(text(&timed_out).contains("Timed out"), "{timed_out}");
    // The server's late answer to the slow call may still come under this id.
    peer.send(&call("charge", json!({"x": 1})));
    let refused = peer.response(&id);
    assert!(is_error(&refused), "{refused}");
    assert_eq!(
        refused["result"]["_meta"]["toolonce/outcome"],
        "not_executed"
    );
    assert_eq!(peer.count("charge"), 0);
    // A read under that id is answered (by the server), not dropped.
    std::thread::sleep(Duration::from_millis(1600));
    peer.send(&call("lookup", json!({})));
    let read = peer.response(&id);
    assert!(read.get("result").is_some(), "{read}");
}

#[test]
fn the_late_answer_to_a_call_given_up_is_dropped_and_frees_its_id() {
    let mut peer = ready(Spawn::proxy().config("[defaults]\ncall_timeout = \"300ms\""));
    let call = |tool: &str, args: Value| {
        json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
               "params": {"name": tool, "arguments": args}})
    };
    peer.send(&call("late", json!({"ms": 2000})));
    let timed_out = peer.response(&json!(77));
    assert!(text(&timed_out).contains("Timed out"), "{timed_out}");
    assert_eq!(
        timed_out["result"]["_meta"]["toolonce/outcome"],
        "timed_out"
    );
    peer.eventually("the late answer", |p| {
        p.server_log()
            .iter()
            .any(|(d, l)| *d == '>' && String::from_utf8_lossy(l).contains("late done"))
    });
    // The late answer never reaches the client, which already has one...
    assert!(peer.try_recv_line(Duration::from_millis(300)).is_none());
    // ...and once it came, the id is free again: a write under it runs, with its own answer.
    peer.send(&call("charge", json!({"after": "late"})));
    let answer = peer.response(&json!(77));
    assert!(text(&answer).contains("charge done"), "{answer}");
    assert_eq!(peer.count("charge"), 1);
}

#[test]
fn an_answer_serde_json_cannot_read_is_recorded_as_it_came_and_never_run_again() {
    for how in ["surrogate", "deep"] {
        let mut peer = ready(Spawn::proxy());
        let mut answers = Vec::new();
        for id in [101_u64, 102, 103] {
            let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                              "params": {"name": "garbled", "arguments": {"how": how}}});
            peer.send(&call);
            answers.push(String::from_utf8(peer.raw_answer(id)).unwrap());
        }
        assert_eq!(
            peer.count("garbled"),
            1,
            "{how}: the write ran again: {answers:?}"
        );
        // The first caller gets the server's bytes; every duplicate the same bytes under its
        // own id.
        let first = &answers[0];
        assert!(first.contains(r"garbled #1 \ud83d"), "{how}: {first}");
        for (answer, id) in answers.iter().zip([101, 102, 103]) {
            assert_eq!(
                answer.replace(&format!(r#""id":{id},"#), r#""id":101,"#),
                *first,
                "{how}: the duplicate {id} did not get the first answer's bytes"
            );
        }
    }
}

/// A store refused at connect (nothing listens on its port): no claim can have been written, so
/// a write is answered at once as not executed, without the layer retrying for seconds to
/// release a claim that never reached a store, and the answer says "store unavailable" once.
#[test]
fn with_the_store_refused_at_connect_a_write_is_answered_at_once_and_says_store_unavailable_once() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut peer = ready(
        Spawn::proxy()
            .arg("--store")
            .arg(&format!("redis://127.0.0.1:{port}/")),
    );
    let answer = peer.call("charge", json!({"amount": 5}));
    assert!(is_error(&answer), "{answer}");
    assert_eq!(
        answer["result"]["_meta"]["toolonce/outcome"], "store_unavailable",
        "{answer}"
    );
    let words = text(&answer);
    assert_eq!(
        words.matches("store unavailable").count(),
        1,
        "said once: {words}"
    );
    assert_eq!(peer.count("charge"), 0, "not sent");
    // The layer never entered its release retries (they log this when they give up).
    let stderr = peer.stderr();
    assert!(
        !stderr.contains("could not release a claim"),
        "the release was retried: {stderr}"
    );
}
