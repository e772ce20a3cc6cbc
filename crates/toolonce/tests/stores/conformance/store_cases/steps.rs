//! Runs one store case's steps on the `Store` API and checks each step's expectations: what a
//! claim decided (or how many of a burst of claims won), whether a fenced write applied, the
//! entry as the store holds it, what a listing held, and what an operator was answered.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use toolonce::{
    About, Claim, ClaimRequest, Entry, Fenced, ListQuery, OwnerToken, Removed, Resolution,
    Resolved, Seen, SeenSettled, State, Store, ToolError,
};

use super::entry::matches;
use super::format::{Case, EntryExpect, Expect, File, Step};
use super::names::{Names, duration};

type Checked = Result<(), String>;

/// How long `wait until` polls for a state before it fails.
const PATIENCE: Duration = Duration::from_secs(30);
/// The most pages a listing may take: paging that does not end fails.
const MAX_PAGES: usize = 50;

struct Run<'f> {
    store: Arc<dyn Store>,
    file: &'f File,
    names: Names,
    reads: HashMap<String, Entry>,
}

/// Runs `case` on `store`, each round with fresh names; says which step of which round failed.
pub async fn run(store: Arc<dyn Store>, file: &File, case: &Case) -> Checked {
    for round in 0..case.rounds {
        let mut run = Run {
            store: store.clone(),
            file,
            names: Names::new(&case.id),
            reads: HashMap::new(),
        };
        for (i, step) in case.steps.iter().enumerate() {
            run.step(step).await.map_err(|e| {
                format!("round {}, step {} ({}): {e}", round + 1, i + 1, step.action)
            })?;
        }
    }
    Ok(())
}

