//! Replays (duplicates suppressed) and in-flight refusals per minute, for the console's chart:
//! from the process's own tallies ([`crate::prometheus::tally`]), so only where the console
//! runs in the process that answers the calls (the gateway). The last [`KEPT_MINUTES`]
//! minutes are kept, the current one growing as calls come.

use std::collections::VecDeque;

use serde_json::{Value, json};

use crate::prometheus::tally::{self, Totals};

pub(crate) const KEPT_MINUTES: usize = 60;
const MINUTE_MS: u64 = 60_000;

/// One minute's calls: its start (ms since the epoch), replays, in-flight refusals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Minute {
    at_ms: u64,
    replays: u64,
    in_flight: u64,
}

pub(crate) struct PerMinute {
    /// The totals when last looked at: what came since goes to the current minute.
    seen: Totals,
    minutes: VecDeque<Minute>,
}

impl PerMinute {
    /// Counting from now: calls before the console opened are not in any minute.
    pub(crate) fn new(now_ms: u64) -> Self {
        let mut per = PerMinute {
            seen: tally::totals(),
            minutes: VecDeque::new(),
        };
        per.advance(now_ms, per.seen);
        per
    }

    /// Adds the calls since the last look to the minute of `now_ms` (minutes without any are
    /// kept as zeros).
    fn advance(&mut self, now_ms: u64, totals: Totals) {
        let minute = now_ms - now_ms % MINUTE_MS;
        let last = self.minutes.back().map(|m| m.at_ms);
        if last.is_none_or(|last| last < minute) {
            let mut at = last.map_or(minute, |last| {
                (last + MINUTE_MS).max(minute.saturating_sub(MINUTE_MS * KEPT_MINUTES as u64))
            });
            while at <= minute {
                self.minutes.push_back(Minute {
                    at_ms: at,
                    replays: 0,
                    in_flight: 0,
                });
                at += MINUTE_MS;
            }
            while self.minutes.len() > KEPT_MINUTES {
                self.minutes.pop_front();
            }
        }
        if let Some(current) = self.minutes.back_mut() {
            current.replays += totals.replays.saturating_sub(self.seen.replays);
            current.in_flight += totals.in_flight.saturating_sub(self.seen.in_flight);
        }
        self.seen = totals;
    }

    /// The minutes, up to `now_ms`, as the stats answer carries them.
    pub(crate) fn answer(&mut self, now_ms: u64) -> Value {
        self.advance(now_ms, tally::totals());
        let minutes: Vec<Value> = self
            .minutes
            .iter()
            .map(|m| json!({"at_ms": m.at_ms, "replays": m.replays, "in_flight": m.in_flight}))
            .collect();
        json!({"per_minute": minutes})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(replays: u64, in_flight: u64) -> Totals {
        Totals { replays, in_flight }
    }

    #[test]
    fn calls_go_to_the_minute_they_came_in_and_quiet_minutes_are_zeros() {
        let mut per = PerMinute {
            seen: totals(5, 1),
            minutes: VecDeque::new(),
        };
        per.advance(10 * MINUTE_MS + 1, totals(5, 1));
        per.advance(10 * MINUTE_MS + 30_000, totals(8, 1));
        per.advance(13 * MINUTE_MS, totals(9, 3));
        let got: Vec<(u64, u64, u64)> = per
            .minutes
            .iter()
            .map(|m| (m.at_ms / MINUTE_MS, m.replays, m.in_flight))
            .collect();
        assert_eq!(got, [(10, 3, 0), (11, 0, 0), (12, 0, 0), (13, 1, 2)]);
        // After hours of nothing, only the kept minutes are there.
        per.advance(500 * MINUTE_MS, totals(9, 3));
        assert_eq!(per.minutes.len(), KEPT_MINUTES);
        assert_eq!(per.minutes.back().unwrap().at_ms, 500 * MINUTE_MS);
        assert!(per.minutes.iter().all(|m| m.replays == 0));
    }
}
