//! The store contract: where operation entries live, and the atomic operations the layer builds
//! on — the [`Store`] trait and the types its operations take and return, with the default
//! retention of an `unknown` entry and the millisecond conversion the backends share. Every
//! backend implements it and imports it from here.

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::Value;

use crate::Result;
use crate::key::{Fingerprint, OperationKey};
use crate::store::owner::OwnerToken;
use crate::tool::ToolError;

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
    /// The key's entry was `unknown` (its lease expired unsettled), the request asked for a
    /// takeover ([`ClaimRequest::takeover`]) and its fingerprint matches: the entry is now
    /// `running` with the caller's token for the lease, one more attempt counted, its first
    /// start and what it is kept. The caller owns it, and the earlier attempt may have taken
    /// effect. (A re-sent takeover, after its reply was lost, answers [`Claim::Won`]: it finds
    /// the caller's own running entry.)
    TookOver,
    /// The key already has a live entry, read in the same atomic step as the failed claim.
    Existing(Entry),
}

/// The answer of the fenced writes [`Store::complete`] and [`Store::fail`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Fenced {
    /// The caller still owned the running (or unknown) entry and the write took effect.
    Applied,
    /// The caller no longer owns the entry (it was taken over, resolved, settled or deleted):
    /// nothing was written.
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
    /// Claimed, and its lease expired without a complete or fail: the attempt may or may not
    /// have taken effect. Kept for the claim's retention after its lease deadline.
    Unknown,
}

