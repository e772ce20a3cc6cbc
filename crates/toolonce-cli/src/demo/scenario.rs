//! The scenarios: what each one scripts and expects, and the store and scope prefix of the runs
//! with toolonce.

use std::sync::Arc;
use std::time::Duration;

use toolonce::Store;

use super::model::{Turn, charge, email, turn};

/// The lease in the crash scenario: the resumed run waits this long for the dead run's claim.
pub(super) const CRASH_LEASE: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Scenario {
    Retry,
    AskAgain,
    Crash,
    Parallel,
    EmailCrash,
    NestedControl,
}

impl Scenario {
    pub(super) const ALL: [Scenario; 6] = [
        Scenario::Retry,
        Scenario::AskAgain,
        Scenario::Crash,
        Scenario::Parallel,
        Scenario::EmailCrash,
        Scenario::NestedControl,
    ];

    pub(super) fn label(self) -> &'static str {
        match self {
            Scenario::Retry => "1. loop retries after a model timeout",
            Scenario::AskAgain => "2. model asks again, new tool_use id",
            Scenario::Crash => "3. crash after the charge, resume",
            Scenario::Parallel => "4. two parallel duplicate calls",
            Scenario::EmailCrash => "5. crash after an email (no key), resume",
            Scenario::NestedControl => "control: cards A and B (nested)",
        }
    }

    pub(super) fn slug(self) -> &'static str {
        match self {
            Scenario::Retry => "retry",
            Scenario::AskAgain => "ask-again",
            Scenario::Crash => "crash",
            Scenario::Parallel => "parallel",
            Scenario::EmailCrash => "email-crash",
            Scenario::NestedControl => "nested-control",
        }
    }

    pub(super) fn from_slug(slug: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.slug() == slug)
    }

    /// Whether an agent process is killed after the effect and a run resumes it.
    pub(super) fn crashes(self) -> bool {
        matches!(self, Scenario::Crash | Scenario::EmailCrash)
    }

    /// How many charges (emails) the scenario should make.
    pub(super) fn expected(self) -> usize {
        match self {
            Scenario::NestedControl => 2,
            _ => 1,
        }
    }

    pub(super) fn script(self) -> Vec<Turn> {
        match self {
            Scenario::Retry => vec![Turn {
                calls: vec![charge("toolu_01", "A")],
                times_out_once: true,
            }],
            Scenario::AskAgain => vec![
                turn(vec![charge("toolu_01", "A")]),
                turn(vec![charge("toolu_02", "A")]),
            ],
            Scenario::Crash => vec![turn(vec![charge("toolu_01", "A")])],
            Scenario::EmailCrash => vec![turn(vec![email("toolu_01")])],
            Scenario::Parallel => {
                vec![turn(vec![charge("toolu_01", "A"), charge("toolu_02", "A")])]
            }
            Scenario::NestedControl => vec![
                turn(vec![charge("toolu_01", "A")]),
                turn(vec![charge("toolu_02", "B")]),
            ],
        }
    }
}

/// The store and scope prefix of the runs with toolonce.
pub(super) struct Guard {
    pub(super) store: Arc<dyn Store>,
    pub(super) url: String,
    pub(super) run_id: String,
    /// Whether other processes see the store's entries (not `memory://`): a run resumed after
    /// a crash then finds the dead run's claim.
    pub(super) shared: bool,
}

impl Guard {
    pub(super) fn scope(&self, scenario: Scenario) -> String {
        format!("{}/{}", self.run_id, scenario.slug())
    }
}
