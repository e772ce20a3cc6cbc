//! One run of a scenario, without or with toolonce, counting the effects downstream.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use toolonce::{InFlight, OperationKey, Outcome, WriteOptions};

use super::agent::{load_checkpoint, run_agent};
use super::crash::crash_and_kill;
use super::provider::{Mailer, Provider};
use super::scenario::{CRASH_LEASE, Guard, Scenario};
use super::tools::{Charger, Tools};

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
