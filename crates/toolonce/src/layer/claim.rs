//! The claim loop of a write call: claim the key; a won claim runs the tool (see
//! `Layer::execute`), and an entry already there is replayed, refused, probed (`verify`) or
//! waited for, then claimed again. What a probe finds is recorded here too.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::answer::{conflict, held, in_flight};
use super::call::{Claimed, ProbeFuture, ToolFuture, WriteCall};
use super::report::count_takeover;
use super::{Layer, Outcome, ReplayNote, WriteAnswer, replayed, store_failed};
use crate::key::{Derived, OperationKey};
use crate::policy::{InFlight, OnExpired, WriteOptions};
use crate::store::{
    Claim, ClaimRequest, Entry, EntryState, OwnerToken, Recorded, Resolution, Resolved, Seen,
};
use crate::tool::{ToolError, Verified, WriteContext};

/// What to do after an entry that was already there.
enum Next {
    /// The call is answered.
    Answer(WriteAnswer<Recorded>),
    /// A probe said the interrupted attempt did not take effect: claim again, taking it over.
    TakeOver,
    /// The entry is running: wait for it, then claim again.
    Wait,
}

/// The answer of a call that ran nothing here.
fn answer(
    key: &OperationKey,
    outcome: Outcome,
    result: Result<Recorded, ToolError>,
) -> WriteAnswer<Recorded> {
    WriteAnswer {
        outcome,
        key: key.clone(),
        notice: None,
        replay: None,
        result,
    }
}

impl Layer {
    /// Claims until the call is answered: runs the tool on a won claim, else answers from the
    /// entry already there, or waits for it (`InFlight::Wait`) and claims again.
    pub(super) async fn run_inner<Fut: ToolFuture, VFut: ProbeFuture>(
        &self,
        call: WriteCall<'_>,
        verify: Option<impl FnOnce(WriteContext) -> VFut>,
        run: impl FnOnce(WriteContext) -> Fut,
    ) -> WriteAnswer<Recorded> {
        let WriteCall { tool, op, .. } = call;
        let key = &op.key;
        let deadline = match call.options.in_flight {
            InFlight::Wait(timeout) => Some(Instant::now() + timeout),
            InFlight::Reject => None,
        };
        let mut verify = verify;
        let mut reclaimed = false;
        // Under `rerun` the first claim already asks to take an `unknown` entry over: one round
        // trip. Otherwise only a probe that answered "not done" asks for it.
        let mut takeover = call.options.expired_policy() == OnExpired::Rerun;
        // Made before the claim, so a claim whose reply is lost is still ours to retry (the
        // store answers `Won` to its own token) or to release.
        let owner = OwnerToken::generate();
        loop {
            let (claimed, ctx) = match self.claim(call, &owner, takeover).await {
                Err(failed) => return failed,
                Ok(Claim::Won) => (
                    Claimed::Fresh(owner),
                    WriteContext::new(key.clone(), reclaimed),
                ),
                Ok(Claim::TookOver) => {
                    log_takeover(call);
                    (
                        Claimed::TookOver(owner),
                        WriteContext::new(key.clone(), true),
                    )
                }
                Ok(Claim::Existing(entry)) => {
                    match self.existing(call, entry, &mut verify, takeover).await {
                        Next::Answer(answer) => return answer,
                        Next::TakeOver => takeover = true,
                        Next::Wait => match self.wait_for(tool, key, deadline).await {
                            Ok(gone) => reclaimed |= gone,
                            Err(answer) => return answer,
                        },
                    }
                    continue;
                }
            };
            return self
                .execute(tool, key, claimed, call.options, run(ctx))
                .await;
        }
    }

    /// One claim of the key; a store failure is the call's answer.
    async fn claim(
        &self,
        call: WriteCall<'_>,
        owner: &OwnerToken,
        takeover: bool,
    ) -> Result<Claim, WriteAnswer<Recorded>> {
        let WriteCall {
            tool,
            op,
            about,
            options,
        } = call;
        let key = &op.key;
        let request = ClaimRequest::new(key, &op.fingerprint, owner, options.lease)
            .retention(options.retention)
            .takeover(takeover)
            .about(about);
        match self.store.claim(&request).await {
            Ok(claim) => Ok(claim),
            Err(e) => {
                if e.is_retryable() {
                    // The store may have applied the claim before the reply was lost: give
                    // it back, never deleting an earlier attempt it may have taken over.
                    self.give_up_claim(tool, key, owner, takeover).await;
                }
                Err(store_failed(tool, key, &e))
            }
        }
    }

