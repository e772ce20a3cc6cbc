//! Where the server is (`--upstream URL`, checked without ever echoing it), and the connections
//! to it: TCP, TLS with the system's trusted roots, HTTP/1.1.

use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::Uri;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::HeaderValue;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// One HTTP/1.1 connection's request end.
pub(super) type Sender = SendRequest<Full<Bytes>>;

/// Where the server is.
pub(super) struct Target {
    pub(super) tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
    pub(super) host: String,
    pub(super) port: u16,
    /// The `Host` header.
    pub(super) authority: HeaderValue,
    /// The request target: path and query.
    pub(super) path: Uri,
    /// The URL for messages: scheme, host, port and path, never the query (it may hold a key).
    pub(super) shown: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Target {
    pub(super) fn parse(url: &str) -> anyhow::Result<Target> {
        // The URL itself is never echoed: its query may hold a key.
        let uri: Uri = url.parse().ok().context("--upstream is not a valid URL")?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => anyhow::bail!("--upstream must be an http:// or https:// URL"),
        };
        let authority = uri.authority().context("--upstream has no host")?;
        if authority.as_str().contains('@') {
            anyhow::bail!(
                "--upstream must not hold credentials (user:password@); pass them with --header \
                 'Authorization: ...'"
            );
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let path = uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse::<Uri>()
            .context("--upstream has an invalid path")?;
        let shown = format!(
            "{}://{}{}",
            if https { "https" } else { "http" },
            authority,
            uri.path()
        );
        let tls = if https {
            Some((tls_connector()?, {
                rustls::pki_types::ServerName::try_from(host.clone())
                    .ok()
                    .context("--upstream has a host name TLS cannot check")?
            }))
        } else {
            None
        };
        Ok(Target {
            tls,
            host,
            port,
            authority: HeaderValue::from_str(authority.as_str())
                .context("--upstream has an invalid host")?,
            path,
            shown,
        })
    }
}

/// TLS with the system's trusted roots (also `SSL_CERT_FILE` and `SSL_CERT_DIR`), HTTP/1.1.
pub(crate) fn tls_connector() -> anyhow::Result<tokio_rustls::TlsConnector> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        anyhow::bail!(
            "no trusted root certificates found in the system's store{}",
            found
                .errors
                .first()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS configuration")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

pub(super) async fn handshake<T>(io: T) -> Result<Sender, String>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(target: "toolonce::mcp", error = %e, "an HTTP connection to the MCP server ended");
        }
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_credentials_are_refused_without_echoing_them() {
        let e = Target::parse("http://user:s3cret@example.com/mcp").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let e = Target::parse("ftp://example.com/").unwrap_err();
        assert!(e.to_string().contains("http"), "{e}");
        let t = Target::parse("http://[::1]:8080/mcp?key=s3cret").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 8080));
        assert_eq!(t.path, "/mcp?key=s3cret");
        assert!(!t.shown.contains("s3cret"));
    }
}
