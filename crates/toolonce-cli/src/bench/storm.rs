//! `toolonce bench --storm N`: N concurrent duplicates of one operation fired at the store at
//! once, through a [`Toolbox`] as users call it, with a write tool that takes 20 ms and counts
//! its executions. Three storms, each on an operation of its own:
//!
//! - `in_flight`: the default policy; duplicates that find the operation running are answered
//!   `in_flight` at once, later ones `replayed`.
//! - `wait`: `InFlight::Wait`; duplicates that find it running wait for it and are answered
//!   `replayed` (counted as `waited` when the caller started before the execution ended).
//! - `store_stopped`: the default policy, the store stopped halfway: half the callers are let
//!   go, and once all but the owner are answered the store is stopped, the other half let go,
//!   and the owner's tool finishes only after they are all answered. Every caller answered
//!   after the stop must fail closed and nothing may execute after it. The bench stops a
//!   store it reaches through a TCP proxy of its own in front of the one server (plain
//!   `redis://` and `postgres://`); it says why it cannot for the others.
//!
//! Each storm must execute its operation exactly once (`store_stopped`: once, before the
//! stop); the command exits non-zero otherwise.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use tokio::sync::watch;
use toolonce::{
    InFlight, OperationKey, Outcome, Store, ToolError, Toolbox, WriteContext, WriteOptions,
};

use super::args::{LEASE, RETENTION};
use super::floor::{self, Kind};
use crate::exit;
use crate::output::outln;

mod proxy;

const TOOL: &str = "bench_storm";
/// How long the storm's tool takes: long enough for duplicates to find it running.
const HOLD: Duration = Duration::from_millis(20);

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct StormArgs {
    /// Which storm.
    storm: String,
}

/// What the tool saw: when each execution started, and when the last one ended.
#[derive(Default)]
struct Runs {
    started: Mutex<Vec<Instant>>,
    ended: Mutex<Option<Instant>>,
}

/// The storm's write tool: counts its executions, then holds for [`HOLD`], or until `release`
/// says so when it is set (the `store_stopped` storm).
struct StormTool {
    runs: Arc<Runs>,
    release: Option<watch::Receiver<bool>>,
}

impl toolonce::WriteTool for StormTool {
    type Args = StormArgs;
    type Output = Value;
    fn name(&self) -> &str {
        TOOL
    }
    fn description(&self) -> &str {
        "Does nothing for a moment: the storm's write tool."
    }
    async fn call(&self, _ctx: WriteContext, args: StormArgs) -> Result<Value, ToolError> {
        self.runs
            .started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
        match &self.release {
            Some(release) => {
                let mut release = release.clone();
                let _ = release.wait_for(|go| *go).await;
            }
            None => tokio::time::sleep(HOLD).await,
        }
        *self.runs.ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        Ok(json!({"storm": args.storm}))
    }
}

/// One caller's answer: its outcome, and when the caller started.
struct Answered {
    outcome: Outcome,
    start: Instant,
}

/// A storm's figures.
struct Report {
    name: &'static str,
    callers: u64,
    executions: usize,
    /// Outcomes by name, with `replayed` split into `replayed` and `waited`.
    answers: BTreeMap<&'static str, u64>,
    wall: Duration,
    /// Only for `store_stopped`: executions begun after the stop, the answers of the callers
    /// that came after it by outcome, and the entry's state once the store is back.
    after_stop: Option<(usize, BTreeMap<&'static str, u64>, String)>,
}

impl Report {
    fn ok(&self) -> bool {
        let once = self.executions == 1;
        match &self.after_stop {
            None => once,
            Some((late, answers, _)) => {
                once && *late == 0
                    && answers
                        .keys()
                        .all(|o| !matches!(*o, "executed" | "replayed" | "waited"))
            }
        }
    }

