//! The report: a row as JSON (`--json`) and the rows as a table, with the notes that say what
//! the columns measure.

use std::time::Duration;

use serde_json::{Value, json};

use super::floor::Kind;
use super::stats::Row;

fn us(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e7).round() / 10.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

impl Row {
    fn ratio(&self) -> Option<f64> {
        self.ratio.map(|r| (r * 1000.0).round() / 1000.0)
    }

    pub(super) fn to_json(&self) -> Value {
        let mut row = json!({
            "workload": self.workload.as_str(),
            "concurrency": self.concurrency,
            "toolonce_ops_s": self.ours_ops_s.round(),
            "raw_ops_s": self.raw_ops_s.map(f64::round),
            "ratio": self.ratio(),
            "p50_us": us(self.p50),
            "p99_us": us(self.p99),
            "raw_p50_us": self.raw_p50.map(us),
            "raw_p99_us": self.raw_p99.map(us),
        });
        if let (Some(ours), Some(raw)) = (self.ours_server_us, self.raw_server_us) {
            row["toolonce_server_us_per_op"] = json!(round2(ours));
            row["raw_server_us_per_op"] = json!(round2(raw));
        }
        if let Some(ours) = self.ours_client_us {
            row["toolonce_client_us_per_op"] = json!(round2(ours));
            row["raw_client_us_per_op"] = json!(self.raw_client_us.map(round2));
        }
        row
    }
}

/// The table of `rows`, with the notes on its columns and `idle_cpus`, the machine's note on
/// idle CPUs if it has one.
pub(super) fn print_table(
    store: &str,
    kind: &Kind,
    rows: &[Row],
    idle_cpus: Option<&str>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "store: {store} ({}; both on {})",
        kind.floor(),
        super::env::runtime()
    )?;
    let server = rows.iter().any(|r| r.ours_server_us.is_some());
    write!(
        out,
        "{:<11} {:>5} {:>13} {:>11} {:>7} {:>9} {:>9} {:>9}",
        "workload", "conc", "toolonce op/s", "raw op/s", "ratio", "p50 µs", "p99 µs", "raw p50"
    )?;
    let client = rows.iter().any(|r| r.ours_client_us.is_some());
    if client {
        write!(out, " {:>16}", "client µs/op")?;
    }
    if server {
        write!(out, " {:>16}", "server µs/op")?;
    }
    writeln!(out)?;
    let dash = "-".to_owned();
    for r in rows {
        write!(
            out,
            "{:<11} {:>5} {:>13.0} {:>11} {:>7} {:>9.1} {:>9.1} {:>9}",
            r.workload.as_str(),
            r.concurrency,
            r.ours_ops_s,
            r.raw_ops_s.map_or(dash.clone(), |x| format!("{x:.0}")),
            r.ratio().map_or(dash.clone(), |x| format!("{x:.2}")),
            us(r.p50),
            us(r.p99),
            r.raw_p50.map_or(dash.clone(), |d| format!("{:.1}", us(d))),
        )?;
        if let Some(ours) = r.ours_client_us {
            match r.raw_client_us {
                Some(raw) => write!(out, " {:>7.2} / {:<6.2}", ours, raw)?,
                None => write!(out, " {:>7.2}{:9}", ours, "")?,
            }
        }
        if let (Some(ours), Some(raw)) = (r.ours_server_us, r.raw_server_us) {
            write!(out, " {:>7.2} / {:<6.2}", ours, raw)?;
        }
        writeln!(out)?;
    }
    if client {
        writeln!(
            out,
            "client µs/op: this process's CPU per operation, user and system, toolonce / raw"
        )?;
    }
    if server {
        writeln!(
            out,
            "server µs/op: Redis CPU per operation, toolonce / raw (INFO cpu)"
        )?;
    }
    if let Some(note) = idle_cpus {
        writeln!(out, "note: {note}")?;
    }
    if matches!(kind, Kind::Memory) {
        writeln!(
            out,
            "memory store: no raw floor (nothing to compare with: the store is this process)"
        )?;
    }
    Ok(())
}
