//! One table of exit codes for every subcommand: each code is tried from each subcommand it
//! applies to, with real stores that cannot be reached (a closed loopback port).

mod cli_support;

use std::net::TcpListener;

use cli_support::{code, exec, sqlite_url, stderr, toolonce};

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

const KEY: &str = "idem:0123456789abcdef0123456789abcdef";

/// Every store-using subcommand, with the store URL appended.
fn store_commands() -> Vec<Vec<&'static str>> {
    vec![
        vec!["ls"],
        vec!["ls", "--json"],
        vec!["show", KEY],
        vec!["rm", KEY],
        vec!["resolve", KEY, "--release"],
        vec!["purge"],
        vec!["exec", "--scope", "s", "--name", "n", "--", "touch", "ran"],
        vec!["bench", "--ops", "1"],
    ]
}

fn run(args: &[&str], store: &str, dir: &std::path::Path) -> std::process::Output {
    let mut cmd = toolonce();
    cmd.current_dir(dir);
    // `--store` goes before `--` so that exec does not take it as part of the command.
    match args.iter().position(|a| *a == "--") {
        Some(at) => cmd
            .args(&args[..at])
            .args(["--store", store])
            .args(&args[at..]),
        None => cmd.args(args).args(["--store", store]),
    };
    cmd.output().unwrap()
}

#[test]
fn an_unreachable_store_is_exit_69_for_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let stores = [
        format!("redis://127.0.0.1:{}", closed_port()),
        format!("postgres://toolonce@127.0.0.1:{}/toolonce", closed_port()),
        // SQLite cannot open a directory as its database file.
        format!("sqlite://{}", dir.path().display()),
    ];
    for store in &stores {
        for args in store_commands() {
            let out = run(&args, store, dir.path());
            assert_eq!(code(&out), 69, "{args:?} {store}: {}", stderr(&out));
            assert!(stderr(&out).starts_with("toolonce: "), "{}", stderr(&out));
            assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
        }
    }
    assert!(!dir.path().join("ran").exists(), "exec ran without a store");
}

#[test]
fn a_bad_store_url_is_exit_2_for_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    for store in ["nosuch://x", "no-scheme", "sqlite:///nonexistent-dir/x.db"] {
        for args in store_commands() {
            let out = run(&args, store, dir.path());
            assert_eq!(code(&out), 2, "{args:?} {store}: {}", stderr(&out));
        }
    }
    // A malformed Redis URL says what is wrong with it (not "did not parse").
    for (store, words) in [
        ("redis://127.0.0.1:99999", "is not a number from 1 to 65535"),
        ("redis://:pw@[::1", "has no closing \"]\""),
        ("redis://127.0.0.1/abc", "the database \"abc\""),
    ] {
        for args in store_commands() {
            let out = run(&args, store, dir.path());
            let text = stderr(&out);
            assert_eq!(code(&out), 2, "{args:?} {store}: {text}");
            assert!(text.contains(words), "{args:?} {store}: {text}");
            assert!(!text.contains("did not parse"), "{text}");
        }
    }
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn a_missing_key_is_exit_66_for_show_rm_and_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    // A store with another operation in it: these commands never create one.
    assert_eq!(code(&exec(dir.path(), "other", &[], "true")), 0);
    for args in [
        &["show", KEY][..],
        &["rm", KEY],
        &["resolve", KEY, "--release"],
        &["resolve", KEY, "--done", "{}"],
    ] {
        let out = run(args, &store, dir.path());
        assert_eq!(code(&out), 66, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("no live entry"), "{}", stderr(&out));
    }
    let json = run(&["show", KEY, "--json"], &store, dir.path());
    assert_eq!(code(&json), 66);
    assert_eq!(cli_support::json(&json)["found"], false);
}