impl State {
    /// The state's name as the wire format and the command line spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Done => "done",
            State::Failed => "failed",
            State::Unknown => "unknown",
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
            "unknown" => Ok(State::Unknown),
            other => Err(crate::Error::Config(format!(
                "unknown state {other:?}: expected running, done, failed or unknown"
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
    /// Claimed, and its lease expired without a complete or fail: whether the attempt took
    /// effect is unknown. A duplicate takes it over only when asked to
    /// ([`ClaimRequest::takeover`]); an operator settles it with [`Store::resolve`].
    Unknown {
        /// The owner token of the attempt that expired, when the writer recorded one. Its owner
        /// may still settle it, as long as nobody took it over.
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

/// What an entry says it is: recorded by the claim that creates it, so an operator looking at
/// a stuck or `unknown` entry can tell what it was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct About {
    /// The scope the key was derived in (a run, a session, a user).
    pub scope: Option<String>,
    /// The tool's name (for `toolonce exec`, the operation's name).
    pub tool: Option<String>,
    /// Anything else that identifies the operation for a person: `exec`'s command line, the
    /// MCP proxy's server identity.
    pub detail: Option<String>,
}

impl About {
    /// An entry's scope and tool.
    pub fn new(scope: impl Into<String>, tool: impl Into<String>) -> Self {
        About {
            scope: Some(scope.into()),
            tool: Some(tool.into()),
            detail: None,
        }
    }

    /// Nothing recorded (what an older writer leaves).
    pub fn empty() -> Self {
        Self::default()
    }

    /// Sets the detail.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Sets or clears the scope.
    pub fn with_scope(mut self, scope: Option<String>) -> Self {
        self.scope = scope;
        self
    }

    /// Sets or clears the tool.
    pub fn with_tool(mut self, tool: Option<String>) -> Self {
        self.tool = tool;
        self
    }

    /// Sets or clears the detail.
    pub fn with_detail(mut self, detail: Option<String>) -> Self {
        self.detail = detail;
        self
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.scope.is_none() && self.tool.is_none() && self.detail.is_none()
    }
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
    /// When the current attempt was claimed (a takeover starts a new attempt; see
    /// [`first_started_at`](Entry::first_started_at) for the first).
    pub started_at: SystemTime,
    /// While `running` or `unknown`, the lease deadline; once settled, the end of the retention.
    /// If the store knows. For display and inspection only: expiry itself is decided by the
    /// store's clock, and a store that keeps a remaining time rather than an instant (Redis's
    /// `PTTL`) reports it added to the caller's clock.
    pub expires_at: Option<SystemTime>,
    /// The state and what it holds.
    pub state: EntryState,
    /// What the entry says it is (empty when written by an older version or another
    /// implementation).
    pub about: About,
    /// When the first attempt was claimed; `None` when written by an older version.
    pub first_started_at: Option<SystemTime>,
    /// How many attempts have started it (1, plus one per takeover); 0 when not recorded (an
    /// older writer).
    pub attempts: u32,
    /// When it settled (`done` or `failed`), if it did and the store recorded it.
    pub settled_at: Option<SystemTime>,
}

impl Entry {
    /// Builds an entry (backends outside this crate need a constructor: the struct is
    /// `#[non_exhaustive]`), with nothing recorded about it, no first start, 0 attempts and no
    /// settle time; the setters below fill those in.
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
            about: About::default(),
            first_started_at: None,
            attempts: 0,
            settled_at: None,
        }
    }

    /// Sets what the entry says it is.
    pub fn with_about(mut self, about: About) -> Self {
        self.about = about;
        self
    }

    /// Sets when the first attempt started.
    pub fn with_first_started_at(mut self, at: Option<SystemTime>) -> Self {
        self.first_started_at = at;
        self
    }

    /// Sets how many attempts started it.
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// Sets when it settled.
    pub fn with_settled_at(mut self, at: Option<SystemTime>) -> Self {
        self.settled_at = at;
        self
    }

    /// The entry's state without its data.
    pub fn state(&self) -> State {
        match self.state {
            EntryState::Running { .. } => State::Running,
            EntryState::Unknown { .. } => State::Unknown,
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

/// The default time an `unknown` entry is kept after its lease: 24 hours, as long as a result.
pub const DEFAULT_UNKNOWN_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// What [`Store::claim`] is asked.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ClaimRequest<'a> {
    /// The operation key.
    pub key: &'a OperationKey,
    /// The fingerprint of the call's full arguments.
    pub fingerprint: &'a Fingerprint,
    /// The caller's token (see [`OwnerToken`]).
    pub owner: &'a OwnerToken,
    /// How long the claim lives without a renewal.
    pub lease: Duration,
    /// How long the entry is kept as `unknown` after its lease deadline, if nobody settles it.
    pub retention: Duration,
    /// Whether to take over an `unknown` entry (the caller's policy reruns it, or a verify probe
    /// said it did not take effect). Without it, an `unknown` entry is [`Claim::Existing`].
    pub takeover: bool,
    /// What the entry says it is; recorded by the claim that creates the entry, kept by a
    /// takeover.
    pub about: &'a About,
}

static EMPTY_ABOUT: About = About {
    scope: None,
    tool: None,
    detail: None,
};

impl<'a> ClaimRequest<'a> {
    /// A claim of `key` for `lease`, with a retention of [`DEFAULT_UNKNOWN_RETENTION`], no
    /// takeover and nothing recorded about the entry.
    pub fn new(
        key: &'a OperationKey,
        fingerprint: &'a Fingerprint,
        owner: &'a OwnerToken,
        lease: Duration,
    ) -> Self {
        ClaimRequest {
            key,
            fingerprint,
            owner,
            lease,
            retention: DEFAULT_UNKNOWN_RETENTION,
            takeover: false,
            about: &EMPTY_ABOUT,
        }
    }

    /// Sets how long an `unknown` entry is kept after its lease.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Sets whether an `unknown` entry is taken over.
    pub fn takeover(mut self, takeover: bool) -> Self {
        self.takeover = takeover;
        self
    }

    /// Sets what the entry says it is.
    pub fn about(mut self, about: &'a About) -> Self {
        self.about = about;
        self
    }
}

/// How an operator settles an entry with [`Store::resolve`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Resolution {
    /// It took effect, with this result: the entry becomes `done`, replayed to duplicates.
    Done(Value),
    /// It failed: the entry becomes `failed`, replayed to duplicates.
    Failed(ToolError),
    /// Forget it: the entry is deleted, so the next call runs the operation.
    Release,
}

/// The answer of [`Store::resolve`].
#[derive(Clone, Debug, PartialEq)]
#[must_use]
// Matched at once and never stored, as `Claim`.
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum Resolved {
    /// The entry was `running` or `unknown`, and the resolution was written.
    Applied,
    /// There is no live entry: nothing was written.
    Absent,
    /// The entry is `done` or `failed` already (it settled meanwhile): nothing was written.
    Settled(Entry),
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
    /// Only entries recorded with this scope.
    pub scope: Option<String>,
    /// Only entries recorded with this tool.
    pub tool: Option<String>,
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

    /// Only entries recorded with `scope`.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// Only entries recorded with `tool`.
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// Whether `entry` passes the state, scope and tool filters (not the cursor).
    pub fn admits(&self, entry: &Entry) -> bool {
        self.state.is_none_or(|s| s == entry.state())
            && self
                .scope
                .as_ref()
                .is_none_or(|s| entry.about.scope.as_ref() == Some(s))
            && self
                .tool
                .as_ref()
                .is_none_or(|t| entry.about.tool.as_ref() == Some(t))
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
///   claims. A claim that finds a live `running` (or `unknown`) entry holding that same token
///   answers [`Claim::Won`] and renews the lease to the length given, in the same atomic step;
///   any other live entry is [`Claim::Existing`], except an `unknown` one the request takes over
///   ([`Claim::TookOver`]). So a claim whose reply was lost can be retried, by the caller or by
///   a driver that re-sends it, without the caller being told that its own claim is somebody
///   else's running operation.
/// - **Unknown.** A `running` entry whose lease passed without a complete or fail is `unknown`
///   ([`EntryState::Unknown`]): kept for the claim's [`retention`](ClaimRequest::retention)
///   after its lease deadline, taken over only by a claim that asks
///   ([`ClaimRequest::takeover`]) with a matching fingerprint, and settled by an operator with
///   [`resolve`](Store::resolve).
/// - **Owner fencing.** [`renew`](Store::renew), [`complete`](Store::complete) and
///   [`fail`](Store::fail) take effect only while the entry is `running` or `unknown` with the
///   caller's [`OwnerToken`]. A caller whose entry was taken over, resolved or deleted gets
///   [`Fenced::NotOwner`] (or `false`), never a silent overwrite; a late owner whose lease
///   passed but whose entry nobody took over still records its outcome. They are not
///   idempotent: a settle repeated after its first attempt applied finds the entry settled and
///   answers [`Fenced::NotOwner`] (the layer then reads the entry to tell the two apart).
/// - **Expiry.** A `running` or `unknown` entry lives for its lease plus its retention, a
///   settled one for its retention. An expired entry counts as absent for every operation,
///   whether or not it has been purged. The **store's** clock decides expiry and whether a
///   lease has passed (the database's or Redis's own, or the injected clock of
///   [`MemoryStore`](crate::store::memory::MemoryStore)), never the caller's, so callers on machines with
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
    /// Claims `req.key` for `req.lease` on behalf of `req.owner`: wins if the key is absent or
    /// expired (a new entry: one attempt, first started now, `req.about` recorded), or if its
    /// live entry is `running` or `unknown` with `req.owner` (then only the lease is renewed, to
    /// `lease` from now); takes over an `unknown` entry if `req.takeover` is set and the
    /// fingerprint matches (a new owner and lease, one more attempt, the first start and about
    /// kept). The entry is then `running`, held by the caller, and kept as `unknown` for
    /// `req.retention` after its lease if nobody settles it. Otherwise returns the live entry as
    /// it was at the moment of the claim.
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim>;

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

    /// Settles an entry for an operator, whatever its owner, if it is `running` or `unknown`:
    /// [`Resolution::Done`] and [`Resolution::Failed`] make it `done` or `failed` for
    /// `retention` (settled now), [`Resolution::Release`] deletes it. Fenced against an entry
    /// that settled meanwhile: a `done` or `failed` entry is left alone and returned
    /// ([`Resolved::Settled`]); no live entry is [`Resolved::Absent`].
    async fn resolve(
        &self,
        key: &OperationKey,
        resolution: &Resolution,
        retention: Duration,
    ) -> Result<Resolved>;

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
