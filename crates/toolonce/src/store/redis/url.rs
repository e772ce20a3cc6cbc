//! Store URLs taken apart: `redis://`, `rediss://`, `redis+cluster://`, `rediss+cluster://`,
//! `redis+sentinel://` and `rediss+sentinel://` with their credentials, database and
//! options, into what the client connects with. Every option is one toolonce reads or one the
//! driver reads (`protocol`); any other is refused, naming the ones that exist.

use crate::store::url::redact_url;
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

/// What a `redis+sentinel://` URL names besides its Sentinels: the master's name and how to
/// log in to the master it points at.
pub(super) struct SentinelTarget {
    pub(super) master: String,
    pub(super) db: i64,
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    pub(super) resp3: bool,
}

/// A store URL taken apart.
pub(super) struct Target {
    pub(super) cluster: bool,
    /// Set for a Sentinel URL: then `nodes` are the Sentinels.
    pub(super) sentinel: Option<SentinelTarget>,
    #[cfg_attr(not(feature = "redis-tls"), allow(dead_code))]
    pub(super) tls: bool,
    /// The URL for the redis client (one), or one per seed node of a cluster.
    pub(super) nodes: Vec<String>,
    /// The hosts as `host:port` (the port 6379 when the URL has none), for the shared vectors.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) hosts: Vec<String>,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) username: Option<String>,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) password: Option<String>,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) db: i64,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) resp3: bool,
    pub(super) prefix: Option<String>,
    pub(super) allow_eviction: Option<bool>,
    pub(super) native_claim: Option<bool>,
    pub(super) replicas: Option<u32>,
    pub(super) replica_timeout_ms: Option<u64>,
    /// The URL without its password, for `Debug`.
    pub(super) display: String,
}

impl Target {
    pub(super) fn parse(url: &str) -> Result<Target> {
        Self::parse_text(url).map_err(|e| match e {
            // A raw `/`, `?` or `#` in a password moves the `@` past the host: the pieces the
            // message would quote may be pieces of the password, so it quotes none.
            Error::Config(_) if misplaced_userinfo(url) => {
                Error::Config(format!("invalid Redis URL: {MISPLACED_USERINFO}"))
            }
            e => e,
        })
    }

    fn parse_text(url: &str) -> Result<Target> {
        let invalid =
            |why: &str| Error::Config(format!("invalid Redis URL {}: {why}", redact_url(url)));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("no scheme"))?;
        // Schemes are case-insensitive (RFC 3986, 3.1).
        let (tls, cluster, sentinel) = match scheme.to_ascii_lowercase().as_str() {
            "redis" => (false, false, false),
            "rediss" => (true, false, false),
            "redis+cluster" => (false, true, false),
            "rediss+cluster" => (true, true, false),
            "redis+sentinel" => (false, false, true),
            "rediss+sentinel" => (true, false, true),
            _ => {
                return Err(invalid(
                    "expected redis, rediss, redis+cluster, rediss+cluster, redis+sentinel or \
                     rediss+sentinel",
                ));
            }
        };
        if tls && !cfg!(feature = "redis-tls") {
            return Err(Error::Config(format!(
                "{scheme}:// needs the `redis-tls` feature, which this build of toolonce was compiled without"
            )));
        }
        if rest.contains('#') {
            return Err(invalid(
                "a store URL has no fragment: a `#` in a password is written %23",
            ));
        }
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let options = Options::read(query.unwrap_or(""), &invalid)?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (username, password) = login(userinfo, &invalid)?;
        let host_list: Vec<&str> = if cluster || sentinel {
            hosts.split(',').filter(|h| !h.is_empty()).collect()
        } else {
            vec![hosts]
        };
        if host_list.is_empty() || host_list.iter().any(|h| h.is_empty()) {
            return Err(invalid("no host"));
        }
        if !cluster && !sentinel && hosts.contains(',') {
            return Err(invalid(
                "several hosts need a redis+cluster:// (or redis+sentinel://) URL",
            ));
        }
        // The driver's own word for these is "did not parse": say what is wrong instead.
        let mut shown_hosts = Vec::with_capacity(host_list.len());
        for host in &host_list {
            shown_hosts.push(check_host(host).map_err(|why| invalid(&why))?);
        }
        let suffix = match options.resp3 {
            Some(true) => "?protocol=resp3",
            _ => "",
        };
        let node_scheme = if tls { "rediss" } else { "redis" };
        let (nodes, db, sentinel) = if sentinel {
            let (master, db) = sentinel_path(path, &invalid)?;
            let nodes = host_list
                .iter()
                .map(|h| format!("{node_scheme}://{h}/{suffix}"))
                .collect();
            let target = SentinelTarget {
                master,
                db,
                username: username.clone(),
                password: password.clone(),
                resp3: options.resp3 == Some(true),
            };
            (nodes, db, Some(target))
        } else {
            let db = database(path, cluster, &invalid)?;
            let auth = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
            let path = if path.is_empty() { "" } else { "/" };
            let db_path = if db == 0 {
                path.to_owned()
            } else {
                format!("/{db}")
            };
            let nodes = host_list
                .iter()
                .map(|h| format!("{node_scheme}://{auth}{h}{db_path}{suffix}"))
                .collect();
            (nodes, db, None)
        };
        Ok(Target {
            cluster,
            sentinel,
            tls,
            nodes,
            hosts: shown_hosts,
            username,
            password,
            db,
            resp3: options.resp3 == Some(true),
            prefix: options.prefix,
            allow_eviction: options.allow_eviction,
            native_claim: options.native_claim,
            replicas: options.replicas,
            replica_timeout_ms: options.replica_timeout_ms,
            display: redact_url(url),
        })
    }
}