#[test]
fn bad_input_is_exit_2_for_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    for args in [
        vec!["show", "idem:XYZ"],
        vec!["rm", "not-a-key"],
        vec!["resolve", "not-a-key", "--release"],
        vec!["resolve", KEY],
        vec!["resolve", KEY, "--done", "{", "--release"],
        vec!["ls", "--state", "lost"],
        vec![
            "exec",
            "--scope",
            "s",
            "--name",
            "n",
            "--on-expired",
            "verify",
            "--",
            "touch",
            "ran",
        ],
        vec!["ls", "--state", "sleeping"],
        vec!["ls", "--limit", "many"],
        vec!["key", "--scope", "s", "--tool", "t", "--args", "{"],
        vec!["key", "--scope", "", "--tool", "t"],
        vec![
            "key",
            "--scope",
            "s",
            "--tool",
            "t",
            "--key-field",
            "no-slash",
        ],
        vec![
            "exec", "--scope", "s", "--name", "n", "--args", "[", "--", "touch", "ran",
        ],
        vec![
            "exec", "--scope", "s", "--name", "n", "--lease", "0", "--", "touch", "ran",
        ],
        vec![
            "exec", "--scope", "s", "--name", "n", "--args", "-", "--", "touch", "ran",
        ],
        vec!["nosuch-subcommand"],
    ] {
        let out = run(&args, &store, dir.path());
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
    }
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn a_conflict_and_the_commands_own_codes_are_kept_apart() {
    let dir = tempfile::tempdir().unwrap();
    let fields = ["--key-field", "/id", "--args"];
    let first = exec(
        dir.path(),
        "c",
        &[fields[0], fields[1], fields[2], r#"{"id":1,"x":1}"#],
        "exit 69",
    );
    // The command's own code passes through, even one that toolonce also uses.
    assert_eq!(code(&first), 69, "{}", stderr(&first));
    assert!(stderr(&first).is_empty(), "{}", stderr(&first));
    let conflict = exec(
        dir.path(),
        "c",
        &[fields[0], fields[1], fields[2], r#"{"id":1,"x":2}"#],
        "exit 0",
    );
    assert_eq!(code(&conflict), 65, "{}", stderr(&conflict));
    // Operator wording, not the text written for a model.
    assert!(
        !stderr(&conflict).contains("If you meant"),
        "{}",
        stderr(&conflict)
    );
    let missing = exec(dir.path(), "m", &[], "exec /nonexistent/program");
    assert_eq!(code(&missing), 127);
}

#[test]
fn the_exit_code_table_is_in_the_top_level_help_once_and_every_subcommand_points_to_it() {
    for help in ["--help", "-h"] {
        let out = toolonce().arg(help).output().unwrap();
        assert_eq!(code(&out), 0);
        let text = cli_support::stdout(&out);
        assert_eq!(text.matches("Exit codes").count(), 1, "{text}");
        for line in [
            "  69 ", "  75 ", "  65 ", "  66 ", "  67 ", "  70 ", "  73 ",
        ] {
            assert!(text.contains(line), "{help} lacks {line}: {text}");
        }
    }
    for sub in [
        "exec", "ls", "show", "rm", "purge", "resolve", "key", "mcp", "bench", "demo",
    ] {
        for help in ["--help", "-h"] {
            let out = toolonce().args([sub, help]).output().unwrap();
            assert_eq!(code(&out), 0);
            let text = cli_support::stdout(&out);
            assert!(
                !text.contains("  69 "),
                "{sub} {help} repeats the table: {text}"
            );
            assert!(
                text.contains(
                    "Exit codes: the same table for every subcommand, in `toolonce --help`."
                ),
                "{sub} {help}: {text}"
            );
        }
    }
}

#[test]
fn an_entry_toolonce_cannot_read_is_exit_70() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    assert_eq!(code(&exec(dir.path(), "n", &[], "echo hello")), 0);
    // Damage the stored result as a bug (or another program) could.
    let db = rusqlite::Connection::open(dir.path().join("store.db")).unwrap();
    let changed = db
        .execute("UPDATE toolonce_entries SET payload = 'not json'", [])
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);
    let key = toolonce()
        .args(["key", "--json", "--scope", "s", "--tool", "n"])
        .output()
        .unwrap();
    let key = cli_support::json(&key)["key"].as_str().unwrap().to_owned();
    for args in [vec!["show", key.as_str()], vec!["ls"], vec!["ls", "--json"]] {
        let out = run(&args, &store, dir.path());
        assert_eq!(code(&out), 70, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("corrupt entry"), "{}", stderr(&out));
        if args[0] == "ls" {
            // The listing is still printed whole, naming the entry it cannot read.
            let listed = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(listed.contains(&key), "{listed}");
            assert!(
                listed.contains("cannot be read") || listed.contains("\"unreadable\""),
                "{listed}"
            );
        }
    }
    // For exec the operation was begun, perhaps done, by a run whose record cannot be read:
    // not run, and its outcome is unknown until a person checks (exit 73), in the operator's
    // words rather than the model's, in one message.
    let again = exec(dir.path(), "n", &[], "echo ran >> counter");
    assert_eq!(code(&again), 73, "{}", stderr(&again));
    let text = stderr(&again);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("not run"), "{text}");
    assert!(text.contains("corrupt entry"), "{text}");
    assert!(text.contains("cannot be read"), "{text}");
    assert!(
        text.contains(&format!("`toolonce show {key} --store {store}`")),
        "{text}"
    );
    assert!(!text.contains("Not executed"), "{text}");
    assert!(!dir.path().join("counter").exists());
}

