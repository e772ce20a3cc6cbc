//! The owner token: the caller's secret that fences every write to a `running` entry, made
//! before the claim so that a claim whose reply is lost is still its caller's to retry or
//! release.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The random token that marks who holds a `running` entry.
///
/// The caller makes it ([`OwnerToken::generate`]) before it claims and hands it to
/// [`Store::claim`](crate::store::Store::claim), so a claim is idempotent for its caller: when the reply to a claim is lost
/// (the connection dropped after the store applied it), the caller still knows the token the
/// entry holds, a retry of the claim with it answers [`Claim::Won`](crate::store::Claim::Won), and the caller can release
/// it with a fenced [`Store::fail`](crate::store::Store::fail). [`Store::complete`](crate::store::Store::complete) and [`Store::fail`](crate::store::Store::fail) consume it, so an
/// owner cannot settle an operation twice by mistake. Stores compare it before every write
/// (fencing): after a lease expired and somebody else took the key over, the old owner's token
/// no longer matches and its writes are refused.
///
/// The token is the caller's secret: it is never shown to a duplicate or to the model (its
/// `Debug` hides it), since anyone holding it could settle the operation.
///
/// A store may also keep in it, byte for byte, the entry its claim wrote for this owner (the
/// Redis store does, to fence its settles and renewals by comparing that whole value with one
/// native `SET … IFEQ`). That memo is the store's own: it is copied by
/// [`duplicate`](Self::duplicate), never shown, and plays no part in equality.
pub struct OwnerToken {
    token: String,
    /// Shared, not copied: a first-time call reads it twice (the heartbeat's duplicate of the
    /// token and the settle), and it is a whole entry.
    written: Mutex<Option<Arc<str>>>,
}

impl PartialEq for OwnerToken {
    fn eq(&self, other: &Self) -> bool {
        self.token == other.token
    }
}

impl Eq for OwnerToken {}

impl Hash for OwnerToken {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.token.hash(state);
    }
}

impl OwnerToken {
    /// A fresh token: 128 bits, unique within the process and random across processes.
    ///
    /// The randomness comes from the OS once per process; each token mixes it with a counter
    /// (a bijective mix, so tokens of one process never repeat). This keeps claims free of a
    /// system call per token.
    pub fn generate() -> Self {
        static SEED: OnceLock<[u64; 2]> = OnceLock::new();
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let seed = SEED.get_or_init(|| {
            let mut bytes = [0u8; 16];
            getrandom::fill(&mut bytes).expect("the OS random number generator failed");
            [
                u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes")),
            ]
        });
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let hi = splitmix64(seed[0].wrapping_add(n));
        let lo = splitmix64(seed[1] ^ n.rotate_left(32));
        let mut text = [0u8; 32];
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&hi.to_be_bytes());
        bytes[8..].copy_from_slice(&lo.to_be_bytes());
        crate::key::hex_into(&bytes, &mut text);
        Self::new(String::from_utf8(text.to_vec()).expect("hex is ASCII"))
    }

    fn new(token: String) -> Self {
        OwnerToken {
            token,
            written: Mutex::new(None),
        }
    }

    /// Rebuilds a token read back from a store.
    pub fn from_stored(token: impl Into<String>) -> Self {
        Self::new(token.into())
    }

    /// The token as text, as stores keep it.
    pub fn as_str(&self) -> &str {
        &self.token
    }

    /// A copy, for a caller that must retry a settle whose reply was lost (each attempt
    /// consumes one). Deliberately not `Clone`, so copies are made on purpose only.
    pub fn duplicate(&self) -> Self {
        OwnerToken {
            token: self.token.clone(),
            written: Mutex::new(self.written()),
        }
    }

    /// Records what the store wrote for this owner (`None`: it does not know the exact bytes,
    /// as after a claim a script rewrote). Only the store that claimed with this token sets it.
    pub(crate) fn remember_written(&self, written: Option<String>) {
        *self.written.lock().unwrap_or_else(|e| e.into_inner()) = written.map(Arc::from);
    }

    /// What the store last recorded with [`remember_written`](Self::remember_written).
    pub(crate) fn written(&self) -> Option<Arc<str>> {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnerToken(..)")
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
