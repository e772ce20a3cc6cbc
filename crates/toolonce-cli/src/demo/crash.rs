//! The crash: the agent of a crash scenario as a child process (`toolonce __demo-child`),
//! killed with SIGKILL by the demo as soon as the effect happened, before it records anything.

use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use toolonce::WriteOptions;

use super::agent::run_agent;
use super::args::ChildArgs;
use super::provider::{Mailer, Provider};
use super::scenario::{CRASH_LEASE, Guard, Scenario};
use super::tools::{Charger, DONE_IT, Tools};

/// Starts the crash scenario's agent as a child process and kills it with SIGKILL as soon as
/// the provider has charged, before it records anything.
pub(super) async fn crash_and_kill(
    scenario: Scenario,
    ledger: &Path,
    outbox: &Path,
    checkpoint: &Path,
    guard: Option<&Guard>,
) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("cannot find the toolonce binary to re-run")?;
    let mut command = tokio::process::Command::new(exe);
    command
        .arg("__demo-child")
        .arg("--ledger")
        .arg(ledger)
        .arg("--outbox")
        .arg(outbox)
        .args(["--scenario", scenario.slug()])
        .arg("--checkpoint")
        .arg(checkpoint)
        .args(["--lease", &CRASH_LEASE.as_secs_f64().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match guard {
        Some(g) => command.args(["--store", &g.url, "--scope", &g.scope(scenario)]),
        None => command.args(["--scope", "unused"]),
    };
    let mut child = command.spawn().context("cannot start the agent process")?;
    let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    let said = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await;
    if !matches!(&said, Ok(Ok(Some(line))) if line == DONE_IT) {
        let _ = child.kill().await;
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr).await;
        }
        bail!("the agent process did not reach the effect: {said:?}\n{stderr}");
    }
    // SIGKILL: no destructor, no `complete`, no checkpoint.
    child
        .kill()
        .await
        .context("cannot kill the agent process")?;
    Ok(())
}

/// `toolonce __demo-child`: the agent of the crash scenario, killed by its parent mid-turn.
pub(crate) async fn child(a: ChildArgs) -> anyhow::Result<ExitCode> {
    let scenario = Scenario::from_slug(&a.scenario)
        .filter(|s| s.crashes())
        .with_context(|| format!("no crash scenario {:?}", a.scenario))?;
    let charger = Charger {
        provider: Provider::new(a.ledger),
        mailer: Mailer::new(a.outbox),
        crash_after_effect: true,
    };
    let tools = match a.store {
        None => Tools::Direct(charger),
        Some(url) => {
            let store = toolonce::store::open(&url).await?;
            let options = WriteOptions::new().lease(a.lease);
            Tools::toolonce(store, &a.scope, charger, options, Arc::default())?
        }
    };
    run_agent(&scenario.script(), &tools, 0, Some(&a.checkpoint)).await?;
    bail!("the agent was meant to be killed after the effect")
}
