//! The proxy's TOML configuration: per-tool overrides of the server's annotations (kind, key
//! fields) and of the layer's policy (in-flight handling, lease, retention, call timeout), plus
//! a few proxy-wide timeouts. Everything is optional; an empty file is the defaults.
//!
//! ```toml
//! [proxy]
//! cancel_grace = "5s"       # after a client's cancel, how long to wait for the server's answer
//!                           # (and one lease more, in which an answer is still recorded)
//! shutdown_timeout = "5s"   # after the client hangs up, how long the server gets to exit
//! idempotent_hint = "pass"  # tools marked idempotentHint: "pass" through, or deduplicate
//!                           # them as "write" tools (see docs/contract.md, mixed restarts)
//!
//! [defaults]                # every write tool, unless the tool's own section says otherwise
//! lease = "60s"
//! retention = "1h"
//! in_flight = "reject"      # or "wait", with wait_timeout = "30s"
//! call_timeout = "5m"       # how long to wait for the server to answer a write call
//! on_error = "keep"         # a JSON-RPC error answer: "keep" (replay it) or "release"
//! on_tool_error = "keep"    # an `isError: true` result: "keep" or "release"
//! failure_retention = "1m"  # how long a kept failure is replayed
//! on_expired = "hold"       # a call whose earlier run ended unanswered: "hold" or "rerun"
//! repeat_argument = "repeat" # the argument by which the model repeats a write on purpose
//!                           # (shown in the listing, taken out before forwarding), or false
//!
//! [tools.read_graph]
//! kind = "read"             # the server did not mark it readOnlyHint
//!
//! [tools.write_file]
//! kind = "write"            # deduplicate it although the server marked it idempotentHint
//!
//! [tools.charge]
//! kind = "write"
//! key_fields = ["/order_id"]   # JSON Pointers into the arguments
//! in_flight = "wait"
//! wait_timeout = "20s"
//! on_expired = "rerun"      # its server passes the key on to a provider that deduplicates
//! ```

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use toolonce::layer::MAX_DURATION;
use toolonce::{InFlight, KeyFields, OnExpired, WriteOptions};

/// The kind a configuration forces on a tool, whatever the server's annotations say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    Read,
    Write,
}

/// What an error answer of the server does to its operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnError {
    /// Recorded as failed and replayed to duplicates for the failure retention: the tool may
    /// have had its effect before it failed.
    Keep,
    /// Forgotten: the next identical call runs the tool again.
    Release,
}

/// How one write tool is run.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    pub(crate) options: WriteOptions,
    pub(crate) key_fields: Option<KeyFields>,
    /// How long to wait for the server's answer before giving up on the call.
    pub(crate) call_timeout: Duration,
    /// A JSON-RPC error answer (other than a refusal before running: parse error, invalid
    /// request, method not found, invalid params, which are always released).
    pub(crate) on_error: OnError,
    /// A `CallToolResult` with `isError: true`.
    pub(crate) on_tool_error: OnError,
    /// How long a kept failure is replayed.
    pub(crate) failure_retention: Duration,
}

/// Proxy-wide settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProxySettings {
    /// After the client cancels a forwarded write call, how long to wait for the server to
    /// answer anyway (its result is then recorded) before giving the call up; the proxy then
    /// waits one lease more, renewing the claim, so an answer that comes in that time is
    /// recorded too rather than left `unknown`.
    pub(crate) cancel_grace: Duration,
    /// After the client closes stdin, how long the server gets to exit before it is sent
    /// SIGTERM, and as long again before SIGKILL.
    pub(crate) shutdown_timeout: Duration,
    /// What a tool marked `idempotentHint: true` (and not `readOnlyHint`) is: passed through
    /// (the default), or deduplicated as a write, so that every write tool of a server acting
    /// on one resource answers a resumed run from the same history.
    pub(crate) idempotent_hint: IdempotentHint,
}

