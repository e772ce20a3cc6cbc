//! Runs one scenario's steps through the layer and checks each step's expectations: the
//! answer's outcome, value and error, how often the tool and the probe ran, the entry as the
//! store holds it, and what an operator's resolve or removal was answered.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use toolonce::key::{self, Derived, KeyFields};
use toolonce::{
    About, EntryState, ErrorClass, InFlight, OnExpired, Resolution, Resolved, Seen, Store,
    ToolError, Verified, WriteAnswer, WriteOptions,
};
use toolonce::{Entry, Removed, SeenSettled};

use super::caller::Caller;
use super::format::{Defaults, Expect, Policy, Scenario, Step};

type Checked = Result<(), String>;

/// How long a step may wait for a tool to start or a call to answer.
const PATIENCE: Duration = Duration::from_secs(20);
/// How long a `start` without a blocking tool pauses, so the caller is claiming or waiting.
const SETTLE: Duration = Duration::from_millis(150);

struct Run {
    store: Arc<dyn Store>,
    scope: String,
    tool: String,
    args: Value,
    policy: Policy,
    options: WriteOptions,
    callers: HashMap<String, Caller>,
    seen: HashMap<String, Entry>,
    runs: Arc<AtomicU32>,
    probes: Arc<AtomicU32>,
}

pub async fn run(store: Arc<dyn Store>, defaults: &Defaults, scenario: &Scenario) -> Checked {
    let policy = scenario.policy.over(&defaults.policy);
    let scope = format!(
        "scenario-{}-{}-{}",
        scenario.id,
        std::process::id(),
        toolonce::OwnerToken::generate().as_str()
    );
    let mut run = Run {
        store,
        scope,
        tool: defaults.tool.clone(),
        args: defaults.args.clone(),
        options: options(&policy)?,
        policy,
        callers: HashMap::new(),
        seen: HashMap::new(),
        runs: Arc::default(),
        probes: Arc::default(),
    };
    for (i, step) in scenario.steps.iter().enumerate() {
        run.step(step)
            .await
            .map_err(|e| format!("step {} ({}): {e}", i + 1, step.action))?;
    }
    // Nothing is left running: a caller still blocked is let go and dropped.
    for caller in run.callers.values_mut() {
        if let Some(task) = caller.running.take() {
            task.abort();
        }
    }
    Ok(())
}

fn options(policy: &Policy) -> Result<WriteOptions, String> {
    let ms = |v: Option<u64>, what| v.map(Duration::from_millis).ok_or(format!("no {what}"));
    let mut options = WriteOptions::new()
        .lease(ms(policy.lease_ms, "lease_ms")?)
        .retention(ms(policy.retention_ms, "retention_ms")?);
    options = match policy.on_expired.as_deref() {
        Some("hold") => options.on_expired(OnExpired::Hold),
        Some("rerun") => options.on_expired(OnExpired::Rerun),
        Some("verify") => options.on_expired(OnExpired::Verify),
        other => return Err(format!("on_expired {other:?}")),
    };
    options = match &policy.in_flight {
        Some(Value::String(s)) if s == "reject" => options.in_flight(InFlight::Reject),
        Some(wait) => match wait.get("wait_ms").and_then(Value::as_u64) {
            Some(ms) => options.in_flight(InFlight::Wait(Duration::from_millis(ms))),
            None => return Err(format!("in_flight {wait}")),
        },
        None => return Err("no in_flight".into()),
    };
    Ok(options)
}

impl Run {
    fn derived(&self, step: &Step) -> Result<Derived, String> {
        let args = step.args.as_ref().unwrap_or(&self.args);
        let fields = match &self.policy.key_fields {
            Some(f) => {
                Some(KeyFields::new(f.iter().map(String::as_str)).map_err(|e| e.to_string())?)
            }
            None => None,
        };
        key::derive(&self.scope, &self.tool, args, fields.as_ref()).map_err(|e| e.to_string())
    }

