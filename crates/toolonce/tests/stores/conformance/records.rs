//! What an entry records (scope, tool, attempts, times) and the listings filtered by it.

use super::*;

pub async fn an_entry_records_what_it_is_how_often_it_started_and_when_it_settled(
    store: Arc<dyn Store>,
) {
    let (key, fp) = op("t");
    let about = About::new(unique_scope("meta"), "send_email").detail("smtp.example.com");
    let owner = won(claim_about(&*store, &key, &fp, &about, LONG, LONG, false).await);
    let running = store.get(&key).await.unwrap().unwrap();
    assert_eq!(running.about, about);
    assert_eq!(running.attempts, 1);
    let first = running.first_started_at.expect("first start recorded");
    assert_eq!(
        first, running.started_at,
        "the first attempt's start is the first start"
    );
    assert_eq!(running.settled_at, None, "not settled yet");
    // A duplicate sees the same.
    let seen = existing(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    assert_eq!(seen.about, about);
    assert_eq!(seen.attempts, 1);

    assert_eq!(
        store
            .complete(&key, owner, &json!("sent"), LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
    let done = store.get(&key).await.unwrap().unwrap();
    assert_eq!(done.about, about);
    assert_eq!(done.attempts, 1);
    assert_eq!(done.first_started_at, Some(first));
    let settled = done.settled_at.expect("the settle time is recorded");
    assert!(settled >= first, "{settled:?} before {first:?}");
    let listed = store
        .list(&ListQuery::new().scope(about.scope.clone().unwrap()))
        .await
        .unwrap();
    assert_eq!(listed.entries.len(), 1);
    assert_eq!(listed.entries[0].about, about);
    assert_eq!(listed.entries[0].settled_at, Some(settled));

    // A failure records its settle time too.
    let (key, fp) = op("t");
    let owner = won(claim_about(&*store, &key, &fp, &about, LONG, LONG, false).await);
    let _ = store
        .fail(&key, owner, &ToolError::permanent("no"), Some(LONG))
        .await
        .unwrap();
    let failed = store.get(&key).await.unwrap().unwrap();
    assert!(failed.settled_at.is_some());
    assert_eq!(failed.about, about);
}

pub async fn list_filters_by_state_scope_and_tool(store: Arc<dyn Store>) {
    let (s1, s2) = (unique_scope("s1"), unique_scope("s2"));
    let mut made: Vec<(OperationKey, String, &str, State)> = Vec::new();
    // Unknown entries first: their short leases expire while the rest are written.
    for (scope, tool) in [(&s1, "email"), (&s2, "charge")] {
        let (key, fp) = op("list");
        let about = About::new(scope.clone(), tool);
        let _ = won(claim_about(&*store, &key, &fp, &about, SHORT, LONG, false).await);
        made.push((key, scope.clone(), tool, State::Unknown));
    }
    for (i, (scope, tool)) in [
        (&s1, "email"),
        (&s1, "charge"),
        (&s2, "email"),
        (&s2, "charge"),
        (&s1, "email"),
        (&s2, "charge"),
    ]
    .into_iter()
    .enumerate()
    {
        let (key, fp) = op("list");
        let about = About::new(scope.clone(), tool);
        let owner = won(claim_about(&*store, &key, &fp, &about, LONG, LONG, false).await);
        let state = match i % 3 {
            0 => State::Running,
            1 => {
                let _ = store.complete(&key, owner, &json!(i), LONG).await.unwrap();
                State::Done
            }
            _ => {
                let error = ToolError::permanent("no");
                let _ = store.fail(&key, owner, &error, Some(LONG)).await.unwrap();
                State::Failed
            }
        };
        made.push((key, scope.clone(), tool, state));
    }
    tokio::time::sleep(PAST_SHORT).await;

    let collect = |query: ListQuery| {
        let store = store.clone();
        async move {
            let mut keys = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut q = query.clone().limit(2);
                if let Some(c) = cursor.take() {
                    q = q.cursor(c);
                }
                let page = store.list(&q).await.unwrap();
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
    let expect = |f: &dyn Fn(&str, &str, State) -> bool| {
        let mut keys: Vec<_> = made
            .iter()
            .filter(|(_, scope, tool, state)| f(scope, tool, *state))
            .map(|(k, ..)| k.clone())
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(
        collect(ListQuery::new().scope(s1.clone())).await,
        expect(&|scope, _, _| scope == s1)
    );
    assert_eq!(
        collect(ListQuery::new().scope(s2.clone()).tool("charge")).await,
        expect(&|scope, tool, _| scope == s2 && tool == "charge")
    );
    for state in [State::Running, State::Done, State::Failed, State::Unknown] {
        for scope in [&s1, &s2] {
            assert_eq!(
                collect(ListQuery::new().scope(scope.clone()).state(state)).await,
                expect(&|sc, _, st| sc == scope && st == state),
                "{state} in {scope}"
            );
        }
    }
    assert_eq!(
        collect(
            ListQuery::new()
                .scope(s1.clone())
                .tool("email")
                .state(State::Unknown)
        )
        .await,
        expect(&|sc, tool, st| sc == s1 && tool == "email" && st == State::Unknown)
    );
    assert!(
        collect(ListQuery::new().scope(s1.clone()).tool("nothing"))
            .await
            .is_empty()
    );
}