impl Run<'_> {
    async fn step(&mut self, step: &Step) -> Checked {
        let expect = &step.expect;
        match step.action.as_str() {
            "claim" => self.claim(step).await,
            "claims" => self.claims(step).await,
            "renew" => {
                let (key, owner) = (self.key(step), self.owner(step)?);
                let lease = self.lease(step)?;
                let renewed = self.store.renew(&key, &owner, lease).await.map_err(err)?;
                same("renewed", renewed, expect.renewed)
            }
            "complete" => self.complete(step).await,
            "fail" => self.fail(step).await,
            "get" => self.get(step).await,
            "list" => self.list(step).await,
            "resolve" => self.resolve(step).await,
            "remove" => self.remove(step).await,
            "delete" => {
                let deleted = self.store.delete(&self.key(step)).await.map_err(err)?;
                same("deleted", deleted, expect.deleted)
            }
            "purge" => {
                let purged = self.store.purge_expired().await.map_err(err)?;
                if expect.purged_at_most.is_some_and(|most| purged > most) {
                    return Err(format!(
                        "purged {purged}, expected at most {:?}",
                        expect.purged_at_most
                    ));
                }
                same("purged", purged, expect.purged)
            }
            "wait" => self.wait(step).await,
            other => Err(format!("unknown step {other:?}")),
        }
    }

    fn key(&self, step: &Step) -> toolonce::OperationKey {
        self.names.key(step.key.as_deref())
    }

    fn owner(&mut self, step: &Step) -> Result<OwnerToken, String> {
        let name = step.owner.as_deref().ok_or("the step names no owner")?;
        Ok(self.names.owner(name))
    }

    fn lease(&self, step: &Step) -> Result<Duration, String> {
        duration(
            self.file,
            step.lease.as_ref().unwrap_or(&self.file.defaults.lease),
        )
    }

    fn retention(&self, step: &Step) -> Result<Duration, String> {
        let default = &self.file.defaults.retention;
        duration(self.file, step.retention.as_ref().unwrap_or(default))
    }

    fn about(&self, step: &Step) -> About {
        let names = step.about.as_ref();
        let scope = self.names.scope(names.and_then(|a| a.scope.as_deref()));
        let tool = names.and_then(|a| a.tool.clone());
        let about = About::new(
            scope,
            tool.unwrap_or_else(|| self.file.defaults.tool.clone()),
        );
        match names.and_then(|a| a.detail.clone()) {
            Some(detail) => about.detail(detail),
            None => about,
        }
    }

    /// The claim a step describes, with `owner` as its token.
    async fn claim_as(&self, step: &Step, owner: &OwnerToken) -> Result<Claim, String> {
        let (key, fp) = (
            self.key(step),
            self.names.fingerprint(step.fingerprint.as_deref()),
        );
        let about = self.about(step);
        let request = ClaimRequest::new(&key, &fp, owner, self.lease(step)?)
            .retention(self.retention(step)?)
            .takeover(step.takeover)
            .about(&about);
        self.store.claim(&request).await.map_err(err)
    }

    async fn claim(&mut self, step: &Step) -> Checked {
        let owner = self.owner(step)?;
        let (decided, entry) = match self.claim_as(step, &owner).await? {
            Claim::Won => ("won", None),
            Claim::TookOver => ("took_over", None),
            Claim::Existing(entry) => ("existing", Some(entry)),
            other => return Err(format!("a claim the cases do not know: {other:?}")),
        };
        same("claim", decided, step.expect.claim.as_deref())?;
        self.check_entry(entry.as_ref(), &step.expect)
    }

    /// `callers` claims at once, each with a token of its own.
    async fn claims(&mut self, step: &Step) -> Checked {
        let n = step.callers.ok_or("claims needs callers")?;
        let barrier = Arc::new(tokio::sync::Barrier::new(n));
        let this: &Run<'_> = self;
        let racers = (0..n).map(|_| {
            let barrier = barrier.clone();
            async move {
                let owner = OwnerToken::generate();
                barrier.wait().await;
                this.claim_as(step, &owner).await
            }
        });
        let (mut won, mut took_over) = (0, 0);
        for claim in futures_util::future::join_all(racers).await {
            match claim? {
                Claim::Won => won += 1,
                Claim::TookOver => took_over += 1,
                Claim::Existing(entry) => {
                    if let Some(wanted) = &step.expect.existing {
                        self.entry_is(&entry, wanted)?;
                    }
                }
                other => return Err(format!("a claim the cases do not know: {other:?}")),
            }
        }
        same("won", won, step.expect.won)?;
        same("took_over", took_over, step.expect.took_over)
    }

    async fn complete(&mut self, step: &Step) -> Checked {
        let (key, owner) = (self.key(step), self.owner(step)?);
        let result = step.result.as_ref().ok_or("complete needs a result")?;
        let retention = self.retention(step)?;
        let fenced = self.store.complete(&key, owner, result, retention).await;
        same(
            "fenced",
            fenced_str(fenced.map_err(err)?),
            step.expect.fenced.as_deref(),
        )
    }

    async fn fail(&mut self, step: &Step) -> Checked {
        let (key, owner) = (self.key(step), self.owner(step)?);
        let wanted = step.error.as_ref().ok_or("fail needs an error")?;
        let error = tool_error(
            &wanted.message,
            wanted.class.as_deref(),
            wanted.detail.clone(),
        )?;
        let kept = match &step.retention {
            Some(r) => Some(duration(self.file, r)?),
            None => None,
        };
        let fenced = self.store.fail(&key, owner, &error, kept).await;
        same(
            "fenced",
            fenced_str(fenced.map_err(err)?),
            step.expect.fenced.as_deref(),
        )
    }

    async fn get(&mut self, step: &Step) -> Checked {
        let entry = self.store.get(&self.key(step)).await.map_err(err)?;
        if let Some(label) = &step.label {
            let read = entry
                .clone()
                .ok_or(format!("no entry to read as {label}"))?;
            self.reads.insert(label.clone(), read);
        }
        self.check_entry(entry.as_ref(), &step.expect)
    }

    /// Checks `expect.entry` against `entry` (none: `null` expected).
    fn check_entry(&self, entry: Option<&Entry>, expect: &Expect) -> Checked {
        match (&expect.entry, entry) {
            (None, _) | (Some(None), None) => Ok(()),
            (Some(None), Some(e)) => Err(format!("an entry {e:?}, expected none")),
            (Some(Some(_)), None) => Err("no entry, expected one".into()),
            (Some(Some(wanted)), Some(e)) => self.entry_is(e, wanted),
        }
    }

    fn entry_is(&self, entry: &Entry, wanted: &EntryExpect) -> Checked {
        matches(entry, wanted, &self.names, &self.reads)
    }

    /// Every page of the step's query; checks each page's size and that every entry listed
    /// passes the filters, then the keys listed (each once) and `each`.
    async fn list(&mut self, step: &Step) -> Checked {
        let mut query = ListQuery::new().scope(self.names.scope(step.scope.as_deref()));
        if let Some(tool) = &step.tool {
            query = query.tool(tool.clone());
        }
        if let Some(state) = &step.state {
            query = query.state(state.parse::<State>().map_err(|e| format!("{e:?}"))?);
        }
        let limit = step.limit.unwrap_or(100);
        let (mut listed, mut cursor) = (Vec::new(), None);
        for _ in 0..MAX_PAGES {
            let mut q = query.clone().limit(limit);
            if let Some(c) = cursor.take() {
                q = q.cursor(c);
            }
            let page = self.store.list(&q).await.map_err(err)?;
            if page.entries.len() > limit {
                return Err(format!(
                    "a page of {} entries, over the limit {limit}",
                    page.entries.len()
                ));
            }
            listed.extend(page.entries);
            match page.next {
                Some(c) => cursor = Some(c),
                None => return self.check_listed(step, &query, &listed),
            }
        }
        Err(format!("paging did not end after {MAX_PAGES} pages"))
    }

    fn check_listed(&self, step: &Step, query: &ListQuery, listed: &[Entry]) -> Checked {
        for e in listed {
            let passes = query.state.is_none_or(|s| s == e.state())
                && query
                    .tool
                    .as_ref()
                    .is_none_or(|t| e.about.tool.as_ref() == Some(t))
                && e.about.scope == query.scope;
            if !passes {
                return Err(format!("listed {e:?}, which the filters exclude"));
            }
            if let Some(wanted) = &step.expect.each {
                self.entry_is(e, wanted)?;
            }
        }
        let Some(names) = &step.expect.keys else {
            return Ok(());
        };
        let mut got: Vec<_> = listed.iter().map(|e| e.key.clone()).collect();
        let mut wanted: Vec<_> = names.iter().map(|n| self.names.key(Some(n))).collect();
        got.sort();
        wanted.sort();
        if got != wanted {
            return Err(format!(
                "listed {} entries, expected {names:?} (each once)",
                got.len()
            ));
        }
        Ok(())
    }

    fn seen(&self, step: &Step) -> Result<&Entry, String> {
        let label = step.seen.as_ref().ok_or("the step names no seen")?;
        self.reads
            .get(label)
            .ok_or(format!("nothing read as {label}"))
    }

    async fn resolve(&mut self, step: &Step) -> Checked {
        let read = self.seen(step)?;
        let mut seen = Seen::of(read).ok_or(format!("resolve of a settled read {read:?}"))?;
        if step.force {
            seen = seen.even_if_live();
        }
        let resolution = resolution(step.resolution.as_ref())?;
        let retention = self.retention(step)?;
        let key = self.key(step);
        let answer = self.store.resolve(&key, &seen, &resolution, retention);
        let (said, entry) = match answer.await.map_err(err)? {
            Resolved::Applied => ("applied", None),
            Resolved::Absent => ("absent", None),
            Resolved::Settled(e) => ("settled", Some(e)),
            Resolved::Live(e) => ("live", Some(e)),
            Resolved::Changed(e) => ("changed", Some(e)),
            other => return Err(format!("an answer this runner does not know: {other:?}")),
        };
        same("answer", said, step.expect.answer.as_deref())?;
        self.check_entry(entry.as_ref(), &step.expect)
    }

    async fn remove(&mut self, step: &Step) -> Checked {
        let read = self.seen(step)?;
        let seen = SeenSettled::of(read).ok_or(format!("remove of an unsettled read {read:?}"))?;
        let (said, entry) = match self
            .store
            .remove(&self.key(step), &seen)
            .await
            .map_err(err)?
        {
            Removed::Applied => ("applied", None),
            Removed::Absent => ("absent", None),
            Removed::Changed(e) => ("changed", Some(e)),
            other => return Err(format!("an answer this runner does not know: {other:?}")),
        };
        same("answer", said, step.expect.answer.as_deref())?;
        self.check_entry(entry.as_ref(), &step.expect)
    }

    /// Sleeps `ms`, or polls until the entry is in the state `until`.
    async fn wait(&mut self, step: &Step) -> Checked {
        match (&step.ms, &step.until) {
            (Some(ms), None) => {
                tokio::time::sleep(duration(self.file, ms)?).await;
                Ok(())
            }
            (None, Some(state)) => {
                let start = std::time::Instant::now();
                while start.elapsed() < PATIENCE {
                    let entry = self.store.get(&self.key(step)).await.map_err(err)?;
                    if entry.is_some_and(|e| e.state().as_str() == state) {
                        return Ok(());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(format!("never {state} within {PATIENCE:?}"))
            }
            _ => Err("wait needs ms or until".into()),
        }
    }
}

fn err(e: toolonce::Error) -> String {
    format!("the store failed: {e}")
}

/// Checks `got` against what the step expects, if it expects anything.
fn same<T: PartialEq + std::fmt::Debug>(what: &str, got: T, wanted: Option<T>) -> Checked {
    match wanted {
        Some(w) if w != got => Err(format!("{what} {got:?}, expected {w:?}")),
        _ => Ok(()),
    }
}

fn fenced_str(fenced: Fenced) -> &'static str {
    match fenced {
        Fenced::Applied => "applied",
        Fenced::NotOwner => "not_owner",
        // Applied where no replica acknowledged it: not what a case expects of a store.
        Fenced::AppliedUnreplicated(_) => "applied_unreplicated",
        _ => "unknown to the cases",
    }
}

fn tool_error(
    message: &str,
    class: Option<&str>,
    detail: Option<Value>,
) -> Result<ToolError, String> {
    let error = match class {
        Some("permanent") | None => ToolError::permanent(message),
        Some("transient") => ToolError::transient(message),
        Some(other) => return Err(format!("error class {other:?}")),
    };
    Ok(match detail {
        Some(d) => error.with_detail(d),
        None => error,
    })
}

fn resolution(r: Option<&Value>) -> Result<Resolution, String> {
    match r {
        Some(Value::String(s)) if s == "release" => Ok(Resolution::Release),
        Some(r) if r.get("done").is_some() => Ok(Resolution::Done(r["done"].clone())),
        Some(r) if r.get("failed").is_some() => {
            let f = &r["failed"];
            let message = f["message"]
                .as_str()
                .ok_or("a failed resolution needs a message")?;
            Ok(Resolution::Failed(tool_error(
                message,
                None,
                f.get("detail").cloned(),
            )?))
        }
        other => Err(format!("resolution {other:?}")),
    }
}
