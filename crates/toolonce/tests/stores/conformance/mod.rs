//! The store conformance suite: the contract of `Store`, written once and run against every
//! backend by `store_conformance!`. Each test gets a fresh, isolated store from the backend's
//! factory, and uses only real time (short leases and sleeps), so backends whose clock is a
//! server's run it unchanged.

#![allow(dead_code, unreachable_pub)]

mod claims;
mod entries;
pub mod multiprocess;
mod records;
mod remove;
mod resolve;
mod resolve_fenced;
mod scenarios;
mod unknown;

pub use claims::*;
pub use entries::*;
pub use records::*;
pub use remove::*;
pub use resolve::*;
pub use resolve_fenced::*;
pub use scenarios::layer_scenarios;
pub use unknown::*;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolonce::key::{self, Fingerprint, OperationKey};
use toolonce::{
    About, Claim, ClaimRequest, EntryState, Fenced, ListQuery, OwnerToken, Resolution, Resolved,
    Seen, State, Store, ToolError,
};

/// Waits until the entry at `key` is `unknown` (its lease ran out unsettled, on the store's
/// clock), failing after 30 s.
pub async fn until_unknown(store: &dyn Store, key: &OperationKey) {
    let start = std::time::Instant::now();
    loop {
        let entry = store.get(key).await.unwrap().expect("kept past its lease");
        if entry.state() == State::Unknown {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never became unknown"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A lease long enough never to expire during a test unless it means to wait for it.
pub const LONG: Duration = Duration::from_secs(60);
/// A lease short enough to wait out.
pub const SHORT: Duration = Duration::from_millis(300);
/// Longer than `SHORT`, with room for slow machines and server clocks.
pub const PAST_SHORT: Duration = Duration::from_millis(700);

/// A fresh key and fingerprint, unique to the test and the process.
pub fn op(name: &str) -> (OperationKey, Fingerprint) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let scope = format!("conformance-{}-{n}", std::process::id());
    let d = key::derive(&scope, name, &json!({"n": n}), None).unwrap();
    (d.key, d.fingerprint)
}

/// What a claim with a fresh token decided, with the token when it won: the shape most tests
/// want, since they play a new caller each time.
#[derive(Debug)]
// Matched at once, as `Claim` is.
#[allow(clippy::large_enum_variant)]
pub enum Fresh {
    Won(OwnerToken),
    Existing(toolonce::Entry),
}

/// [`Store::claim`] as a new caller makes it: with a token of its own, generated first.
#[async_trait::async_trait]
pub trait ClaimFresh {
    async fn claim_fresh(
        &self,
        key: &OperationKey,
        fp: &Fingerprint,
        lease: Duration,
    ) -> toolonce::Result<Fresh>;

    /// The same with `takeover` set: an `unknown` entry is taken over.
    async fn take_over_fresh(
        &self,
        key: &OperationKey,
        fp: &Fingerprint,
        lease: Duration,
    ) -> toolonce::Result<Fresh>;
}

#[async_trait::async_trait]
impl<S: Store + ?Sized> ClaimFresh for S {
    async fn claim_fresh(
        &self,
        key: &OperationKey,
        fp: &Fingerprint,
        lease: Duration,
    ) -> toolonce::Result<Fresh> {
        let owner = OwnerToken::generate();
        Ok(
            match self
                .claim(&ClaimRequest::new(key, fp, &owner, lease))
                .await?
            {
                Claim::Won => Fresh::Won(owner),
                Claim::TookOver => panic!("a claim without takeover took over"),
                Claim::Existing(entry) => Fresh::Existing(entry),
            },
        )
    }

    async fn take_over_fresh(
        &self,
        key: &OperationKey,
        fp: &Fingerprint,
        lease: Duration,
    ) -> toolonce::Result<Fresh> {
        let owner = OwnerToken::generate();
        let request = ClaimRequest::new(key, fp, &owner, lease).takeover(true);
        Ok(match self.claim(&request).await? {
            Claim::Won | Claim::TookOver => Fresh::Won(owner),
            Claim::Existing(entry) => Fresh::Existing(entry),
        })
    }
}

pub fn won(claim: Fresh) -> OwnerToken {
    match claim {
        Fresh::Won(owner) => owner,
        Fresh::Existing(entry) => panic!("expected to win the claim, found {entry:?}"),
    }
}

pub fn existing(claim: Fresh) -> toolonce::Entry {
    match claim {
        Fresh::Existing(entry) => entry,
        Fresh::Won(_) => panic!("expected an existing entry, but won the claim"),
    }
}

/// The result a fresh claim of `key` is answered with: the entry must be there, and done.
pub async fn replayed_result<S: Store + ?Sized>(
    store: &S,
    key: &OperationKey,
    fp: &Fingerprint,
) -> serde_json::Value {
    match existing(store.claim_fresh(key, fp, LONG).await.unwrap()).state {
        EntryState::Done { result, .. } => result.into_value(),
        other => panic!("expected a done entry, got {other:?}"),
    }
}

/// Asserts that an entry shows `owner` as its holder: the token itself, or, where duplicates
/// read the entry's value (Redis), the token's SHA-1 in hex, which names the holder without
/// letting the reader settle the entry.
pub fn assert_shows_owner(shown: &str, owner: &OwnerToken) {
    let digest = sha1_smol::Sha1::from(owner.as_str()).digest().to_string();
    assert!(
        shown == owner.as_str() || shown == digest,
        "the entry shows {shown:?}, neither the owner's token nor its digest"
    );
}

/// Runs the whole suite against a backend. `$make` is an async expression that gives a fresh,
/// isolated `Arc<dyn Store>` each time it is evaluated.
#[macro_export]
macro_rules! store_conformance {
    ($make:expr) => {
        $crate::store_conformance!(@tests $make;
            first_claim_wins_and_the_second_sees_it_running,
            sixty_four_concurrent_claims_have_exactly_one_winner,
            a_claim_retried_with_its_own_token_wins_and_with_another_does_not,
            a_completed_entry_replays_its_result_exactly,
            a_replayed_result_reads_exactly_as_the_first_call_showed_it,
            a_sticky_failure_is_replayed,
            a_transient_failure_deletes_the_entry,
            renew_keeps_a_running_entry_alive_past_its_first_lease,
            an_expired_lease_lets_a_caller_that_asks_take_over,
            a_stale_owner_can_neither_complete_renew_nor_fail_after_a_takeover,
            a_late_owner_still_records_its_outcome_when_nobody_took_over,
            a_stranger_token_is_fenced_out,
            a_settled_entry_cannot_be_settled_again,
            retention_expiry_makes_a_done_entry_absent,
            list_pages_through_entries_and_filters_by_state,
            delete_removes_an_entry_whatever_its_state,
            purge_removes_expired_entries_and_keeps_live_ones,
            get_of_an_unknown_key_is_none,
            a_running_entry_reports_a_lease_expiry_in_the_future,
            an_expired_lease_leaves_the_entry_unknown,
            a_claim_without_takeover_sees_an_unknown_entry,
            a_takeover_wins_an_unknown_entry_counts_the_attempt_and_keeps_the_first_start,
            a_takeover_never_applies_to_a_live_or_settled_entry,
            a_takeover_with_other_arguments_is_refused,
            its_own_token_reclaims_an_unknown_entry,
            an_unknown_entry_is_kept_for_its_retention_after_the_lease_then_absent,
            resolve_done_settles_an_unknown_entry_for_duplicates,
            a_forced_resolve_failed_settles_the_stuck_running_claim_it_saw,
            resolve_release_forgets_the_entry_so_the_next_call_runs,
            resolve_leaves_an_entry_that_settled_meanwhile_alone,
            resolve_of_an_absent_key_is_absent,
            resolve_of_a_live_running_claim_is_refused_and_says_when_its_lease_ends,
            an_unknown_entry_renewed_by_its_owner_after_it_was_seen_is_refused_as_live,
            resolve_with_a_stale_seen_is_refused_after_a_takeover,
            a_second_operator_never_releases_the_claim_made_after_the_first_released,
            operators_racing_to_settle_one_unknown_entry_apply_once_and_spare_the_new_claim,
            an_entry_records_what_it_is_how_often_it_started_and_when_it_settled,
            list_filters_by_state_scope_and_tool,
            concurrent_takeovers_of_an_unknown_entry_have_exactly_one_winner,
            a_zero_lease_renewal_gives_an_entry_back_unknown_with_its_record,
            remove_deletes_the_settled_entry_read_so_the_next_call_runs,
            remove_after_the_entry_was_deleted_and_claimed_again_spares_the_live_claim,
            remove_after_the_entry_was_claimed_and_settled_again_is_refused_as_changed,
            remove_of_an_absent_key_is_absent,
            layer_scenarios,
        );
    };
    (@tests $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let store: ::std::sync::Arc<dyn ::toolonce::Store> = $make.await;
                conformance::$name(store).await;
            }
        )*
    };
}