/// `[proxy] idempotent_hint`: what the server's `idempotentHint: true` makes of a tool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum IdempotentHint {
    /// Passed through: running it again is safe, replaying a stale answer is not.
    #[default]
    Pass,
    /// Deduplicated like any write (and given the repeat argument).
    Write,
}

/// The resolved configuration.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) proxy: ProxySettings,
    default_policy: Arc<Policy>,
    kinds: HashMap<String, Kind>,
    policies: HashMap<String, Arc<Policy>>,
    /// The tools whose section names their own `repeat_argument`, which the command line's
    /// `--repeat-argument` and `--no-repeat-argument` leave alone.
    own_repeat_argument: std::collections::HashSet<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config::from_toml("").expect("the empty configuration is valid")
    }
}

impl Config {
    /// Reads a configuration file.
    pub(crate) fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the MCP configuration {}", path.display()))?;
        Config::from_toml(&text)
            .with_context(|| format!("invalid MCP configuration {}", path.display()))
    }

    /// Parses and checks a configuration.
    pub(crate) fn from_toml(text: &str) -> anyhow::Result<Config> {
        let file: File = toml::from_str(text)?;
        let proxy = ProxySettings {
            cancel_grace: file
                .proxy
                .cancel_grace
                .map_or(Duration::from_secs(5), Dur::forever_capped),
            shutdown_timeout: file
                .proxy
                .shutdown_timeout
                .map_or(Duration::from_secs(5), Dur::forever_capped),
            idempotent_hint: file.proxy.idempotent_hint.unwrap_or_default(),
        };
        let base = Policy {
            options: WriteOptions::new()
                .retention(DEFAULT_RETENTION)
                .failure_retention(DEFAULT_FAILURE_RETENTION),
            key_fields: None,
            call_timeout: Duration::from_secs(300),
            on_error: OnError::Keep,
            on_tool_error: OnError::Keep,
            failure_retention: DEFAULT_FAILURE_RETENTION,
        };
        let default_policy = file.defaults.apply(&base).context("[defaults]")?;
        let mut kinds = HashMap::new();
        let mut policies = HashMap::new();
        let mut own_repeat_argument = std::collections::HashSet::new();
        for (name, section) in file.tools {
            let context = || format!("[tools.{name}]");
            if section.repeat_argument.is_some() {
                own_repeat_argument.insert(name.clone());
            }
            if let Some(kind) = section.kind {
                kinds.insert(name.clone(), kind);
            }
            let mut policy = section
                .policy_section()
                .apply(&default_policy)
                .with_context(context)?;
            if let Some(fields) = section.key_fields {
                policy.key_fields = Some(KeyFields::new(fields).with_context(context)?);
            }
            if section.kind == Some(Kind::Read) && policy.key_fields.is_some() {
                bail!("[tools.{name}]: key_fields only apply to write tools, and kind is \"read\"");
            }
            policies.insert(name, Arc::new(policy));
        }
        Ok(Config {
            proxy,
            default_policy: Arc::new(default_policy),
            kinds,
            policies,
            own_repeat_argument,
        })
    }

    /// The configuration with tools marked `idempotentHint` deduplicated as writes (the
    /// command line's `--dedupe-idempotent`, over `[proxy] idempotent_hint`).
    pub(crate) fn with_idempotent_as_write(mut self) -> Config {
        self.proxy.idempotent_hint = IdempotentHint::Write;
        self
    }

    /// The configuration with the repeat argument `name` (`None`: none) for every write tool
    /// whose own section does not name one: the command line's `--repeat-argument NAME` and
    /// `--no-repeat-argument`, over `[defaults]`.
    pub(crate) fn with_repeat_argument(mut self, name: Option<&str>) -> anyhow::Result<Config> {
        if name == Some("") {
            bail!("--repeat-argument is empty: name the argument, or use --no-repeat-argument");
        }
        let set = |policy: &Policy| {
            let mut policy = policy.clone();
            policy.options = policy.options.repeat_argument(name);
            Arc::new(policy)
        };
        self.default_policy = set(&self.default_policy);
        for (tool, policy) in &mut self.policies {
            if !self.own_repeat_argument.contains(tool) {
                *policy = set(policy);
            }
        }
        Ok(self)
    }

    /// The kind the configuration forces on `tool`, if any.
    pub(crate) fn kind(&self, tool: &str) -> Option<Kind> {
        self.kinds.get(tool).copied()
    }

    /// The policy of write tool `tool`.
    pub(crate) fn policy(&self, tool: &str) -> Arc<Policy> {
        self.policies
            .get(tool)
            .unwrap_or(&self.default_policy)
            .clone()
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    proxy: ProxySection,
    #[serde(default)]
    defaults: PolicySection,
    #[serde(default)]
    tools: HashMap<String, ToolSection>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ProxySection {
    cancel_grace: Option<Dur>,
    shutdown_timeout: Option<Dur>,
    idempotent_hint: Option<IdempotentHint>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PolicySection {
    lease: Option<Dur>,
    retention: Option<Dur>,
    in_flight: Option<InFlightName>,
    wait_timeout: Option<Dur>,
    call_timeout: Option<Dur>,
    on_error: Option<OnError>,
    on_tool_error: Option<OnError>,
    failure_retention: Option<Dur>,
    on_expired: Option<OnExpiredName>,
    repeat_argument: Option<RepeatArgument>,
}

// Written out rather than `#[serde(flatten)]`: flatten and `deny_unknown_fields` do not mix,
// and a misspelt option must be an error, not silently ignored.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ToolSection {
    kind: Option<Kind>,
    key_fields: Option<Vec<String>>,
    lease: Option<Dur>,
    retention: Option<Dur>,
    in_flight: Option<InFlightName>,
    wait_timeout: Option<Dur>,
    call_timeout: Option<Dur>,
    on_error: Option<OnError>,
    on_tool_error: Option<OnError>,
    failure_retention: Option<Dur>,
    on_expired: Option<OnExpiredName>,
    repeat_argument: Option<RepeatArgument>,
}

impl ToolSection {
    fn policy_section(&self) -> PolicySection {
        PolicySection {
            lease: self.lease,
            retention: self.retention,
            in_flight: self.in_flight,
            wait_timeout: self.wait_timeout,
            call_timeout: self.call_timeout,
            on_error: self.on_error,
            on_tool_error: self.on_tool_error,
            failure_retention: self.failure_retention,
            on_expired: self.on_expired,
            repeat_argument: self.repeat_argument.clone(),
        }
    }
}

/// `repeat_argument`: the name of the argument by which a model repeats a write on purpose
/// (`"repeat"` by default), or `false` for none (`true` is the default name).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
enum RepeatArgument {
    Name(String),
    On(bool),
}

impl RepeatArgument {
    fn name(&self) -> anyhow::Result<Option<&str>> {
        match self {
            RepeatArgument::Name(name) if name.is_empty() => {
                bail!("repeat_argument is empty: name the argument, or write false for none")
            }
            RepeatArgument::Name(name) => Ok(Some(name)),
            RepeatArgument::On(true) => Ok(Some(toolonce::repeat::DEFAULT_NAME)),
            RepeatArgument::On(false) => Ok(None),
        }
    }
}

/// `on_expired`: what a duplicate of a call whose earlier run ended without an answer (the
/// server died or hung, the proxy was killed) does once that run's lease has expired. No
/// `verify`: the proxy has no way to ask a server whether a call took effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum OnExpiredName {
    /// Not forwarded: answered with outcome `unknown` until a person settles it.
    Hold,
    /// Forwarded again with the same key (for servers that deduplicate by it).
    Rerun,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum InFlightName {
    Reject,
    Wait,
}

const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Shorter than the library's day: the duplicates a proxy sees (a client's retry, a resumed
/// session replaying its last calls) come within minutes, while an MCP client runs for days
/// under one scope and may mean to repeat a write with the same arguments hours later.
const DEFAULT_RETENTION: Duration = Duration::from_secs(3600);

/// Long enough to absorb a client's or a model's immediate retries of a failed write (which
/// may have had its effect), short enough that a failure the MCP spec reports as a result
/// (a rate limit, an upstream outage) can be retried soon.
const DEFAULT_FAILURE_RETENTION: Duration = Duration::from_secs(60);

impl PolicySection {
    fn apply(&self, base: &Policy) -> anyhow::Result<Policy> {
        let mut policy = base.clone();
        if let Some(lease) = self.lease {
            policy.options = policy.options.lease(lease.0);
        }
        if let Some(retention) = self.retention {
            policy.options = policy.options.retention(retention.0);
        }
        // The layer's own check: the error names the option, its value and the range.
        policy.options.validate()?;
        match (self.in_flight, self.wait_timeout) {
            (Some(InFlightName::Reject), Some(_)) => {
                bail!("wait_timeout needs in_flight = \"wait\"");
            }
            (Some(InFlightName::Reject), None) => {
                policy.options = policy.options.in_flight(InFlight::Reject);
            }
            (Some(InFlightName::Wait), wait) => {
                let wait = wait.map_or(DEFAULT_WAIT, Dur::forever_capped);
                policy.options = policy.options.in_flight(InFlight::Wait(wait));
            }
            (None, Some(wait)) => match policy.options.in_flight {
                InFlight::Wait(_) => {
                    let wait = InFlight::Wait(wait.forever_capped());
                    policy.options = policy.options.in_flight(wait);
                }
                _ => bail!("wait_timeout needs in_flight = \"wait\""),
            },
            (None, None) => {}
        }
        if let Some(timeout) = self.call_timeout {
            if timeout.0.is_zero() {
                bail!("call_timeout must be more than 0");
            }
            policy.call_timeout = timeout.forever_capped();
        }
        match self.on_expired {
            Some(OnExpiredName::Hold) => {
                policy.options = policy.options.on_expired(OnExpired::Hold)
            }
            Some(OnExpiredName::Rerun) => {
                policy.options = policy.options.on_expired(OnExpired::Rerun);
            }
            None => {}
        }
        if let Some(argument) = &self.repeat_argument {
            policy.options = policy.options.repeat_argument(argument.name()?);
        }
        policy.on_error = self.on_error.unwrap_or(policy.on_error);
        policy.on_tool_error = self.on_tool_error.unwrap_or(policy.on_tool_error);
        if let Some(retention) = self.failure_retention {
            if retention.0.is_zero() {
                bail!("failure_retention must be more than 0 (use on_error = \"release\")");
            }
            policy.failure_retention = retention.0;
            policy.options = policy.options.failure_retention(retention.0);
        }
        Ok(policy)
    }
}

/// A duration written `"250ms"`, `"30s"`, `"5m"`, `"2h"`, `"7d"`, or an integer of seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dur(Duration);

impl Dur {
    /// For timeouts and waits, where a huge value means "as long as it takes": capped to
    /// 100 years, so no deadline computed from it overflows a clock.
    fn forever_capped(self) -> Duration {
        self.0.min(MAX_DURATION)
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct DurVisitor;
        impl Visitor<'_> for DurVisitor {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"250ms\", \"30s\", \"5m\", \"2h\" or \"7d\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                u64::try_from(v)
                    .map(|s| Dur(Duration::from_secs(s)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                Ok(Dur(Duration::from_secs(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_any(DurVisitor)
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let bad = || format!("invalid duration {text:?}: expected a number and ms, s, m, h or d");
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let secs_per: u32 = match unit.trim() {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" | "" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    // Beyond what a `Duration` holds is "forever": the range checks of each option decide
    // what that means (an error for a lease, a capped wait).
    Ok(Duration::from_secs(n)
        .checked_mul(secs_per)
        .unwrap_or(Duration::MAX))
}

#[cfg(test)]
mod tests;
