//! The console's route table: each (method, path) it serves, and what answers it. `/metrics`
//! is a route of its own, served without the console's session to a scraper holding the
//! console's token (`Authorization: Bearer`; the server checks it). Under the gateway only
//! `/console` paths reach this table: the gateway's own `/metrics` answers there.

use bytes::Bytes;
use hyper::{Method, StatusCode};
use toolonce::Store;

use super::reply::{self, Answer};
use super::session::Session;
use super::stats::Stats;
use super::{act, api, bulk};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Route {
    Page,
    Script,
    Style,
    Login,
    Entries,
    Entry,
    Unknown,
    Resolve,
    Remove,
    BulkPreview,
    BulkApply,
    Stats,
    Metrics,
}

impl Route {
    /// Whether it changes the store (a `POST`: Origin and CSRF token checked).
    pub(crate) fn is_action(self) -> bool {
        matches!(self, Route::Resolve | Route::Remove | Route::BulkApply)
    }
}

const TABLE: &[(&str, &str, Route)] = &[
    ("GET", "/console", Route::Page),
    ("GET", "/console/", Route::Page),
    ("GET", "/console/console.js", Route::Script),
    ("GET", "/console/console.css", Route::Style),
    ("POST", "/console/api/session", Route::Login),
    ("GET", "/console/api/entries", Route::Entries),
    ("GET", "/console/api/entry", Route::Entry),
    ("GET", "/console/api/unknown", Route::Unknown),
    ("POST", "/console/api/resolve", Route::Resolve),
    ("POST", "/console/api/remove", Route::Remove),
    ("GET", "/console/api/bulk", Route::BulkPreview),
    ("POST", "/console/api/bulk", Route::BulkApply),
    ("GET", "/console/api/stats", Route::Stats),
    ("GET", "/metrics", Route::Metrics),
];

pub(crate) fn route(method: &Method, path: &str) -> Option<Route> {
    TABLE
        .iter()
        .find(|(m, p, _)| *p == path && method.as_str() == *m)
        .map(|(_, _, r)| *r)
}

/// The embedded page and its assets (no data in them: served without a session).
pub(crate) fn asset(route: Route) -> Option<Answer> {
    let (kind, text) = match route {
        Route::Page => (
            "text/html; charset=utf-8",
            include_str!("assets/index.html"),
        ),
        Route::Script => (
            "text/javascript; charset=utf-8",
            include_str!("assets/console.js"),
        ),
        Route::Style => (
            "text/css; charset=utf-8",
            include_str!("assets/console.css"),
        ),
        _ => return None,
    };
    Some(reply::with(
        StatusCode::OK,
        kind,
        Bytes::from_static(text.as_bytes()),
    ))
}

/// The answer to an API `route`, from the console's store and its stats (handed in, not the
/// console itself, so this table does not depend on the server that owns it).
pub(crate) async fn dispatch(
    store: &dyn Store,
    stats: &Stats,
    route: Route,
    _session: &Session,
    query: &str,
    body: &[u8],
) -> Answer {
    match route {
        Route::Entries => api::entries(store, query).await,
        Route::Entry => api::entry(store, query).await,
        Route::Unknown => api::unknown(store).await,
        Route::Resolve => act::resolve(store, body).await,
        Route::Remove => act::remove(store, body).await,
        Route::BulkPreview => bulk::preview(store, query).await,
        Route::BulkApply => bulk::apply(store, body).await,
        Route::Stats => stats.answer(),
        _ => reply::error(StatusCode::NOT_FOUND, "not found"),
    }
}

/// `GET /metrics`: the Prometheus exposition the gateway serves too ([`crate::prometheus`]).
pub(crate) async fn metrics(store: &dyn Store) -> Answer {
    let text = crate::prometheus::render(store).await;
    reply::with(
        StatusCode::OK,
        "text/plain; version=0.0.4; charset=utf-8",
        Bytes::from(text),
    )
}
