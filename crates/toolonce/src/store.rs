//! The store contract: where operation entries live, and the atomic operations the layer builds
//! on. Backends live in `store/`, each behind a feature named after it (the in-memory store is
//! always there).

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::Value;

use crate::Result;
use crate::key::{Fingerprint, OperationKey};
use crate::tool::ToolError;

pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod url;

pub use url::redact_url;

/// The random token that marks who holds a `running` entry.
///
/// The caller makes it ([`OwnerToken::generate`]) before it claims and hands it to
/// [`Store::claim`], so a claim is idempotent for its caller: when the reply to a claim is lost
/// (the connection dropped after the store applied it), the caller still knows the token the
/// entry holds, a retry of the claim with it answers [`Claim::Won`], and the caller can release
/// it with a fenced [`Store::fail`]. [`Store::complete`] and [`Store::fail`] consume it, so an
/// owner cannot settle an operation twice by mistake. Stores compare it before every write
/// (fencing): after a lease expired and somebody else reclaimed the key, the old owner's token no
/// longer matches and its writes are refused.
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

/// What [`Store::claim`] decided.
#[derive(Debug)]
#[must_use]
// A return value that is matched at once and never stored: boxing the entry would only add an
// allocation to every duplicate.
#[allow(clippy::large_enum_variant)]
pub enum Claim {
    /// The key was absent or expired, or its live entry is `running` with the caller's own
    /// token (an earlier attempt of this claim applied): the entry is now `running` with the
    /// caller's token for the lease, and the caller owns it.
    Won,
    /// The key already has a live entry, read in the same atomic step as the failed claim.
    Existing(Entry),
}

/// The answer of the fenced writes [`Store::complete`] and [`Store::fail`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Fenced {
    /// The caller still owned the running entry and the write took effect.
    Applied,
    /// The caller no longer owns the entry (its lease expired and it was reclaimed, or the entry
    /// was deleted): nothing was written.
    NotOwner,
}

/// The state of an entry, for filtering listings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum State {
    /// Claimed, the tool is (or was, until the lease expires) running.
    Running,
    /// Completed; holds the result.
    Done,
    /// Failed permanently; holds the error.
    Failed,
}

impl State {
    /// The state's name as the wire format and the command line spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Done => "done",
            State::Failed => "failed",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for State {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "running" => Ok(State::Running),
            "done" => Ok(State::Done),
            "failed" => Ok(State::Failed),
            other => Err(crate::Error::Config(format!(
                "unknown state {other:?}: expected running, done or failed"
            ))),
        }
    }
}

/// What an entry holds in each state.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum EntryState {
    /// Claimed and not settled yet.
    Running {
        /// The owner token, when the writer recorded one (workers of other implementations may
        /// not).
        owner: Option<String>,
    },
    /// Completed with this result.
    Done {
        /// The tool's result, exactly as the first caller got it.
        result: Value,
        /// When it completed, if recorded.
        completed_at: Option<SystemTime>,
    },
    /// Failed with an error classed permanent.
    Failed {
        /// The error, exactly as the first caller got it.
        error: ToolError,
        /// When it failed, if recorded.
        failed_at: Option<SystemTime>,
    },
}

/// One live entry of the store.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Entry {
    /// The operation key.
    pub key: OperationKey,
    /// Fingerprint of the full arguments of the call that claimed it (absent when written by an
    /// implementation that does not record one; such entries match every fingerprint).
    pub fingerprint: Option<Fingerprint>,
    /// When the claim that created the entry was made.
    pub started_at: SystemTime,
    /// When the entry expires (the lease while running, the retention once settled), if the
    /// store knows. For display and inspection only: expiry itself is decided by the store's
    /// clock, and a store that keeps a remaining time rather than an instant (Redis's `PTTL`)
    /// reports it added to the caller's clock.
    pub expires_at: Option<SystemTime>,
    /// The state and what it holds.
    pub state: EntryState,
}

impl Entry {
    /// Builds an entry (backends outside this crate need a constructor: the struct is
    /// `#[non_exhaustive]`).
    pub fn new(
        key: OperationKey,
        fingerprint: Option<Fingerprint>,
        started_at: SystemTime,
        expires_at: Option<SystemTime>,
        state: EntryState,
    ) -> Self {
        Entry {
            key,
            fingerprint,
            started_at,
            expires_at,
            state,
        }
    }

