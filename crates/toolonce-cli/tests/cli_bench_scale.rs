//! `toolonce bench --scale` on the memory store, SQLite and a real Redis: the JSON report has
//! one result per size with the figures, purge removes the expiring share where the
//! store purges, and nothing of the bench's is left. Shape only: speed is the benchmark's to
//! report, never a test's to assert.

mod cli_support;

use cli_support::{code, json, stderr, toolonce};
use serde_json::Value;
use toolonce_testsupport::RedisServer;

/// Runs `bench --scale --sizes 100,1000` with small rounds and returns its JSON report.
fn scale(url: &str) -> Value {
    let out = toolonce()
        .args([
            "bench",
            "--store",
            url,
            "--scale",
            "--sizes",
            "1000,100",
            "--ops",
            "20",
            "--rounds",
            "1",
            "--concurrency",
            "1,4",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    json(&out)
}

/// Checks the report: the two sizes in increasing order, each filled to its size, four rows
/// of positive throughput, the operator's commands timed, `ls` matching at least the entries,
/// and one ratio per row. `bytes` says whether the store reports its size, `purges` whether
/// `purge` removes the expiring tenth (Redis expires it itself).
fn check(report: &Value, url: &str, bytes: bool, purges: bool) {
    assert_eq!(report["store"], url, "{report}");
    let sizes = report["scale"].as_array().expect("scale");
    assert_eq!(sizes.len(), 2, "{report}");
    for (size, asked) in sizes.iter().zip([100u64, 1000]) {
        let entries = size["entries"].as_u64().expect("entries");
        // The smaller size's rounds wrote more than the fill: the larger one starts from them.
        assert!(entries >= asked, "{size}");
        assert!(size["fill_s"].as_f64().unwrap() > 0.0, "{size}");
        assert!(size["filled"].as_u64().unwrap() >= asked / 10, "{size}");
        match size["bytes_per_entry"].as_f64() {
            Some(b) => assert!(bytes && b > 0.0 && b < 1e5, "{size}"),
            None => assert!(!bytes, "{size}"),
        }
        let rows: Vec<(String, u64)> = size["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                assert!(r["toolonce_ops_s"].as_f64().unwrap() > 0.0, "{r}");
                (
                    r["workload"].as_str().unwrap().to_owned(),
                    r["concurrency"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("first_time".to_owned(), 1),
                ("replay".to_owned(), 1),
                ("first_time".to_owned(), 4),
                ("replay".to_owned(), 4)
            ],
            "{size}"
        );
        for timed in ["list_page_ms", "ls_ms", "purge_ms", "resolve_ms"] {
            assert!(size[timed].as_f64().unwrap() >= 0.0, "{timed}: {size}");
        }
        // `ls` walks past one page (500 entries) at the larger size and finds every entry.
        assert!(size["ls_matched"].as_u64().unwrap() >= entries, "{size}");
        let purged = size["purged"].as_u64().unwrap();
        assert_eq!(purged, if purges { asked / 10 } else { 0 }, "{size}");
    }
    let ratios = report["largest_over_smallest"].as_array().expect("ratios");
    assert_eq!(ratios.len(), 4, "{report}");
    assert!(
        ratios.iter().all(|r| r["ratio"].as_f64().unwrap() > 0.0),
        "{report}"
    );
    assert!(report["purged_share"].as_str().is_some(), "{report}");
}

#[test]
fn scale_on_the_memory_store_reports_each_size_without_bytes() {
    check(&scale("memory://"), "memory://", false, true);
}

#[test]
fn scale_on_sqlite_reports_bytes_per_entry_and_leaves_no_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    let url = cli_support::sqlite_url(dir.path());
    check(&scale(&url), &url, true, true);
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn scale_on_redis_removes_every_key_it_wrote_and_keeps_the_users() {
    // A server of its own: the bytes per entry are the server's growth, and the keys are
    // compared before and after.
    let redis = RedisServer::start();
    assert_eq!(redis.command(&["SET", "users:own-key", "precious"]), "OK");
    let before = redis.command(&["KEYS", "*"]);
    check(&scale(&redis.url()), &redis.url(), true, false);
    assert_eq!(redis.command(&["KEYS", "*"]), before);
    assert_eq!(redis.command(&["GET", "users:own-key"]), "precious");
}
