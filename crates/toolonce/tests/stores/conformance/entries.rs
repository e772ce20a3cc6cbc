//! Reading, listing, retention, deletion and purging of entries.

use super::*;

pub async fn retention_expiry_makes_a_done_entry_absent(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    assert_eq!(
        store.complete(&key, owner, &json!(1), SHORT).await.unwrap(),
        Fenced::Applied
    );
    assert_eq!(store.get(&key).await.unwrap().unwrap().state(), State::Done);
    tokio::time::sleep(PAST_SHORT).await;
    assert!(store.get(&key).await.unwrap().is_none());
    won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
}

pub async fn list_pages_through_entries_and_filters_by_state(store: Arc<dyn Store>) {
    let mut done = Vec::new();
    let mut running = Vec::new();
    for i in 0..7 {
        let (key, fp) = op("list");
        let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
        if i % 2 == 0 {
            let _ = store.complete(&key, owner, &json!(i), LONG).await.unwrap();
            done.push(key);
        } else {
            running.push(key);
        }
    }
    let (failed_key, fp) = op("list");
    let owner = won(store.claim_fresh(&failed_key, &fp, LONG).await.unwrap());
    let _ = store
        .fail(&failed_key, owner, &ToolError::permanent("no"), Some(LONG))
        .await
        .unwrap();

    let mut all = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let mut q = ListQuery::new().limit(3);
        if let Some(c) = cursor.take() {
            q = q.cursor(c);
        }
        let page = store.list(&q).await.unwrap();
        assert!(page.entries.len() <= 3);
        all.extend(page.entries.into_iter().map(|e| e.key));
        pages += 1;
        assert!(pages < 50, "paging does not end");
        match page.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    all.sort();
    let mut expected: Vec<_> = done.iter().chain(&running).cloned().collect();
    expected.push(failed_key.clone());
    expected.sort();
    assert_eq!(all, expected, "every entry listed exactly once");

    let collect = |state| {
        let store = store.clone();
        async move {
            let mut keys = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut q = ListQuery::new().state(state).limit(2);
                if let Some(c) = cursor.take() {
                    q = q.cursor(c);
                }
                let page = store.list(&q).await.unwrap();
                for e in &page.entries {
                    assert_eq!(e.state(), state);
                }
                keys.extend(page.entries.into_iter().map(|e| e.key));
                match page.next {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            keys.sort();
            keys
        }
    };
    done.sort();
    running.sort();
    assert_eq!(collect(State::Done).await, done);
    assert_eq!(collect(State::Running).await, running);
    assert_eq!(collect(State::Failed).await, vec![failed_key]);
}

pub async fn delete_removes_an_entry_whatever_its_state(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    assert!(store.delete(&key).await.unwrap());
    assert!(!store.delete(&key).await.unwrap());
    assert!(store.get(&key).await.unwrap().is_none());
    // The deleted owner is fenced out; a new caller wins.
    assert_eq!(
        store.complete(&key, owner, &json!(1), LONG).await.unwrap(),
        Fenced::NotOwner
    );
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let _ = store.complete(&key, owner, &json!(1), LONG).await.unwrap();
    assert!(store.delete(&key).await.unwrap());
    assert!(store.get(&key).await.unwrap().is_none());
}

pub async fn purge_removes_expired_entries_and_keeps_live_ones(store: Arc<dyn Store>) {
    let (live, fp) = op("t");
    let owner = won(store.claim_fresh(&live, &fp, LONG).await.unwrap());
    let _ = store.complete(&live, owner, &json!(1), LONG).await.unwrap();
    let (expiring, fp2) = op("t");
    let owner = won(store.claim_fresh(&expiring, &fp2, LONG).await.unwrap());
    let _ = store
        .complete(&expiring, owner, &json!(2), SHORT)
        .await
        .unwrap();
    // A lease and an unknown retention that both end within `SHORT`: gone by `PAST_SHORT`.
    let (lapsed, fp3) = op("t");
    let lapsed_owner = OwnerToken::generate();
    let request = ClaimRequest::new(&lapsed, &fp3, &lapsed_owner, SHORT / 2).retention(SHORT / 2);
    assert!(matches!(store.claim(&request).await.unwrap(), Claim::Won));
    tokio::time::sleep(PAST_SHORT).await;
    let purged = store.purge_expired().await.unwrap();
    assert!(
        purged <= 2,
        "purged {purged}, but only two entries had expired"
    );
    assert!(store.get(&live).await.unwrap().is_some());
    assert!(store.get(&expiring).await.unwrap().is_none());
    assert!(store.get(&lapsed).await.unwrap().is_none());
    let listed = store.list(&ListQuery::new()).await.unwrap();
    assert_eq!(
        listed
            .entries
            .iter()
            .map(|e| e.key.clone())
            .collect::<Vec<_>>(),
        vec![live]
    );
    assert_eq!(
        store.purge_expired().await.unwrap(),
        0,
        "nothing left to purge"
    );
}

pub async fn get_of_an_unknown_key_is_none(store: Arc<dyn Store>) {
    let (key, _) = op("t");
    assert!(store.get(&key).await.unwrap().is_none());
    assert!(!store.delete(&key).await.unwrap());
    assert!(
        !store
            .renew(&key, &OwnerToken::generate(), LONG)
            .await
            .unwrap()
    );
}

pub async fn a_running_entry_reports_a_lease_expiry_in_the_future(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let _owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let entry = store.get(&key).await.unwrap().unwrap();
    let expires = entry.expires_at.expect("expiry known");
    let now = std::time::SystemTime::now();
    // Generous bounds: the store's clock may differ a little from ours.
    assert!(
        expires > now + Duration::from_secs(30),
        "{expires:?} vs {now:?}"
    );
    assert!(
        expires < now + Duration::from_secs(90),
        "{expires:?} vs {now:?}"
    );
    let started = entry.started_at;
    assert!(started < now + Duration::from_secs(5) && started > now - Duration::from_secs(30));
}
