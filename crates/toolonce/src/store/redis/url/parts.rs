//! The pieces of a Redis store URL, each checked and decoded: its options, its login, its
//! database or Sentinel path, and each host.

use crate::store::url::{parse_bool, percent_decode, unknown_option};
use crate::{Error, Result};

/// The options a Redis store URL may carry: toolonce's own, then the driver's.
pub(super) const OPTIONS: &[&str] = &[
    "prefix",
    "allow_eviction",
    "native_claim",
    "replicas",
    "replica_timeout_ms",
    "protocol",
];

/// The options of a Redis store URL, each decoded (RFC 3986; `+` is a plus) and given once.
#[derive(Default)]
pub(super) struct Options {
    pub(super) prefix: Option<String>,
    pub(super) allow_eviction: Option<bool>,
    pub(super) native_claim: Option<bool>,
    pub(super) replicas: Option<u32>,
    pub(super) replica_timeout_ms: Option<u64>,
    pub(super) resp3: Option<bool>,
}

impl Options {
    pub(super) fn read(query: &str, invalid: &dyn Fn(&str) -> Error) -> Result<Options> {
        let mut o = Options::default();
        let mut seen: Vec<String> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let bad = || invalid("an option is not valid percent-encoding");
            let name = percent_decode(name).ok_or_else(bad)?;
            if !OPTIONS.contains(&name.as_str()) {
                return Err(unknown_option("Redis", &name, OPTIONS));
            }
            if !pair.contains('=') {
                return Err(invalid(&format!(
                    "the option `{name}` has no value: write {name}=…"
                )));
            }
            if seen.contains(&name) {
                return Err(invalid(&format!(
                    "the option `{name}` is given twice: give it once"
                )));
            }
            let value = percent_decode(value).ok_or_else(bad)?;
            let flag = |what: &str| {
                parse_bool(&value)
                    .ok_or_else(|| invalid(&format!("{what} takes true or false, not {value:?}")))
            };
            match name.as_str() {
                "prefix" => o.prefix = Some(value.clone()),
                "allow_eviction" => o.allow_eviction = Some(flag("allow_eviction")?),
                "native_claim" => o.native_claim = Some(flag("native_claim")?),
                "replicas" => {
                    o.replicas = Some(value.parse::<u32>().map_err(|_| {
                        invalid(&format!(
                            "replicas takes a number of replicas (0 or more), not {value:?}"
                        ))
                    })?);
                }
                "replica_timeout_ms" => {
                    o.replica_timeout_ms = Some(
                        value
                            .parse::<u64>()
                            .ok()
                            .filter(|ms| (1..=3_600_000).contains(ms))
                            .ok_or_else(|| {
                                invalid(&format!(
                                    "replica_timeout_ms takes milliseconds from 1 to 3600000, \
                                     not {value:?}"
                                ))
                            })?,
                    );
                }
                _ => {
                    o.resp3 = Some(match value.as_str() {
                        "2" | "resp2" => false,
                        "3" | "resp3" => true,
                        _ => {
                            return Err(invalid(&format!(
                                "protocol takes 2 or 3 (resp2, resp3), not {value:?}"
                            )));
                        }
                    });
                }
            }
            seen.push(name);
        }
        Ok(o)
    }
}

/// The user name and password of a userinfo, decoded; an empty one is none. A userinfo
/// without `:` is a user name (RFC 3986, 3.2.1), as the driver reads it.
pub(super) fn login(
    userinfo: Option<&str>,
    invalid: &dyn Fn(&str) -> Error,
) -> Result<(Option<String>, Option<String>)> {
    let Some(userinfo) = userinfo else {
        return Ok((None, None));
    };
    let (user, pass) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let user = percent_decode(user)
        .ok_or_else(|| invalid("the user name is not valid percent-encoding"))?;
    let pass = percent_decode(pass)
        .ok_or_else(|| invalid("the password is not valid percent-encoding"))?;
    Ok((
        (!user.is_empty()).then_some(user),
        (!pass.is_empty()).then_some(pass),
    ))
}

/// The database after the host: 0 when there is none, a number from 0 to 2147483647 (a
/// Redis `databases` setting is an `int`), and only 0 on a cluster.
pub(super) fn database(path: &str, cluster: bool, invalid: &dyn Fn(&str) -> Error) -> Result<i64> {
    let text = path.trim_start_matches('/');
    let text = text.strip_suffix('/').unwrap_or(text);
    if text.is_empty() {
        return Ok(0);
    }
    let db = Some(text)
        .filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<i32>().ok())
        .ok_or_else(|| {
            invalid(&format!(
                "the database {text:?} after the host is not a number from 0 to 2147483647 \
                 (redis://host:6379/0)"
            ))
        })?;
    if cluster && db != 0 {
        return Err(invalid(&format!(
            "a Redis Cluster has only database 0, and the store URL names database {db}: leave \
             the number out (redis+cluster://host:port,host:port/)"
        )));
    }
    Ok(i64::from(db))
}

/// The rest of a Sentinel URL: `/MASTER-NAME` or `/MASTER-NAME/DB` after the Sentinels'
/// addresses. The userinfo logs in to the master (and its replicas), not to the Sentinels.
pub(super) fn sentinel_path(path: &str, invalid: &dyn Fn(&str) -> Error) -> Result<(String, i64)> {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let master = parts.next().unwrap_or("");
    if master.is_empty() {
        return Err(invalid(
            "a Sentinel URL names its master after the Sentinels, as in \
             redis+sentinel://h1:26379,h2:26379/mymaster",
        ));
    }
    let master = percent_decode(master)
        .ok_or_else(|| invalid("the master name is not valid percent-encoding"))?;
    let db = match parts.next() {
        None => 0,
        Some(d) => database(d, false, invalid)?,
    };
    Ok((master, db))
}

/// Checks one `host[:port]` of a URL: a host name, a closed IPv6 bracket, a port from 1 to
/// 65535. Returns it as `host:port` (6379 when it names no port); the error says what is
/// wrong with it.
pub(super) fn check_host(host: &str) -> std::result::Result<String, String> {
    let (name, port) = if let Some(v6) = host.strip_prefix('[') {
        let (address, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("the IPv6 address in {host:?} has no closing \"]\""))?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or_else(|| {
                format!("{host:?}: after an IPv6 address in brackets comes \":PORT\" or nothing")
            })?),
        };
        (format!("[{address}]"), port)
    } else {
        match host.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Err(format!(
                    "{host:?}: an IPv6 address goes in brackets, as in redis://[::1]:6379"
                ));
            }
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (host.to_owned(), None),
        }
    };
    if name.is_empty() || name == "[]" {
        return Err(format!("{host:?} names no host"));
    }
    match port {
        Some(port) if port.parse::<u16>().map_or(true, |p| p == 0) => Err(format!(
            "the port {port:?} of {host:?} is not a number from 1 to 65535"
        )),
        Some(port) => Ok(format!("{name}:{port}")),
        None => Ok(format!("{name}:6379")),
    }
}