    /// What an entry already there means for the call: a conflict, a replay, what a probe
    /// finds for an `unknown` one, or a wait for a running one.
    async fn existing<VFut: ProbeFuture>(
        &self,
        call: WriteCall<'_>,
        entry: Entry,
        verify: &mut Option<impl FnOnce(WriteContext) -> VFut>,
        takeover: bool,
    ) -> Next {
        let WriteCall {
            tool, op, options, ..
        } = call;
        let key = &op.key;
        let repeat_argument = options.repeat_argument.as_deref();
        if !entry.matches(&op.fingerprint) {
            return Next::Answer(answer(key, Outcome::Conflict, Err(conflict(tool, key))));
        }
        // The attempt a verify probe looks at: what it finds is recorded on that attempt
        // only (none for a settled entry, which allocates nothing).
        let seen = Seen::of(&entry);
        match entry.state {
            EntryState::Done {
                result,
                completed_at,
            } => {
                let note = ReplayNote::new(tool, op, false, completed_at, repeat_argument);
                Next::Answer(replayed(answer(key, Outcome::Replayed, Ok(result)), note))
            }
            EntryState::Failed { error, failed_at } => {
                let note = ReplayNote::new(tool, op, true, failed_at, repeat_argument);
                let failure = answer(key, Outcome::ReplayedFailure, Err(error));
                Next::Answer(replayed(failure, note))
            }
            EntryState::Unknown { .. } => {
                // Under `rerun` the claim asked to take over and the store refused (it
                // would have, had it been able to): hold rather than loop.
                let probe = match options.expired_policy() {
                    OnExpired::Verify if !takeover => verify.take(),
                    _ => None,
                };
                let hold = || Next::Answer(answer(key, Outcome::Unknown, Err(held(tool, key))));
                let Some(probe) = probe else {
                    return hold();
                };
                match probe(WriteContext::new(key.clone(), true)).await {
                    Verified::Done(value) => {
                        let seen = seen.expect("an unknown entry is unsettled");
                        Next::Answer(self.record_verified(tool, op, &seen, value, options).await)
                    }
                    Verified::NotDone => Next::TakeOver,
                    Verified::CannotTell => hold(),
                }
            }
            EntryState::Running { .. } => Next::Wait,
        }
    }

    /// Records what a verify probe found (the earlier attempt took effect with `value`), fenced
    /// so it never overwrites an entry that settled meanwhile, and answers as a duplicate.
    async fn record_verified(
        &self,
        tool: &str,
        op: &Derived,
        seen: &Seen,
        value: Value,
        options: &WriteOptions,
    ) -> WriteAnswer<Recorded> {
        let key = &op.key;
        let note =
            |failed, at| ReplayNote::new(tool, op, failed, at, options.repeat_argument.as_deref());
        let answer = |outcome, result| answer(key, outcome, result);
        let resolution = Resolution::Done(value.clone());
        match self
            .store
            .resolve(key, seen, &resolution, options.retention)
            .await
        {
            // Settled meanwhile (its late owner recorded it, or an operator did): that record
            // wins, as it would for any duplicate.
            Ok(Resolved::Settled(entry)) => match entry.state {
                EntryState::Failed { error, failed_at } => replayed(
                    answer(Outcome::ReplayedFailure, Err(error)),
                    note(true, failed_at),
                ),
                EntryState::Done {
                    result,
                    completed_at,
                } => replayed(
                    answer(Outcome::Replayed, Ok(result)),
                    note(false, completed_at),
                ),
                // Not a settled state: a store that answers so breaks the contract; hold.
                _ => answer(Outcome::Unknown, Err(held(tool, key))),
            },
            Ok(Resolved::Applied) => {
                tracing::info!(
                    target: "toolonce",
                    tool,
                    key = %key,
                    "the verify probe found the interrupted attempt took effect; its result is \
                     recorded"
                );
                let at = Some(std::time::SystemTime::now());
                replayed(answer(Outcome::Replayed, Ok(value.into())), note(false, at))
            }
            // Released, expired, taken over or renewed meanwhile (that attempt is not the one
            // probed, so it is left alone), or the store failed: the downstream system said it
            // is done, so it is answered as done (nothing runs), just not recorded.
            other => {
                if let Err(e) = &other {
                    tracing::warn!(
                        target: "toolonce",
                        tool,
                        key = %key,
                        error = %e.report(),
                        "could not record what the verify probe found; answering with it anyway"
                    );
                }
                replayed(
                    answer(Outcome::Replayed, Ok(value.into())),
                    note(false, None),
                )
            }
        }
    }

    /// Waits for a running entry to settle, vanish or turn unknown, polling with a growing
    /// pause: stores have no portable change notification, and a poll is one cheap read.
    /// `Ok(true)` when it vanished; without a wait (`InFlight::Reject`) or past the deadline,
    /// the call is answered `in_flight`.
    async fn wait_for(
        &self,
        tool: &str,
        key: &OperationKey,
        deadline: Option<Instant>,
    ) -> Result<bool, WriteAnswer<Recorded>> {
        let in_flight = || answer(key, Outcome::InFlight, Err(in_flight(tool, key)));
        let Some(deadline) = deadline else {
            return Err(in_flight());
        };
        let mut pause = Duration::from_millis(5);
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(in_flight());
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(200));
            match self.store.get(key).await {
                Err(e) => return Err(store_failed(tool, key, &e)),
                Ok(Some(e)) if matches!(e.state, EntryState::Running { .. }) => continue,
                // Settled: the next claim returns the settled entry. Unknown: the next claim
                // applies the policy.
                Ok(Some(_)) => return Ok(false),
                // Gone: the owner failed transiently (or an operator released it), and the
                // next claim runs it.
                Ok(None) => return Ok(true),
            }
        }
    }
}

/// A claim took over an `unknown` entry: said at warn, since the tool runs again.
fn log_takeover(call: WriteCall<'_>) {
    count_takeover(call.tool);
    tracing::warn!(
        target: "toolonce",
        tool = call.tool,
        scope = call.about.scope.as_deref(),
        key = %call.op.key,
        policy = call.options.expired_policy().as_str(),
        "took over an operation whose earlier attempt was interrupted; running it \
         again with the same key"
    );
}
