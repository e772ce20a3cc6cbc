//! The console's reads: a page of entries (`GET /console/api/entries`), one entry
//! (`/entry?key=`), and the unknown outcomes with the age of the oldest (`/unknown`). Every
//! request reads at most [`MAX_STORE_PAGES`] pages of the store, whatever its size: filters
//! the store applies (state, scope, tool) go to it, the others (age, text) are applied to
//! what it returns, and the store's cursor continues where a request stopped.

use std::time::{Duration, SystemTime};

use hyper::StatusCode;
use serde_json::{Value, json};
use toolonce::{Entry, EntryState, ListQuery, OperationKey, State, Store, owner_digest};

use super::reply::{self, Answer};
use crate::inspect::{since, summary};

/// The most store pages one request reads (each of [`PAGE`] entries).
pub(crate) const MAX_STORE_PAGES: usize = 10;
pub(crate) const PAGE: usize = 50;
/// The most unknown entries `/unknown` looks at for the oldest.
pub(crate) const MAX_UNKNOWN_SCAN: usize = 5_000;

/// What the page knows of an entry, and sends back to act on it: an action applies only if
/// the entry is still this one (state, attempt, owner, start and settling time).
pub(crate) fn fence(entry: &Entry) -> String {
    let owner = match &entry.state {
        EntryState::Running { owner } | EntryState::Unknown { owner } => {
            owner.as_deref().map(owner_digest)
        }
        _ => None,
    };
    let ms = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    };
    format!(
        "{}:{}:{}:{}:{}",
        entry.state().as_str(),
        entry.attempts,
        owner.unwrap_or_default(),
        ms(entry.started_at),
        entry.settled_at.map(ms).unwrap_or_default()
    )
}

/// An entry as the list shows it: its summary and its fence.
fn listed(entry: &Entry, now: SystemTime) -> Value {
    let mut doc = summary(entry, now);
    doc["fence"] = json!(fence(entry));
    doc
}

/// `name=value` pairs of a query string, percent-decoded.
pub(crate) fn param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| decode(v))
        .filter(|v| !v.is_empty())
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The filters of a list request.
struct Filter {
    query: ListQuery,
    min_age: Option<Duration>,
    text: Option<String>,
}

fn filter(query: &str) -> Result<Filter, String> {
    let mut list = ListQuery::new().limit(PAGE);
    if let Some(state) = param(query, "state") {
        list = list.state(state.parse::<State>().map_err(|e| e.to_string())?);
    }
    if let Some(scope) = param(query, "scope") {
        list = list.scope(scope);
    }
    if let Some(tool) = param(query, "tool") {
        list = list.tool(tool);
    }
    if let Some(cursor) = param(query, "cursor") {
        list = list.cursor(cursor);
    }
    let min_age = match param(query, "min_age") {
        Some(s) => Some(
            s.parse::<u64>()
                .map(Duration::from_secs)
                .map_err(|_| format!("min_age {s:?} is not a whole number of seconds"))?,
        ),
        None => None,
    };
    let text = param(query, "q").map(|q| q.to_lowercase());
    Ok(Filter {
        query: list,
        min_age,
        text,
    })
}

fn matches(f: &Filter, entry: &Entry, now: SystemTime) -> bool {
    f.query.admits(entry)
        && f.min_age.is_none_or(|a| since(entry.started_at, now) >= a)
        && f.text.as_ref().is_none_or(|q| {
            [
                Some(entry.key.as_str()),
                entry.about.scope.as_deref(),
                entry.about.tool.as_deref(),
                entry.about.detail.as_deref(),
            ]
            .into_iter()
            .flatten()
            .any(|field| field.to_lowercase().contains(q.as_str()))
        })
}

/// `GET /console/api/entries?state=&scope=&tool=&min_age=&q=&cursor=`: up to a page of
/// matching entries in the store's order, the cursor to continue (`next`, null at the end), and
/// the entries of that stretch the store cannot decode (`unreadable`: key and why), which the
/// page names rather than hiding them.
pub(crate) async fn entries(store: &dyn Store, query: &str) -> Answer {
    match matching_with_unreadable(store, query).await {
        Ok((found, next, unreadable)) => reply::json(
            StatusCode::OK,
            &json!({"entries": found, "next": next, "unreadable": unreadable}),
        ),
        Err(answer) => answer,
    }
}

/// Up to a page of the entries matching the list filters of `query`, within
/// [`MAX_STORE_PAGES`] store pages, and the cursor to continue.
pub(crate) async fn matching(
    store: &dyn Store,
    query: &str,
) -> Result<(Vec<Value>, Option<String>), Answer> {
    let (found, next, _) = matching_with_unreadable(store, query).await?;
    Ok((found, next))
}