/// The parsed URL in the neutral form of the shared vectors (`tests/data/store_urls.json`).
#[cfg(test)]
pub(crate) fn describe(url: &str) -> Result<serde_json::Value> {
    let t = Target::parse(url)?;
    let mode = match (&t.sentinel, t.cluster) {
        (Some(_), _) => "sentinel",
        (None, true) => "cluster",
        (None, false) => "single",
    };
    Ok(serde_json::json!({
        "kind": "redis",
        "mode": mode,
        "tls": t.tls,
        "hosts": t.hosts,
        "username": t.username,
        "password": t.password,
        "db": t.db,
        "prefix": t.prefix.unwrap_or_default(),
        "allow_eviction": t.allow_eviction.unwrap_or(false),
        "native_claim": t.native_claim.unwrap_or(true),
        "replicas": t.replicas.unwrap_or(0),
        "replica_timeout_ms": t.replica_timeout_ms.unwrap_or(500),
        "protocol": if t.resp3 { 3 } else { 2 },
        "master": t.sentinel.as_ref().map(|s| s.master.clone()),
    }))
}

/// What the message of a URL with a misplaced `@` says instead of quoting it.
pub(crate) const MISPLACED_USERINFO: &str = "it has an `@` after its host, as a password with a \
     raw `/`, `?` or `#` puts it there; in a user name or password these are written \
     percent-encoded (%2F, %3F, %23), and `@` as %40";

