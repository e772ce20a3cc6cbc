//! Bulk actions by filter: `GET /console/api/bulk?<the list's filters>` counts the matching
//! entries and names each with its fence (at most [`MAX_BULK`], within a bounded number of
//! store pages), so that the page shows the count before anything is done; `POST
//! /console/api/bulk {action, message?, result?, items: [{key, fence}]}` then acts on each
//! named entry as a single action would, fenced on its own fence: an entry that changed since
//! the count is left alone and counted as changed.

use hyper::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use toolonce::Store;

use super::act::{self, Action};
use super::api;
use super::reply::{self, Answer};

/// The most entries one bulk action names.
pub(crate) const MAX_BULK: usize = 1000;
/// The most store pages one count reads.
const MAX_PAGES: usize = 40;

/// `GET /console/api/bulk?...`: how many entries match (up to [`MAX_BULK`]), with their fences.
pub(crate) async fn preview(store: &dyn Store, query: &str) -> Answer {
    let mut items: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut complete = false;
    for _ in 0..MAX_PAGES {
        let page_query = match &cursor {
            Some(c) => format!("{query}&cursor={}", encode(c)),
            None => query.to_owned(),
        };
        let (found, next) = match api::matching(store, &page_query).await {
            Ok(page) => page,
            Err(answer) => return answer,
        };
        items.extend(
            found
                .iter()
                .map(|e| json!({"key": e["key"], "fence": e["fence"]})),
        );
        if items.len() >= MAX_BULK {
            items.truncate(MAX_BULK);
            break;
        }
        match next {
            Some(next) => cursor = Some(next),
            None => {
                complete = true;
                break;
            }
        }
    }
    reply::json(
        StatusCode::OK,
        &json!({"count": items.len(), "complete": complete, "items": items}),
    )
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Bulk {
    /// `done`, `failed`, `release` or `remove`.
    action: String,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    message: Option<String>,
    items: Vec<Item>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Item {
    key: String,
    fence: String,
}

/// `POST /console/api/bulk`: each item acted on, fenced on its own fence; the counts.
pub(crate) async fn apply(store: &dyn Store, body: &[u8]) -> Answer {
    let bulk: Bulk = match serde_json::from_slice(body) {
        Ok(bulk) => bulk,
        Err(e) => return reply::error(StatusCode::BAD_REQUEST, &format!("invalid bulk: {e}")),
    };
    if bulk.items.len() > MAX_BULK {
        return reply::error(
            StatusCode::BAD_REQUEST,
            &format!("a bulk action names at most {MAX_BULK} entries"),
        );
    }
    if !matches!(
        bulk.action.as_str(),
        "done" | "failed" | "release" | "remove"
    ) {
        return reply::error(
            StatusCode::BAD_REQUEST,
            "action must be done, failed, release or remove",
        );
    }
    let (mut applied, mut changed, mut refused, mut unknown) = (0, 0, 0, 0);
    for item in bulk.items {
        let action = Action {
            key: item.key,
            fence: item.fence,
            outcome: Some(bulk.action.clone()),
            result: bulk.result.clone(),
            message: bulk.message.clone(),
        };
        let answer = if bulk.action == "remove" {
            act::remove_action(store, action).await
        } else {
            act::resolve_action(store, action).await
        };
        match answer.status() {
            StatusCode::OK => applied += 1,
            StatusCode::CONFLICT => changed += 1,
            StatusCode::BAD_GATEWAY => unknown += 1,
            StatusCode::BAD_REQUEST => return answer,
            _ => refused += 1,
        }
    }
    reply::json(
        StatusCode::OK,
        &json!({"applied": applied, "changed": changed, "refused": refused, "unknown": unknown}),
    )
}
