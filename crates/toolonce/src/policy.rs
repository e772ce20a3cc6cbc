//! The per-tool policy of a write call, apart from the layer that applies it: what a duplicate
//! does while its operation runs ([`InFlight`]) or after an earlier attempt was interrupted
//! ([`OnExpired`]), and the durations of [`WriteOptions`] with their bounds. Tools declare
//! policy ([`WriteTool::on_expired`](crate::WriteTool::on_expired)) and stores bound their
//! durations by it, so neither has to know the layer.

use std::time::Duration;

/// What to do when a duplicate finds its operation still running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InFlight {
    /// Answer at once with an `in_flight` result telling the model not to retry (the default).
    Reject,
    /// Wait up to this long for the running call to settle, then answer as a duplicate of it.
    /// If the owner fails transiently, the waiter claims the operation and runs it itself; if
    /// the owner's lease expires, the operation is `unknown` and the waiter does what the
    /// [`OnExpired`] policy says.
    Wait(Duration),
}

/// What a duplicate does when it finds its operation `unknown`: an earlier attempt was
/// claimed and its lease expired without a result, so it may or may not have taken effect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnExpired {
    /// Do not run it again: answer [`Outcome::Unknown`], telling the model the first attempt may
    /// have taken effect and a person must check. The default, since running twice is only
    /// safe when the downstream system drops the second attempt by its key.
    ///
    /// [`Outcome::Unknown`]: crate::Outcome::Unknown
    #[default]
    Hold,
    /// Take it over and run it again with the same key: right when the downstream system
    /// honours the key (a payment API with `Idempotency-Key`), so a second attempt cannot take
    /// effect twice.
    Rerun,
    /// Ask the tool's verify probe (a read against the downstream system by the key): done
    /// records and replays its result, not done reruns, cannot tell holds.
    Verify,
}

impl OnExpired {
    /// The policy's name as configuration spells it: `hold`, `rerun` or `verify`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExpired::Hold => "hold",
            OnExpired::Rerun => "rerun",
            OnExpired::Verify => "verify",
        }
    }
}

impl std::fmt::Display for OnExpired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for OnExpired {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "hold" => Ok(OnExpired::Hold),
            "rerun" => Ok(OnExpired::Rerun),
            "verify" => Ok(OnExpired::Verify),
            other => Err(crate::Error::Config(format!(
                "unknown on_expired policy {other:?}: expected hold, rerun or verify"
            ))),
        }
    }
}

/// The shortest lease accepted: the heartbeat renews it every third of its length, so a
/// shorter one leaves no time for a renewal to reach the store.
pub const MIN_LEASE: Duration = Duration::from_millis(30);

/// The longest lease or retention accepted: 100 years, which is as good as forever and still
/// adds to any clock without overflowing. A longer [`InFlight::Wait`] is not an error: it means
/// "wait for as long as it takes" and is shortened to this.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// The shortest retention accepted: a result kept for no time at all is never replayed.
pub(crate) const MIN_RETENTION: Duration = Duration::from_millis(1);

/// Per-tool settings of the layer.
///
/// The fields are checked when they are used ([`WriteOptions::validate`]): by
/// [`ToolboxBuilder::build`](crate::ToolboxBuilder::build), and by [`Layer::run`], which
/// refuses to run a call with invalid options.
///
/// [`Layer::run`]: crate::Layer::run
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WriteOptions {
    /// How long a claim lives without a heartbeat. Short, so a crashed caller's operation can
    /// be retried soon; the heartbeat renews it every third of it while the tool runs.
    pub lease: Duration,
    /// How long a result is kept and replayed (and a permanent error too, unless
    /// [`failure_retention`](Self::failure_retention) says otherwise).
    pub retention: Duration,
    /// How long a permanent error is kept and replayed, when it should be shorter (or longer)
    /// than a result: `None` (the default) keeps it for [`retention`](Self::retention). The MCP
    /// proxy keeps a failed write for a minute by default, so a fixed server is soon tried
    /// again, while its results are kept for a day.
    pub failure_retention: Option<Duration>,
    /// What a duplicate does while the operation runs.
    pub in_flight: InFlight,
    /// What a duplicate does when an earlier attempt's lease expired without a result.
    /// `None` (the default) means the tool's own declaration ([`WriteTool::on_expired`](
    /// crate::WriteTool::on_expired)) when registered in a [`Toolbox`](crate::Toolbox), and
    /// [`OnExpired::Hold`] for [`Layer::run`].
    ///
    /// [`Layer::run`]: crate::Layer::run
    pub on_expired: Option<OnExpired>,
    /// The name of the optional argument by which a model says it performs the same action
    /// again on purpose (see [`crate::repeat`]): `Some("repeat")` by default, `None` for a tool
    /// that shows the model none. A surface that shows the tool to a model adds it to the
    /// tool's schema and takes it out of the arguments; a replay's note tells the model how to
    /// use it, or that the action cannot be repeated with identical arguments.
    pub repeat_argument: Option<String>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            lease: Duration::from_secs(60),
            retention: Duration::from_secs(24 * 60 * 60),
            failure_retention: None,
            in_flight: InFlight::Reject,
            on_expired: None,
            repeat_argument: Some(crate::repeat::DEFAULT_NAME.to_owned()),
        }
    }
}

