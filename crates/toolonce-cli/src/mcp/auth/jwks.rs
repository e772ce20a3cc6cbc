//! The authorization server's public keys (`--oauth-jwks`): a JWK Set read from a file or
//! fetched from an `http(s)://` URL, at start (a gateway that cannot check any token does not
//! start) and again when a token names a key the set does not hold (the issuer rotated its
//! keys), at most once per [`REFRESH_EVERY`] so that tokens naming made-up keys cannot make
//! the gateway hammer the issuer.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{Request, StatusCode, Uri, header};
use hyper_util::rt::TokioIo;
use jsonwebtoken::jwk::{Jwk, JwkSet};

/// The least time between two loads of the key set for unknown key ids.
pub(super) const REFRESH_EVERY: Duration = Duration::from_secs(30);
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

/// The key set, and when it was last loaded.
pub(super) struct Keys {
    source: Source,
    set: Mutex<(Arc<JwkSet>, Instant)>,
    /// One reload at a time; others wait for it and then look again.
    reloading: tokio::sync::Mutex<()>,
}

impl Keys {
    /// Loads the key set from `source` (a path, or an `http://` or `https://` URL).
    pub(super) async fn load(source: &str) -> anyhow::Result<Keys> {
        let source = if source.starts_with("http://") || source.starts_with("https://") {
            let uri: Uri = source
                .parse()
                .ok()
                .context("--oauth-jwks is not a valid URL")?;
            Source::Url(uri)
        } else {
            Source::File(PathBuf::from(source))
        };
        let set = read(&source).await?;
        Ok(Keys {
            source,
            set: Mutex::new((Arc::new(set), Instant::now())),
            reloading: tokio::sync::Mutex::new(()),
        })
    }

    /// The key named `kid` (or the only key, when the token names none), reloading the set
    /// once if it is not there and the set is older than [`REFRESH_EVERY`].
    pub(super) async fn find(&self, kid: Option<&str>) -> Result<Jwk, &'static str> {
        let (set, loaded) = self.current();
        if let Some(found) = pick(&set, kid)? {
            return Ok(found);
        }
        let _one = self.reloading.lock().await;
        let (set, now_loaded) = self.current();
        if now_loaded == loaded && loaded.elapsed() >= REFRESH_EVERY {
            match read(&self.source).await {
                Ok(fresh) => {
                    let fresh = Arc::new(fresh);
                    *self.set.lock().unwrap_or_else(|p| p.into_inner()) =
                        (fresh.clone(), Instant::now());
                    return pick(&fresh, kid)?.ok_or(UNKNOWN_KEY);
                }
                Err(e) => {
                    // Kept: the old set still checks the tokens it can.
                    tracing::warn!(target: "toolonce::mcp", error = %e, "cannot reload the key set (--oauth-jwks)");
                    self.set.lock().unwrap_or_else(|p| p.into_inner()).1 = Instant::now();
                }
            }
        }
        pick(&set, kid)?.ok_or(UNKNOWN_KEY)
    }

    fn current(&self) -> (Arc<JwkSet>, Instant) {
        let held = self.set.lock().unwrap_or_else(|p| p.into_inner());
        (held.0.clone(), held.1)
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

async fn read(source: &Source) -> anyhow::Result<JwkSet> {
    let (text, what) = match source {
        Source::File(path) => (
            // Off the gateway's one thread, which also renews the leases of calls in flight.
            Bytes::from({
                let owned = path.clone();
                tokio::task::spawn_blocking(move || std::fs::read(owned))
                    .await?
                    .with_context(|| format!("cannot read --oauth-jwks {}", path.display()))?
            }),
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
    Ok(set)
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
async fn fetch(uri: &Uri) -> anyhow::Result<Bytes> {
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
    let body = Limited::new(response.into_body(), MAX_SET)
        .collect()
        .await
        .map_err(|e| anyhow::anyhow!("the key set was not received whole ({e})"))?;
    Ok(body.to_bytes())
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
