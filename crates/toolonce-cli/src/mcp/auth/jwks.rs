//! The authorization server's public keys (`--oauth-jwks`): a JWK Set read from a file or
//! fetched from an `http(s)://` URL at start (a gateway that cannot check any token does not
//! start), then kept only as long as it may be: a key the issuer removed (revoked) must stop
//! being trusted. The set's maximum age is its response's `Cache-Control: max-age` (`no-store`
//! and `no-cache`: the floor), [`DEFAULT_MAX_AGE`] without one (and for a file), within the
//! floor (30 s; lower only in tests) and [`MAX_AGE_CAP`]. A task of its own loads it again
//! at three quarters of that age, without waiting for a request. A failed load keeps the last
//! set for a grace (the max-age again, from ten floors (5 min) to [`GRACE_CAP`]) and is tried
//! again every floor, with a warning; past the grace no token is accepted (503: the gateway,
//! not the client, is at fault). A token naming a key the set does not hold also loads it
//! again (the issuer rotated its keys), at most once per floor, so that tokens naming made-up
//! keys cannot make the gateway hammer the issuer.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{Request, StatusCode, Uri, header};
use hyper_util::rt::TokioIo;
use jsonwebtoken::jwk::{Jwk, JwkSet};

/// The max-age of a key set whose response says none (and of a file).
const DEFAULT_MAX_AGE: Duration = Duration::from_secs(600);
/// The longest max-age honoured.
const MAX_AGE_CAP: Duration = Duration::from_secs(24 * 3600);
/// The longest a set is used past its max-age while it cannot be loaded again.
const GRACE_CAP: Duration = Duration::from_secs(3600);
/// How long a fetch of the key set may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest key set read (real ones are a few kilobytes).
const MAX_SET: usize = 1024 * 1024;

/// Where the key set comes from.
#[derive(Debug)]
enum Source {
    File(PathBuf),
    Url(Uri),
}

/// The key set and its times.
#[derive(Clone)]
struct Held {
    set: Arc<JwkSet>,
    /// When it was loaded, and for how long it is fresh.
    loaded: Instant,
    max_age: Duration,
    /// When a load was last tried, whether it worked or not.
    tried: Instant,
    /// Past this, the set is not used at all (the max-age and the grace).
    usable_until: Instant,
}

/// The key set, shared with the task that keeps it fresh.
pub(super) struct Keys(Arc<Shared>);

struct Shared {
    source: Source,
    floor: Duration,
    held: Mutex<Held>,
    /// One load at a time; others wait for it and then look again.
    reloading: tokio::sync::Mutex<()>,
}

/// Why no key checks a token.
pub(super) enum Missing {
    /// The token's fault: said to its client.
    Token(&'static str),
    /// The set could not be loaded for longer than its grace.
    Unavailable,
}

impl Keys {
    /// Loads the key set from `source` (a path, or an `http://` or `https://` URL); `floor` is
    /// the least max-age and the least time between loads.
    pub(super) async fn load(source: &str, floor: Duration) -> anyhow::Result<Keys> {
        let source = if source.starts_with("http://") || source.starts_with("https://") {
            let uri: Uri = source
                .parse()
                .ok()
                .context("--oauth-jwks is not a valid URL")?;
            Source::Url(uri)
        } else {
            Source::File(PathBuf::from(source))
        };
        let floor = floor.min(MAX_AGE_CAP);
        let (set, directive) = read(&source).await?;
        let shared = Shared {
            held: Mutex::new(Held::new(set, max_age(directive, floor), floor)),
            source,
            floor,
            reloading: tokio::sync::Mutex::new(()),
        };
        shared.loaded_log();
        Ok(Keys(Arc::new(shared)))
    }

    /// Loads the set again at three quarters of its max-age (every floor after a failure),
    /// until the keys are dropped. On the gateway's runtime: started by its `serve`.
    pub(super) fn refresh_in_background(&self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(keep_fresh(Arc::downgrade(&self.0)))
    }

    /// The key named `kid` (or the only key, when the token names none), loading the set
    /// again once if it is not there and no load was tried within the floor.
    pub(super) async fn find(&self, kid: Option<&str>) -> Result<Jwk, Missing> {
        let shared = &self.0;
        let mut held = shared.current();
        if pick(&held.set, kid)?.is_none() {
            let _one = shared.reloading.lock().await;
            let now_held = shared.current();
            if now_held.tried == held.tried && held.tried.elapsed() >= shared.floor {
                shared.reload().await;
            }
            held = shared.current();
        }
        if Instant::now() >= held.usable_until {
            return Err(Missing::Unavailable);
        }
        pick(&held.set, kid)?.ok_or(Missing::Token(UNKNOWN_KEY))
    }
}

impl Held {
    fn new(set: JwkSet, max_age: Duration, floor: Duration) -> Held {
        let now = Instant::now();
        Held {
            set: Arc::new(set),
            loaded: now,
            max_age,
            tried: now,
            usable_until: now + max_age + grace(max_age, floor),
        }
    }

