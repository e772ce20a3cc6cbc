//! The proxy's TOML configuration: per-tool overrides of the server's annotations (kind, key
//! fields) and of the layer's policy (in-flight handling, lease, retention, call timeout), plus
//! a few proxy-wide timeouts. Everything is optional; an empty file is the defaults.
//!
//! ```toml
//! [proxy]
//! cancel_grace = "5s"       # after a client's cancel, how long to wait for the server's answer
//!                           # (and one lease more, in which an answer is still recorded)
//! shutdown_timeout = "5s"   # after the client hangs up, how long the server gets to exit
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
}

/// The resolved configuration.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) proxy: ProxySettings,
    default_policy: Arc<Policy>,
    kinds: HashMap<String, Kind>,
    policies: HashMap<String, Arc<Policy>>,
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
        for (name, section) in file.tools {
            let context = || format!("[tools.{name}]");
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
        })
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
mod tests {
    use super::*;
    use proptest::strategy::Strategy as _;

    #[test]
    fn empty_configuration_is_the_proxy_defaults() {
        let config = Config::from_toml("").unwrap();
        let policy = config.policy("anything");
        assert_eq!(policy.options.lease, Duration::from_secs(60));
        assert_eq!(policy.options.retention, Duration::from_secs(3600));
        assert_eq!(policy.options.in_flight, InFlight::Reject);
        assert_eq!(policy.call_timeout, Duration::from_secs(300));
        assert!(policy.key_fields.is_none());
        assert_eq!(config.kind("anything"), None);
        assert_eq!(policy.on_error, OnError::Keep);
        assert_eq!(policy.on_tool_error, OnError::Keep);
        assert_eq!(policy.failure_retention, Duration::from_secs(60));
        assert_eq!(policy.options.expired_policy(), OnExpired::Hold);
    }

    #[test]
    fn on_expired_is_set_in_defaults_and_per_tool() {
        let config = Config::from_toml(
            "[defaults]\non_expired = \"rerun\"\n[tools.send_email]\non_expired = \"hold\"\n\
             [tools.charge]\nlease = \"5s\"",
        )
        .unwrap();
        assert_eq!(
            config.policy("other").options.expired_policy(),
            OnExpired::Rerun
        );
        assert_eq!(
            config.policy("charge").options.expired_policy(),
            OnExpired::Rerun
        );
        assert_eq!(
            config.policy("send_email").options.expired_policy(),
            OnExpired::Hold
        );
        let e = format!(
            "{:#}",
            Config::from_toml("[tools.x]\non_expired = \"verify\"").unwrap_err()
        );
        assert!(e.contains("unknown variant") && e.contains("rerun"), "{e}");
    }

    #[test]
    fn tool_sections_override_defaults_which_override_the_layer() {
        let config = Config::from_toml(
            r#"
            [proxy]
            cancel_grace = "250ms"
            [defaults]
            lease = "10s"
            in_flight = "wait"
            [tools.charge]
            key_fields = ["/order"]
            wait_timeout = 3
            retention = "2h"
            [tools.read_graph]
            kind = "read"
            "#,
        )
        .unwrap();
        assert_eq!(config.proxy.cancel_grace, Duration::from_millis(250));
        let charge = config.policy("charge");
        assert_eq!(charge.options.lease, Duration::from_secs(10));
        assert_eq!(charge.options.retention, Duration::from_secs(7200));
        assert_eq!(
            charge.options.in_flight,
            InFlight::Wait(Duration::from_secs(3))
        );
        assert!(charge.key_fields.is_some());
        let other = config.policy("other");
        assert_eq!(other.options.in_flight, InFlight::Wait(DEFAULT_WAIT));
        assert_eq!(config.kind("read_graph"), Some(Kind::Read));
        assert_eq!(config.kind("charge"), None);
    }

    #[test]
    fn mistakes_are_errors_not_silently_ignored() {
        for (text, needle) in [
            ("[tools.x]\nkindd = \"read\"", "unknown field"),
            ("[tools.x]\nkind = \"reed\"", "unknown variant"),
            ("[tools.x]\nkey_fields = [\"amount\"]", "invalid key field"),
            ("[tools.x]\nwait_timeout = \"1s\"", "wait_timeout needs"),
            ("[defaults]\nlease = \"5 parsecs\"", "invalid duration"),
            ("[defaults]\nlease = \"1ms\"", "between 30ms and 100 years"),
            ("[defaults]\nlease = \"0s\"", "lease 0ns is out of range"),
            ("[tools.x]\nretention = 0", "retention 0ns is out of range"),
            (
                "[defaults]\nlease = \"36600d\"",
                "lease 3162240000s is out of range: it must be between 30ms and 100 years",
            ),
            ("[defaults]\non_error = \"retry\"", "unknown variant"),
            ("[tools.x]\nfailure_retention = 0", "more than 0"),
            (
                "[tools.x]\nkind = \"read\"\nkey_fields = [\"/a\"]",
                "only apply to write",
            ),
        ] {
            let e = format!("{:#}", Config::from_toml(text).unwrap_err());
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn no_duration_in_the_configuration_panics_or_escapes_its_range(
            field in proptest::sample::select(vec![
                "lease", "retention", "wait_timeout", "call_timeout", "cancel_grace",
                "shutdown_timeout",
            ]),
            value in proptest::prop_oneof![
                proptest::num::i64::ANY.prop_map(|n| n.to_string()),
                (proptest::num::u64::ANY, proptest::sample::select(vec!["ms", "s", "m", "h", "d", "", " s", "x"]))
                    .prop_map(|(n, unit)| format!("\"{n}{unit}\"")),
                proptest::num::f64::ANY.prop_map(|x| format!("{x:?}")),
                proptest::strategy::Just("\"1e19s\"".to_owned()),
            ],
        ) {
            let text = match field {
                "cancel_grace" | "shutdown_timeout" => format!("[proxy]\n{field} = {value}"),
                "wait_timeout" => format!("[defaults]\nin_flight = \"wait\"\n{field} = {value}"),
                _ => format!("[tools.t]\n{field} = {value}"),
            };
            if let Ok(config) = Config::from_toml(&text) {
                let policy = config.policy("t");
                // Whatever was accepted, the layer runs it.
                proptest::prop_assert!(policy.options.validate().is_ok(), "{text}");
                if let InFlight::Wait(wait) = policy.options.in_flight {
                    proptest::prop_assert!(wait <= MAX_DURATION, "{text}");
                }
                for d in [
                    policy.call_timeout,
                    config.proxy.cancel_grace,
                    config.proxy.shutdown_timeout,
                ] {
                    proptest::prop_assert!(d <= MAX_DURATION, "{text}");
                }
            }
        }
    }

    #[test]
    fn a_wait_or_timeout_of_forever_is_capped_not_refused() {
        let config = Config::from_toml(
            "[proxy]\ncancel_grace = \"213503982334601d\"\n\
             [defaults]\nin_flight = \"wait\"\nwait_timeout = 9223372036854775807\n\
             call_timeout = \"18446744073709551615ms\"",
        )
        .unwrap();
        let policy = config.policy("t");
        assert_eq!(policy.options.in_flight, InFlight::Wait(MAX_DURATION));
        assert_eq!(policy.call_timeout, MAX_DURATION);
        assert_eq!(config.proxy.cancel_grace, MAX_DURATION);
    }

    #[test]
    fn durations_read_their_units() {
        for (text, ms) in [
            ("250ms", 250),
            ("30s", 30_000),
            ("5m", 300_000),
            ("2h", 7_200_000),
        ] {
            assert_eq!(parse_duration(text).unwrap(), Duration::from_millis(ms));
        }
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
