//! What a store counts for a metrics endpoint ([`Store::census`](crate::Store::census)): its
//! live entries by state and how long the oldest `unknown` one has waited.

use std::time::Duration;

use crate::store::entry::State;

/// How many live entries a store holds in each state, and how long the oldest `unknown` one
/// has been waiting: what a metrics endpoint samples ([`Store::census`](crate::Store::census)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Census {
    /// Running entries whose lease is live.
    pub running: u64,
    /// Running entries whose lease passed (`unknown`).
    pub unknown: u64,
    /// Settled with a result.
    pub done: u64,
    /// Settled with a kept error.
    pub failed: u64,
    /// How long ago, on the store's clock, the lease of the oldest `unknown` entry ended;
    /// `None` when there is none.
    pub oldest_unknown: Option<Duration>,
}

impl Census {
    /// A census of these counts.
    pub fn new(running: u64, unknown: u64, done: u64, failed: u64) -> Census {
        Census {
            running,
            unknown,
            done,
            failed,
            oldest_unknown: None,
        }
    }

    /// With the oldest `unknown` entry's wait.
    pub fn oldest_unknown(mut self, waited: Option<Duration>) -> Census {
        self.oldest_unknown = waited;
        self
    }

    /// The count of `state`.
    pub fn count(&self, state: State) -> u64 {
        match state {
            State::Running => self.running,
            State::Unknown => self.unknown,
            State::Done => self.done,
            State::Failed => self.failed,
        }
    }
}