    /// The entry's state without its data.
    pub fn state(&self) -> State {
        match self.state {
            EntryState::Running { .. } => State::Running,
            EntryState::Done { .. } => State::Done,
            EntryState::Failed { .. } => State::Failed,
        }
    }

    /// Whether a call with this fingerprint is the same operation as the one stored. An entry
    /// without a fingerprint (written by another implementation) matches any.
    pub fn matches(&self, fingerprint: &Fingerprint) -> bool {
        self.fingerprint.as_ref().is_none_or(|f| f == fingerprint)
    }
}

/// Which entries [`Store::list`] returns.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ListQuery {
    /// Only entries in this state; all states when `None`.
    pub state: Option<State>,
    /// Where to continue: the `next` of the previous [`Page`]; the beginning when `None`.
    pub cursor: Option<String>,
    /// The most entries to return (a store may return fewer, even with more to come). `0`
    /// means the store's default (100).
    pub limit: usize,
}

impl ListQuery {
    /// The first page of all entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only entries in `state`.
    pub fn state(mut self, state: State) -> Self {
        self.state = Some(state);
        self
    }

    /// Continue after a previous page.
    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }

    /// At most `limit` entries.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// The effective page size.
    pub fn page_size(&self) -> usize {
        if self.limit == 0 { 100 } else { self.limit }
    }
}

/// One page of a listing.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Page {
    /// The entries of this page.
    pub entries: Vec<Entry>,
    /// The cursor of the next page, `None` on the last page.
    pub next: Option<String>,
}

impl Page {
    /// Builds a page.
    pub fn new(entries: Vec<Entry>, next: Option<String>) -> Self {
        Page { entries, next }
    }
}

