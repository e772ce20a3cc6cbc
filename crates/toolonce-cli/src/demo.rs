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

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use toolonce::{
    InFlight, OperationKey, Outcome, Store, ToolError, Toolbox, WriteContext, WriteOptions,
    WriteTool,
};

use crate::args;
use crate::output::{self, Align, Table, out, outln};

#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    /// Run against this store instead of a fresh SQLite file in a temporary directory. Each run
    /// uses scopes of its own, so earlier runs never interfere. (TOOLONCE_STORE is ignored
    /// here, so the demo never writes into your store unasked.)
    #[arg(long, value_name = "URL")]
    store: Option<String>,
}

/// The agent process of the crash scenario, started by the demo itself.
#[derive(clap::Args)]
pub(crate) struct ChildArgs {
    /// The fake provider's ledger file.
    #[arg(long)]
    ledger: PathBuf,
    /// The fake mail server's outbox file.
    #[arg(long)]
    outbox: PathBuf,
    /// The scenario whose agent this is (`crash` or `email-crash`).
    #[arg(long)]
    scenario: String,
    /// The agent's checkpoint file.
    #[arg(long)]
    checkpoint: PathBuf,
    /// Call the tool through toolonce on this store; directly when absent.
    #[arg(long)]
    store: Option<String>,
    #[arg(long)]
    scope: String,
    #[arg(long, value_parser = args::lease)]
    lease: Duration,
}

/// How long the provider takes to answer: long enough for parallel calls to overlap.
const PROVIDER_LATENCY: Duration = Duration::from_millis(20);
/// The lease in the crash scenario: the resumed run waits this long for the dead run's claim.
const CRASH_LEASE: Duration = Duration::from_secs(1);
/// The width the explanations are wrapped at.
const WIDTH: usize = 96;
/// What the crashing child prints once the effect (a charge, an email) happened, so the parent
/// kills it then.
const DONE_IT: &str = "done it";

// ---------------------------------------------------------------------------------------------
// The fake payment provider.

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Payment {
    card: String,
    cents: u64,
}

/// The arguments of `charge_card`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct ChargeArgs {
    payment: Payment,
}

/// One line of the ledger: a charge the provider made.
#[derive(Serialize, Deserialize)]
struct Charge {
    id: String,
    card: String,
    cents: u64,
    idempotency_key: Option<String>,
}

/// A payment provider that charges by appending to a ledger file, and answers a request whose
/// `Idempotency-Key` it has already seen with the original charge instead of a new one.
struct Provider {
    ledger: PathBuf,
    /// Makes "look up the key, then append" one step for the calls of this process. A std
    /// Mutex is enough: nothing awaits while it is held. Processes never share a ledger at the
    /// same time (the crashed child is dead before the resumed run starts).
    lock: Mutex<()>,
    /// Requests answered from an `Idempotency-Key` instead of charging.
    answered_from_key: AtomicU32,
}

impl Provider {
    fn new(ledger: PathBuf) -> Arc<Self> {
        Arc::new(Provider {
            ledger,
            lock: Mutex::new(()),
            answered_from_key: AtomicU32::new(0),
        })
    }

    /// Charges the card, or returns the original charge of an `Idempotency-Key` seen before.
    async fn charge(
        &self,
        payment: &Payment,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<String> {
        tokio::time::sleep(PROVIDER_LATENCY).await;
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let charges = self.charges()?;
        if let Some(key) = idempotency_key
            && let Some(original) = charges
                .iter()
                .find(|c| c.idempotency_key.as_deref() == Some(key))
        {
            self.answered_from_key.fetch_add(1, Ordering::SeqCst);
            return Ok(original.id.clone());
        }
        let charge = Charge {
            id: format!("ch_{}", charges.len() + 1),
            card: payment.card.clone(),
            cents: payment.cents,
            idempotency_key: idempotency_key.map(str::to_owned),
        };
        // One write of one line to a file opened for appending: once it returns, the charge is
        // in the file even if the process is killed the next instant.
        let line = format!("{}\n", serde_json::to_string(&charge)?);
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.ledger)?
            .write_all(line.as_bytes())?;
        Ok(charge.id)
    }

    fn charges(&self) -> anyhow::Result<Vec<Charge>> {
        let text = match std::fs::read_to_string(&self.ledger) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e.into()),
        };
        text.lines()
            .map(|line| Ok(serde_json::from_str(line)?))
            .collect()
    }
}

/// The arguments of `send_email`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct EmailArgs {
    to: String,
    subject: String,
}

