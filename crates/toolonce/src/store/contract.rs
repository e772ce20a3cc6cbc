//! The store contract: where operation entries live, and the atomic operations the layer builds
//! on — the [`Store`] trait and the types its operations take and return, with the default
//! retention of an `unknown` entry and the millisecond conversion the backends share. Every
//! backend implements it and imports it from here.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::Result;
use crate::key::{Fingerprint, OperationKey};
// Re-exported: the backends read it with the rest of the contract.
pub use crate::store::about::About;
pub(crate) use crate::store::census::Census;
pub use crate::store::entry::{Entry, EntryState, State};
use crate::store::owner::OwnerToken;
pub use crate::store::removal::{Removed, SeenSettled};
pub use crate::store::settled_by::owner_digest;
pub use crate::store::unreadable::Unreadable;
use crate::tool::ToolError;

/// What [`Store::claim`] decided.
#[derive(Debug)]
#[must_use]
// A return value that is matched at once and never stored: boxing the entry would only add an
// allocation to every duplicate.
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
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
#[non_exhaustive]
pub enum Fenced {
    /// The caller still owned the running (or unknown) entry and the write took effect.
    Applied,
    /// As [`Applied`](Fenced::Applied), but fewer of the store's replicas acknowledged the
    /// write in time than it was asked to wait for (a Redis store's `replicas=N`): the record
    /// stands on the primary, and a failover of the primary before a replica has it may lose
    /// it. Only a record (a result, a sticky failure) answers this; a claim that too few
    /// acknowledged fails instead, since its tool has not run.
    AppliedUnreplicated(Unreplicated),
    /// The caller no longer owns the entry (it was taken over, resolved, settled or deleted):
    /// nothing was written.
    NotOwner,
}

impl Fenced {
    /// Whether the write took effect ([`Applied`](Fenced::Applied) or
    /// [`AppliedUnreplicated`](Fenced::AppliedUnreplicated)).
    pub fn is_applied(self) -> bool {
        !matches!(self, Fenced::NotOwner)
    }
}

/// How far short of its replicas a write fell: see [`Fenced::AppliedUnreplicated`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unreplicated {
    /// How many replicas acknowledged the write.
    pub acknowledged: u32,
    /// How many the store was asked to wait for.
    pub asked: u32,
    /// How long it waited for them.
    pub waited: Duration,
}

impl Unreplicated {
    /// `acknowledged` of `asked` replicas acknowledged a write within `waited`.
    pub fn new(acknowledged: u32, asked: u32, waited: Duration) -> Unreplicated {
        Unreplicated {
            acknowledged,
            asked,
            waited,
        }
    }
}

impl fmt::Display for Unreplicated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "only {} of the {asked} replicas asked (replicas={asked}) acknowledged the write \
             within {} ms",
            self.acknowledged,
            self.waited.as_millis(),
            asked = self.asked
        )
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

/// The attempt of an unsettled entry that the caller of [`Store::resolve`] saw, and acts on
/// only: the store compares it with the entry in the same atomic step as the write, so an
/// operator (or a verify probe) never settles or deletes an entry it did not look at.
///
/// It holds the attempt count and the owner as the store reported them (the token for the SQL
/// stores and the memory store, its SHA-1 for Redis). The owner is the holder's secret: its
/// `Debug` shows only [`owner_digest`](Seen::owner_digest), and so must anything a person sees.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Seen {
    attempts: u32,
    owner: Option<String>,
    even_if_live: bool,
}

impl Seen {
    /// The attempt `entry` is, if it is unsettled (`running` or `unknown`); `None` once it is
    /// `done` or `failed`. The resolve acts only once the attempt's lease has passed (it is
    /// `unknown` on the store's clock), whether it was seen `running` or `unknown`.
    pub fn of(entry: &Entry) -> Option<Seen> {
        match &entry.state {
            EntryState::Running { owner } | EntryState::Unknown { owner } => Some(Seen {
                attempts: entry.attempts,
                owner: owner.clone(),
                even_if_live: false,
            }),
            _ => None,
        }
    }

    /// Acts also while the attempt's lease is live (an operator's `--force` on a claim whose
    /// owner is stuck but renewing): still only on this attempt, with this owner.
    pub fn even_if_live(mut self) -> Seen {
        self.even_if_live = true;
        self
    }

    /// How many attempts the entry had started (0: not recorded by its writer).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The owner as the store reported it, for the store's comparison. Never show it: it is
    /// the holder's secret (for display, [`owner_digest`](Seen::owner_digest)).
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// Whether the resolve may act while the lease is live ([`even_if_live`](Seen::even_if_live)).
    pub fn acts_while_live(&self) -> bool {
        self.even_if_live
    }

    /// A short digest of the owner (12 hex digits of its SHA-256), safe to show: it tells two
    /// owners apart without giving away the token. `None` when the writer recorded no owner.
    pub fn owner_digest(&self) -> Option<String> {
        self.owner.as_deref().map(owner_digest)
    }

    /// Whether `entry` is the attempt seen, in a state the resolve may act on: unsettled, the
    /// same attempt count and owner, and `unknown` unless [`acts_while_live`](Seen::acts_while_live).
    pub fn admits(&self, entry: &Entry) -> bool {
        match &entry.state {
            EntryState::Running { owner } => {
                self.same(entry.attempts, owner.as_deref()) && self.even_if_live
            }
            EntryState::Unknown { owner } => self.same(entry.attempts, owner.as_deref()),
            _ => false,
        }
    }