    fn derived_default(&self) -> Result<Derived, String> {
        let fields = match &self.policy.key_fields {
            Some(f) => {
                Some(KeyFields::new(f.iter().map(String::as_str)).map_err(|e| e.to_string())?)
            }
            None => None,
        };
        key::derive(&self.scope, &self.tool, &self.args, fields.as_ref()).map_err(|e| e.to_string())
    }

    fn caller_name(step: &Step) -> Result<String, String> {
        step.caller.clone().ok_or_else(|| "no caller".to_owned())
    }

    async fn step(&mut self, step: &Step) -> Checked {
        match step.action.as_str() {
            "call" => {
                let task = self.start(step).await?;
                let answer = answer_of(task).await?;
                self.check_answer(&answer, &step.expect).await
            }
            "start" => {
                let task = self.start(step).await?;
                let name = Self::caller_name(step)?;
                self.callers.get_mut(&name).expect("started").running = Some(task);
                Ok(())
            }
            "release" => {
                let caller = self.caller(step)?;
                let gate = caller.release.take().ok_or("no blocked tool to release")?;
                let _ = gate.send(());
                Ok(())
            }
            "await" => {
                let caller = self.caller(step)?;
                let task = caller.running.take().ok_or("no call started")?;
                let answer = answer_of(task).await?;
                self.check_answer(&answer, &step.expect).await
            }
            "abandon" => {
                let caller = self.caller(step)?;
                let task = caller.running.take().ok_or("no call started")?;
                task.abort();
                let _ = task.await;
                Ok(())
            }
            "fault" => {
                let caller = self.caller(step)?;
                let switch = match step.fault.as_deref() {
                    Some("lose_next_claim_reply") => &caller.faults.lose_next_claim_reply,
                    Some("lose_renewals") => &caller.faults.lose_renewals,
                    other => return Err(format!("unknown fault {other:?}")),
                };
                switch.store(true, Ordering::SeqCst);
                Ok(())
            }
            "wait" => {
                let ms = match (step.ms, step.leases) {
                    (Some(ms), None) => ms,
                    (None, Some(n)) => n * self.policy.lease_ms.unwrap_or_default(),
                    _ => return Err("wait needs ms or leases".into()),
                };
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(())
            }
            "read" => {
                let key = self.derived(step)?.key;
                let entry = self.store.get(&key).await.map_err(|e| e.to_string())?;
                let label = step.label.clone().ok_or("read needs as")?;
                self.seen.insert(label, entry.ok_or("no entry to read")?);
                self.check_common(&step.expect, None).await
            }
            "resolve" => {
                let answer = self.resolve(step).await?;
                self.check_operator(answer, &step.expect).await
            }
            "remove" => {
                let answer = self.remove(step).await?;
                self.check_operator(answer, &step.expect).await
            }
            "check" => self.check_common(&step.expect, None).await,
            other => Err(format!("unknown step {other:?}")),
        }
    }

    fn caller(&mut self, step: &Step) -> Result<&mut Caller, String> {
        let name = Self::caller_name(step)?;
        let store = self.store.clone();
        Ok(self
            .callers
            .entry(name)
            .or_insert_with(|| Caller::new(store)))
    }

