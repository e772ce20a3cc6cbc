//! `toolonce demo`, the first thing a new user runs: it must exit 0 and its table must show
//! the right figure with toolonce for every scenario (and the duplicates without it): the
//! crashed charge runs again safely under its key, the crashed email is held.

mod cli_support;

use std::time::{Duration, Instant};

use cli_support::{code, stderr, stdout, toolonce};

/// One row of the demo's table.
#[derive(Debug)]
struct Row {
    scenario: String,
    without: usize,
    /// `None`: skipped with toolonce (`-`).
    with: Option<usize>,
    expected: usize,
    ok: String,
}

/// The rows of the table: the lines with `|` after the header and its rule.
fn rows(text: &str) -> Vec<Row> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with("scenario "));
    let header = lines.next().expect("a table header");
    assert!(header.contains("effects without"), "{header}");
    lines
        .skip(1)
        .take_while(|l| l.contains(" | "))
        .map(|line| {
            let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 5, "{line}");
            let number = |i: usize| cells[i].parse().unwrap_or_else(|_| panic!("{line}"));
            Row {
                scenario: cells[0].to_owned(),
                without: number(1),
                with: (cells[2] != "-").then(|| number(2)),
                expected: number(3),
                ok: cells[4].to_owned(),
            }
        })
        .collect()
}

/// The text with every run of whitespace made one space.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Checks the table and the explanations; `shared`: the store outlives a process (so the
/// email scenario runs with toolonce).
fn check(text: &str, shared: bool) {
    let rows = rows(text);
    assert_eq!(rows.len(), 6, "{text}");
    for row in &rows {
        if !shared && row.scenario.starts_with("5.") {
            assert_eq!((row.with, row.ok.as_str()), (None, "skipped"), "{row:?}");
            continue;
        }
        assert_eq!(row.with, Some(row.expected), "{row:?}\n{text}");
        assert_eq!(row.ok, "yes", "{row:?}");
    }
    // The five sources of duplicates do the effect twice without toolonce; the control does
    // not merge with it.
    for row in &rows[..5] {
        assert_eq!((row.without, row.expected), (2, 1), "{row:?}");
    }
    assert!(rows[4].scenario.contains("email"), "{:?}", rows[4]);
    assert!(rows[5].scenario.starts_with("control"), "{:?}", rows[5]);
    assert_eq!(rows[5].expected, 2);
    // The explanations are wrapped: phrases are looked for across line ends.
    let text = &flat(text);
    assert!(
        text.contains("saved by the Idempotency-Key handed downstream"),
        "{text}"
    );
    if shared {
        // The crashed charge reruns under its key; the crashed email is held.
        assert!(
            text.contains("(policy rerun), ran charge_card again"),
            "{text}"
        );
        assert!(text.contains("With it (unknown)"), "{text}");
        assert!(text.contains("keeps the default policy (hold)"), "{text}");
        assert!(text.contains("toolonce resolve idem:"), "{text}");
        assert!(text.contains("All 6 \"with\" figures are right"), "{text}");
    } else {
        assert!(text.contains("All 5 \"with\" figures are right"), "{text}");
        assert!(text.contains("1 skipped"), "{text}");
    }
}

#[test]
fn demo_exits_zero_and_its_table_shows_every_with_figure_right() {
    let started = Instant::now();
    let out = toolonce().arg("demo").output().unwrap();
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    check(&text, true);
    // What the demo provokes (a held email) is explained in the report, not warned about.
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    // The crash scenario must really wait out the dead run's lease and reclaim the key.
    assert!(
        flat(&text).contains("waited for its 1.0s lease to expire"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn demo_runs_twice_against_a_given_store_without_interference() {
    let dir = tempfile::tempdir().unwrap();
    let store = cli_support::sqlite_url(dir.path());
    for _ in 0..2 {
        let out = toolonce()
            .args(["demo", "--store", &store])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
        check(&stdout(&out), true);
    }
}

#[test]
fn demo_on_an_in_memory_store_is_still_saved_by_the_idempotency_key() {
    // memory:// lives in one process, so the resumed run cannot see the dead run's claim: the
    // provider's Idempotency-Key alone prevents the second charge, and nothing can prevent the
    // second email (that scenario is skipped, and says why).
    let out = toolonce()
        .args(["demo", "--store", "memory://"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    check(&stdout(&out), false);
    assert!(
        stdout(&out).contains("Skipped with toolonce"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn demo_with_an_unknown_store_fails_clearly() {
    let out = toolonce()
        .args(["demo", "--store", "nosuch://x"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("unknown store scheme"),
        "{}",
        stderr(&out)
    );
}
