//! The owner token: the caller's secret that fences every write to a `running` entry, made
//! before the claim so that a claim whose reply is lost is still its caller's to retry or
//! release.

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

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
#[derive(PartialEq, Eq, Hash)]
pub struct OwnerToken(String);

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
        OwnerToken(String::from_utf8(text.to_vec()).expect("hex is ASCII"))
    }

    /// Rebuilds a token read back from a store.
    pub fn from_stored(token: impl Into<String>) -> Self {
        OwnerToken(token.into())
    }

    /// The token as text, as stores keep it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A copy, for a caller that must retry a settle whose reply was lost (each attempt
    /// consumes one). Deliberately not `Clone`, so copies are made on purpose only.
    pub fn duplicate(&self) -> Self {
        OwnerToken(self.0.clone())
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
