//! `sslmode` and `sslrootcert` with libpq's meaning. tokio-postgres knows only `disable`,
//! `prefer` and `require` and no `sslrootcert`, so both are taken out of the connection string
//! here, and the certificate checks each mode asks for are made by the rustls verifier built
//! for it (feature `postgres-tls`; rustls on ring, the provider the Redis TLS feature uses).
//!
//! | `sslmode` | TLS | certificate checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default) | if the server offers it | no |
//! | `require` | always | no; against `sslrootcert` when one is given (as libpq does) |
//! | `verify-ca` | always | chain to a trusted root |
//! | `verify-full` | always | chain, and the host name (or IP address) of the URL |
//!
//! The trusted roots are the PEM file `sslrootcert=PATH`, else the system's trust store
//! (`sslrootcert=system`, or no `sslrootcert`). A build without the feature refuses every mode
//! that requires TLS rather than connect in plain text.

use deadpool_postgres::tokio_postgres::config::SslMode as DriverMode;

use crate::store::url::{key_values, percent_decode};
use crate::{Error, Result};

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Result<SslMode> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // libpq's `allow` (plain first, TLS if the server insists) has no counterpart in
            // the driver.
            other => {
                return Err(Error::Config(format!(
                    "invalid sslmode {other:?}: expected disable, prefer, require, verify-ca or \
                     verify-full"
                )));
            }
        })
    }

    #[cfg(not(feature = "postgres-tls"))]
    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// The TLS options of a connection string.
#[derive(Debug)]
pub(super) struct TlsOptions {
    pub(super) mode: SslMode,
    /// `sslrootcert`: a PEM file of trusted roots, or `system`.
    #[cfg_attr(not(feature = "postgres-tls"), allow(dead_code))]
    root_cert: Option<String>,
}

impl TlsOptions {
    /// Takes `sslmode` and `sslrootcert` out of a connection string (URL or key/value form)
    /// and returns the rest, for the driver, with them.
    pub(super) fn take(conninfo: &str) -> Result<(String, TlsOptions)> {
        let mut mode = None;
        let mut root_cert = None;
        let mut take = |key: &str, value: String| -> Result<bool> {
            match key {
                "sslmode" => mode = Some(SslMode::parse(&value)?),
                "sslrootcert" => root_cert = Some(value),
                _ => return Ok(false),
            }
            Ok(true)
        };
        let rest = if conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://") {
            match conninfo.split_once('?') {
                None => conninfo.to_owned(),
                Some((base, query)) => {
                    let mut kept = Vec::new();
                    let mut seen = Vec::new();
                    for pair in query.split('&').filter(|p| !p.is_empty()) {
                        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                        let bad = || {
                            Error::Config(
                                "a PostgreSQL URL option is not valid percent-encoding".to_owned(),
                            )
                        };
                        let key = percent_decode(key).ok_or_else(bad)?;
                        let value = percent_decode(value).ok_or_else(bad)?;
                        // The driver would keep the last; one of the two was not meant.
                        if seen.contains(&key) {
                            return Err(Error::Config(format!(
                                "the PostgreSQL URL option `{key}` is given twice: give it once"
                            )));
                        }
                        seen.push(key.clone());
                        if !take(&key, value)? {
                            kept.push(pair);
                        }
                    }
                    if kept.is_empty() {
                        base.to_owned()
                    } else {
                        format!("{base}?{}", kept.join("&"))
                    }
                }
            }
        } else {
            match key_values(conninfo) {
                // Not key/value text: the driver says what is wrong with it.
                None => conninfo.to_owned(),
                Some(pairs) => {
                    let mut rest = String::with_capacity(conninfo.len());
                    let mut copied = 0;
                    for pair in pairs {
                        if take(&pair.key, pair.value)? {
                            rest.push_str(&conninfo[copied..pair.span.0]);
                            copied = pair.span.1;
                        }
                    }
                    rest.push_str(&conninfo[copied..]);
                    rest
                }
            }
        };
        Ok((
            rest,
            TlsOptions {
                mode: mode.unwrap_or(SslMode::Prefer),
                root_cert,
            },
        ))
    }

    /// The driver's mode: it only knows whether TLS is off, tried or required.
    pub(super) fn driver_mode(&self) -> DriverMode {
        match self.mode {
            SslMode::Disable => DriverMode::Disable,
            SslMode::Prefer => DriverMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => DriverMode::Require,
        }
    }

    /// Whether the connection may go without TLS.
    #[cfg(not(feature = "postgres-tls"))]
    fn plain_allowed(&self) -> bool {
        matches!(self.mode, SslMode::Disable | SslMode::Prefer)
    }

    /// The rustls connector for this mode, `None` for plain connections.
    #[cfg(feature = "postgres-tls")]
    pub(super) fn connector(&self) -> Result<Option<tokio_postgres_rustls::MakeRustlsConnect>> {
        if self.mode == SslMode::Disable {
            return Ok(None);
        }
        let config = verify::client_config(self.check(), self.root_cert.as_deref())?;
        Ok(Some(tokio_postgres_rustls::MakeRustlsConnect::new(config)))
    }

    /// A build without TLS connects in plain text where libpq would (`disable`, `prefer`) and
    /// refuses the rest.
    #[cfg(not(feature = "postgres-tls"))]
    pub(super) fn connector(&self) -> Result<Option<std::convert::Infallible>> {
        if self.plain_allowed() {
            Ok(None)
        } else {
            Err(Error::Config(format!(
                "sslmode={} needs TLS, and this build of toolonce was compiled without the \
                 `postgres-tls` feature; it will not connect without TLS instead",
                self.mode.name()
            )))
        }
    }

    /// What the certificate check covers.
    #[cfg(feature = "postgres-tls")]
    fn check(&self) -> verify::Check {
        match (self.mode, &self.root_cert) {
            (SslMode::VerifyFull, _) => verify::Check::Full,
            (SslMode::VerifyCa, _) => verify::Check::Chain,
            // libpq: `require` with a root certificate file checks the chain, as `verify-ca`.
            (SslMode::Require, Some(path)) if path != "system" => verify::Check::Chain,
            _ => verify::Check::Nothing,
        }
    }
}

