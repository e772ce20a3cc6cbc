//! The console's HTTP server (hyper, as the gateway): at most [`MAX_CONNECTIONS`] connections
//! at once (at the cap the oldest one without a whole request head, else the oldest idle one,
//! is closed for a new one, as [`crate::connections`] says), a request head within
//! [`HEADER_TIMEOUT`], a body of at most [`MAX_BODY`] bytes within [`BODY_TIMEOUT`]. Each
//! request is authenticated before its body is read.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioTimer;
use toolonce::Store;

use super::reply::{self, Answer};
use super::routes::{self, Route};
use super::session::Sessions;
use super::stats::Stats;
use crate::connections::Connections;

pub(crate) const MAX_CONNECTIONS: usize = 64;
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// A bulk action names at most a thousand entries with their fences: well under this.
pub(crate) const MAX_BODY: usize = 256 * 1024;

/// Whether the console runs in the process that answers the calls (the gateway's): then it
/// shows their replays and in-flight refusals per minute; `toolonce console` sees no other
/// process's calls.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Calls {
    Here,
    Elsewhere,
}

/// What the console serves from: the store, who may use it, and from which origins.
pub(crate) struct Console {
    pub(super) store: Arc<dyn Store>,
    pub(super) sessions: Sessions,
    /// The origins (`scheme://host:port`) the page may be opened from.
    pub(super) origins: Vec<String>,
    pub(super) stats: Arc<Stats>,
}

impl Console {
    /// A console for `store`, opened with `token`, served at `local` (and `extra` origins).
    pub(crate) fn new(
        store: Arc<dyn Store>,
        token: &str,
        local: SocketAddr,
        extra: &[String],
        calls: Calls,
    ) -> anyhow::Result<Arc<Console>> {
        let mut origins = vec![format!("http://{local}")];
        if local.ip().is_loopback() {
            origins.push(format!("http://localhost:{}", local.port()));
        }
        for origin in extra {
            let origin = origin.trim_end_matches('/');
            if !(origin.starts_with("http://") || origin.starts_with("https://"))
                || origin.matches('/').count() != 2
            {
                anyhow::bail!(
                    "--origin {origin}: expected scheme://host[:port] (such as \
                     https://console.example.com)"
                );
            }
            origins.push(origin.to_owned());
        }
        let stats = Arc::new(Stats::new(calls == Calls::Here));
        Stats::start(&stats, store.clone());
        Ok(Arc::new(Console {
            store,
            sessions: Sessions::new(token),
            origins,
            stats,
        }))
    }

    /// Answers one request under `/console`.
    pub(crate) async fn handle(self: &Arc<Self>, request: Request<Incoming>) -> Answer {
        let path = request.uri().path().to_owned();
        let Some(route) = routes::route(request.method(), &path) else {
            return reply::error(StatusCode::NOT_FOUND, "not found");
        };
        // Any request a browser sends from another page is refused, before anything is read.
        let origin = request.headers().get(header::ORIGIN);
        if origin.is_some_and(|o| !self.origins.iter().any(|a| a.as_bytes() == o.as_bytes())) {
            return reply::error(
                StatusCode::FORBIDDEN,
                "requests from this Origin are refused",
            );
        }
        if let Some(asset) = routes::asset(route) {
            return asset;
        }
        if route == Route::Metrics {
            // A scraper keeps no cookie: it sends the console's token itself.
            if !self.sessions.bearer(request.headers()) {
                return reply::error(
                    StatusCode::UNAUTHORIZED,
                    "/metrics needs the console's token as Authorization: Bearer",
                );
            }
            return routes::metrics(self.store.as_ref()).await;
        }
        if route == Route::Login {
            return self.sessions.login(request.headers(), origin.is_some());
        }
        let session = match self.sessions.check(request.headers(), route.is_action()) {
            Ok(session) => session,
            Err(refusal) => return refusal,
        };
        let query = request.uri().query().unwrap_or("").to_owned();
        let body = if route.is_action() {
            match read_body(request).await {
                Ok(body) => body,
                Err(refusal) => return refusal,
            }
        } else {
            Bytes::new()
        };
        routes::dispatch(
            self.store.as_ref(),
            &self.stats,
            route,
            &session,
            &query,
            &body,
        )
        .await
    }
}

/// A request's body within [`MAX_BODY`] and [`BODY_TIMEOUT`].
async fn read_body(request: Request<Incoming>) -> Result<Bytes, Answer> {
    let too_large = || {
        reply::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the body is larger than {MAX_BODY} bytes, the limit"),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY as u64) {
        return Err(too_large());
    }
    let collect = Limited::new(request.into_body(), MAX_BODY).collect();
    match tokio::time::timeout(BODY_TIMEOUT, collect).await {
        Ok(Ok(body)) => Ok(body.to_bytes()),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(_)) => Err(reply::error(
            StatusCode::BAD_REQUEST,
            "the body was not received whole",
        )),
        Err(_) => Err(reply::error(
            StatusCode::REQUEST_TIMEOUT,
            "the body did not arrive in time",
        )),
    }
}

/// Serves until SIGTERM or SIGINT.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    console: Arc<Console>,
) -> anyhow::Result<()> {
    let connections = Connections::new(MAX_CONNECTIONS);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let stream = tokio::select! {
            accepted = async {
                let accepted = listener.accept().await;
                // After the accept, so that a connection is only closed for one that came.
                if accepted.is_ok() {
                    connections.room().await;
                }
                accepted
            } => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!(target: "toolonce::console", error = %e, "cannot accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = terminate.recv() => return Ok(()),
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let console = console.clone();
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .max_buf_size(64 * 1024);
        connections.serve(
            stream,
            http,
            move |request| {
                let console = console.clone();
                async move { console.handle(request).await }
            },
            || {
                reply::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the connection was closed to make room",
                )
            },
        );
    }
}
