//! `toolonce ls | show | rm | purge` on a SQLite store filled by `toolonce exec`.

mod cli_support;

use std::path::Path;
use std::time::Duration;

use cli_support::{code, json, run, sqlite_url, stderr, stdout, toolonce};

/// Records one operation with `exec` and returns its key.
fn record(dir: &Path, name: &str, extra: &[&str], script: &str) -> String {
    let out = cli_support::exec(dir, name, extra, script);
    assert!(code(&out) != 2, "{}", stderr(&out));
    let key = toolonce()
        .args(["key", "--json", "--scope", "s", "--tool", name])
        .output()
        .unwrap();
    json(&key)["key"].as_str().unwrap().to_owned()
}

#[test]
fn ls_show_rm_work_on_a_store_filled_by_exec() {
    let dir = tempfile::tempdir().unwrap();
    let ok = record(dir.path(), "greet", &[], "echo hello");
    let failed = record(dir.path(), "broken", &[], "echo oops >&2; exit 5");

    let table = run(dir.path(), &["ls"]);
    assert_eq!(code(&table), 0, "{}", stderr(&table));
    let text = stdout(&table);
    assert!(text.starts_with("KEY "), "{text}");
    for (key, state) in [(&ok, "done"), (&failed, "failed")] {
        let line = text
            .lines()
            .find(|l| l.starts_with(key.as_str()))
            .expect(&text);
        assert!(line.contains(state), "{line}");
        assert!(line.ends_with(" B"), "no size: {line}");
    }

    let all = json(&run(dir.path(), &["ls", "--json"]));
    assert_eq!(all["entries"].as_array().unwrap().len(), 2, "{all}");
    assert_eq!(all["more"], false);
    let entry = &all["entries"][0];
    for field in [
        "key",
        "state",
        "fingerprint",
        "started_at",
        "expires_at",
        "size",
    ] {
        assert!(!entry[field].is_null(), "{field} missing: {entry}");
    }
    let failed_only = json(&run(dir.path(), &["ls", "--json", "--state", "failed"]));
    assert_eq!(failed_only["entries"].as_array().unwrap().len(), 1);
    assert_eq!(failed_only["entries"][0]["key"], failed.as_str());
    let limited = json(&run(dir.path(), &["ls", "--json", "--limit", "1"]));
    assert_eq!(limited["entries"].as_array().unwrap().len(), 1);
    assert_eq!(limited["more"], true);

    let shown = json(&run(dir.path(), &["show", &ok, "--json"]));
    assert_eq!(shown["state"], "done");
    assert_eq!(shown["result"]["exit_code"], 0);
    assert_eq!(shown["result"]["stdout"], "hello\n");
    let shown = json(&run(dir.path(), &["show", &failed, "--json"]));
    assert_eq!(shown["state"], "failed");
    assert_eq!(shown["error"]["class"], "permanent");
    assert_eq!(shown["error"]["detail"]["exit_code"], 5);
    assert_eq!(shown["error"]["detail"]["stderr"], "oops\n");
    let human = stdout(&run(dir.path(), &["show", &ok]));
    assert!(human.contains("state          done"), "{human}");
    assert!(human.contains("tool           greet"), "{human}");
    assert!(
        human.contains("detail         sh -c 'echo hello'"),
        "{human}"
    );
    assert!(human.contains("\"stdout\": \"hello\\n\""), "{human}");

    let removed = run(dir.path(), &["rm", &ok]);
    assert_eq!(code(&removed), 0, "{}", stderr(&removed));
    assert_eq!(stdout(&removed), format!("removed {ok}\n"));
    let again = run(dir.path(), &["rm", &ok]);
    assert_eq!(code(&again), 66);
    assert!(
        stderr(&again).contains("no live entry"),
        "{}",
        stderr(&again)
    );
    let gone = run(dir.path(), &["show", &ok]);
    assert_eq!(code(&gone), 66);
    let removed = json(&run(dir.path(), &["rm", &failed, "--json"]));
    assert_eq!(removed, serde_json::json!({"key": failed, "removed": true}));
    assert_eq!(stdout(&run(dir.path(), &["ls"])), "no entries\n");
}

