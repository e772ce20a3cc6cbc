//! How the layer gives a claim back without an outcome to record: a claim whose reply was lost
//! (it may have applied unseen), and a takeover whose tool failed transiently. A claim that
//! created its entry is released (deleted: nothing began). One that may have taken over an
//! earlier attempt is **given back** instead: a fenced renewal with a zero lease ends the lease
//! now, so the entry is `unknown` at once and keeps the earlier attempt's record (its attempts,
//! first start, fingerprint, what it is). Deleting it would let the next caller under `hold`
//! run an operation that may already have taken effect.

use std::time::Duration;

use tokio::time::Instant;

use super::Layer;
use crate::key::OperationKey;
use crate::store::{Entry, Fenced, OwnerToken, State};
use crate::tool::ToolError;

/// How long a claim that may have applied unseen is retried for release or give-back: long
/// enough to ride out a dropped connection or a quick restart, short enough that the caller
/// soon gets its `store_unavailable` answer.
const RELEASE_FOR: Duration = Duration::from_secs(3);

/// What to do with a claim given up without an outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GiveUp {
    /// Delete it (fenced): the claim created the entry, so no earlier attempt exists.
    Release,
    /// End its lease now (fenced): it may hold an earlier attempt's record.
    GiveBack,
    /// Nothing: there is no unsettled entry the claim could hold.
    Nothing,
}

impl Layer {
    /// Gives up a claim whose answer was an error after which it may have applied (the store
    /// was unreachable mid-request, or too few replicas acknowledged it). A claim that asked
    /// for no takeover can only have created the entry: it is released. One that asked for a
    /// takeover reads the entry first and releases it only when the entry shows it created it
    /// ([`created_by_its_claim`]); otherwise, or when the read fails, it is given back.
    pub(super) async fn give_up_claim(
        &self,
        tool: &str,
        key: &OperationKey,
        owner: &OwnerToken,
        takeover: bool,
    ) {
        let what = if takeover {
            match self.store.get(key).await {
                Ok(Some(entry)) if created_by_its_claim(&entry) => GiveUp::Release,
                Ok(Some(entry)) if is_settled(&entry) => GiveUp::Nothing,
                Ok(None) => GiveUp::Nothing,
                Ok(Some(_)) | Err(_) => GiveUp::GiveBack,
            }
        } else {
            GiveUp::Release
        };
        match what {
            GiveUp::Release => self.release(tool, key, owner).await,
            GiveUp::GiveBack => {
                self.give_back(tool, key, owner).await;
            }
            GiveUp::Nothing => {}
        }
    }

    /// Releases a claim whose answer was an error after which it may have applied: a fenced
    /// transient `fail` with the caller's token deletes the entry if, and only if, the claim
    /// did write it. Best effort, retried for at most [`RELEASE_FOR`]; without it the entry
    /// would stay `running` for its lease, and every retry would be told the operation is in
    /// flight although it never ran.
    async fn release(&self, tool: &str, key: &OperationKey, owner: &OwnerToken) {
        let reason = ToolError::transient("the reply to the claim was lost; claim released");
        let released = retried(|| self.store.fail(key, owner.duplicate(), &reason, None)).await;
        match released {
            // The claim never applied (or its entry is gone): nothing to release.
            Some(Fenced::NotOwner) => {}
            Some(_) => tracing::info!(
                target: "toolonce",
                tool,
                key = %key,
                "released a claim whose reply was lost; the tool was not run"
            ),
            None => tracing::warn!(
                target: "toolonce",
                tool,
                key = %key,
                "could not release a claim whose reply was lost; if it was written, it stays \
                 running until its lease expires"
            ),
        }
    }

    /// Gives back a claim that may hold an earlier attempt's record: a fenced renewal with a
    /// zero lease, so the entry is `unknown` at once and keeps everything it recorded. Retried
    /// for at most [`RELEASE_FOR`]; if it cannot be written the lease runs out by itself, with
    /// the same result later. Answers what the store said (`None`: it could not be written).
    pub(super) async fn give_back(
        &self,
        tool: &str,
        key: &OperationKey,
        owner: &OwnerToken,
    ) -> Option<Fenced> {
        let renewed = retried(|| self.store.renew(key, owner, Duration::ZERO)).await;
        let given = renewed.map(|held| {
            if held {
                Fenced::Applied
            } else {
                Fenced::NotOwner
            }
        });
        match given {
            Some(Fenced::NotOwner) => {}
            Some(_) => tracing::warn!(
                target: "toolonce",
                tool,
                key = %key,
                "gave back an operation taken over from an interrupted attempt without an \
                 outcome of its own; it stays unknown, with the earlier attempt's record"
            ),
            None => tracing::warn!(
                target: "toolonce",
                tool,
                key = %key,
                "could not give back an operation taken over from an interrupted attempt; it \
                 becomes unknown again when its lease expires"
            ),
        }
        given
    }
}

/// Whether an unsettled entry shows that the claim holding it created it: one attempt, whose
/// start is the first start (a takeover counts another attempt and keeps the earlier first
/// start). An entry that records neither (an older writer's) does not show it.
fn created_by_its_claim(entry: &Entry) -> bool {
    !is_settled(entry) && entry.attempts == 1 && entry.first_started_at == Some(entry.started_at)
}

fn is_settled(entry: &Entry) -> bool {
    matches!(entry.state(), State::Done | State::Failed)
}

/// Runs a fenced write until the store answers, for at most [`RELEASE_FOR`]: `None` when it
/// never did, or refused the request.
async fn retried<T, Fut>(mut write: impl FnMut() -> Fut) -> Option<T>
where
    Fut: std::future::Future<Output = crate::Result<T>>,
{
    let deadline = Instant::now() + RELEASE_FOR;
    let mut pause = Duration::from_millis(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        match tokio::time::timeout(left, write()).await {
            Ok(Ok(answer)) => return Some(answer),
            Ok(Err(e)) if e.is_retryable() => {}
            Ok(Err(_)) | Err(_) => return None,
        }
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}
