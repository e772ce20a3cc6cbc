//! An entry a listing found and could not decode ([`Unreadable`]): reported beside the page
//! rather than failing it, so one entry another writer garbled never hides every other entry
//! from an operator.

use crate::Error;

/// An entry of a listing that cannot be decoded: its key as the store holds it and why. Such
/// an entry is neither replayed nor released: a call of its operation is answered that the
/// outcome cannot be read, until the entry's retention ends.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unreadable {
    /// The key as the store holds it (not necessarily a valid operation key).
    pub key: String,
    /// What could not be decoded.
    pub reason: String,
}

impl Unreadable {
    /// Builds one (backends outside this crate need a constructor: the struct is
    /// `#[non_exhaustive]`).
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Unreadable {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// The entry `error` says cannot be decoded ([`Error::Corrupt`]); any other error is handed
    /// back, since it is about the store, not one entry.
    pub fn from_error(error: Error) -> Result<Unreadable, Error> {
        match error {
            Error::Corrupt { key, reason } => Ok(Unreadable { key, reason }),
            other => Err(other),
        }
    }
}
