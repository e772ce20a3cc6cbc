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

/// Returns the result it is asked for, to see how each result reads when it is replayed.
struct Echo;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    result: serde_json::Value,
}

impl toolonce::WriteTool for Echo {
    type Args = EchoArgs;
    type Output = serde_json::Value;
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Returns its argument."
    }
    async fn call(
        &self,
        _ctx: toolonce::WriteContext,
        args: EchoArgs,
    ) -> Result<serde_json::Value, ToolError> {
        Ok(args.result)
    }
}

/// A store may hand a replayed result back as the text it kept or as a value; through a
/// toolbox either way reads exactly as the first call did, for results in the form serde_json
/// writes plainly (sorted members, integers, strings without escapes, as deep as a result may
/// nest) and for every other (fractions, escapes, numbers past 15 digits, `-0.0`).
pub async fn a_replayed_result_reads_exactly_as_the_first_call_showed_it(store: Arc<dyn Store>) {
    let nested = |levels: usize, inner: serde_json::Value| {
        (0..levels - 1).fold(json!([inner]), |v, _| json!([v]))
    };
    let results = [
        json!({"cents": 500, "receipt": "re_000000000001", "status": "succeeded"}),
        json!("sent"),
        json!(""),
        json!(-42),
        json!(null),
        json!({"a": [true, false, {}, []], "é": "✓ 🦀 / \u{7f}"}),
        nested(toolonce::store::MAX_STORED_DEPTH, json!(1)),
        json!({"ratio": 0.1, "text": "a \"quoted\" \\ line\n\u{1}"}),
        json!([123456789012345678u64, -9007199254740993i64, -0.0, 1e300]),
        nested(toolonce::store::MAX_STORED_DEPTH, json!(2.5)),
    ];
    let toolbox = toolonce::Toolbox::builder(store)
        .scope(unique_scope("replayed-text"))
        .write(Echo)
        .build()
        .unwrap();
    for result in results {
        let shown = match &result {
            serde_json::Value::String(s) => s.clone(),
            other => serde_json::to_string(other).unwrap(),
        };
        let first = toolbox.call("echo", json!({"result": result})).await;
        let again = toolbox.call("echo", json!({"result": result})).await;
        assert_eq!(first.outcome, toolonce::Outcome::Executed, "{shown}");
        assert_eq!(again.outcome, toolonce::Outcome::Replayed, "{shown}");
        assert_eq!(first.content, shown);
        assert_eq!(again.content, shown, "the replay reads as the first call");
        let value = again.value.expect("a replayed result");
        assert_eq!(value.to_json(), serde_json::to_string(&result).unwrap());
        assert_eq!(value.into_value(), result);
    }
}
