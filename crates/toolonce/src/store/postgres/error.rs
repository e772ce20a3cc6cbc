//! What a failed statement means: SQLSTATE classes as the store's errors (may a retry help, is
//! the connection broken), and discarding a connection that may be.

use deadpool_postgres::Object;
use deadpool_postgres::tokio_postgres::{self};

use crate::Error;

/// What a failed statement means for the caller and for its connection.
pub(super) struct Class {
    pub(super) kind: Kind,
    /// The connection may be unusable: close it rather than return it to the pool.
    pub(super) broken: bool,
}

#[derive(PartialEq, Eq)]
pub(super) enum Kind {
    /// The server cannot be reached or cannot serve now: a retry may help.
    Unavailable,
    /// The statement was rolled back by a serialization failure or a deadlock: run it again.
    Rollback,
    /// Refused for good.
    Refused,
}

impl Class {
    pub(super) fn into_error(self, e: tokio_postgres::Error) -> Error {
        match self.kind {
            Kind::Unavailable | Kind::Rollback => Error::unavailable(e),
            Kind::Refused => Error::store(e),
        }
    }
}

/// Sorts a driver error by SQLSTATE (server errors) or by cause (the rest).
pub(super) fn classify(e: &tokio_postgres::Error) -> Class {
    let Some(db) = e.as_db_error() else {
        // Not an answer from the server: the socket failed or closed (an I/O cause, or none
        // for a closed connection or a connect timeout), or the driver could not encode or
        // decode a value (a cause of another type). Either way the connection is suspect.
        let io =
            e.is_closed() || std::error::Error::source(e).is_none_or(|s| s.is::<std::io::Error>());
        return Class {
            kind: if io { Kind::Unavailable } else { Kind::Refused },
            broken: true,
        };
    };
    sqlstate_class(db.code().code())
}

pub(super) fn sqlstate_class(code: &str) -> Class {
    let (kind, broken) = match code {
        // Connection exceptions; the server shutting down, crashed, or starting up; a standby
        // that cannot write (a failover in progress: a new connection may reach the primary).
        c if c.starts_with("08") => (Kind::Unavailable, true),
        "57P01" | "57P02" | "57P03" | "25006" => (Kind::Unavailable, true),
        // Too many connections, out of memory or disk; a statement timeout.
        c if c.starts_with("53") => (Kind::Unavailable, false),
        "57014" => (Kind::Unavailable, false),
        "40001" | "40P01" => (Kind::Rollback, false),
        _ => (Kind::Refused, false),
    };
    Class { kind, broken }
}

/// Classifies an error outside [`PostgresStore::run`], discarding the connection if broken.
pub(super) fn discard_if_broken(client: Object, e: tokio_postgres::Error) -> Error {
    let class = classify(&e);
    if class.broken {
        drop(Object::take(client));
    }
    class.into_error(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_say_whether_a_retry_may_help_and_whether_the_connection_is_broken() {
        let c = sqlstate_class("08006");
        assert!(c.kind == Kind::Unavailable && c.broken);
        let c = sqlstate_class("57P01");
        assert!(c.kind == Kind::Unavailable && c.broken);
        let c = sqlstate_class("53300");
        assert!(c.kind == Kind::Unavailable && !c.broken);
        assert!(sqlstate_class("40001").kind == Kind::Rollback);
        assert!(sqlstate_class("40P01").kind == Kind::Rollback);
        let c = sqlstate_class("42P01");
        assert!(c.kind == Kind::Refused && !c.broken);
        assert!(sqlstate_class("28P01").kind == Kind::Refused);
    }
}
