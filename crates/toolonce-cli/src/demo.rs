//! `toolonce demo`: a scripted agent loop pays through a fake payment provider in each of the
//! four ways an agent runs a write tool twice (see the README and `docs/contract.md`), sends an
//! email through a fake mail server that knows no idempotency key, plus a control that must
//! charge twice. Every scenario runs once without toolonce and once with it; the command prints
//! a table and exits non-zero if a figure with toolonce is wrong.
//!
//! Nothing touches the network. The provider keeps its charges in a ledger file (the mail
//! server its emails in an outbox file), so a child process killed after the effect and the run
//! that resumes it count the same effects. Like real payment APIs the provider honours an
//! `Idempotency-Key`, and `charge_card` declares it: when an agent dies between the provider's
//! success and toolonce's record of it, the operation's outcome is unknown, and toolonce runs it
//! again with the same key, which the provider answers with the original charge. The mail
//! server has no such key, so `send_email` keeps the default policy: an unknown outcome is
//! held, not sent again, until a person checks.
//!
//! Layout: this file is the command (the run); `args` its arguments and the crashing child's,
//! `provider` the fake payment provider and mail server, `tools` the tools without and with
//! toolonce, `model` the scripted model's turns and tool calls, `agent` the agent loop,
//! `scenario` the scenarios (what each scripts and expects), `runner` one run of a scenario,
//! `crash` the child process killed after the effect, `report` the table and the explanations.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;

use crate::output::{self, outln};

mod agent;
mod args;
mod crash;
mod model;
mod provider;
mod report;
mod runner;
mod scenario;
mod tools;

pub(crate) use args::{ChildArgs, DemoArgs};
pub(crate) use crash::child;
use runner::run_scenario;
use scenario::{Guard, Scenario};

pub(crate) async fn run(a: DemoArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    // Declared first so it is removed last, after the store has been dropped.
    let dir = tempfile::Builder::new()
        .prefix("toolonce-demo-")
        .tempdir()?;
    let fresh = a.store.is_none();
    let url = a
        .store
        .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("demo.db").display()));
    let store = toolonce::store::open(&url).await.with_context(|| {
        format!(
            "cannot open the store {}",
            toolonce::store::redact_url(&url)
        )
    })?;
    let millis = output::millis_since_epoch(std::time::SystemTime::now());
    let guard = Guard {
        store,
        shared: !url.starts_with("memory:"),
        url,
        run_id: format!("demo-{millis}-{}", std::process::id()),
    };

    outln!(
        "toolonce demo: a scripted agent pays with the write tool charge_card, through a fake\n\
         payment provider that counts charges and honours an Idempotency-Key, and sends an\n\
         email with send_email, through a fake mail server that takes no key. Each scenario\n\
         runs without toolonce (calling the provider directly, no key), then with it; the\n\
         effects are the charges made (emails sent in scenario 5)."
    );
    outln!(
        "store: {} ({})\n",
        toolonce::store::redact_url(&guard.url),
        if fresh {
            "fresh for this run"
        } else {
            "given; scopes of this run start with the run id"
        }
    );

    let mut rows = Vec::new();
    for scenario in Scenario::ALL {
        let without = run_scenario(scenario, None, dir.path())
            .await
            .with_context(|| format!("scenario {:?} without toolonce", scenario.slug()))?;
        // Without a key downstream, only a claim other processes see can stop the second email:
        // a memory store dies with the agent process.
        let with = if scenario == Scenario::EmailCrash && !guard.shared {
            None
        } else {
            Some(
                run_scenario(scenario, Some(&guard), dir.path())
                    .await
                    .with_context(|| format!("scenario {:?} with toolonce", scenario.slug()))?,
            )
        };
        rows.push((scenario, without, with));
    }

    report::print(&rows, started)
}