impl WriteOptions {
    /// The defaults: a 60 s lease, 24 h retention, in-flight duplicates rejected.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the lease.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }
    /// Sets the retention.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }
    /// Sets how long a permanent error is kept (see
    /// [`failure_retention`](Self::failure_retention)).
    pub fn failure_retention(mut self, retention: Duration) -> Self {
        self.failure_retention = Some(retention);
        self
    }
    /// How long a permanent error is kept: the failure retention if set, else the retention.
    pub fn sticky_retention(&self) -> Duration {
        self.failure_retention.unwrap_or(self.retention)
    }
    /// Sets the in-flight policy.
    pub fn in_flight(mut self, policy: InFlight) -> Self {
        self.in_flight = policy;
        self
    }
    /// Sets what a duplicate of an `unknown` operation does (over the tool's declaration).
    pub fn on_expired(mut self, policy: OnExpired) -> Self {
        self.on_expired = Some(policy);
        self
    }

    /// Sets the name of the repeat argument (see
    /// [`repeat_argument`](Self::repeat_argument)); `None` shows the model none.
    pub fn repeat_argument(mut self, name: Option<&str>) -> Self {
        self.repeat_argument = name.map(str::to_owned);
        self
    }

    /// The policy the layer applies: the one set, else [`OnExpired::Hold`].
    pub fn expired_policy(&self) -> OnExpired {
        self.on_expired.unwrap_or_default()
    }

    /// Checks the durations: the lease must be between [`MIN_LEASE`] and [`MAX_DURATION`], the
    /// retention (and the failure retention, if set) between 1 ms and [`MAX_DURATION`]. Any [`InFlight::Wait`] is valid: one longer
    /// than [`MAX_DURATION`] waits that long, which is to say for as long as it takes.
    ///
    /// # Errors
    ///
    /// [`Error::Config`](crate::Error::Config) naming the option, its value and the range.
    pub fn validate(&self) -> crate::Result<()> {
        check_range("lease", self.lease, MIN_LEASE, "30ms")?;
        check_range("retention", self.retention, MIN_RETENTION, "1ms")?;
        if let Some(failure_retention) = self.failure_retention {
            check_range("failure_retention", failure_retention, MIN_RETENTION, "1ms")?;
        }
        if self.repeat_argument.as_deref() == Some("") {
            return Err(crate::Error::Config(
                "repeat_argument is empty: name the argument (such as \"repeat\"), or turn it \
                 off"
                .into(),
            ));
        }
        Ok(())
    }

    /// The options as the layer runs them: validated, with a wait beyond [`MAX_DURATION`]
    /// shortened to it, so no deadline computed from them can overflow a clock.
    pub(crate) fn effective(&self) -> crate::Result<std::borrow::Cow<'_, WriteOptions>> {
        self.validate()?;
        Ok(match self.in_flight {
            InFlight::Wait(wait) if wait > MAX_DURATION => {
                std::borrow::Cow::Owned(self.clone().in_flight(InFlight::Wait(MAX_DURATION)))
            }
            _ => std::borrow::Cow::Borrowed(self),
        })
    }
}

fn check_range(field: &str, value: Duration, min: Duration, min_text: &str) -> crate::Result<()> {
    if (min..=MAX_DURATION).contains(&value) {
        return Ok(());
    }
    Err(crate::Error::Config(format!(
        "{field} {value:?} is out of range: it must be between {min_text} and 100 years"
    )))
}