#[cfg(feature = "postgres-tls")]
mod verify {
    //! The three rustls certificate verifiers, on the ring provider.

    use std::sync::Arc;

    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::WebPkiSupportedAlgorithms;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};

    use crate::{Error, Result};

    #[derive(Clone, Copy, Debug)]
    pub(super) enum Check {
        /// Encryption only (libpq's `prefer` and `require`): any certificate is accepted, but
        /// the handshake's signatures are still checked against it.
        Nothing,
        /// The chain to a trusted root, not the name.
        Chain,
        /// The chain and the host name.
        Full,
    }

    pub(super) fn client_config(check: Check, root_cert: Option<&str>) -> Result<ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match check {
            Check::Nothing => Arc::new(AnyCertificate(provider.signature_verification_algorithms)),
            Check::Chain | Check::Full => {
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots(root_cert)?), {
                        Arc::clone(&provider)
                    })
                    .build()
                    .map_err(|e| Error::Config(format!("cannot set up TLS: {e}")))?;
                match check {
                    Check::Full => webpki,
                    _ => Arc::new(AnyName(webpki)),
                }
            }
        };
        Ok(ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("cannot set up TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth())
    }

    /// The trusted roots: the PEM file `sslrootcert`, else the system's.
    fn roots(root_cert: Option<&str>) -> Result<RootCertStore> {
        let mut roots = RootCertStore::empty();
        match root_cert {
            Some(path) if path != "system" => {
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
                    .map_err(|e| Error::Config(format!("cannot read sslrootcert {path}: {e}")))?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(Error::Config(format!(
                        "sslrootcert {path} holds no usable certificate"
                    )));
                }
            }
            _ => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(Error::Config(format!(
                        "no trusted certificate in the system's trust store{}: give the \
                         server's CA with sslrootcert=PATH",
                        found
                            .errors
                            .first()
                            .map(|e| format!(" ({e})"))
                            .unwrap_or_default()
                    )));
                }
            }
        }
        Ok(roots)
    }

    /// Accepts any certificate; checks the handshake's signatures.
    #[derive(Debug)]
    struct AnyCertificate(WebPkiSupportedAlgorithms);

    impl ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp_response: &[u8],
            _now: UnixTime,
        ) -> std::result::Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.supported_schemes()
        }
    }

    /// Checks the chain as WebPKI does, and accepts a certificate issued for another name:
    /// WebPKI checks the name last, so a name mismatch means the chain was good.
    #[derive(Debug)]
    struct AnyName(Arc<WebPkiServerVerifier>);

    impl ServerCertVerifier for AnyName {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> std::result::Result<ServerCertVerified, rustls::Error> {
            match self.0.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.supported_verify_schemes()
        }
    }
}

