//! The System V shared memory of a server: which segment its `postmaster.pid` names, and
//! whether any process still has it attached (after a SIGKILL, its backends exit on their own).

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::process::POLL;

/// The System V shared memory segment (key, id) named on line 7 of a
/// `postmaster.pid`.
pub(super) fn shm_segment(data_dir: &Path) -> Option<(i64, i64)> {
    let text = fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    let mut fields = text.lines().nth(6)?.split_whitespace();
    let key = fields.next()?.parse().ok()?;
    let id = fields.next()?.parse().ok()?;
    Some((key, id))
}

/// How many processes have the segment attached, `None` if it is gone.
pub(super) fn shm_attached(segment: (i64, i64)) -> Option<u64> {
    let table = fs::read_to_string("/proc/sysvipc/shm").ok()?;
    table.lines().skip(1).find_map(|row| {
        let cols: Vec<&str> = row.split_whitespace().collect();
        let key: i64 = cols.first()?.parse().ok()?;
        let id: i64 = cols.get(1)?.parse().ok()?;
        ((key, id) == segment)
            .then(|| cols.get(6)?.parse().ok())
            .flatten()
    })
}

/// Waits until no process has the segment attached: after a SIGKILL of the
/// postmaster, its backends notice and exit on their own.
pub(super) fn wait_segment_detached(segment: Option<(i64, i64)>, timeout: Duration) {
    let Some(segment) = segment else { return };
    let deadline = Instant::now() + timeout;
    while shm_attached(segment).is_some_and(|n| n > 0) && Instant::now() < deadline {
        thread::sleep(POLL);
    }
}
