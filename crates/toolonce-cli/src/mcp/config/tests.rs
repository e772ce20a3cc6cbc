//! The configuration's tests: defaults, per-tool sections, durations, refusals.

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

#[test]
fn the_repeat_argument_is_named_per_tool_turned_off_or_refused_when_empty() {
    let argument =
        |config: &Config, tool: &str| config.policy(tool).options.repeat_argument.clone();
    let default = Config::from_toml("").unwrap();
    assert_eq!(argument(&default, "x").as_deref(), Some("repeat"));
    let config = Config::from_toml(
        "[defaults]\nrepeat_argument = false\n[tools.pay]\nrepeat_argument = \"again\"\n\
         [tools.on]\nrepeat_argument = true\n",
    )
    .unwrap();
    assert_eq!(argument(&config, "x"), None);
    assert_eq!(argument(&config, "pay").as_deref(), Some("again"));
    assert_eq!(argument(&config, "on").as_deref(), Some("repeat"));
    let empty = Config::from_toml("[tools.pay]\nrepeat_argument = \"\"").unwrap_err();
    assert!(
        format!("{empty:#}").contains("repeat_argument is empty"),
        "{empty:#}"
    );
    assert!(Config::from_toml("[defaults]\nrepeat_argument = 2").is_err());
    // The command line's setting is over [defaults], never over a tool's own.
    let config = Config::from_toml(
        "[tools.pay]\nrepeat_argument = \"again\"\n[tools.other]\nlease = \"30s\"",
    )
    .unwrap()
    .with_repeat_argument(None)
    .unwrap();
    assert_eq!(argument(&config, "x"), None);
    assert_eq!(argument(&config, "other"), None);
    assert_eq!(argument(&config, "pay").as_deref(), Some("again"));
    assert!(Config::default().with_repeat_argument(Some("")).is_err());
}