/// `toolonce exec --scope <scope> --name <name> -- true` on the dir's store.
fn exec_in(dir: &Path, scope: &str, name: &str) {
    let out = toolonce()
        .current_dir(dir)
        .args(["exec", "--store", &sqlite_url(dir), "--scope", scope])
        .args(["--name", name, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn ls_filters_by_scope_and_tool_and_lists_the_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    // Started in this order; keys are random-looking, so key order is not start order.
    let made = [
        ("nightly", "backup"),
        ("nightly", "report"),
        ("deploy-7", "backup"),
        ("deploy-7", "migrate"),
        ("nightly", "vacuum"),
    ];
    for (scope, name) in made {
        exec_in(dir.path(), scope, name);
        // Distinct start times even on a coarse clock.
        std::thread::sleep(Duration::from_millis(20));
    }
    let listed = |args: &[&str]| -> Vec<(String, String)> {
        let out = run(dir.path(), &[&["ls", "--json"], args].concat());
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        json(&out)["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                assert_eq!(e["attempts"], 1, "{e}");
                assert_eq!(e["state"], "done", "{e}");
                (
                    e["scope"].as_str().unwrap().to_owned(),
                    e["tool"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(s, t)| ((*s).to_owned(), (*t).to_owned()))
            .collect()
    };
    let mut newest_first = made.to_vec();
    newest_first.reverse();
    assert_eq!(listed(&[]), pairs(&newest_first));
    assert_eq!(
        listed(&["--scope", "nightly"]),
        pairs(&[
            ("nightly", "vacuum"),
            ("nightly", "report"),
            ("nightly", "backup")
        ])
    );
    assert_eq!(
        listed(&["--tool", "backup"]),
        pairs(&[("deploy-7", "backup"), ("nightly", "backup")])
    );
    assert_eq!(
        listed(&["--scope", "deploy-7", "--tool", "backup", "--state", "done"]),
        pairs(&[("deploy-7", "backup")])
    );
    assert_eq!(listed(&["--scope", "deploy-7", "--state", "unknown"]), []);
    assert_eq!(listed(&["--scope", "nowhere"]), []);
    // The limit keeps the newest, and says how many more there are.
    let limited = json(&run(dir.path(), &["ls", "--json", "--limit", "2"]));
    assert_eq!(limited["more"], true);
    assert_eq!(limited["entries"][0]["tool"], "vacuum");
    assert_eq!(limited["entries"][1]["tool"], "migrate");
    let table = stdout(&run(dir.path(), &["ls", "--limit", "2"]));
    assert!(table.contains("(3 more matching entries"), "{table}");

    // The table has the columns an operator needs.
    let table = stdout(&run(dir.path(), &["ls", "--tool", "migrate"]));
    let mut rows = table.lines();
    let header = rows.next().unwrap();
    for column in [
        "KEY",
        "STATE",
        "SCOPE",
        "TOOL",
        "ATTEMPTS",
        "AGE",
        "EXPIRES IN",
        "SIZE",
    ] {
        assert!(header.contains(column), "{header}");
    }
    let row = rows.nth(1).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[1..5], ["done", "deploy-7", "migrate", "1"], "{row}");
}

#[test]
fn purge_removes_expired_entries_and_says_how_many() {
    let dir = tempfile::tempdir().unwrap();
    record(dir.path(), "short", &["--retention", "0.2"], "true");
    record(dir.path(), "long", &[], "true");
    std::thread::sleep(Duration::from_millis(400));
    let purged = json(&run(dir.path(), &["purge", "--json"]));
    assert_eq!(purged["removed"], 1, "{purged}");
    let text = stdout(&run(dir.path(), &["purge"]));
    assert_eq!(text, "removed 0 expired entries\n");
    let left = json(&run(dir.path(), &["ls", "--json"]));
    assert_eq!(left["entries"].as_array().unwrap().len(), 1);
}

#[test]
fn an_invalid_key_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in ["show", "rm"] {
        let out = run(dir.path(), &[cmd, "idem:XYZ"]);
        assert_eq!(code(&out), 2);
        assert!(
            stderr(&out).contains("invalid operation key \"idem:XYZ\""),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn an_empty_store_lists_no_entries() {
    let out = toolonce()
        .args(["ls", "--store", "memory://"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0);
    assert_eq!(stdout(&out), "no entries\n");
    let out = toolonce()
        .args(["ls", "--json", "--store", "memory://"])
        .output()
        .unwrap();
    assert_eq!(
        json(&out),
        serde_json::json!({
            "entries": [],
            "more": false,
            "unreadable": {"entries": [], "count": 0}
        })
    );
}

#[test]
fn reading_commands_never_create_a_database_and_name_the_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let key = "idem:0123456789abcdef0123456789abcdef";
    let typo = dir.path().join("tolonce.db");
    let typo_url = format!("sqlite://{}", typo.display());
    let default = dir.path().join("toolonce.db");
    for args in [
        &["ls"][..],
        &["ls", "--json"],
        &["show", key],
        &["rm", key],
        &["resolve", key, "--release"],
        &["purge"],
    ] {
        // The default store (toolonce.db here), and a path with a typo in it.
        let default_out = toolonce()
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap();
        let typo_out = toolonce()
            .current_dir(dir.path())
            .args(args)
            .args(["--store", &typo_url])
            .output()
            .unwrap();
        for (out, path) in [(&default_out, &default), (&typo_out, &typo)] {
            assert_eq!(code(out), 2, "{args:?}: {}", stderr(out));
            let text = stderr(out);
            assert!(text.starts_with("toolonce: "), "{text}");
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(text.contains("does not exist"), "{text}");
            assert!(out.stdout.is_empty(), "{args:?}: {}", stdout(out));
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "a reading command created {left:?}");

    // exec creates the database as before; then the same commands read it.
    let out = toolonce()
        .current_dir(dir.path())
        .args(["exec", "--scope", "s", "--name", "n", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(default.exists());
    let out = toolonce()
        .current_dir(dir.path())
        .args(["ls", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["entries"].as_array().unwrap().len(), 1);
}
