//! The operator's commands timed on the filled store, through the code they run: one page of
//! `Store::list` and the walk `toolonce ls` makes (every page of the run's scope, the newest
//! 100 kept), `purge_expired` as `toolonce purge` calls it, and `toolonce resolve`'s get and
//! fenced resolve of one `unknown` entry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use toolonce::{
    About, Claim, ClaimRequest, Fingerprint, ListQuery, OperationKey, OwnerToken, Resolution,
    Resolved, Seen, State, Store,
};

use crate::bench::args::RETENTION;
use crate::inspect::{Filters, newest};

/// The tool named by the `unknown` entries `resolve` settles.
const UNKNOWN_TOOL: &str = "bench_unknown";
/// `toolonce ls`'s default `--limit`.
const LS_LIMIT: usize = 100;

/// What the operator's commands took at one size.
pub(super) struct Timings {
    /// One page (the default 100 entries) of `Store::list` on the run's scope.
    pub(super) list_page: Duration,
    /// `toolonce ls --scope <the run's>`: the walk over every page.
    pub(super) ls: Duration,
    /// How many entries that walk matched.
    pub(super) ls_matched: usize,
    pub(super) purge: Duration,
    pub(super) purged: u64,
    pub(super) resolve: Duration,
}

/// Times a page, `ls` and `purge` (once `purge_after` has passed: the expiring entries are
/// then past their retention) and `resolve` on an entry of its own, numbered `n`.
pub(super) async fn time(
    store: &Arc<dyn Store>,
    scope: &str,
    purge_after: Instant,
    n: u64,
) -> anyhow::Result<Timings> {
    let start = Instant::now();
    let page = store.list(&ListQuery::new().scope(scope)).await?;
    let list_page = start.elapsed();
    ensure!(
        !page.entries.is_empty(),
        "a page of the filled store came back empty"
    );
    let filters = Filters {
        scope: Some(scope.to_owned()),
        ..Filters::default()
    };
    let start = Instant::now();
    let listing = newest(store.as_ref(), &filters, LS_LIMIT).await?;
    let ls = start.elapsed();
    tokio::time::sleep_until(purge_after.into()).await;
    let start = Instant::now();
    let purged = store.purge_expired().await?;
    let purge = start.elapsed();
    let resolve = time_resolve(store, scope, n).await?;
    Ok(Timings {
        list_page,
        ls,
        ls_matched: listing.matched,
        purge,
        purged,
        resolve,
    })
}

/// Claims an entry with a 1 ms lease, waits for it to turn `unknown`, and times what
/// `toolonce resolve --release` asks the store: a get, then the resolve of the entry seen.
async fn time_resolve(store: &Arc<dyn Store>, scope: &str, n: u64) -> anyhow::Result<Duration> {
    let canonical = format!("{{\"n\":{n}}}");
    let key = OperationKey::derive(scope, UNKNOWN_TOOL, &canonical)?;
    let fingerprint = Fingerprint::of_canonical(&canonical);
    let owner = OwnerToken::generate();
    let about = About::new(scope, UNKNOWN_TOOL);
    let claim = ClaimRequest::new(&key, &fingerprint, &owner, Duration::from_millis(1))
        .retention(RETENTION)
        .about(&about);
    if !matches!(store.claim(&claim).await?, Claim::Won) {
        bail!("the entry for resolve was claimed already");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.get(&key).await?.map(|e| e.state()) != Some(State::Unknown) {
        ensure!(
            Instant::now() < deadline,
            "the entry for resolve never became unknown"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let start = Instant::now();
    let entry = store
        .get(&key)
        .await?
        .context("the unknown entry vanished")?;
    let seen = Seen::of(&entry).context("the unknown entry was settled")?;
    let resolved = store
        .resolve(&key, &seen, &Resolution::Release, RETENTION)
        .await?;
    let took = start.elapsed();
    ensure!(
        matches!(resolved, Resolved::Applied),
        // Not the answer's entry: it would show the owner, the holder's secret.
        "resolve of the bench's unknown entry was refused"
    );
    Ok(took)
}
