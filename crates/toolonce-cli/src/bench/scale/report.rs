//! The report of `--scale`: one line per size (the fill, the bytes per entry, toolonce's
//! throughput per workload and concurrency, the operator's commands), and the ratio of each
//! throughput at the largest size to the smallest; or one JSON document (`--json`).

use std::time::Duration;

use serde_json::{Value, json};

use super::figures::Size;
use crate::bench::env::runtime;
use crate::bench::stats::Row;
use crate::output::outln;

/// What the `purge` column removes, for the report to say.
const PURGE_SHARE: &str = "a tenth of each size written again with a 1 s retention, expired \
     when purged (Redis and Valkey expire them themselves: purge removes nothing there)";

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

/// Each throughput at the largest size over the same one at the smallest: (workload,
/// concurrency, ratio).
fn ratios(sizes: &[Size]) -> Vec<(&'static str, u64, f64)> {
    let (Some(small), Some(large)) = (sizes.first(), sizes.last()) else {
        return Vec::new();
    };
    small
        .rows
        .iter()
        .zip(&large.rows)
        .map(|(s, l)| {
            (
                s.workload.as_str(),
                s.concurrency,
                l.ours_ops_s / s.ours_ops_s,
            )
        })
        .collect()
}

fn size_json(size: &Size) -> Value {
    let t = &size.timings;
    let rows: Vec<Value> = size
        .rows
        .iter()
        .map(|r| {
            json!({
                "workload": r.workload.as_str(),
                "concurrency": r.concurrency,
                "toolonce_ops_s": r.ours_ops_s.round(),
                "p50_us": (r.p50.as_secs_f64() * 1e7).round() / 10.0,
                "p99_us": (r.p99.as_secs_f64() * 1e7).round() / 10.0,
            })
        })
        .collect();
    json!({
        "entries": size.entries,
        "fill_s": (size.fill.as_secs_f64() * 1000.0).round() / 1000.0,
        "filled": size.filled,
        "fill_ops_s": (size.filled as f64 / size.fill.as_secs_f64()).round(),
        "bytes_per_entry": size.bytes_per_entry.map(f64::round),
        "results": rows,
        "list_page_ms": ms(t.list_page),
        "ls_ms": ms(t.ls),
        "ls_matched": t.ls_matched,
        "purge_ms": ms(t.purge),
        "purged": t.purged,
        "resolve_ms": ms(t.resolve),
    })
}

pub(super) fn print_json(
    store: &str,
    sizes: &[Size],
    idle_cpus: Option<&str>,
) -> anyhow::Result<()> {
    let ratios: Vec<Value> = ratios(sizes)
        .into_iter()
        .map(|(w, c, r)| json!({"workload": w, "concurrency": c, "ratio": (r * 1000.0).round() / 1000.0}))
        .collect();
    outln!(
        "{}",
        json!({
            "store": store,
            "runtime": runtime(),
            "idle_cpus": idle_cpus,
            "scale": sizes.iter().map(size_json).collect::<Vec<_>>(),
            "largest_over_smallest": ratios,
            "purged_share": PURGE_SHARE,
        })
    );
    Ok(())
}

/// The column of one row's throughput, as `first c8` or `replay c1`.
fn column(row: &Row) -> String {
    let workload = match row.workload.as_str() {
        "first_time" => "first",
        other => other,
    };
    format!("{workload} c{} op/s", row.concurrency)
}

pub(super) fn print_table(
    store: &str,
    sizes: &[Size],
    idle_cpus: Option<&str>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "store: {store} (toolonce's rounds only, no raw floor; {})",
        runtime()
    )?;
    let columns: Vec<String> = sizes
        .first()
        .map(|s| s.rows.iter().map(column).collect())
        .unwrap_or_default();
    write!(
        out,
        "{:>9} {:>8} {:>9} {:>8}",
        "entries", "fill s", "fill op/s", "B/entry"
    )?;
    for c in &columns {
        write!(out, " {c:>16}")?;
    }
    writeln!(
        out,
        " {:>9} {:>10} {:>9} {:>7} {:>10}",
        "page ms", "ls ms", "purge ms", "purged", "resolve ms"
    )?;
    for size in sizes {
        let t = &size.timings;
        write!(
            out,
            "{:>9} {:>8.2} {:>9.0} {:>8}",
            size.entries,
            size.fill.as_secs_f64(),
            size.filled as f64 / size.fill.as_secs_f64(),
            size.bytes_per_entry
                .map_or("n/a".to_owned(), |b| format!("{b:.0}")),
        )?;
        for row in &size.rows {
            write!(out, " {:>16.0}", row.ours_ops_s)?;
        }
        writeln!(
            out,
            " {:>9.2} {:>10.2} {:>9.2} {:>7} {:>10.2}",
            ms(t.list_page),
            ms(t.ls),
            ms(t.purge),
            t.purged,
            ms(t.resolve)
        )?;
    }
    let ratios: Vec<String> = ratios(sizes)
        .into_iter()
        .map(|(w, c, r)| format!("{w} c{c} {r:.2}"))
        .collect();
    if sizes.len() > 1 {
        writeln!(out, "largest ÷ smallest size: {}", ratios.join(", "))?;
    }
    writeln!(
        out,
        "entries: the run's live entries when the rounds began; B/entry: the store's growth \
         over the entries present after the fill; page: one Store::list page (100); ls: \
         `toolonce ls --scope` (every page walked, the newest 100 kept)"
    )?;
    writeln!(out, "purged: {PURGE_SHARE}")?;
    if let Some(note) = idle_cpus {
        writeln!(out, "note: {note}")?;
    }
    Ok(())
}