/// Whether a driver error is a refused TLS handshake (a certificate that fails its check, a
/// server without TLS under a mode that requires it): retrying will not fix it.
pub(super) fn is_tls_refusal(e: &deadpool_postgres::tokio_postgres::Error) -> bool {
    // The driver has no public kind; this is the text of its TLS kind.
    e.to_string() == "error performing TLS handshake"
}

/// The parsed URL in the neutral form of the shared vectors (`tests/data/store_urls.json`):
/// the refusals of [`driver`], less the TLS connector (which reads `sslrootcert`'s file).
#[cfg(test)]
pub(crate) fn describe(url: &str) -> Result<serde_json::Value> {
    let (conninfo, _) = TlsOptions::take(url)?;
    let pg: deadpool_postgres::tokio_postgres::Config =
        conninfo.parse().map_err(super::options::config_refusal)?;
    let written = |key: &str| {
        url.split_once('?').and_then(|(_, query)| {
            query.split('&').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                (k == key).then(|| percent_decode(v).unwrap())
            })
        })
    };
    let host = match pg.get_hosts() {
        [deadpool_postgres::tokio_postgres::config::Host::Tcp(h)] => h.clone(),
        other => panic!("{url}: hosts {other:?}"),
    };
    Ok(serde_json::json!({
        "kind": "postgres",
        "host": host,
        "port": pg.get_ports().first().copied().unwrap_or(5432),
        "dbname": pg.get_dbname(),
        "user": pg.get_user(),
        "password": pg.get_password().map(|p| String::from_utf8(p.to_vec()).unwrap()),
        "sslmode": written("sslmode"),
        "sslrootcert": written("sslrootcert"),
        "application_name": pg.get_application_name(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_options_leave_the_url_and_the_rest_goes_to_the_driver() {
        let (rest, tls) = TlsOptions::take(
            "postgres://u:pw@h:5432/db?sslmode=verify-full&application_name=x&sslrootcert=%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:pw@h:5432/db?application_name=x");
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert.as_deref(), Some("/ca.pem"));

        let (rest, tls) = TlsOptions::take("postgres://h/db?sslmode=require").unwrap();
        assert_eq!(
            (rest.as_str(), tls.mode),
            ("postgres://h/db", SslMode::Require)
        );

        let (rest, tls) =
            TlsOptions::take("host=h sslmode=verify-ca  sslrootcert='/a b.pem' dbname=d").unwrap();
        assert_eq!(rest, "host=h    dbname=d");
        assert_eq!(tls.mode, SslMode::VerifyCa);
        assert_eq!(tls.root_cert.as_deref(), Some("/a b.pem"));
    }

    #[test]
    fn the_default_is_prefer_as_in_libpq() {
        let (rest, tls) = TlsOptions::take("postgres://h/db").unwrap();
        assert_eq!(
            (rest.as_str(), tls.mode),
            ("postgres://h/db", SslMode::Prefer)
        );
        assert_eq!(tls.driver_mode(), DriverMode::Prefer);
    }

    #[test]
    fn an_unknown_sslmode_is_a_configuration_error() {
        for url in ["postgres://h/db?sslmode=allow", "host=h sslmode=maybe"] {
            match TlsOptions::take(url) {
                Err(Error::Config(m)) => assert!(m.contains("verify-full"), "{m}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[cfg(not(feature = "postgres-tls"))]
    #[test]
    fn a_build_without_tls_refuses_the_modes_that_require_it() {
        for mode in ["require", "verify-ca", "verify-full"] {
            let (_, tls) = TlsOptions::take(&format!("postgres://h/db?sslmode={mode}")).unwrap();
            match tls.connector() {
                Err(Error::Config(m)) => {
                    assert!(m.contains("postgres-tls") && m.contains(mode), "{m}")
                }
                _ => panic!("sslmode={mode} must be refused"),
            }
        }
        for mode in ["disable", "prefer"] {
            let (_, tls) = TlsOptions::take(&format!("postgres://h/db?sslmode={mode}")).unwrap();
            assert!(tls.connector().unwrap().is_none());
        }
    }
}
