//! `remove` deletes only the settled entry its caller read (`toolonce rm`): an entry deleted
//! and claimed again since the read, whether that claim still runs or has settled anew, is
//! refused as changed with nothing deleted, so the removal never lets a third run happen where
//! two were right.

use super::*;
use toolonce::{Removed, SeenSettled};

/// A settled entry of a fresh key: `done`, or `failed` when `failed` is set.
async fn settled_entry(store: &dyn Store, failed: bool) -> (OperationKey, Fingerprint) {
    let (key, fp) = op("rm");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let settled = if failed {
        let error = ToolError::permanent("declined");
        store.fail(&key, owner, &error, Some(LONG)).await.unwrap()
    } else {
        store
            .complete(&key, owner, &json!("sent"), LONG)
            .await
            .unwrap()
    };
    assert_eq!(settled, Fenced::Applied);
    (key, fp)
}

/// What an operator's `rm` saw of the settled entry of `key`.
pub async fn seen_settled(store: &dyn Store, key: &OperationKey) -> SeenSettled {
    let entry = store
        .get(key)
        .await
        .unwrap()
        .expect("a live entry to look at");
    SeenSettled::of(&entry).unwrap_or_else(|| panic!("expected a settled entry, got {entry:?}"))
}

/// Someone else removes the entry of `key` and the agent's retry claims it again: the claim's
/// token. Waits first, so that what follows cannot fall in the millisecond the entry seen
/// started or settled in.
async fn deleted_and_claimed_again(
    store: &dyn Store,
    key: &OperationKey,
    fp: &Fingerprint,
) -> OwnerToken {
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(store.delete(key).await.unwrap());
    won(store.claim_fresh(key, fp, LONG).await.unwrap())
}

pub async fn remove_deletes_the_settled_entry_read_so_the_next_call_runs(store: Arc<dyn Store>) {
    for failed in [false, true] {
        let (key, fp) = settled_entry(&*store, failed).await;
        let seen = seen_settled(&*store, &key).await;
        assert_eq!(store.remove(&key, &seen).await.unwrap(), Removed::Applied);
        assert!(store.get(&key).await.unwrap().is_none(), "failed={failed}");
        won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    }
}

pub async fn remove_after_the_entry_was_deleted_and_claimed_again_spares_the_live_claim(
    store: Arc<dyn Store>,
) {
    let (key, fp) = settled_entry(&*store, false).await;
    let seen = seen_settled(&*store, &key).await;
    let retry = deleted_and_claimed_again(&*store, &key, &fp).await;
    match store.remove(&key, &seen).await.unwrap() {
        Removed::Changed(entry) => assert_eq!(entry.state(), State::Running, "{entry:?}"),
        other => panic!("a removal of the entry read answered {other:?} for a new claim"),
    }
    // The retry still holds the key: no duplicate runs beside it, and it records its outcome.
    assert!(matches!(
        store.claim_fresh(&key, &fp, LONG).await.unwrap(),
        Fresh::Existing(_)
    ));
    assert_eq!(
        store
            .complete(&key, retry, &json!("second"), LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
}

pub async fn remove_after_the_entry_was_claimed_and_settled_again_is_refused_as_changed(
    store: Arc<dyn Store>,
) {
    for failed in [false, true] {
        let (key, fp) = settled_entry(&*store, false).await;
        let seen = seen_settled(&*store, &key).await;
        let retry = deleted_and_claimed_again(&*store, &key, &fp).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let settled = if failed {
            let error = ToolError::permanent("declined");
            store.fail(&key, retry, &error, Some(LONG)).await.unwrap()
        } else {
            store
                .complete(&key, retry, &json!("second"), LONG)
                .await
                .unwrap()
        };
        assert_eq!(settled, Fenced::Applied);
        let now = store.get(&key).await.unwrap().expect("the second outcome");
        assert_ne!(now.settled_at, None, "{now:?}");
        assert_ne!(now.settled_at, seen.settled_at(), "another settling time");
        match store.remove(&key, &seen).await.unwrap() {
            Removed::Changed(entry) => assert_eq!(entry, now_but_expiry(&now, &entry)),
            other => panic!("failed={failed}: the second outcome answered {other:?}"),
        }
        // The second outcome is still there, replayed to duplicates.
        let kept = store.get(&key).await.unwrap().expect("nothing was deleted");
        assert_eq!(kept.settled_at, now.settled_at);
        // Whoever reads it now may remove it.
        let fresh = seen_settled(&*store, &key).await;
        assert_eq!(store.remove(&key, &fresh).await.unwrap(), Removed::Applied);
    }
}

/// `now` with the expiry of `found` (Redis reports an expiry from a remaining time, so two
/// reads of one entry differ in it).
fn now_but_expiry(now: &toolonce::Entry, found: &toolonce::Entry) -> toolonce::Entry {
    let mut now = now.clone();
    now.expires_at = found.expires_at;
    now
}

pub async fn remove_of_an_absent_key_is_absent(store: Arc<dyn Store>) {
    let (key, _fp) = settled_entry(&*store, false).await;
    let seen = seen_settled(&*store, &key).await;
    assert!(store.delete(&key).await.unwrap());
    assert_eq!(store.remove(&key, &seen).await.unwrap(), Removed::Absent);
    // And a second removal of an entry that one removal deleted finds nothing either.
    let (key, _fp) = settled_entry(&*store, true).await;
    let seen = seen_settled(&*store, &key).await;
    assert_eq!(store.remove(&key, &seen).await.unwrap(), Removed::Applied);
    assert_eq!(store.remove(&key, &seen).await.unwrap(), Removed::Absent);
}
