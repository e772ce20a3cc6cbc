//! The census a metrics endpoint samples: live entries by state and the oldest `unknown` one's
//! wait, counted by the store; what was released or never claimed does not count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolonce::{Census, State, Store, ToolError};

use super::{ClaimFresh, LONG, PAST_SHORT, SHORT, op, won};

/// Claims one entry into each state (two `unknown` ones, 400 ms apart, and one released), then
/// checks the counts and that the wait is the older `unknown` entry's. `counts`: whether the
/// store counts at all (`false`: its census must be `None`, never made-up numbers).
pub async fn a_census_counts_live_entries_by_state_and_the_oldest_unknown_wait(
    store: Arc<dyn Store>,
    counts: bool,
) {
    if !counts {
        assert_eq!(store.census().await.unwrap(), None);
        return;
    }
    assert_eq!(store.census().await.unwrap(), Some(Census::default()));
    let older = Instant::now();
    let (key, fp) = op("census_unknown_older");
    won(store.claim_fresh(&key, &fp, SHORT).await.unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (key, fp) = op("census_unknown_newer");
    won(store.claim_fresh(&key, &fp, SHORT).await.unwrap());
    let (key, fp) = op("census_running");
    won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let (key, fp) = op("census_done");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let done = store.complete(&key, owner, &json!(1), LONG).await.unwrap();
    assert!(done.is_applied());
    let (key, fp) = op("census_failed");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let error = ToolError::permanent("declined");
    let failed = store.fail(&key, owner, &error, Some(LONG)).await.unwrap();
    assert!(failed.is_applied());
    let (key, fp) = op("census_released");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let error = ToolError::transient("try again");
    let released = store.fail(&key, owner, &error, None).await.unwrap();
    assert!(released.is_applied());
    tokio::time::sleep(PAST_SHORT).await;
    let census = store.census().await.unwrap().expect("this store counts");
    let since_older = older.elapsed();
    for (state, count) in [
        (State::Running, 1),
        (State::Unknown, 2),
        (State::Done, 1),
        (State::Failed, 1),
    ] {
        assert_eq!(census.count(state), count, "{state:?} in {census:?}");
    }
    // The older entry's lease ended 300 ms after its claim: about 800 ms ago (the newer one's,
    // about 400 ms ago). Store clocks round to milliseconds; 150 ms of slack for a slow machine.
    let waited = census.oldest_unknown.expect("two unknown entries");
    let most = since_older - SHORT + Duration::from_millis(50);
    assert!(waited >= Duration::from_millis(650), "{waited:?}");
    assert!(waited <= most, "{waited:?} > {most:?}");
}
