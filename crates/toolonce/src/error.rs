//! The one error type of the library. Store backends box their driver's error into
//! [`Error::Store`] or [`Error::Unavailable`], so adding a backend never adds a variant.

use std::fmt;

/// A boxed error from a store driver or a tool.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in toolonce.
///
/// [`Error::is_retryable`] says whether trying the same thing again may help.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A part of the key (the scope or the tool name) is empty or contains NUL.
    #[error("invalid {part}: {reason}")]
    InvalidKeyPart {
        /// `"scope"` or `"tool name"`.
        part: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Text that should be an operation key (`idem:` + 32 lowercase hex digits) is not one.
    #[error("invalid operation key {0:?}: expected \"idem:\" followed by 32 lowercase hex digits")]
    InvalidKey(String),
    /// The arguments are not valid JSON, or not of the shape the tool expects.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The arguments are larger than the configured limit.
    #[error("arguments are {size} bytes, more than the limit of {limit} bytes")]
    ArgumentsTooLarge {
        /// Size of the arguments in bytes.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The arguments nest deeper than the limit.
    #[error("arguments nest deeper than the limit of {limit} levels")]
    TooDeep {
        /// The limit in levels of arrays and objects.
        limit: usize,
    },
    /// A key field is not a valid JSON Pointer (RFC 6901).
    #[error("invalid key field {pointer:?}: {reason}")]
    InvalidPointer {
        /// The pointer as given.
        pointer: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The store could not be reached (connection refused or lost, timeout). A retry may help.
    #[error("store unavailable")]
    Unavailable(#[source] BoxError),
    /// The store answered with an error that a retry will not fix.
    #[error("store error")]
    Store(#[source] BoxError),
    /// An entry in the store cannot be decoded.
    #[error("corrupt entry for {key}: {reason}")]
    Corrupt {
        /// The key of the entry.
        key: String,
        /// What could not be decoded.
        reason: String,
    },
    /// A store URL or option is wrong.
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl Error {
    /// Whether the same operation may succeed if tried again later.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }

    /// Whether this error means the store could not be used (as opposed to bad input).
    pub fn is_store_error(&self) -> bool {
        matches!(
            self,
            Error::Unavailable(_) | Error::Store(_) | Error::Corrupt { .. }
        )
    }

    /// Wraps a driver error as [`Error::Unavailable`].
    pub fn unavailable(e: impl Into<BoxError>) -> Self {
        Error::Unavailable(e.into())
    }

    /// Wraps a driver error as [`Error::Store`].
    pub fn store(e: impl Into<BoxError>) -> Self {
        Error::Store(e.into())
    }

    /// Displays the error followed by its chain of sources, `a: b: c`, as logs and messages
    /// want it (the error's own `Display` leaves the sources out, as errors should).
    pub fn report(&self) -> impl fmt::Display + '_ {
        Report(self)
    }

    /// Builds [`Error::Corrupt`].
    pub fn corrupt(key: impl fmt::Display, reason: impl fmt::Display) -> Self {
        Error::Corrupt {
            key: key.to_string(),
            reason: reason.to_string(),
        }
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Displays an error followed by its chain of sources, `a: b: c`, for logs and messages.
struct Report<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}