    fn to_json(&self) -> Value {
        let mut row = json!({
            "storm": self.name,
            "callers": self.callers,
            "executions": self.executions,
            "answers": self.answers,
            "wall_ms": (self.wall.as_secs_f64() * 1e4).round() / 10.0,
        });
        if let Some((late, answers, entry)) = &self.after_stop {
            row["executions_after_stop"] = json!(late);
            row["answers_after_stop"] = json!(answers);
            row["entry_after_restart"] = json!(entry);
        }
        row
    }
}

/// The store of the run, opened for a storm, and what it needs removed afterwards.
struct Opened {
    store: Arc<dyn Store>,
    kind: Kind,
    keys: Vec<OperationKey>,
}

impl Opened {
    async fn clean_up(self) -> anyhow::Result<()> {
        if self.kind.entries_need_deleting() {
            for key in &self.keys {
                let store = &self.store;
                back(|| store.delete(key))
                    .await
                    .context("deleting a storm entry")?;
            }
        }
        self.kind.clean_up(0, 0).await
    }
}

pub(super) async fn run(
    url: &str,
    callers: u64,
    json_out: bool,
) -> anyhow::Result<std::process::ExitCode> {
    let run_id = format!("{:016x}", super::env::rand_u64());
    let mut reports = Vec::new();
    for (name, policy) in [
        ("in_flight", InFlight::Reject),
        ("wait", InFlight::Wait(Duration::from_secs(30))),
    ] {
        let (store, kind) = floor::open(url, &format!("{run_id}{name}")).await?;
        let mut opened = Opened {
            store,
            kind,
            keys: Vec::new(),
        };
        let storm = storm(&mut opened, name, policy, callers, None).await;
        opened.clean_up().await?;
        reports.push(storm?);
    }
    let stopped = match proxy::stoppable(url) {
        Ok((target, through)) => {
            let proxy = proxy::Proxy::start(target).await?;
            let proxied = through(proxy.addr());
            let (store, kind) = floor::open(&proxied, &format!("{run_id}stop"))
                .await
                .with_context(|| {
                    format!(
                        "opening the store through the storm's proxy at {}",
                        proxy.addr()
                    )
                })?;
            let mut opened = Opened {
                store,
                kind,
                keys: Vec::new(),
            };
            let storm = storm(
                &mut opened,
                "store_stopped",
                InFlight::Reject,
                callers,
                Some(&proxy),
            )
            .await;
            proxy.resume();
            opened.clean_up().await?;
            reports.push(storm?);
            None
        }
        Err(why) => Some(why),
    };
    let ok = reports.iter().all(Report::ok);
    if json_out {
        let storms: Vec<Value> = reports.iter().map(Report::to_json).collect();
        let mut doc = json!({
            "store": toolonce::store::redact_url(url),
            "runtime": super::env::runtime(),
            "storms": storms,
        });
        if let Some(why) = &stopped {
            doc["store_stopped"] = json!({"skipped": why});
        }
        outln!("{doc}");
    } else {
        print(url, &reports, stopped.as_deref())?;
    }
    if ok {
        Ok(std::process::ExitCode::SUCCESS)
    } else {
        Err(exit::internal(anyhow::anyhow!(
            "a storm executed its operation other than once, or after the store stopped"
        )))
    }
}

fn print(url: &str, reports: &[Report], skipped: Option<&str>) -> anyhow::Result<()> {
    outln!(
        "store: {} (storm of duplicates of one operation; runtime: {})",
        toolonce::store::redact_url(url),
        super::env::runtime()
    );
    for r in reports {
        let answers: Vec<String> = r.answers.iter().map(|(o, n)| format!("{o} {n}")).collect();
        outln!(
            "{:<14} callers {:>5}  executions {}  wall {:>8.1} ms  answers: {}",
            r.name,
            r.callers,
            r.executions,
            r.wall.as_secs_f64() * 1e3,
            answers.join(", ")
        );
        if let Some((late, after, entry)) = &r.after_stop {
            let after: Vec<String> = after.iter().map(|(o, n)| format!("{o} {n}")).collect();
            outln!(
                "{:<14} after the stop: executions {late}, callers' answers: {}; the entry once the store was back: {entry}",
                "",
                after.join(", ")
            );
        }
    }
    if let Some(why) = skipped {
        outln!("store_stopped  not run: {why}");
    }
    Ok(())
}

/// One storm of `callers` duplicates on `opened`; with `proxy`, stopped halfway.
async fn storm(
    opened: &mut Opened,
    name: &'static str,
    policy: InFlight,
    callers: u64,
    proxy: Option<&proxy::Proxy>,
) -> anyhow::Result<Report> {
    let runs = Arc::new(Runs::default());
    let (release_tx, release_rx) = watch::channel(false);
    let tool = StormTool {
        runs: Arc::clone(&runs),
        release: proxy.map(|_| release_rx),
    };
    let toolbox = toolbox_of(opened, tool, policy)?;
    // Stage 1 lets the first half go, stage 2 the rest.
    let (gate_tx, gate_rx) = watch::channel(0u8);
    let answered = Arc::new(AtomicU64::new(0));
    let first_half = if proxy.is_some() {
        callers.div_ceil(2)
    } else {
        callers
    };
    let tasks = spawn_callers(&toolbox, &gate_rx, &answered, callers, first_half, name);
    // Let every task reach its gate before the storm starts.
    tokio::task::yield_now().await;
    let start = Instant::now();
    let _ = gate_tx.send(1);
    let mut stopped_at = None;
    if let Some(proxy) = proxy {
        // All of the first half but the owner, whose tool holds until released.
        until(&answered, first_half - 1).await;
        proxy.stop();
        stopped_at = Some(Instant::now());
        let _ = gate_tx.send(2);
        until(&answered, callers - 1).await;
        let _ = release_tx.send(true);
    }
    let mut answers = Vec::with_capacity(callers as usize);
    for task in tasks {
        let (key, answer) = task.await.context("a storm caller panicked")?;
        if let Some(key) = key
            && !opened.keys.contains(&key)
        {
            opened.keys.push(key);
        }
        answers.push(answer);
    }
    let wall = start.elapsed();
    let started = runs
        .started
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let ended = *runs.ended.lock().unwrap_or_else(|e| e.into_inner());
    let (counts, after) = tally(&answers, policy, ended, stopped_at);
    let after_stop = match (stopped_at, proxy) {
        (Some(stop), Some(proxy)) => {
            let late = started.iter().filter(|s| **s > stop).count();
            proxy.resume();
            Some((late, after, entry_state(opened).await))
        }
        _ => None,
    };
    Ok(Report {
        name,
        callers,
        executions: started.len(),
        answers: counts,
        wall,
        after_stop,
    })
}

/// The toolbox the callers share: the storm's tool, in a scope of its own.
fn toolbox_of(opened: &Opened, tool: StormTool, policy: InFlight) -> anyhow::Result<Arc<Toolbox>> {
    let options = WriteOptions::new()
        .lease(LEASE)
        .retention(RETENTION)
        .in_flight(policy);
    Ok(Arc::new(
        Toolbox::builder(Arc::clone(&opened.store))
            .scope(format!("toolonce-bench-storm-{}", super::env::rand_u64()))
            .write_with(tool, options)
            .build()
            .map_err(exit::internal)?,
    ))
}

type Caller = tokio::task::JoinHandle<(Option<OperationKey>, Answered)>;

/// The callers, each waiting at the gate for its stage (the first half 1, the rest 2).
fn spawn_callers(
    toolbox: &Arc<Toolbox>,
    gate_rx: &watch::Receiver<u8>,
    answered: &Arc<AtomicU64>,
    callers: u64,
    first_half: u64,
    name: &'static str,
) -> Vec<Caller> {
    let mut tasks = Vec::with_capacity(callers as usize);
    for i in 0..callers {
        let (toolbox, mut gate, answered) =
            (Arc::clone(toolbox), gate_rx.clone(), Arc::clone(answered));
        let stage = if i < first_half { 1 } else { 2 };
        tasks.push(tokio::spawn(async move {
            let _ = gate.wait_for(|s| *s >= stage).await;
            let start = Instant::now();
            let answer = toolbox.call(TOOL, json!({"storm": name})).await;
            answered.fetch_add(1, Ordering::SeqCst);
            (
                answer.key,
                Answered {
                    outcome: answer.outcome,
                    start,
                },
            )
        }));
    }
    tasks
}

/// The callers' answers by outcome, all of them and those of the callers let go after the
/// stop.
fn tally(
    answers: &[Answered],
    policy: InFlight,
    ended: Option<Instant>,
    stopped_at: Option<Instant>,
) -> (BTreeMap<&'static str, u64>, BTreeMap<&'static str, u64>) {
    let mut counts = BTreeMap::new();
    let mut after = BTreeMap::new();
    for a in answers {
        let label = match a.outcome {
            // Only a waiting policy waits: under the default one a duplicate that started
            // before the execution ended and was replayed merely reached the store after it.
            Outcome::Replayed
                if matches!(policy, InFlight::Wait(_))
                    && ended.is_some_and(|end| a.start < end) =>
            {
                "waited"
            }
            other => other.as_str(),
        };
        *counts.entry(label).or_insert(0) += 1;
        // The callers let go after the stop (the owner, which started before it, is not one).
        if stopped_at.is_some_and(|stop| a.start > stop) {
            *after.entry(label).or_insert(0) += 1;
        }
    }
    (counts, after)
}

/// The state of the storm's entry once the store is back.
async fn entry_state(opened: &Opened) -> String {
    match opened.keys.first() {
        Some(key) => match back(|| opened.store.get(key)).await {
            Ok(Some(entry)) => entry.state().as_str().to_owned(),
            Ok(None) => "absent".to_owned(),
            Err(e) => format!("unreadable: {e}"),
        },
        None => "no key".to_owned(),
    }
}

/// `op`'s answer once the store is back: its connections were dropped by the stop and are
/// remade on the next request, so an unavailable store is asked again for up to 10 s.
async fn back<T, F, Fut>(op: F) -> toolonce::Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = toolonce::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match op().await {
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

/// Waits until `answered` reaches `n`.
async fn until(answered: &AtomicU64, n: u64) {
    while answered.load(Ordering::SeqCst) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
