//! Store URLs taken apart: `redis://`, `rediss://`, `redis+cluster://`, `rediss+cluster://`,
//! `redis+sentinel://` and `rediss+sentinel://` with their credentials, database and
//! options, into what the client connects with. Every option is one toolonce reads or one the
//! driver reads (`protocol`); any other is refused, naming the ones that exist.

use crate::store::url::redact_url;
use crate::{Error, Result};

mod parts;

use parts::{OPTIONS, Options, check_host, database, login, sentinel_path};

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
        let (tls, cluster, sentinel) = scheme_of(scheme, &invalid)?;
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
        let (host_list, shown_hosts) = hosts_of(hosts, cluster, sentinel, &invalid)?;
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

/// `(tls, cluster, sentinel)` of a scheme.
fn scheme_of(scheme: &str, invalid: &dyn Fn(&str) -> Error) -> Result<(bool, bool, bool)> {
    // Schemes are case-insensitive (RFC 3986, 3.1).
    let flags = match scheme.to_ascii_lowercase().as_str() {
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
    if flags.0 && !cfg!(feature = "redis-tls") {
        return Err(Error::Config(format!(
            "{scheme}:// needs the `redis-tls` feature, which this build of toolonce was compiled without"
        )));
    }
    Ok(flags)
}

/// The hosts of the authority, and each as `host:port`: one, or for a cluster or Sentinels
/// several, comma-separated.
fn hosts_of<'a>(
    hosts: &'a str,
    cluster: bool,
    sentinel: bool,
    invalid: &dyn Fn(&str) -> Error,
) -> Result<(Vec<&'a str>, Vec<String>)> {
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
    Ok((host_list, shown_hosts))
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
