//! The console's writes, each fenced on the entry the page showed: the page sends back the
//! entry's fence (see [`api::fence`]); the entry is read again, and unless it is still the one
//! shown the answer is 409 "changed" with the entry as it is now; then the store's own fenced
//! write ([`Store::resolve`], [`Store::remove`]) compares the attempt in the same atomic step,
//! so an entry that changes between the read and the write is not touched either. A write
//! whose answer was lost is said to be unknown (502): it may have applied.

use std::time::Duration;

use hyper::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use toolonce::{
    Entry, OperationKey, Removed, Resolution, Resolved, Seen, SeenSettled, State, Store, ToolError,
};

use super::api::{detail, fence, store_error};
use super::reply::{self, Answer};

/// How long a resolved outcome is kept and replayed (as `toolonce resolve`'s default).
const RETENTION: Duration = Duration::from_secs(86_400);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Action {
    pub(crate) key: String,
    pub(crate) fence: String,
    /// For resolve: `done`, `failed` or `release`.
    #[serde(default)]
    pub(crate) outcome: Option<String>,
    #[serde(default)]
    pub(crate) result: Option<Value>,
    #[serde(default)]
    pub(crate) message: Option<String>,
}

fn parsed(body: &[u8]) -> Result<Action, Answer> {
    serde_json::from_slice(body)
        .map_err(|e| reply::error(StatusCode::BAD_REQUEST, &format!("invalid action: {e}")))
}

/// The entry the action names, if it is still the one the page showed.
async fn seen_entry(store: &dyn Store, action: Action) -> Result<(Action, Entry), Answer> {
    let key: OperationKey = action
        .key
        .parse()
        .map_err(|e: toolonce::Error| reply::error(StatusCode::BAD_REQUEST, &e.to_string()))?;
    match store.get(&key).await {
        Ok(Some(entry)) if fence(&entry) == action.fence => Ok((action, entry)),
        Ok(Some(entry)) => Err(changed(&entry)),
        Ok(None) => Err(reply::json(
            StatusCode::CONFLICT,
            &json!({"error": "changed: the entry is gone", "changed": true, "entry": null}),
        )),
        Err(e) => Err(store_error(&e)),
    }
}

fn changed(now: &Entry) -> Answer {
    reply::json(
        StatusCode::CONFLICT,
        &json!({
            "error": "changed: the entry is not the one the page showed; nothing was done",
            "changed": true,
            "entry": detail(now),
        }),
    )
}

fn refused(status: StatusCode, why: &str, now: &Entry) -> Answer {
    reply::json(status, &json!({"error": why, "entry": detail(now)}))
}

fn lost(e: &toolonce::Error) -> Option<Answer> {
    matches!(
        e,
        toolonce::Error::Unavailable(_) | toolonce::Error::Store(_)
    )
    .then(|| {
        reply::error(
            StatusCode::BAD_GATEWAY,
            &format!(
                "unknown: the store failed before it answered ({}); the action may or may not \
                 have applied: look at the entry again",
                toolonce::error_report(e)
            ),
        )
    })
}

/// `POST /console/api/resolve {key, fence, outcome: done|failed|release, result?, message?}`:
/// settles an unknown entry.
pub(crate) async fn resolve(store: &dyn Store, body: &[u8]) -> Answer {
    match parsed(body) {
        Ok(action) => resolve_action(store, action).await,
        Err(answer) => answer,
    }
}

/// A resolve, once its body is read (one entry of a bulk action too).
pub(crate) async fn resolve_action(store: &dyn Store, action: Action) -> Answer {
    let (action, entry) = match seen_entry(store, action).await {
        Ok(seen) => seen,
        Err(answer) => return answer,
    };
    let resolution = match (action.outcome.as_deref(), action.result, action.message) {
        (Some("done"), Some(result), _) => Resolution::Done(result),
        (Some("failed"), _, Some(m)) if !m.trim().is_empty() => {
            Resolution::Failed(ToolError::permanent(m))
        }
        (Some("release"), _, _) => Resolution::Release,
        _ => {
            return reply::error(
                StatusCode::BAD_REQUEST,
                "outcome must be done (with a result), failed (with a message) or release",
            );
        }
    };
    if entry.state() != State::Unknown {
        return refused(
            StatusCode::CONFLICT,
            "only an unknown entry is resolved here (a running one belongs to a live owner; \
             `toolonce resolve --force` acts on a stuck one)",
            &entry,
        );
    }
    let Some(seen) = Seen::of(&entry) else {
        return changed(&entry);
    };
    settled(
        store
            .resolve(&entry.key, &seen, &resolution, RETENTION)
            .await,
    )
}

/// The answer to a fenced resolve (or release).
fn settled(answer: toolonce::Result<Resolved>) -> Answer {
    match answer {
        Ok(Resolved::Applied) => reply::json(StatusCode::OK, &json!({"applied": true})),
        Ok(Resolved::Absent) => reply::json(
            StatusCode::CONFLICT,
            &json!({"error": "changed: the entry is gone", "changed": true, "entry": null}),
        ),
        Ok(Resolved::Changed(now)) => changed(&now),
        Ok(Resolved::Settled(now)) => refused(StatusCode::CONFLICT, "already settled", &now),
        Ok(Resolved::Live(now)) => refused(StatusCode::CONFLICT, "its owner is live", &now),
        Ok(_) => reply::error(StatusCode::INTERNAL_SERVER_ERROR, "unexpected store answer"),
        Err(e) => lost(&e).unwrap_or_else(|| store_error(&e)),
    }
}

/// `POST /console/api/remove {key, fence}`: deletes a settled entry, or releases an unknown
/// one (never a running one: its owner is live).
pub(crate) async fn remove(store: &dyn Store, body: &[u8]) -> Answer {
    match parsed(body) {
        Ok(action) => remove_action(store, action).await,
        Err(answer) => answer,
    }
}

/// A removal, once its body is read (one entry of a bulk action too).
pub(crate) async fn remove_action(store: &dyn Store, action: Action) -> Answer {
    let (_, entry) = match seen_entry(store, action).await {
        Ok(seen) => seen,
        Err(answer) => return answer,
    };
    if let Some(seen) = SeenSettled::of(&entry) {
        return match store.remove(&entry.key, &seen).await {
            Ok(Removed::Applied) => reply::json(StatusCode::OK, &json!({"applied": true})),
            Ok(Removed::Changed(now)) => changed(&now),
            Ok(_) => reply::json(
                StatusCode::CONFLICT,
                &json!({"error": "changed: the entry is gone", "changed": true, "entry": null}),
            ),
            Err(e) => lost(&e).unwrap_or_else(|| store_error(&e)),
        };
    }
    match (entry.state(), Seen::of(&entry)) {
        (State::Unknown, Some(seen)) => settled(
            store
                .resolve(&entry.key, &seen, &Resolution::Release, Duration::ZERO)
                .await,
        ),
        _ => refused(
            StatusCode::CONFLICT,
            "a running entry belongs to a live owner: it is not removed here",
            &entry,
        ),
    }
}
