//! How the layer records an outcome once the tool has run: fenced writes retried while the
//! store is briefly unreachable, and a read-back that tells a write applied unseen from a claim
//! that was really lost. Giving a claim back without an outcome is `release.rs`.

use std::time::Duration;

use serde_json::Value;

use super::Layer;
use super::storable::{is_release, unstorable};
use crate::key::OperationKey;
use crate::policy::WriteOptions;
use crate::store::{EntryState, Fenced, OwnerToken};
use crate::tool::ToolError;

/// How often a complete or fail is retried when the store is briefly unreachable: the tool has
/// already run, so giving up means a duplicate will run it again (with the same key).
const SETTLE_RETRIES: u32 = 3;

impl Layer {
    /// Records the outcome with a fenced complete or fail, retrying a few times while the
    /// store is unreachable; a permanent error is kept for `failure_retention`. `None` means it could not be recorded at all: the entry then
    /// becomes `unknown` when its lease expires.
    ///
    /// A write whose reply was lost may have applied: the layer's own retry (after an error),
    /// or the driver's (redis-rs re-sends a script on a cluster by itself, unseen), then finds
    /// the entry already settled, and the fenced write answers `NotOwner`. Rather than make the
    /// stores remember the owner of settled entries (which would change every store's format,
    /// the wire format shared with other implementations included), the layer reads the entry
    /// on `NotOwner` and counts the write as applied when it holds exactly what was written:
    /// `done` with this result, `failed` with this error, or, for a transient failure (a
    /// delete), no entry at all. So "the claim was lost" is logged only when it was. (A
    /// duplicate that took over after this caller's lease expired and recorded an identical
    /// result looks the same; the heartbeat has then already warned that the lease was lost,
    /// and the entry replays exactly what this caller got.)
    pub(super) async fn settle(
        &self,
        tool: &str,
        key: &OperationKey,
        owner: &OwnerToken,
        result: &Result<Value, ToolError>,
        options: &WriteOptions,
        failure_retention: Duration,
    ) -> Option<Fenced> {
        let mut pause = Duration::from_millis(50);
        for attempt in 1..=SETTLE_RETRIES {
            let written = match result {
                Ok(value) => {
                    let retention = options.retention;
                    self.store
                        .complete(key, owner.duplicate(), value, retention)
                        .await
                }
                Err(error) => {
                    let sticky = (!error.is_transient()).then_some(failure_retention);
                    self.store.fail(key, owner.duplicate(), error, sticky).await
                }
            };
            match written {
                Ok(Fenced::NotOwner) => return Some(self.applied_before(key, result).await),
                Ok(applied) => return Some(applied),
                Err(e) if e.is_retryable() && attempt < SETTLE_RETRIES => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Err(e) => {
                    let unstorable = !e.is_retryable() && !is_release(result);
                    if unstorable
                        && let Some(done) = self.record_refusal(tool, key, owner, &e, options).await
                    {
                        return Some(done);
                    }
                    tracing::error!(
                        target: "toolonce",
                        tool,
                        key = %key,
                        error = %e.report(),
                        "could not record the outcome; the entry becomes unknown when its lease expires"
                    );
                    return None;
                }
            }
        }
        None
    }

    /// The store refused to keep the tool's outcome (a value its database cannot hold, say):
    /// the tool ran, so rather than leave the entry to expire into `unknown` the layer records
    /// a failure that says what happened, which every duplicate then gets. `None` if that
    /// cannot be recorded either.
    async fn record_refusal(
        &self,
        tool: &str,
        key: &OperationKey,
        owner: &OwnerToken,
        refusal: &crate::Error,
        options: &WriteOptions,
    ) -> Option<Fenced> {
        let why =
            crate::texts::Text::StoreRefused.fill(&[("report", &refusal.report().to_string())]);
        let instead = unstorable(tool, &why);
        // The tool ran: the record stands for its result, and is kept as long as one.
        let retention = Some(options.retention);
        match self
            .store
            .fail(key, owner.duplicate(), &instead, retention)
            .await
        {
            Ok(Fenced::NotOwner) => Some(Fenced::NotOwner),
            Ok(applied) => {
                tracing::warn!(
                    target: "toolonce",
                    tool,
                    key = %key,
                    error = %refusal.report(),
                    "the store refused the tool's outcome; recorded as a failure that says so"
                );
                Some(applied)
            }
            Err(_) => None,
        }
    }

    /// Whether a settle that answered `NotOwner` had in fact been applied by an earlier
    /// sending of the same write whose reply was lost (see [`Layer::settle`]).
    async fn applied_before(
        &self,
        key: &OperationKey,
        result: &Result<Value, ToolError>,
    ) -> Fenced {
        let applied = match self.store.get(key).await {
            Ok(Some(entry)) => match (&entry.state, result) {
                (EntryState::Done { result: stored, .. }, Ok(value)) => stored == value,
                (EntryState::Failed { error: stored, .. }, Err(error)) => {
                    !error.is_transient() && stored == error
                }
                _ => false,
            },
            // The delete of a transient failure: the key is free, as the write wanted.
            Ok(None) => matches!(result, Err(error) if error.is_transient()),
            Err(e) => {
                tracing::warn!(
                    target: "toolonce",
                    key = %key,
                    error = %e.report(),
                    "could not read the entry back to learn whether the outcome was recorded"
                );
                false
            }
        };
        if applied {
            Fenced::Applied
        } else {
            Fenced::NotOwner
        }
    }
}
