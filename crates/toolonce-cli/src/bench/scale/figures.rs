//! What `--scale` measured at one size: the fill, the bytes per entry, the rounds' rows and
//! the operator's commands.

use std::time::Duration;

use super::operator::Timings;
use crate::bench::stats::Row;

/// What the bench measured at one size.
pub(super) struct Size {
    /// The run's live entries in the store when the rounds began.
    pub(super) entries: u64,
    /// The fill up to `entries` (and the expiring tenth): how long, how many written.
    pub(super) fill: Duration,
    pub(super) filled: u64,
    /// The store's bytes over what it held before the run, per entry present after the fill.
    pub(super) bytes_per_entry: Option<f64>,
    pub(super) rows: Vec<Row>,
    pub(super) timings: Timings,
}