/// [`matching`], with the entries of the stretch read that cannot be decoded.
async fn matching_with_unreadable(
    store: &dyn Store,
    query: &str,
) -> Result<(Vec<Value>, Option<String>, Vec<Value>), Answer> {
    let mut f = filter(query).map_err(|e| reply::error(StatusCode::BAD_REQUEST, &e))?;
    let now = SystemTime::now();
    let mut found = Vec::new();
    let mut unreadable = Vec::new();
    let mut next = f.query.cursor.clone();
    for _ in 0..MAX_STORE_PAGES {
        let page = store.list(&f.query).await.map_err(|e| store_error(&e))?;
        unreadable.extend(
            page.unreadable
                .iter()
                .map(|u| json!({"key": u.key, "reason": u.reason})),
        );
        found.extend(
            page.entries
                .iter()
                .filter(|e| matches(&f, e, now))
                .map(|e| listed(e, now)),
        );
        next = page.next;
        match &next {
            Some(cursor) if found.len() < PAGE => f.query.cursor = Some(cursor.clone()),
            _ => break,
        }
    }
    Ok((found, next, unreadable))
}

/// `GET /console/api/entry?key=`: everything shown of one entry (404 when there is none).
pub(crate) async fn entry(store: &dyn Store, query: &str) -> Answer {
    let Some(key) = param(query, "key") else {
        return reply::error(StatusCode::BAD_REQUEST, "key is missing");
    };
    let key: OperationKey = match key.parse() {
        Ok(key) => key,
        Err(e) => return reply::error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    match store.get(&key).await {
        Ok(Some(entry)) => reply::json(StatusCode::OK, &detail(&entry)),
        Ok(None) => reply::error(StatusCode::NOT_FOUND, "no live entry for this key"),
        Err(e) => store_error(&e),
    }
}

/// An entry's detail: its summary, fence, owner digest, result or error, and whether a
/// downstream key (the operation key handed to the tool) was handed out: once it ran.
pub(crate) fn detail(entry: &Entry) -> Value {
    let mut doc = listed(entry, SystemTime::now());
    match &entry.state {
        EntryState::Running { owner } | EntryState::Unknown { owner } => {
            doc["owner_digest"] = json!(owner.as_deref().map(owner_digest));
        }
        EntryState::Done { result, .. } => doc["result"] = result.to_value(),
        EntryState::Failed { error, .. } => {
            doc["error"] = serde_json::to_value(error).unwrap_or(Value::Null);
        }
        _ => {}
    }
    // Every attempt a claim starts hands the tool the operation key as its downstream
    // idempotency key (WriteContext::key); null when the writer recorded no attempts.
    doc["downstream_key_handed_out"] = json!((entry.attempts > 0).then_some(true));
    doc
}

/// `GET /console/api/unknown`: the unknown entries, oldest first (up to a page), how many were
/// looked at, and the age of the oldest (among at most [`MAX_UNKNOWN_SCAN`]).
pub(crate) async fn unknown(store: &dyn Store) -> Answer {
    let now = SystemTime::now();
    let mut query = ListQuery::new().state(State::Unknown).limit(500);
    let mut all: Vec<Entry> = Vec::new();
    let mut complete = false;
    while all.len() < MAX_UNKNOWN_SCAN {
        let page = match store.list(&query).await {
            Ok(page) => page,
            Err(e) => return store_error(&e),
        };
        all.extend(
            page.entries
                .into_iter()
                .filter(|e| e.state() == State::Unknown),
        );
        // Keep only the oldest page's worth while looking: memory stays bounded.
        all.sort_by_key(|e| e.started_at);
        all.truncate(MAX_UNKNOWN_SCAN.min(all.len()));
        match page.next {
            Some(next) => query = query.cursor(next),
            None => {
                complete = true;
                break;
            }
        }
    }
    let oldest = all
        .first()
        .map(|e| since(e.started_at, now).as_millis() as u64);
    let count = all.len();
    let shown: Vec<Value> = all.iter().take(PAGE).map(|e| listed(e, now)).collect();
    reply::json(
        StatusCode::OK,
        &json!({"entries": shown, "count": count, "complete": complete, "oldest_age_ms": oldest}),
    )
}

/// A store that failed: 503, with the store's report (never a URL or a password: the core's
/// errors redact them).
pub(crate) fn store_error(e: &toolonce::Error) -> Answer {
    reply::error(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("the store failed: {}", toolonce::error_report(e)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_percent_decoded_and_broken_escapes_kept_as_text() {
        assert_eq!(param("q=a%20b+c&x=1", "q").as_deref(), Some("a b c"));
        assert_eq!(param("q=%3Cscript%3E", "q").as_deref(), Some("<script>"));
        assert_eq!(param("q=100%", "q").as_deref(), Some("100%"));
        assert_eq!(param("q=%zz", "q").as_deref(), Some("%zz"));
        assert_eq!(param("q=%e2%82%ac", "q").as_deref(), Some("€"));
        assert_eq!(param("q=", "q"), None);
        assert_eq!(param("qq=1", "q"), None);
    }
}
