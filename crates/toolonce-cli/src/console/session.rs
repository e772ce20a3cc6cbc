//! Who may use the console: the holder of the token printed at start. The page sends it once
//! (`POST /console/api/session` with `Authorization: Bearer TOKEN`, from an allowed Origin)
//! and gets a session: an HttpOnly, SameSite=Strict cookie (no script reads it, no other site
//! sends it) and a CSRF token the page keeps in memory and sends with every action. Sessions
//! are bounded: at most [`MAX_SESSIONS`] (a new one ends the oldest), each for [`LIFETIME`].
//! Tokens are compared in constant time and never logged or repeated.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use hyper::header::{self, HeaderMap, HeaderValue};
use serde_json::json;

use super::reply::{self, Answer};

pub(crate) const MAX_SESSIONS: usize = 32;
pub(crate) const LIFETIME: Duration = Duration::from_secs(8 * 3600);
const COOKIE: &str = "toolonce_console";
const CSRF_HEADER: &str = "x-csrf-token";

pub(crate) struct Sessions {
    token: String,
    open: Mutex<HashMap<String, Session>>,
}

#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) csrf: String,
    started: Instant,
}

/// `bytes` random bytes as hex.
pub(crate) fn random_hex(bytes: usize) -> anyhow::Result<String> {
    let mut raw = vec![0u8; bytes];
    getrandom::fill(&mut raw).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `given` is `secret`, in the same time wherever the first difference is.
fn same(given: &[u8], secret: &[u8]) -> bool {
    given.len() == secret.len() && given.iter().zip(secret).fold(0u8, |a, (x, y)| a | (x ^ y)) == 0
}

impl Sessions {
    pub(crate) fn new(token: &str) -> Self {
        Sessions {
            token: token.to_owned(),
            open: Mutex::default(),
        }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `POST /console/api/session`: the token for a session cookie and a CSRF token; a
    /// request with a session cookie already gets its CSRF token again (a reloaded page).
    pub(crate) fn login(&self, headers: &HeaderMap, from_browser_page: bool) -> Answer {
        if !from_browser_page {
            return reply::error(
                StatusCode::FORBIDDEN,
                "a session is opened by the console's page (a request with an Origin)",
            );
        }
        if let Some((_, session)) = self.of_cookie(headers) {
            return reply::json(StatusCode::OK, &json!({"csrf": session.csrf}));
        }
        if !self.bearer(headers) {
            tracing::info!(target: "toolonce::console", "refused a session: wrong or no token");
            return unauthorized();
        }
        let (Ok(id), Ok(csrf)) = (random_hex(32), random_hex(32)) else {
            return reply::error(StatusCode::INTERNAL_SERVER_ERROR, "no randomness");
        };
        {
            let mut open = self.open();
            open.retain(|_, s| s.started.elapsed() < LIFETIME);
            if open.len() >= MAX_SESSIONS
                && let Some(oldest) = open
                    .iter()
                    .min_by_key(|(_, s)| s.started)
                    .map(|(k, _)| k.clone())
            {
                open.remove(&oldest);
            }
            open.insert(
                id.clone(),
                Session {
                    csrf: csrf.clone(),
                    started: Instant::now(),
                },
            );
        }
        let mut answer = reply::json(StatusCode::OK, &json!({"csrf": csrf}));
        let cookie = format!(
            "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/console; Max-Age={}",
            LIFETIME.as_secs()
        );
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            answer.headers_mut().insert(header::SET_COOKIE, value);
        }
        answer
    }

    /// Whether the request carries the console's token as `Authorization: Bearer` (a
    /// scraper of `/metrics`, which keeps no cookie).
    pub(crate) fn bearer(&self, headers: &HeaderMap) -> bool {
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .is_some_and(|g| same(g.as_bytes(), self.token.as_bytes()))
    }

    /// The session of a request's cookie, if it is open.
    fn of_cookie(&self, headers: &HeaderMap) -> Option<(String, Session)> {
        let id = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
            .next()?;
        let open = self.open();
        let session = open.get(id).filter(|s| s.started.elapsed() < LIFETIME)?;
        Some((id.to_owned(), session.clone()))
    }

    /// The request's session, or its refusal: 401 without one; for an action (`POST`), 403
    /// without the session's CSRF token or without an Origin (checked allowed by the caller).
    pub(crate) fn check(&self, headers: &HeaderMap, action: bool) -> Result<Session, Answer> {
        let Some((_, session)) = self.of_cookie(headers) else {
            return Err(unauthorized());
        };
        if action {
            if headers.get(header::ORIGIN).is_none() {
                return Err(reply::error(
                    StatusCode::FORBIDDEN,
                    "an action needs the Origin header of the console's page",
                ));
            }
            let given = headers.get(CSRF_HEADER).map(HeaderValue::as_bytes);
            if !given.is_some_and(|g| same(g, session.csrf.as_bytes())) {
                return Err(reply::error(
                    StatusCode::FORBIDDEN,
                    "the CSRF token is missing or wrong: reload the console",
                ));
            }
        }
        Ok(session)
    }
}

fn unauthorized() -> Answer {
    reply::error(
        StatusCode::UNAUTHORIZED,
        "the console needs its token: open the URL `toolonce console` printed at start",
    )
}