    /// When the next load is due: at three quarters of the max-age, or a floor after a
    /// failed one.
    fn due(&self, floor: Duration) -> Instant {
        if self.tried > self.loaded {
            self.tried + floor
        } else {
            self.loaded + self.max_age * 3 / 4
        }
    }
}

impl Shared {
    fn current(&self) -> Held {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Loads the set again; a failure keeps the last one (until its grace ends).
    async fn reload(&self) {
        let result = read(&self.source).await;
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok((set, directive)) => {
                *held = Held::new(set, max_age(directive, self.floor), self.floor);
                drop(held);
                self.loaded_log();
            }
            Err(e) => {
                held.tried = Instant::now();
                let left = held.usable_until.saturating_duration_since(held.tried);
                drop(held);
                // The error names the source without its query (see `shown`): no secret.
                tracing::warn!(
                    target: "toolonce::mcp",
                    error = %format!("{e:#}"),
                    "cannot load the key set again (--oauth-jwks): the last one is used for \
                     {}s more, then no token is accepted",
                    left.as_secs()
                );
            }
        }
    }

    fn loaded_log(&self) {
        let max_age = self.current().max_age;
        tracing::info!(
            target: "toolonce::mcp",
            max_age_secs = max_age.as_secs_f64(),
            "loaded the key set (--oauth-jwks)"
        );
    }
}

/// Loads the set whenever it is due, until the keys are dropped.
async fn keep_fresh(shared: Weak<Shared>) {
    loop {
        let Some(due) = shared.upgrade().map(|s| s.current().due(s.floor)) else {
            return;
        };
        tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let _one = shared.reloading.lock().await;
        // Another load (for an unknown key) may have come first.
        if shared.current().due(shared.floor) <= Instant::now() {
            shared.reload().await;
        }
    }
}

/// The max-age of a set whose response said `directive` (see [`cache_control`]).
fn max_age(directive: Option<Duration>, floor: Duration) -> Duration {
    directive
        .unwrap_or(DEFAULT_MAX_AGE)
        .clamp(floor, MAX_AGE_CAP)
}

/// How long a set is used past its max-age while it cannot be loaded: the max-age again, from
/// ten floors (5 minutes) to [`GRACE_CAP`].
fn grace(max_age: Duration, floor: Duration) -> Duration {
    max_age.clamp((floor * 10).min(GRACE_CAP), GRACE_CAP)
}

/// The max-age a `Cache-Control` value gives: its `max-age`, zero for `no-store` or
/// `no-cache` (load it every time: every floor), `None` when it says neither.
fn cache_control(value: &str) -> Option<Duration> {
    let mut found = None;
    for directive in value.split(',') {
        let directive = directive.trim().to_ascii_lowercase();
        if directive == "no-store" || directive == "no-cache" {
            return Some(Duration::ZERO);
        }
        if let Some(seconds) = directive.strip_prefix("max-age=")
            && let Ok(seconds) = seconds.trim_matches('"').parse::<u64>()
        {
            found = Some(Duration::from_secs(seconds));
        }
    }
    found
}

impl From<&'static str> for Missing {
    fn from(why: &'static str) -> Self {
        Missing::Token(why)
    }
}

const UNKNOWN_KEY: &str =
    "the token is signed with a key (kid) the authorization server's key set does not hold";

/// The key for `kid` in `set`: `Ok(None)` when it is not there.
fn pick(set: &JwkSet, kid: Option<&str>) -> Result<Option<Jwk>, &'static str> {
    let usable = |jwk: &&Jwk| {
        !matches!(
            jwk.common.public_key_use,
            Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
        )
    };
    match kid {
        Some(kid) => Ok(set
            .keys
            .iter()
            .filter(usable)
            .find(|k| k.common.key_id.as_deref() == Some(kid))
            .cloned()),
        None => {
            let mut keys = set.keys.iter().filter(usable);
            match (keys.next(), keys.next()) {
                (Some(only), None) => Ok(Some(only.clone())),
                (None, _) => Ok(None),
                (Some(_), Some(_)) => {
                    Err("the token names no key (kid) and the authorization server has several")
                }
            }
        }
    }
}

