//! The console's figures over time (`GET /console/api/stats`): every [`EVERY`], the store's
//! entries by state and the oldest unknown one's wait, from the store's census
//! ([`Store::census`]: one aggregate query, SQLite and PostgreSQL) or, where the store answers
//! none (Redis), from a walk of its pages (at most [`MAX_PAGES`] pages of [`PAGE`]: beyond,
//! the sample says it is incomplete); each sample's `source` says which. A sample also times
//! one store page (the latency the console sees). The last [`KEPT`] samples are kept. Replays
//! and in-flight refusals per minute ([`super::calls`]) are known only in the process that
//! answers the calls: the gateway's console has them; `toolonce console` runs none and sees no
//! other process's, so it answers `calls: null` and says so.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use hyper::StatusCode;
use serde_json::{Value, json};
use toolonce::{ListQuery, State, Store};

use super::calls::PerMinute;
use super::reply::{self, Answer};

pub(crate) const EVERY: Duration = Duration::from_secs(5);
pub(crate) const KEPT: usize = 360;
/// How long one census may take before the sample says it failed.
const CENSUS_TIMEOUT: Duration = Duration::from_secs(2);
/// Without a census: the walk reads at most [`MAX_PAGES`] pages of [`PAGE`] entries.
const PAGE: usize = 500;
const MAX_PAGES: usize = 200;

pub(crate) struct Stats {
    samples: Mutex<VecDeque<Value>>,
    /// The calls per minute, where this process answers them.
    calls: Option<Mutex<PerMinute>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Stats {
    /// With `calls_here`, the console charts this process's calls too.
    pub(crate) fn new(calls_here: bool) -> Self {
        Stats {
            samples: Mutex::default(),
            calls: calls_here.then(|| Mutex::new(PerMinute::new(now_ms()))),
        }
    }

    fn samples(&self) -> std::sync::MutexGuard<'_, VecDeque<Value>> {
        self.samples.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn keep(&self, sample: Value) {
        let mut samples = self.samples();
        samples.push_back(sample);
        while samples.len() > KEPT {
            samples.pop_front();
        }
    }

    /// Samples `store` until the console (holding `stats`) is gone.
    pub(crate) fn start(stats: &Arc<Stats>, store: Arc<dyn Store>) {
        let weak: Weak<Stats> = Arc::downgrade(stats);
        tokio::spawn(async move {
            loop {
                let sample = sample(store.as_ref()).await;
                let Some(stats) = weak.upgrade() else { return };
                stats.keep(sample);
                drop(stats);
                tokio::time::sleep(EVERY).await;
            }
        });
    }

    /// `GET /console/api/stats`.
    pub(crate) fn answer(&self) -> Answer {
        let samples: Vec<Value> = self.samples().iter().cloned().collect();
        let calls = self.calls.as_ref().map(|calls| {
            calls
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .answer(now_ms())
        });
        let note = match calls {
            Some(_) => Value::Null,
            None => json!(
                "Replays and in-flight refusals are counted by the process that answers the \
                 calls. This console (toolonce console) runs none and cannot see other \
                 processes' calls: read them from that process's /metrics, or open the \
                 gateway's own console (toolonce mcp --listen ... --console)."
            ),
        };
        reply::json(
            StatusCode::OK,
            &json!({
                "every_ms": EVERY.as_millis() as u64,
                "samples": samples,
                "calls": calls,
                "calls_note": note,
            }),
        )
    }
}

/// One sample: the store's census where it answers one (one aggregate query, exact at any
/// size), else a walk of its pages (bounded: `complete: false` beyond); `source` says which.
async fn sample(store: &dyn Store) -> Value {
    let at = now_ms();
    let started = Instant::now();
    let census = match tokio::time::timeout(CENSUS_TIMEOUT, store.census()).await {
        Ok(Ok(census)) => census,
        Ok(Err(e)) => return failed(at, "census", toolonce::error_report(&e).to_string()),
        Err(_) => {
            return failed(
                at,
                "census",
                format!("the store's census took longer than {CENSUS_TIMEOUT:?}"),
            );
        }
    };
    let census_ms = started.elapsed().as_secs_f64() * 1000.0;
    let Some(census) = census else {
        return walk(store, at).await;
    };
    // The latency the console sees: one page of the store, as a list request reads it.
    let started = Instant::now();
    let page = store.list(&ListQuery::new().limit(PAGE)).await;
    let page_ms = started.elapsed().as_secs_f64() * 1000.0;
    json!({
        "at_ms": at,
        "source": "census",
        "running": census.running, "unknown": census.unknown,
        "done": census.done, "failed": census.failed,
        "oldest_unknown_ms": census.oldest_unknown.map(|d| d.as_millis() as u64),
        "complete": true,
        "census_ms": census_ms,
        "store_page_ms": page.is_ok().then_some(page_ms),
        "error": page.err().map(|e| toolonce::error_report(&e).to_string()),
    })
}

/// A sample that could not count.
fn failed(at: u64, source: &str, error: String) -> Value {
    json!({"at_ms": at, "source": source, "complete": false, "error": error})
}

/// A walk of the store's pages: entries by state, the oldest unknown one's wait (since its
/// lease ended, as the census says it), and the store's page latency.
async fn walk(store: &dyn Store, at: u64) -> Value {
    let now = SystemTime::now();
    let mut counts = [0u64; 4];
    let mut oldest: Option<Duration> = None;
    let mut query = ListQuery::new().limit(PAGE);
    let (mut pages, mut spent) = (0u32, Duration::ZERO);
    let mut complete = false;
    let mut error = None;
    for _ in 0..MAX_PAGES {
        let started = Instant::now();
        let page = match store.list(&query).await {
            Ok(page) => page,
            Err(e) => {
                error = Some(toolonce::error_report(&e).to_string());
                break;
            }
        };
        spent += started.elapsed();
        pages += 1;
        for entry in &page.entries {
            let slot = match entry.state() {
                State::Running => 0,
                State::Unknown => 1,
                State::Done => 2,
                _ => 3,
            };
            counts[slot] += 1;
            if slot == 1 {
                let waited = entry
                    .expires_at
                    .and_then(|end| now.duration_since(end).ok())
                    .unwrap_or_default();
                oldest = oldest.max(Some(waited));
            }
        }
        match page.next {
            Some(next) => query = query.cursor(next),
            None => {
                complete = true;
                break;
            }
        }
    }
    json!({
        "at_ms": at,
        "source": "pages",
        "running": counts[0], "unknown": counts[1], "done": counts[2], "failed": counts[3],
        "oldest_unknown_ms": oldest.map(|d| d.as_millis() as u64),
        "complete": complete,
        "store_page_ms": (pages > 0).then(|| spent.as_secs_f64() * 1000.0 / f64::from(pages)),
        "error": error,
    })
}