/// Every store-using subcommand, the MCP proxy included (it exits before it starts its server).
fn every_store_command() -> Vec<Vec<&'static str>> {
    let mut all = store_commands();
    all.push(vec!["mcp", "--scope", "s", "--", "true"]);
    all
}

#[test]
fn a_store_that_can_never_work_is_exit_2_for_every_subcommand_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    // A file that is not a SQLite database.
    let not_a_db = dir.path().join("notes.db");
    std::fs::write(
        &not_a_db,
        "these are my notes, not a database\n".repeat(200),
    )
    .unwrap();
    // A server of its own that needs a password (set once it is up: the support's readiness
    // check has none to give).
    let locked = toolonce_testsupport::RedisServer::start();
    locked.command(&["CONFIG", "SET", "requirepass", "s3cret"]);
    let open = toolonce_testsupport::shared_redis();
    let postgres = toolonce_testsupport::shared_postgres();
    postgres.create_user_with_password("toolonce_cli_exit", "right-secret");
    let cases = [
        (format!("sqlite://{}", not_a_db.display()), "not a database"),
        (
            format!("redis://:wrong-secret@127.0.0.1:{}", locked.port()),
            "password",
        ),
        // A server that needs a password and got none says so.
        (
            format!("redis://127.0.0.1:{}", locked.port()),
            "needs a password",
        ),
        (
            format!("redis://127.0.0.1:{}/99999", open.port()),
            "database index",
        ),
        (
            format!(
                "postgres://toolonce_cli_exit:wrong-secret@127.0.0.1:{}/postgres",
                postgres.port()
            ),
            "password",
        ),
    ];
    // Every wrong answer is listed, not only the first.
    let mut wrong = Vec::new();
    for (store, why) in &cases {
        for args in every_store_command() {
            // bench measures SQLite in a fresh file of its own beside the one named: that
            // file is never opened.
            if args[0] == "bench" && store.starts_with("sqlite://") {
                continue;
            }
            let out = run(&args, store, dir.path());
            let text = stderr(&out);
            let right = code(&out) == 2
                && text.starts_with("toolonce: ")
                && text.contains(why)
                && !text.contains("try again later")
                && !text.contains("allow_eviction");
            if !right {
                wrong.push(format!(
                    "{args:?} {store} (want {why:?}): {}: {text}",
                    code(&out)
                ));
            }
            assert!(!text.contains("wrong-secret"), "{text}");
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(!dir.path().join("ran").exists(), "exec ran without a store");
}

/// A failure written by a worker of another language carries a `detail` of its own, not an
/// exec record: it is still the operation's recorded outcome, replayed as its message (exit
/// 1) and the command not run, never an internal error (exit 70).
#[test]
fn a_failed_entry_whose_detail_another_writer_recorded_is_replayed_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(code(&exec(dir.path(), "n", &[], "echo hello")), 0);
    let db = rusqlite::Connection::open(dir.path().join("store.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE toolonce_entries SET state = 'failed', \
             payload = '{\"message\":\"card declined\",\"class\":\"permanent\",\"detail\":{\"ticket\":7}}'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);
    let again = exec(dir.path(), "n", &[], "echo ran >> counter");
    assert_eq!(code(&again), 1, "{}", stderr(&again));
    assert!(
        stderr(&again).contains("card declined"),
        "{}",
        stderr(&again)
    );
    assert!(
        !dir.path().join("counter").exists(),
        "the command did not run"
    );
}