    /// Why a store refused to act on `entry`, read in the same atomic step as the refused
    /// write: [`Resolved::Settled`], [`Resolved::Changed`] or [`Resolved::Live`]. An entry the
    /// seen attempt [`admits`](Seen::admits) (a store's read and its write disagree) is
    /// answered [`Resolved::Changed`]: refused, never applied by guess.
    pub fn refusal(&self, entry: Entry) -> Resolved {
        match &entry.state {
            EntryState::Done { .. } | EntryState::Failed { .. } => Resolved::Settled(entry),
            EntryState::Running { owner } if self.same(entry.attempts, owner.as_deref()) => {
                if self.even_if_live {
                    Resolved::Changed(entry)
                } else {
                    Resolved::Live(entry)
                }
            }
            _ => Resolved::Changed(entry),
        }
    }

    fn same(&self, attempts: u32, owner: Option<&str>) -> bool {
        self.attempts == attempts && self.owner.as_deref() == owner
    }
}

impl fmt::Debug for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Seen")
            .field("attempts", &self.attempts)
            .field("owner", &self.owner_digest())
            .field("even_if_live", &self.even_if_live)
            .finish()
    }
}

/// The answer of [`Store::resolve`]. Only [`Applied`](Resolved::Applied) wrote anything.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
// Matched at once and never stored, as `Claim`.
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum Resolved {
    /// The entry was the attempt seen, unsettled (and `unknown`, unless the seen attempt
    /// [`acts_while_live`](Seen::acts_while_live)), and the resolution was written.
    Applied,
    /// There is no live entry: nothing was written.
    Absent,
    /// The entry is `done` or `failed` already (it settled meanwhile): nothing was written.
    Settled(Entry),
    /// The entry is the attempt seen, and its lease is live (its owner is running it and
    /// renewing it, or renewed it since it was seen `unknown`): nothing was written. Its
    /// `expires_at` is when the lease ends.
    Live(Entry),
    /// The entry is unsettled but not the attempt seen (it was taken over, or released and
    /// claimed again, since it was read): nothing was written.
    Changed(Entry),
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
    /// The entries of this page's stretch of the store that cannot be decoded, reported rather
    /// than failing the page, unless the store could tell from what it reads apart (SQL
    /// columns) that the filters exclude them. They count towards the page size.
    pub unreadable: Vec<Unreadable>,
}

impl Page {
    /// Builds a page with no unreadable entries.
    pub fn new(entries: Vec<Entry>, next: Option<String>) -> Self {
        Page {
            entries,
            next,
            unreadable: Vec::new(),
        }
    }

    /// The page, reporting `unreadable` entries beside its own.
    pub fn with_unreadable(mut self, unreadable: Vec<Unreadable>) -> Self {
        self.unreadable = unreadable;
        self
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

    /// Settles an entry for an operator, or for the layer after a verify probe, **only if it
    /// is the attempt `seen`** and its lease has passed: unsettled, with the seen attempt count
    /// and owner, and `unknown` on the store's clock (or also `running`, if `seen`
    /// [`acts_while_live`](Seen::acts_while_live)). Compared in the same atomic step as the
    /// write. [`Resolution::Done`] and [`Resolution::Failed`] make it `done` or `failed` for
    /// `retention` (settled now), [`Resolution::Release`] deletes it. Anything else is refused
    /// with nothing written, answering what was found in that step: no live entry
    /// ([`Resolved::Absent`]), a settled one ([`Resolved::Settled`]), the seen attempt with its
    /// lease live ([`Resolved::Live`]: its owner is alive), or another attempt
    /// ([`Resolved::Changed`]: taken over, or released and claimed again). So two operators
    /// settling one key cannot both act, and neither can delete a claim made after it looked.
    async fn resolve(
        &self,
        key: &OperationKey,
        seen: &Seen,
        resolution: &Resolution,
        retention: Duration,
    ) -> Result<Resolved>;

    /// Deletes the settled entry of `key` for an operator (`toolonce rm`), **only if it is the
    /// entry `seen`**: `done` or `failed` as seen, with the attempts, start and settling time
    /// seen (a member its writer did not record compares as absent), compared in the same
    /// atomic step as the delete. Anything else is refused with nothing deleted, answering
    /// what was found in that step: no live entry ([`Removed::Absent`]) or another entry
    /// ([`Removed::Changed`]: deleted and claimed again since it was read, so running, or
    /// settled anew). So a removal never deletes the claim of a retry made after it looked,
    /// which would let a third run happen where two were right. (An unsettled entry is
    /// deleted with a fenced [`Resolution::Release`] instead.)
    async fn remove(&self, key: &OperationKey, seen: &SeenSettled) -> Result<Removed>;

    /// Deletes the entry of `key` whatever its state or owner. Returns whether there was a live
    /// one. Unfenced, so for tests and tools that own the store alone: an operator removes an
    /// entry with [`remove`](Store::remove) or a fenced [`resolve`](Store::resolve), which act
    /// only on the entry they read. (Deleting a running entry lets a duplicate run at once.)
    async fn delete(&self, key: &OperationKey) -> Result<bool>;

    /// Deletes expired entries and returns how many. Expired entries already count as absent;
    /// this only reclaims their space. Stores with native expiry return 0.
    async fn purge_expired(&self) -> Result<u64>;

    /// How many live entries are in each state, and the oldest `unknown` one's wait, counted
    /// by the store in one aggregate query (no entry is read out: a metrics scrape must stay
    /// cheap at millions of entries). `None` from a store that cannot count without reading
    /// every entry (Redis keeps no index by state): the default.
    async fn census(&self) -> Result<Option<Census>> {
        Ok(None)
    }
}

/// Converts a duration to whole milliseconds, saturating, as stores keep them.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "redis", feature = "postgres")),
    allow(dead_code)
)]
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
