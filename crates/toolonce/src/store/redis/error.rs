//! Redis's errors as the store's: whether the server could not be reached (a retry may help),
//! refused TLS, or refused the request.

use ::redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::Error;

/// Whether an error means the server could not be reached or cannot serve right now (a retry
/// may help), as opposed to refusing the request.
pub(super) fn is_unavailable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                )
        )
        // Another client's script is running too long.
        || e.code() == Some("BUSY")
}

/// Whether the TLS handshake failed (an unknown certificate authority, a wrong host name):
/// the driver reports it as an I/O error, but retrying will not fix it.
pub(super) fn is_tls_refusal(e: &RedisError) -> bool {
    #[cfg(feature = "redis-tls")]
    {
        use std::error::Error as _;
        let mut next: Option<&(dyn std::error::Error + 'static)> = e.source();
        while let Some(err) = next {
            // The driver keeps its cause in an `Arc`, which is itself the error `source` gives.
            let err: &(dyn std::error::Error + 'static) =
                match err.downcast_ref::<std::sync::Arc<dyn std::error::Error + Send + Sync>>() {
                    Some(inner) => &**inner,
                    None => err,
                };
            if err.is::<rustls::Error>() {
                return true;
            }
            if let Some(io) = err.downcast_ref::<std::io::Error>()
                && io
                    .get_ref()
                    .is_some_and(|inner| inner.is::<rustls::Error>())
            {
                return true;
            }
            next = err.source();
        }
    }
    #[cfg(not(feature = "redis-tls"))]
    let _ = e;
    false
}

pub(super) fn to_error(e: RedisError) -> Error {
    if is_tls_refusal(&e) {
        Error::store(e)
    } else if is_unavailable(&e) {
        Error::unavailable(e)
    } else if e.kind() == ErrorKind::InvalidClientConfig {
        config_error(e)
    } else {
        Error::store(e)
    }
}

/// A refusal no retry fixes, because the store URL is wrong: a wrong password or user, a
/// server that needs a password and got none, a database index the server does not have. As
/// [`Error::Config`] saying what to change; `place` names the server (without secrets).
pub(super) fn refused_setup(e: &RedisError, place: &str) -> Option<Error> {
    let message = if e.kind() == ErrorKind::AuthenticationFailed || e.code() == Some("WRONGPASS") {
        format!(
            "{place} refused the password (or user name) of the store URL ({e}): check its \
             userinfo, redis://:PASSWORD@host or redis://USER:PASSWORD@host"
        )
    } else if e.code() == Some("NOAUTH") {
        format!(
            "{place} needs a password, and the store URL gives none: put it in the URL, \
             redis://:PASSWORD@host (or redis://USER:PASSWORD@host for an ACL user)"
        )
    } else if e.to_string().contains("refused to switch database") {
        format!(
            "{place} has no such database index ({}): the number at the end of the store URL \
             (redis://host/N) must be below the server's `databases` setting (16 by default)",
            e.detail().unwrap_or("refused")
        )
    } else {
        return None;
    };
    Some(Error::Config(message))
}

pub(super) fn config_error(e: RedisError) -> Error {
    Error::Config(format!("redis: {e}"))
}
