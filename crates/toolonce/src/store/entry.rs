//! One entry of the store as every backend reports it: its [`State`], what it holds in that
//! state ([`EntryState`]) and the [`Entry`] itself. Kept apart from the contract so the types
//! that only read entries (a resolve's [`Seen`](crate::store::Seen)) need not import the trait.

use std::fmt;
use std::time::SystemTime;

use crate::Result;
use crate::key::{Fingerprint, OperationKey};
use crate::store::about::About;
use crate::store::recorded::Recorded;
use crate::store::settled_by::SettledBy;
use crate::tool::ToolError;

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
    ///
    /// [`ClaimRequest::takeover`]: crate::ClaimRequest::takeover
    /// [`Store::resolve`]: crate::Store::resolve
    Unknown {
        /// The owner token of the attempt that expired, when the writer recorded one. Its owner
        /// may still settle it, as long as nobody took it over.
        owner: Option<String>,
    },
    /// Completed with this result.
    Done {
        /// The tool's result, exactly as the first caller got it.
        result: Recorded,
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
    /// Which attempt settled it, if it did and the store recorded it (older writers and other
    /// implementations may not).
    pub settled_by: Option<SettledBy>,
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
            settled_by: None,
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

    /// Sets which attempt settled it.
    pub fn with_settled_by(mut self, by: Option<SettledBy>) -> Self {
        self.settled_by = by;
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