/// A mail server that sends by appending to an outbox file. Like SMTP it knows no idempotency
/// key: every request it gets is one more email.
struct Mailer {
    outbox: PathBuf,
}

impl Mailer {
    fn new(outbox: PathBuf) -> Arc<Self> {
        Arc::new(Mailer { outbox })
    }

    async fn send(&self, email: &EmailArgs) -> anyhow::Result<usize> {
        tokio::time::sleep(PROVIDER_LATENCY).await;
        let line = format!("{}\n", serde_json::to_string(email)?);
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.outbox)?
            .write_all(line.as_bytes())?;
        self.sent()
    }

    fn sent(&self) -> anyhow::Result<usize> {
        match std::fs::read_to_string(&self.outbox) {
            Ok(text) => Ok(text.lines().count()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e.into()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The tools, without and with toolonce.

/// Calls the provider and the mail server; in the crashing child, stops right after the
/// effect.
#[derive(Clone)]
struct Charger {
    provider: Arc<Provider>,
    mailer: Arc<Mailer>,
    crash_after_effect: bool,
}

impl Charger {
    async fn charge(
        &self,
        args: &ChargeArgs,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<String> {
        let receipt = self.provider.charge(&args.payment, idempotency_key).await?;
        if self.crash_after_effect {
            match crash_here().await {}
        }
        Ok(receipt)
    }

    async fn send(&self, email: &EmailArgs) -> anyhow::Result<usize> {
        let number = self.mailer.send(email).await?;
        if self.crash_after_effect {
            match crash_here().await {}
        }
        Ok(number)
    }
}

/// Where the crashing child stops: it tells the parent that the effect happened, then waits to
/// be killed before it can record anything (toolonce's result, the agent's checkpoint).
async fn crash_here() -> std::convert::Infallible {
    {
        let mut stdout = std::io::stdout().lock();
        // If the parent is gone there is nobody to kill us; waiting forever is still right.
        let _ = writeln!(stdout, "{DONE_IT}").and_then(|()| stdout.flush());
    }
    std::future::pending().await
}

/// `charge_card` as a toolonce write tool: it hands the operation key to the provider.
struct ChargeCard {
    charger: Charger,
    /// Set when the layer says an earlier run of the operation may have started (a reclaim).
    reclaimed: Arc<AtomicBool>,
}

impl WriteTool for ChargeCard {
    type Args = ChargeArgs;
    type Output = Value;

    fn name(&self) -> &str {
        "charge_card"
    }

    fn description(&self) -> &str {
        "Charge a card."
    }

    /// The provider deduplicates by the Idempotency-Key it is handed: running the operation
    /// again after an unknown outcome is safe (policy `rerun`).
    fn honours_key(&self) -> bool {
        true
    }

    async fn call(&self, ctx: WriteContext, args: ChargeArgs) -> Result<Value, ToolError> {
        if ctx.may_have_run_before() {
            self.reclaimed.store(true, Ordering::SeqCst);
        }
        let (_header, key) = ctx.idempotency_header();
        let receipt = self
            .charger
            .charge(&args, Some(key))
            .await
            .map_err(|e| ToolError::transient(format!("the payment provider failed: {e:#}")))?;
        Ok(json!({"receipt": receipt, "card": args.payment.card, "cents": args.payment.cents}))
    }
}

/// `send_email` as a toolonce write tool. Its mail server takes no key, so it declares nothing:
/// an unknown outcome is held (policy `hold`, the default).
struct SendEmail {
    charger: Charger,
}

impl WriteTool for SendEmail {
    type Args = EmailArgs;
    type Output = Value;

    fn name(&self) -> &str {
        "send_email"
    }

    fn description(&self) -> &str {
        "Send an email."
    }

    async fn call(&self, _ctx: WriteContext, args: EmailArgs) -> Result<Value, ToolError> {
        let number = self
            .charger
            .send(&args)
            .await
            .map_err(|e| ToolError::transient(format!("the mail server failed: {e:#}")))?;
        Ok(json!({"sent": number, "to": args.to}))
    }
}

/// How the agent loop runs its tool calls: straight to the provider, or through toolonce.
enum Tools {
    Direct(Charger),
    Toolonce(Toolbox),
}

impl Tools {
    fn toolonce(
        store: Arc<dyn Store>,
        scope: &str,
        charger: Charger,
        options: WriteOptions,
        reclaimed: Arc<AtomicBool>,
    ) -> anyhow::Result<Tools> {
        let email = SendEmail {
            charger: charger.clone(),
        };
        let tool = ChargeCard { charger, reclaimed };
        let toolbox = Toolbox::builder(store)
            .scope(scope)
            .write_with(tool, options.clone())
            .write_with(email, options)
            .build()?;
        Ok(Tools::Toolonce(toolbox))
    }

    /// Runs one tool call; through toolonce, returns how it ended and its key.
    async fn call(
        &self,
        call: &ToolCall,
    ) -> anyhow::Result<Option<(Outcome, Option<OperationKey>)>> {
        match self {
            // No key: a direct call cannot tell a duplicate from a new charge.
            Tools::Direct(charger) if call.tool == "send_email" => {
                charger
                    .send(&serde_json::from_value(call.args.clone())?)
                    .await?;
                Ok(None)
            }
            Tools::Direct(charger) => {
                let args: ChargeArgs = serde_json::from_value(call.args.clone())?;
                charger.charge(&args, None).await?;
                Ok(None)
            }
            Tools::Toolonce(toolbox) => {
                let result = toolbox.call(call.tool, call.args.clone()).await;
                Ok(Some((result.outcome, result.key)))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The scripted model and the agent loop.

/// One `tool_use` block of a model reply.
struct ToolCall {
    /// A new one for every attempt: the operation key deliberately ignores it.
    id: &'static str,
    tool: &'static str,
    args: Value,
}

/// One turn of the scripted model: the tool calls it asks for, and whether the request that
/// carries their results back to the model provider times out once.
struct Turn {
    calls: Vec<ToolCall>,
    times_out_once: bool,
}

fn turn(calls: Vec<ToolCall>) -> Turn {
    Turn {
        calls,
        times_out_once: false,
    }
}

fn charge(id: &'static str, card: &str) -> ToolCall {
    ToolCall {
        id,
        tool: "charge_card",
        args: json!({"payment": {"card": card, "cents": 4200}}),
    }
}

fn email(id: &'static str) -> ToolCall {
    ToolCall {
        id,
        tool: "send_email",
        args: json!({"to": "ada@example.com", "subject": "Your receipt"}),
    }
}

/// The agent loop. Each turn runs the model's tool calls (in parallel, as agents do) and sends
/// the results back; when that request times out, the turn is retried. With a checkpoint file,
/// the loop records the turn it is about to run before running its tools, so a resumed run
/// starts again before the tool calls of an unfinished turn.
async fn run_agent(
    script: &[Turn],
    tools: &Tools,
    from_turn: usize,
    checkpoint: Option<&Path>,
) -> anyhow::Result<Vec<(Outcome, Option<OperationKey>)>> {
    let mut outcomes = Vec::new();
    let mut timed_out = vec![false; script.len()];
    let mut turn = from_turn;
    while let Some(current) = script.get(turn) {
        if let Some(path) = checkpoint {
            std::fs::write(path, json!({"next_turn": turn}).to_string())?;
        }
        let answers = futures_util::future::join_all(
            current
                .calls
                .iter()
                .map(|c| async move { (c.id, tools.call(c).await) }),
        )
        .await;
        for (id, answer) in answers {
            outcomes.extend(answer.with_context(|| format!("tool call {id}"))?);
        }
        if current.times_out_once && !timed_out[turn] {
            // The model provider timed out on the request carrying the results: retry the turn.
            timed_out[turn] = true;
            continue;
        }
        turn += 1;
    }
    if let Some(path) = checkpoint {
        std::fs::write(path, json!({"next_turn": turn}).to_string())?;
    }
    Ok(outcomes)
}

fn load_checkpoint(path: &Path) -> anyhow::Result<usize> {
    let text = std::fs::read_to_string(path).context("the crashed run left no checkpoint")?;
    let doc: Value = serde_json::from_str(&text)?;
    doc["next_turn"]
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .context("the checkpoint has no next_turn")
}

// ---------------------------------------------------------------------------------------------
// The scenarios.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Retry,
    AskAgain,
    Crash,
    Parallel,
    EmailCrash,
    NestedControl,
}

impl Scenario {
    const ALL: [Scenario; 6] = [
        Scenario::Retry,
        Scenario::AskAgain,
        Scenario::Crash,
        Scenario::Parallel,
        Scenario::EmailCrash,
        Scenario::NestedControl,
    ];

    fn label(self) -> &'static str {
        match self {
            Scenario::Retry => "1. loop retries after a model timeout",
            Scenario::AskAgain => "2. model asks again, new tool_use id",
            Scenario::Crash => "3. crash after the charge, resume",
            Scenario::Parallel => "4. two parallel duplicate calls",
            Scenario::EmailCrash => "5. crash after an email (no key), resume",
            Scenario::NestedControl => "control: cards A and B (nested)",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Scenario::Retry => "retry",
            Scenario::AskAgain => "ask-again",
            Scenario::Crash => "crash",
            Scenario::Parallel => "parallel",
            Scenario::EmailCrash => "email-crash",
            Scenario::NestedControl => "nested-control",
        }
    }

    fn from_slug(slug: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.slug() == slug)
    }

    /// Whether an agent process is killed after the effect and a run resumes it.
    fn crashes(self) -> bool {
        matches!(self, Scenario::Crash | Scenario::EmailCrash)
    }

    /// How many charges (emails) the scenario should make.
    fn expected(self) -> usize {
        match self {
            Scenario::NestedControl => 2,
            _ => 1,
        }
    }

    fn script(self) -> Vec<Turn> {
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
struct Guard {
    store: Arc<dyn Store>,
    url: String,
    run_id: String,
    /// Whether other processes see the store's entries (not `memory://`): a run resumed after
    /// a crash then finds the dead run's claim.
    shared: bool,
}

impl Guard {
    fn scope(&self, scenario: Scenario) -> String {
        format!("{}/{}", self.run_id, scenario.slug())
    }
}

/// What one run of a scenario did.
struct Figures {
    /// Charges made, or emails sent.
    effects: usize,
    /// Outcome and key of each call made through toolonce (by this process).
    calls: Vec<(Outcome, Option<OperationKey>)>,
    answered_from_key: u32,
    reclaimed: bool,
    /// How long the resumed run of the crash scenario took.
    resumed_in: Option<Duration>,
}

async fn run_scenario(
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

/// Starts the crash scenario's agent as a child process and kills it with SIGKILL as soon as
/// the provider has charged, before it records anything.
async fn crash_and_kill(
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

// ---------------------------------------------------------------------------------------------
// The report.

fn outcomes(figures: &Figures) -> String {
    let words: Vec<&str> = figures.calls.iter().map(|(o, _)| o.as_str()).collect();
    words.join(", ")
}

/// What happened: the scenario, then what toolonce did about it.
fn explain(scenario: Scenario, without: &Figures, with: &Figures) -> (String, String) {
    let (w, t) = (without.effects, with.effects);
    let did = outcomes(with);
    let first_key = with.calls.iter().find_map(|(_, k)| k.as_ref());
    match scenario {
        Scenario::Retry => (
            "The model provider timed out after charge_card had run, and the loop re-sent the \
             turn."
                .into(),
            format!(
                "Without toolonce the retry charged again ({w} charges). With it ({did}) the \
                 retry got the first receipt back from the store."
            ),
        ),
        Scenario::AskAgain => (
            "The model asked for the same charge again in a later turn, with a new tool_use id \
             (toolu_01, then toolu_02)."
                .into(),
            format!(
                "Without toolonce: {w} charges. The key ignores the tool_use id, so with it \
                 ({did}) the second call got the first receipt."
            ),
        ),
        Scenario::Crash => {
            let key = first_key.map_or("the same key".into(), |k| format!("the same key {k}"));
            let mut text = format!("Without toolonce: {w} charges. With it ({did}): ");
            if with.reclaimed {
                let resumed = with.resumed_in.map_or_else(String::new, output::duration);
                text += &format!(
                    "the resumed run found the dead run's claim still running, waited for its \
                     {} lease to expire (resumed in {resumed}), found the outcome unknown, and, \
                     since charge_card declares that its provider honours the key (policy \
                     rerun), ran charge_card again with {key}; ",
                    output::duration(CRASH_LEASE)
                );
            } else {
                text += &format!("the resumed run ran charge_card again with {key}; ");
            }
            if with.answered_from_key > 0 {
                text += "the provider returned the original charge instead of charging again: \
                         saved by the Idempotency-Key handed downstream.";
            } else {
                text += &format!("{t} charge(s).");
            }
            (
                "The agent process was killed with SIGKILL right after the charge, before it \
                 could record anything; a run resumed from its last checkpoint, taken before \
                 the tool call, and replayed the call."
                    .into(),
                text,
            )
        }
        Scenario::EmailCrash => {
            let setup = "The agent process was killed with SIGKILL right after send_email, whose \
                         mail server takes no idempotency key; a run resumed from its checkpoint \
                         and replayed the call."
                .to_owned();
            let result = if with.calls.iter().any(|(o, _)| *o == Outcome::Unknown) {
                let key = first_key.map_or_else(|| "KEY".to_owned(), ToString::to_string);
                format!(
                    "Without toolonce: {w} emails. With it ({did}): the resumed run waited for \
                     the dead run's {} lease to expire and found the outcome unknown; \
                     send_email keeps the default policy (hold), so it was not sent again \
                     ({t} email): the model was told the email may have been sent, not to \
                     retry, and that a person must check, who then settles it with `toolonce \
                     resolve {key} --done JSON | --failed MESSAGE | --release`.",
                    output::duration(CRASH_LEASE)
                )
            } else {
                format!("Without toolonce: {w} emails. With it ({did}): {t} email(s).")
            };
            (setup, result)
        }
        Scenario::Parallel => {
            let other = match with
                .calls
                .iter()
                .map(|(o, _)| *o)
                .find(|o| *o != Outcome::Executed)
            {
                Some(Outcome::InFlight) => {
                    "the other was told the charge is already in flight and must not be retried"
                }
                Some(Outcome::Replayed) => "the other got the first receipt",
                _ => "the other did not charge",
            };
            (
                "The model put the same call twice in one reply, and the loop ran both at once."
                    .into(),
                format!(
                    "Without toolonce: {w} charges. With it ({did}) one call charged; {other}."
                ),
            )
        }
        Scenario::NestedControl => {
            let keys: Vec<String> = with
                .calls
                .iter()
                .filter_map(|(_, k)| k.as_ref().map(ToString::to_string))
                .collect();
            (
                "Two charges whose arguments differ only in a nested field, payment.card (A, then \
                 B), are two operations and must both happen."
                    .into(),
                format!(
                    "With toolonce: {t} charges ({did}), under two keys ({}). A key over the \
                     top-level fields only would merge them and give card B card A's receipt.",
                    keys.join(" and ")
                ),
            )
        }
    }
}

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

    let mut table = Table::new(
        &[
            ("scenario", Align::Left),
            ("effects without", Align::Right),
            ("effects with", Align::Right),
            ("expected", Align::Right),
            ("ok", Align::Left),
        ],
        " | ",
    );
    for (scenario, without, with) in &rows {
        let (with, ok) = match with {
            Some(with) if with.effects == scenario.expected() => (with.effects.to_string(), "yes"),
            Some(with) => (with.effects.to_string(), "NO"),
            None => ("-".to_owned(), "skipped"),
        };
        table.row(vec![
            scenario.label().into(),
            without.effects.to_string(),
            with,
            scenario.expected().to_string(),
            ok.into(),
        ]);
    }
    out!("{}", table.render());
    outln!();
    for (scenario, without, with) in &rows {
        let (setup, result) = match with {
            Some(with) => explain(*scenario, without, with),
            None => (
                explain(*scenario, without, without).0,
                format!(
                    "Without toolonce: {} emails. Skipped with toolonce: a memory:// store lives \
                     in one process, so the resumed run cannot see the dead run's claim, and \
                     with no key downstream nothing else can stop the second email. Run the \
                     demo on a store that outlives the process (the default SQLite file).",
                    without.effects
                ),
            ),
        };
        let number = match scenario.label().split_once(' ') {
            Some((number, _)) => format!("{number} "),
            None => String::new(),
        };
        out!("{}", output::wrap(&number, &setup, WIDTH));
        out!(
            "{}",
            output::wrap(&" ".repeat(number.len()), &result, WIDTH)
        );
    }
    outln!();

    // The rows run with toolonce (a skipped one is not counted either way).
    let ran: Vec<(Scenario, &Figures, &Figures)> = rows
        .iter()
        .filter_map(|(s, without, with)| with.as_ref().map(|with| (*s, without, with)))
        .collect();
    let skipped = rows.len() - ran.len();
    let wrong = ran
        .iter()
        .filter(|(s, _, w)| w.effects != s.expected())
        .count();
    let extra = |pick: fn(&(Scenario, &Figures, &Figures)) -> usize| -> usize {
        ran.iter()
            .map(|r| pick(r).saturating_sub(r.0.expected()))
            .sum()
    };
    let (extra_without, extra_with) = (extra(|r| r.1.effects), extra(|r| r.2.effects));
    let took = output::duration(started.elapsed());
    let skipped = if skipped > 0 {
        format!(" {skipped} skipped (see above).")
    } else {
        String::new()
    };
    let summary = if wrong == 0 {
        format!(
            "All {} \"with\" figures are right: without toolonce {extra_without} duplicate \
             effect(s) (charges, emails), with it {extra_with}.{skipped} ({took})",
            ran.len()
        )
    } else {
        format!(
            "{wrong} of {} \"with\" figures are WRONG: duplicate effects without toolonce \
             {extra_without}, with it {extra_with}.{skipped} ({took})",
            ran.len()
        )
    };
    out!("{}", output::wrap("", &summary, WIDTH));
    Ok(if wrong == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
