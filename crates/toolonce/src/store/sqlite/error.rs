//! What goes wrong in the SQLite store, and how it is reported: a job's fault (a SQLite error
//! or an undecodable row), and the classification of SQLite's errors into the store's
//! [`Error::Unavailable`] (may go away by itself), [`Error::Config`] (the file is not a SQLite
//! database) and [`Error::Store`].

use rusqlite::ErrorCode;

use crate::Error;

/// What went wrong in a job: a SQLite error (classified by the caller, who knows the path) or
/// an undecodable entry.
pub(super) enum Fault {
    Sql(rusqlite::Error),
    Corrupt(Error),
}

impl From<rusqlite::Error> for Fault {
    fn from(e: rusqlite::Error) -> Self {
        Fault::Sql(e)
    }
}

pub(super) type JobResult<T> = std::result::Result<T, Fault>;

/// A SQLite error, with the database and what toolonce was doing.
#[derive(Debug, thiserror::Error)]
#[error("SQLite database {path}: could not {doing}")]
pub(super) struct SqliteError {
    path: String,
    doing: &'static str,
    #[source]
    source: rusqlite::Error,
}

/// Whether a SQLite error may go away by itself: a lock still held after the busy timeout, a
/// full disk, an I/O error. Everything else (a corrupt file, a read-only one) will not.
pub(super) fn is_transient(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::SystemIoFailure
                | ErrorCode::DiskFull
                | ErrorCode::CannotOpen
        )
    )
}

/// Whether a SQLite error says that another connection holds a lock: the statement did nothing
/// and may be retried elsewhere.
pub(super) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

pub(super) fn sql_error(path: &str, doing: &'static str, source: rusqlite::Error) -> Error {
    // A file that is something else (a typo naming another file, notes, an encrypted
    // database): the URL's mistake, which no retry fixes.
    if source.sqlite_error_code() == Some(ErrorCode::NotADatabase) {
        return Error::Config(format!(
            "{path} is not a SQLite database (could not {doing}: {source}): check the path in \
             the store URL"
        ));
    }
    let transient = is_transient(&source);
    let e = SqliteError {
        path: path.to_owned(),
        doing,
        source,
    };
    if transient {
        Error::unavailable(e)
    } else {
        Error::store(e)
    }
}
