//! The store conformance suite: the contract of `Store`, written once and run against every
//! backend by `store_conformance!`: the store cases as data (`store_cases`, the file the
//! TypeScript package runs too), the layer scenarios, and the few cases that stay code. Each
//! case gets a fresh, isolated store from the backend's factory, and uses only real time
//! (short leases and sleeps), so backends whose clock is a server's run it unchanged.

#![allow(dead_code, unreachable_pub)]

mod census;
pub mod multiprocess;
mod racing_operators;
mod replayed_text;
mod scenarios;
mod store_cases;

pub use census::*;
pub use racing_operators::*;
pub use replayed_text::*;
pub use scenarios::layer_scenarios;
pub use store_cases::store_cases;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolonce::key::{self, Fingerprint, OperationKey};
use toolonce::{
    Claim, ClaimRequest, EntryState, Fenced, OwnerToken, Resolution, Resolved, Seen, State, Store,
    ToolError,
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

/// A key whose first attempt's lease has expired unsettled: its entry is `unknown`.
pub async fn unknown_entry(
    store: &dyn Store,
    name: &str,
) -> (OperationKey, Fingerprint, OwnerToken) {
    let (key, fp) = op(name);
    let owner = won(store.claim_fresh(&key, &fp, SHORT).await.unwrap());
    tokio::time::sleep(PAST_SHORT).await;
    (key, fp, owner)
}

/// What an operator sees of `key` before it resolves it: the live entry's attempt, which must
/// be unsettled.
pub async fn seen(store: &dyn Store, key: &OperationKey) -> Seen {
    let entry = store
        .get(key)
        .await
        .unwrap()
        .expect("a live entry to look at");
    Seen::of(&entry).unwrap_or_else(|| panic!("expected an unsettled entry, got {entry:?}"))
}

/// What an operator saw of a settled entry, as it would have seen it while it ran: an
/// attempt that no longer exists as such.
pub async fn seen_while_running(store: &dyn Store, key: &OperationKey) -> Seen {
    seen(store, key).await.even_if_live()
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
                other => panic!("a claim this suite does not know: {other:?}"),
            },
        )
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

/// Runs the whole suite against a backend: the store cases, the layer scenarios and the cases
/// that stay code. `$make` is an async expression that gives a fresh,
/// isolated `Arc<dyn Store>` each time it is evaluated.
#[macro_export]
macro_rules! store_conformance {
    ($make:expr) => {
        $crate::store_conformance!($make, census: true);
    };
    // `census: false`: a store whose census is `None` (it cannot count without reading every
    // entry), which must say so rather than guess.
    ($make:expr, census: $counts:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn a_census_counts_live_entries_by_state_and_the_oldest_unknown_wait() {
            let store: ::std::sync::Arc<dyn ::toolonce::Store> = $make.await;
            conformance::a_census_counts_live_entries_by_state_and_the_oldest_unknown_wait(
                store, $counts,
            )
            .await;
        }
        $crate::store_conformance!(@tests $make;
            a_replayed_result_reads_exactly_as_the_first_call_showed_it,
            operators_racing_to_settle_one_unknown_entry_apply_once_and_spare_the_new_claim,
            layer_scenarios,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn store_cases() {
            conformance::store_cases(&|| {
                ::std::boxed::Box::pin(async {
                    let store: ::std::sync::Arc<dyn ::toolonce::Store> = $make.await;
                    store
                })
            })
            .await;
        }
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