/// The set at `source`, and the max-age its response's `Cache-Control` gives (none for a file).
async fn read(source: &Source) -> anyhow::Result<(JwkSet, Option<Duration>)> {
    let ((text, directive), what) = match source {
        Source::File(path) => (
            (
                // Off the gateway's one thread, which also renews the leases of calls in flight.
                Bytes::from({
                    let owned = path.clone();
                    tokio::task::spawn_blocking(move || std::fs::read(owned))
                        .await?
                        .with_context(|| format!("cannot read --oauth-jwks {}", path.display()))?
                }),
                None,
            ),
            format!("--oauth-jwks {}", path.display()),
        ),
        Source::Url(uri) => (
            tokio::time::timeout(FETCH_TIMEOUT, fetch(uri))
                .await
                .map_err(|_| anyhow::anyhow!("no answer within {FETCH_TIMEOUT:?}"))
                .and_then(|r| r)
                .with_context(|| format!("cannot fetch --oauth-jwks {}", shown(uri)))?,
            format!("--oauth-jwks {}", shown(uri)),
        ),
    };
    let set: JwkSet = serde_json::from_slice(&text)
        .with_context(|| format!("{what} is not a JWK Set ({{\"keys\": [...]}})"))?;
    if set.keys.is_empty() {
        anyhow::bail!("{what} holds no keys");
    }
    Ok((set, directive))
}

/// The URL without its query (which may hold a key), for messages.
fn shown(uri: &Uri) -> String {
    format!(
        "{}://{}{}",
        uri.scheme_str().unwrap_or(""),
        uri.authority().map_or("", |a| a.as_str()),
        uri.path()
    )
}

/// One GET of `uri` on a connection of its own (TLS with the system's roots for https).
async fn fetch(uri: &Uri) -> anyhow::Result<(Bytes, Option<Duration>)> {
    let https = uri.scheme_str() == Some("https");
    let authority = uri.authority().context("the URL has no host")?.clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
    let request = Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(header::HOST, authority.as_str())
        .header(header::ACCEPT, "application/json, application/jwk-set+json")
        .header(
            header::USER_AGENT,
            concat!("toolonce/", env!("CARGO_PKG_VERSION")),
        )
        .body(Empty::<Bytes>::new())?;
    let response = if https {
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .ok()
            .context("the URL has a host name TLS cannot check")?;
        let tls = crate::mcp::http::tls_connector()?
            .connect(name, tcp)
            .await
            .context("TLS")?;
        send(tls, request).await?
    } else {
        send(tcp, request).await?
    };
    if response.status() != StatusCode::OK {
        anyhow::bail!("answered {}", response.status());
    }
    let directive = response
        .headers()
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(cache_control)
        .min();
    let body = Limited::new(response.into_body(), MAX_SET)
        .collect()
        .await
        .map_err(|e| anyhow::anyhow!("the key set was not received whole ({e})"))?;
    Ok((body.to_bytes(), directive))
}

async fn send<T>(
    io: T,
    request: Request<Empty<Bytes>>,
) -> anyhow::Result<hyper::Response<hyper::body::Incoming>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(connection);
    Ok(sender.send_request(request).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_control_gives_its_max_age_and_no_store_or_no_cache_give_zero() {
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(cache_control("public, max-age=300"), secs(300));
        assert_eq!(cache_control("Max-Age=\"60\", must-revalidate"), secs(60));
        assert_eq!(cache_control("max-age=300, no-cache"), secs(0));
        assert_eq!(cache_control("no-store"), secs(0));
        assert_eq!(cache_control("public"), None);
        assert_eq!(cache_control("max-age=soon"), None);
    }

    #[test]
    fn the_max_age_and_the_grace_stay_within_their_bounds() {
        // The floor unless a test lowers it (`--oauth-jwks-min-age`).
        let floor = Duration::from_secs(30);
        assert_eq!(max_age(None, floor), DEFAULT_MAX_AGE);
        assert_eq!(max_age(Some(Duration::ZERO), floor), floor);
        assert_eq!(
            max_age(Some(Duration::from_secs(1 << 40)), floor),
            MAX_AGE_CAP
        );
        assert_eq!(grace(floor, floor), Duration::from_secs(300));
        assert_eq!(grace(DEFAULT_MAX_AGE, floor), DEFAULT_MAX_AGE);
        assert_eq!(grace(MAX_AGE_CAP, floor), GRACE_CAP);
    }
}