/// Where operation entries live.
///
/// # Contract
///
/// Every operation is atomic with respect to every other, across processes and machines that
/// share the store. In particular:
///
/// - [`claim`](Store::claim) decides the winner **and** returns the existing entry in one atomic
///   step. There is no window in which two callers both win, and none in which a caller is told
///   it won without the entry being written (a "set if absent, then read" that treats a vanished
///   entry as a win has exactly that bug).
/// - **Claims are idempotent for their caller.** The caller makes its [`OwnerToken`] before it
///   claims. A claim that finds a live `running` entry holding that same token answers
///   [`Claim::Won`] and renews the lease to the length given, in the same atomic step; any other
///   live entry (another token, or settled) is [`Claim::Existing`]. So a claim whose reply was
///   lost can be retried, by the caller or by a driver that re-sends it, without the caller
///   being told that its own claim is somebody else's running operation.
/// - **Fencing.** [`renew`](Store::renew), [`complete`](Store::complete) and
///   [`fail`](Store::fail) take effect only while the entry is `running` with the caller's
///   [`OwnerToken`]. A caller that lost its claim gets [`Fenced::NotOwner`] (or `false`), never a
///   silent overwrite. They are not idempotent: a settle repeated after its first attempt
///   applied finds the entry settled and answers [`Fenced::NotOwner`] (the layer then reads the
///   entry to tell the two apart).
/// - **Expiry.** A `running` entry lives for its lease, a settled one for its retention. An
///   expired entry counts as absent for every operation, whether or not it has been purged. The
///   **store's** clock decides expiry (the database's or Redis's own, or the injected clock of
///   [`MemoryStore`](memory::MemoryStore)), never the caller's, so callers on machines with
///   skewed clocks agree.
///
/// # Errors
///
/// [`Error::Unavailable`](crate::Error::Unavailable) when the store cannot be reached (a retry
/// may help), [`Error::Store`](crate::Error::Store) when it refuses the operation, and
/// [`Error::Corrupt`](crate::Error::Corrupt) when an entry cannot be decoded. After an error the
/// outcome of a write is unknown: it may or may not have been applied.
///
/// # Cancellation
///
/// Dropping a future of this trait part-way leaves the store in a state some complete
/// operation could have left it in: each operation is a single atomic step on the server, so it
/// is either applied or not. A dropped (or failed) `claim` may have won: the caller still holds
/// its token, so it can claim again with it (and win) or release the entry with a fenced
/// transient [`fail`](Store::fail); otherwise the entry stays `running` until its lease
/// expires, after which the key can be claimed again.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Claims `key` for `lease` on behalf of `owner`: wins if the key is absent or expired, or
    /// if its live entry is `running` with `owner` (then only the lease is renewed, to `lease`
    /// from now); the entry is then `running`, held by `owner`. Otherwise returns the live entry
    /// as it was at the moment of the claim.
    async fn claim(
        &self,
        key: &OperationKey,
        fingerprint: &Fingerprint,
        owner: &OwnerToken,
        lease: Duration,
    ) -> Result<Claim>;

    /// Extends the lease of a running entry the caller owns to `lease` from now. Returns
    /// whether the caller still owns it.
    async fn renew(&self, key: &OperationKey, owner: &OwnerToken, lease: Duration) -> Result<bool>;

    /// Records the result: the entry becomes `done` for `retention`, if it is still running
    /// with this owner.
    async fn complete(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> Result<Fenced>;

    /// Settles a failed run, if the entry is still running with this owner: with `sticky` set
    /// the entry becomes `failed` for that retention (permanent errors, replayed to duplicates);
    /// without it the entry is deleted, so the operation may be tried again (transient errors).
    async fn fail(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> Result<Fenced>;

    /// The live entry of `key`, if any.
    async fn get(&self, key: &OperationKey) -> Result<Option<Entry>>;

    /// A page of live entries, ordered by key where the store can.
    async fn list(&self, query: &ListQuery) -> Result<Page>;

    /// Deletes the entry of `key` whatever its state or owner. Returns whether there was a live
    /// one. (For operators: deleting a running entry lets a duplicate run at once.)
    async fn delete(&self, key: &OperationKey) -> Result<bool>;

    /// Deletes expired entries and returns how many. Expired entries already count as absent;
    /// this only reclaims their space. Stores with native expiry return 0.
    async fn purge_expired(&self) -> Result<u64>;
}

/// Converts a duration to whole milliseconds, saturating, as stores keep them.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "redis", feature = "postgres")),
    allow(dead_code)
)]
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Opens the store a URL names, for programs that pick their store at run time:
///
/// | URL | store | feature |
/// |---|---|---|
/// | `memory://` | [`MemoryStore`](memory::MemoryStore) (this process only) | always |
/// | `sqlite://PATH` (`sqlite://toolonce.db`, `sqlite:///abs/path.db`) | SQLite file | `sqlite` |
/// | `redis://…`, `rediss://…`, `redis+cluster://…` | Redis, Redis Cluster | `redis` |
/// | `postgres://…`, `postgresql://…` | PostgreSQL | `postgres` |
///
/// # Errors
///
/// [`Error::Config`](crate::Error::Config) for an unknown scheme or one this build was compiled
/// without; the backend's own errors when it cannot open or connect.
pub async fn open(url: &str) -> Result<std::sync::Arc<dyn Store>> {
    let Some((scheme, _rest)) = url.split_once("://") else {
        return Err(crate::Error::Config(format!(
            "store URL {:?} has no scheme: expected memory://, sqlite://PATH, redis://HOST or postgres://HOST",
            redact_url(url)
        )));
    };
    #[allow(unused_variables)]
    let missing = |feature: &str| {
        crate::Error::Config(format!(
            "store URL {:?} needs the `{feature}` feature, which this build of toolonce was compiled without",
            redact_url(url)
        ))
    };
    match scheme {
        "memory" => Ok(std::sync::Arc::new(memory::MemoryStore::new())),
        "sqlite" => {
            #[cfg(feature = "sqlite")]
            {
                Ok(std::sync::Arc::new(sqlite::SqliteStore::open(_rest)?))
            }
            #[cfg(not(feature = "sqlite"))]
            Err(missing("sqlite"))
        }
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => {
            #[cfg(feature = "redis")]
            {
                Ok(std::sync::Arc::new(redis::RedisStore::connect(url).await?))
            }
            #[cfg(not(feature = "redis"))]
            Err(missing("redis"))
        }
        "postgres" | "postgresql" => {
            #[cfg(feature = "postgres")]
            {
                Ok(std::sync::Arc::new(
                    postgres::PostgresStore::connect(url).await?,
                ))
            }
            #[cfg(not(feature = "postgres"))]
            Err(missing("postgres"))
        }
        other => Err(crate::Error::Config(format!(
            "unknown store scheme {other:?} in {:?}: expected memory, sqlite, redis, rediss, redis+cluster, postgres or postgresql",
            redact_url(url)
        ))),
    }
}
