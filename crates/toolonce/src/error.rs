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
    /// want it (the error's own `Display` leaves the sources out, as errors should). A source
    /// whose text is already shown is left out: see [`error_report`].
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

/// Displays any error followed by its chain of sources, `a: b: c`, for logs and messages — an
/// [`Error`], a driver's error, an `anyhow::Error` (`error_report(&*e)`).
///
/// A source whose text is already part of what is shown is left out. Some drivers both print
/// their cause and return it as the source (redis-rs does for I/O errors), which walked naively
/// reads "Connection refused (os error 111): Connection refused (os error 111)".
pub fn error_report<'a>(error: &'a (dyn std::error::Error + 'static)) -> impl fmt::Display + 'a {
    Report(error)
}

struct Report<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.to_string();
        let mut source = self.0.source();
        while let Some(s) = source {
            let text = s.to_string();
            if !text.is_empty() && !shown.contains(&text) {
                shown.push_str(": ");
                shown.push_str(&text);
            }
            source = s.source();
        }
        f.write_str(&shown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a message and an optional source, as drivers build them.
    #[derive(Debug)]
    struct Layer(String, Option<Box<Layer>>);

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    fn chain(texts: &[&str]) -> Layer {
        texts
            .iter()
            .rev()
            .fold(None, |source, text| {
                Some(Layer((*text).to_owned(), source.map(Box::new)))
            })
            .expect("at least one text")
    }

    fn io_refused() -> std::io::Error {
        std::io::Error::from_raw_os_error(111)
    }

    #[test]
    fn a_source_that_repeats_its_parents_text_is_shown_once() {
        // What redis-rs does: its error displays the I/O error and returns it as the source.
        let refused = io_refused().to_string();
        let driver = Layer(
            refused.clone(),
            Some(Box::new(Layer(refused.clone(), None))),
        );
        let e = Error::unavailable(driver);
        assert_eq!(
            e.report().to_string(),
            format!("store unavailable: {refused}")
        );
    }

    #[test]
    fn a_source_already_quoted_inside_its_parent_is_left_out() {
        let refused = io_refused().to_string();
        let e = Error::unavailable(chain(&[
            &format!("error connecting to server: {refused}"),
            &refused,
        ]));
        assert_eq!(
            e.report().to_string(),
            format!("store unavailable: error connecting to server: {refused}")
        );
    }

    #[test]
    fn distinct_sources_are_all_shown_in_order_even_past_a_repeated_one() {
        let e = Error::store(chain(&["query failed", "query failed", "deadlock", ""]));
        assert_eq!(
            e.report().to_string(),
            "store error: query failed: deadlock"
        );
        let plain = chain(&["a", "b", "c"]);
        assert_eq!(error_report(&plain).to_string(), "a: b: c");
    }

    #[test]
    fn an_error_without_sources_is_its_own_text() {
        let e = Error::Config("bad".into());
        assert_eq!(e.report().to_string(), "invalid configuration: bad");
    }
}
