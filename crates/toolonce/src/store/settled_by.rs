//! Which attempt settled an entry ([`SettledBy`]): what a fenced removal compares besides the
//! state, attempts and times, which SQLite and Redis keep in whole milliseconds; and
//! [`owner_digest`], how a person is shown an owner.

use std::fmt;

/// Which attempt settled an entry, in its store's own terms: the attempt's owner token
/// (SQLite, PostgreSQL, memory) or the digest of it (Redis, whose entries keep only that).
/// Compared by [`Store::remove`](crate::Store::remove), it tells an entry deleted, claimed
/// again and settled anew within the millisecond of the one read from that one. A settled
/// attempt's token fences nothing any more (every owner's write requires a running entry),
/// but it is still shown only as a digest: `Debug` prints that.
#[derive(Clone, PartialEq, Eq)]
pub struct SettledBy(String);

impl SettledBy {
    /// The attempt `mark` (a token or a digest, as the store keeps it).
    pub fn new(mark: impl Into<String>) -> Self {
        SettledBy(mark.into())
    }

    /// The mark as the store keeps it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SettledBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SettledBy(#{})", owner_digest(&self.0))
    }
}

/// 12 hex digits of the SHA-256 of an owner as a store reports it: what a person is shown.
pub fn owner_digest(owner: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest: [u8; 32] = Sha256::digest(owner.as_bytes()).into();
    let mut text = [0u8; 12];
    crate::key::hex_into(&digest[..6], &mut text);
    String::from_utf8_lossy(&text).into_owned()
}