    /// Starts the step's call on its caller's layer; with a blocking tool, once the tool runs.
    async fn start(&mut self, step: &Step) -> Result<tokio::task::JoinHandle<WriteAnswer>, String> {
        let name = Self::caller_name(step)?;
        let op = self.derived(step)?;
        let default_tool = json!({"returns": {"by": name}});
        let mut tool = step.tool.clone().unwrap_or(default_tool.clone());
        let store = self.store.clone();
        let caller = self
            .callers
            .entry(name.clone())
            .or_insert_with(|| Caller::new(store));
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
        let blocks = tool.get("blocks") == Some(&Value::Bool(true));
        if blocks {
            tool = tool.get("then").cloned().unwrap_or(default_tool);
            caller.release = Some(release_tx);
        }
        let probe = step.probe.clone();
        let (runs, probes) = (self.runs.clone(), self.probes.clone());
        let (layer, options) = (caller.layer.clone(), self.options.clone());
        let tool_name = self.tool.clone();
        let about = About::new(&self.scope, &self.tool);
        let task = tokio::spawn(async move {
            layer
                .run_with_verify(
                    &tool_name,
                    &op,
                    &about,
                    &options,
                    move |_ctx| async move {
                        probes.fetch_add(1, Ordering::SeqCst);
                        verdict(probe.as_ref())
                    },
                    move |_ctx| async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        if blocks {
                            let _ = started_tx.send(());
                            let _ = release_rx.await;
                        }
                        behave(&tool)
                    },
                )
                .await
        });
        if blocks {
            tokio::time::timeout(PATIENCE, started_rx)
                .await
                .map_err(|_| "the blocking tool never started")?
                .map_err(|_| "the call ended before its tool started")?;
        } else if step.action == "start" {
            tokio::time::sleep(SETTLE).await;
        }
        Ok(task)
    }

    async fn resolve(&mut self, step: &Step) -> Result<&'static str, String> {
        let entry = self.seen_entry(step)?;
        let resolution = match step.resolution.as_ref() {
            Some(Value::String(s)) if s == "release" => Resolution::Release,
            Some(r) if r.get("done").is_some() => Resolution::Done(r["done"].clone()),
            Some(r) if r.get("failed").and_then(Value::as_str).is_some() => {
                Resolution::Failed(ToolError::permanent(r["failed"].as_str().unwrap()))
            }
            other => return Err(format!("resolution {other:?}")),
        };
        let Some(seen) = Seen::of(&entry) else {
            return Ok("settled");
        };
        let retention = self.options.retention;
        let answer = self
            .store
            .resolve(&entry.key, &seen, &resolution, retention)
            .await
            .map_err(|e| e.to_string())?;
        Ok(match answer {
            Resolved::Applied => "applied",
            Resolved::Absent => "absent",
            Resolved::Settled(_) => "settled",
            Resolved::Live(_) => "live",
            Resolved::Changed(_) => "changed",
            other => return Err(format!("unexpected resolve answer {other:?}")),
        })
    }

    async fn remove(&mut self, step: &Step) -> Result<&'static str, String> {
        let entry = self.seen_entry(step)?;
        let seen = SeenSettled::of(&entry).ok_or("remove of an unsettled entry")?;
        let answer = self
            .store
            .remove(&entry.key, &seen)
            .await
            .map_err(|e| e.to_string())?;
        Ok(match answer {
            Removed::Applied => "applied",
            Removed::Absent => "absent",
            Removed::Changed(_) => "changed",
            other => return Err(format!("unexpected remove answer {other:?}")),
        })
    }

    fn seen_entry(&self, step: &Step) -> Result<Entry, String> {
        let label = step.seen.as_ref().ok_or("no seen")?;
        self.seen
            .get(label)
            .cloned()
            .ok_or(format!("nothing read as {label}"))
    }

    async fn check_operator(&self, answer: &str, expect: &Expect) -> Checked {
        if let Some(wanted) = &expect.answer
            && wanted != answer
        {
            return Err(format!("the store answered {answer}, expected {wanted}"));
        }
        self.check_common(expect, None).await
    }

    async fn check_answer(&self, answer: &WriteAnswer, expect: &Expect) -> Checked {
        let got = answer.outcome.as_str();
        if let Some(wanted) = &expect.outcome
            && wanted != got
        {
            return Err(format!(
                "outcome {got} ({:?}), expected {wanted}",
                answer.result
            ));
        }
        if let Some(wanted) = &expect.result
            && answer.result.as_ref().ok() != Some(wanted)
        {
            return Err(format!("result {:?}, expected {wanted}", answer.result));
        }
        if let Some(wanted) = &expect.error {
            let Err(error) = &answer.result else {
                return Err(format!("no error: {:?}", answer.result));
            };
            let class = match error.class {
                ErrorClass::Permanent => "permanent",
                _ => "transient",
            };
            if wanted.class.as_deref().is_some_and(|c| c != class) {
                return Err(format!("error class {class}, expected {:?}", wanted.class));
            }
            if wanted
                .message
                .as_deref()
                .is_some_and(|m| m != error.message)
            {
                return Err(format!(
                    "error {:?}, expected {:?}",
                    error.message, wanted.message
                ));
            }
        }
        if let Some(wanted) = expect.notice
            && answer.notice.is_some() != wanted
        {
            return Err(format!(
                "notice {:?}, expected one: {wanted}",
                answer.notice
            ));
        }
        self.check_common(expect, Some(&answer.key)).await
    }

    /// `runs`, `probes` and `entry`.
    async fn check_common(&self, expect: &Expect, key: Option<&toolonce::OperationKey>) -> Checked {
        for (what, wanted, counter) in [
            ("runs", expect.runs, &self.runs),
            ("probes", expect.probes, &self.probes),
        ] {
            let got = counter.load(Ordering::SeqCst);
            if wanted.is_some_and(|w| w != got) {
                return Err(format!("{what} {got}, expected {wanted:?}"));
            }
        }
        let Some(wanted) = &expect.entry else {
            return Ok(());
        };
        let key = match key {
            Some(k) => k.clone(),
            None => self.derived_default()?.key,
        };
        // A give-back is a zero-lease renewal, which Redis shows within a millisecond.
        let mut last = String::new();
        for _ in 0..10 {
            let entry = self.store.get(&key).await.map_err(|e| e.to_string())?;
            match entry_matches(entry.as_ref(), wanted) {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Err(last)
    }
}

async fn answer_of(task: tokio::task::JoinHandle<WriteAnswer>) -> Result<WriteAnswer, String> {
    tokio::time::timeout(PATIENCE, task)
        .await
        .map_err(|_| "the call never answered".to_owned())?
        .map_err(|e| format!("the call panicked: {e}"))
}

fn verdict(probe: Option<&Value>) -> Verified {
    match probe {
        Some(Value::String(s)) if s == "not_done" => Verified::NotDone,
        Some(Value::String(s)) if s == "cannot_tell" => Verified::CannotTell,
        Some(p) if p.get("done").is_some() => Verified::Done(p["done"].clone()),
        other => panic!("probe {other:?}: expected done, not_done or cannot_tell"),
    }
}

fn behave(tool: &Value) -> Result<Value, ToolError> {
    let message = || {
        tool["message"]
            .as_str()
            .unwrap_or("the tool failed")
            .to_owned()
    };
    match (
        tool.get("returns"),
        tool.get("throws").and_then(Value::as_str),
    ) {
        (Some(v), None) => Ok(v.clone()),
        (None, Some("permanent")) => Err(ToolError::permanent(message())),
        (None, Some("transient")) => Err(ToolError::transient(message())),
        _ => panic!("tool {tool}: expected returns or throws"),
    }
}

fn entry_matches(entry: Option<&Entry>, wanted: &Value) -> Checked {
    let Some(entry) = entry else {
        return if wanted.is_null() {
            Ok(())
        } else {
            Err(format!("no entry, expected {wanted}"))
        };
    };
    if wanted.is_null() {
        return Err(format!("an entry {entry:?}, expected none"));
    }
    let state = entry.state().as_str();
    if wanted.get("state").is_some_and(|s| s != state) {
        return Err(format!("entry {state}, expected {}", wanted["state"]));
    }
    if wanted.get("attempts").is_some_and(|a| a != entry.attempts) {
        return Err(format!(
            "entry attempts {}, expected {}",
            entry.attempts, wanted["attempts"]
        ));
    }
    if let Some(result) = wanted.get("result") {
        match &entry.state {
            EntryState::Done { result: got, .. } if got.clone().into_value() == *result => {}
            other => return Err(format!("entry {other:?}, expected the result {result}")),
        }
    }
    if let Some(message) = wanted.get("error") {
        match &entry.state {
            EntryState::Failed { error, .. } if message == error.message.as_str() => {}
            other => return Err(format!("entry {other:?}, expected the error {message}")),
        }
    }
    Ok(())
}
