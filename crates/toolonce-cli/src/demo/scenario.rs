//! The scenarios: what each one scripts and expects, and one run of a scenario, without or
//! with toolonce, counting the effects downstream.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use toolonce::{InFlight, OperationKey, Outcome, Store, WriteOptions};

use super::CRASH_LEASE;
use super::agent::{Turn, charge, email, load_checkpoint, run_agent, turn};
use super::crash::crash_and_kill;
use super::provider::{Mailer, Provider};
use super::tools::{Charger, Tools};

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

/// What one run of a scenario did.
pub(super) struct Figures {
    /// Charges made, or emails sent.
    pub(super) effects: usize,
    /// Outcome and key of each call made through toolonce (by this process).
    pub(super) calls: Vec<(Outcome, Option<OperationKey>)>,
    pub(super) answered_from_key: u32,
    pub(super) reclaimed: bool,
    /// How long the resumed run of the crash scenario took.
    pub(super) resumed_in: Option<Duration>,
}

pub(super) async fn run_scenario(
    scenario: Scenario,
    guard: Option<&Guard>,
    dir: &Path,
) -> anyhow::Result<Figures> {
    let name = format!(
        "{}-{}",
        scenario.slug(),
        if guard.is_some() { "with" } else { "without" }
    );
    let provider = Provider::new(dir.join(format!("{name}.ledger")));
    let mailer = Mailer::new(dir.join(format!("{name}.outbox")));
    let reclaimed = Arc::new(AtomicBool::new(false));
    let charger = Charger {
        provider: provider.clone(),
        mailer: mailer.clone(),
        crash_after_effect: false,
    };
    let crash = scenario.crashes();
    let options = if crash {
        // The resumed run finds the dead run's claim still `running`: it waits for its lease
        // to expire; the outcome is then unknown, and the tool's policy decides.
        WriteOptions::new()
            .lease(CRASH_LEASE)
            .in_flight(InFlight::Wait(Duration::from_secs(10)))
    } else {
        WriteOptions::new()
    };
    let tools = match guard {
        None => Tools::Direct(charger),
        Some(g) => Tools::toolonce(
            g.store.clone(),
            &g.scope(scenario),
            charger,
            options,
            reclaimed.clone(),
        )?,
    };
    let (calls, resumed_in) = if crash {
        let checkpoint = dir.join(format!("{name}.checkpoint"));
        crash_and_kill(
            scenario,
            &provider.ledger,
            &mailer.outbox,
            &checkpoint,
            guard,
        )
        .await?;
        // Resume from the checkpoint, which is before the tool call.
        let started = Instant::now();
        let from = load_checkpoint(&checkpoint)?;
        let calls = run_agent(&scenario.script(), &tools, from, Some(&checkpoint)).await?;
        (calls, Some(started.elapsed()))
    } else {
        (run_agent(&scenario.script(), &tools, 0, None).await?, None)
    };
    let effects = if scenario == Scenario::EmailCrash {
        mailer.sent()?
    } else {
        provider.charges()?.len()
    };
    Ok(Figures {
        effects,
        calls,
        answered_from_key: provider.answered_from_key.load(Ordering::SeqCst),
        reclaimed: reclaimed.load(Ordering::SeqCst),
        resumed_in,
    })
}