/// Whether the `@` that ends a userinfo may come after the authority: the authority (up to
/// the first `/`, `?` or `#`) has none, and the rest has one outside the value of a known
/// option.
pub(crate) fn misplaced_userinfo(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if rest[..end].contains('@') {
        return false;
    }
    let (before_fragment, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let (path, query) = before_fragment
        .split_once('?')
        .unwrap_or((before_fragment, ""));
    fragment.contains('@')
        || path.contains('@')
        || query.split('&').any(|pair| match pair.split_once('=') {
            // `?prefix=me@x` is a prefix; `?cr=3t@h` is more likely a password's tail.
            Some((name, value)) => {
                name.contains('@') || (value.contains('@') && !OPTIONS.contains(&name))
            }
            None => pair.contains('@'),
        })
}

/// The options of a Redis store URL, each decoded (RFC 3986; `+` is a plus) and given once.
#[derive(Default)]
struct Options {
    prefix: Option<String>,
    allow_eviction: Option<bool>,
    native_claim: Option<bool>,
    replicas: Option<u32>,
    replica_timeout_ms: Option<u64>,
    resp3: Option<bool>,
}

impl Options {
    fn read(query: &str, invalid: &dyn Fn(&str) -> Error) -> Result<Options> {
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
fn login(
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
fn database(path: &str, cluster: bool, invalid: &dyn Fn(&str) -> Error) -> Result<i64> {
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
fn sentinel_path(path: &str, invalid: &dyn Fn(&str) -> Error) -> Result<(String, i64)> {
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
fn check_host(host: &str) -> std::result::Result<String, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_url_becomes_one_node_url_per_seed_with_the_credentials() {
        let t = Target::parse("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001/?prefix=app%3A")
            .unwrap();
        assert!(t.cluster && !t.tls);
        assert_eq!(
            t.nodes,
            vec!["redis://:pw@10.0.0.1:7000/", "redis://:pw@10.0.0.2:7001/"]
        );
        assert_eq!(t.prefix.as_deref(), Some("app:"));
        assert_eq!(
            t.display,
            "redis+cluster://:***@10.0.0.1:7000,10.0.0.2:7001/?prefix=app%3A"
        );
    }

    #[test]
    fn a_single_url_keeps_its_database_and_other_parameters() {
        let t = Target::parse("redis://user:secret@host:6380/2?protocol=resp3&prefix=x").unwrap();
        assert!(!t.cluster);
        assert_eq!(
            t.nodes,
            vec!["redis://user:secret@host:6380/2?protocol=resp3"]
        );
        assert_eq!(t.prefix.as_deref(), Some("x"));
        assert!(!format!("{:?}", t.display).contains("secret"));
    }

    #[test]
    fn a_malformed_port_address_or_database_says_what_is_wrong() {
        for (url, words) in [
            ("redis://127.0.0.1:99999", "port \"99999\""),
            ("redis://host:", "port \"\""),
            ("redis://host:abc/0", "port \"abc\""),
            ("redis://:secret@[::1", "no closing \"]\""),
            ("redis://[::1]x", "after an IPv6 address"),
            ("redis://::1:6379", "in brackets"),
            ("redis://host/abc", "database \"abc\""),
            ("redis+cluster://a:1,b:0/", "port \"0\""),
        ] {
            match Target::parse(url) {
                Err(Error::Config(message)) => {
                    assert!(message.contains(words), "{url}: {message}");
                    assert!(!message.contains("secret"), "{message}");
                }
                other => panic!(
                    "{url}: expected a configuration error, got {:?}",
                    other.err()
                ),
            }
        }
        for url in [
            "redis://[::1]:6379/2",
            "redis://[::1]",
            "redis://h:6379",
            "redis://h/",
        ] {
            assert!(Target::parse(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn an_unknown_scheme_or_a_missing_host_is_a_configuration_error() {
        assert!(matches!(Target::parse("http://h"), Err(Error::Config(_))));
        assert!(matches!(
            Target::parse("redis+cluster://"),
            Err(Error::Config(_))
        ));
        assert!(matches!(Target::parse("redis://"), Err(Error::Config(_))));
    }

    #[test]
    fn an_option_nobody_reads_is_refused_with_a_near_miss() {
        for (url, words) in [
            (
                "redis://h/?allow_evicton=true",
                "did you mean `allow_eviction`?",
            ),
            ("redis://:secret@h/?replica=1", "did you mean `replicas`?"),
            (
                "redis+cluster://a:1,b:2/?colour=red",
                "`colour` that nothing reads",
            ),
            (
                "redis+sentinel://s:26379/m?flag",
                "`flag` that nothing reads",
            ),
        ] {
            match Target::parse(url) {
                Err(Error::Config(m)) => {
                    assert!(m.contains(words), "{url}: {m}");
                    assert!(m.contains("`replica_timeout_ms`"), "{m}");
                    assert!(!m.contains("secret"), "{m}");
                }
                other => panic!("{url}: expected a refusal, got {:?}", other.err()),
            }
        }
    }

    #[test]
    fn replicas_and_their_timeout_are_read_and_bad_values_refused() {
        let t =
            Target::parse("redis://h/?replicas=2&replica_timeout_ms=250&protocol=resp3").unwrap();
        assert_eq!((t.replicas, t.replica_timeout_ms), (Some(2), Some(250)));
        assert_eq!(t.nodes, vec!["redis://h/?protocol=resp3"]);
        for (url, words) in [
            ("redis://h/?replicas=-1", "replicas takes"),
            ("redis://h/?replicas=one", "replicas takes"),
            (
                "redis://h/?replica_timeout_ms=0",
                "replica_timeout_ms takes",
            ),
        ] {
            match Target::parse(url) {
                Err(Error::Config(m)) => assert!(m.contains(words), "{url}: {m}"),
                other => panic!("{url}: expected a refusal, got {:?}", other.err()),
            }
        }
    }

    #[test]
    fn a_sentinel_url_names_its_sentinels_master_database_and_login() {
        let t = Target::parse(
            "redis+sentinel://app:s%40cret@10.0.0.1:26379,10.0.0.2:26380/mymaster/3?prefix=p:&replicas=1",
        )
        .unwrap();
        let s = t.sentinel.as_ref().unwrap();
        assert_eq!(s.master, "mymaster");
        assert_eq!(s.db, 3);
        assert_eq!(s.username.as_deref(), Some("app"));
        assert_eq!(s.password.as_deref(), Some("s@cret"));
        assert_eq!(
            t.nodes,
            vec!["redis://10.0.0.1:26379/", "redis://10.0.0.2:26380/"]
        );
        assert_eq!((t.prefix.as_deref(), t.replicas), (Some("p:"), Some(1)));
        assert!(!t.display.contains("cret"), "{}", t.display);
        match Target::parse("redis+sentinel://h:26379/") {
            Err(Error::Config(m)) => assert!(m.contains("names its master"), "{m}"),
            other => panic!("expected a refusal, got {:?}", other.err()),
        }
        match Target::parse("redis+sentinel://h:26379/m/x") {
            Err(Error::Config(m)) => assert!(m.contains("database \"x\""), "{m}"),
            other => panic!("expected a refusal, got {:?}", other.err()),
        }
    }

    #[cfg(not(feature = "redis-tls"))]
    #[test]
    fn a_tls_url_without_the_tls_feature_names_the_feature() {
        match Target::parse("rediss://h:6380") {
            Err(Error::Config(m)) => assert!(m.contains("redis-tls"), "{m}"),
            _ => panic!("expected a configuration error"),
        }
    }
}
