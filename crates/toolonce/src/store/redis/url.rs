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
        let invalid =
            |why: &str| Error::Config(format!("invalid Redis URL {}: {why}", redact_url(url)));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("no scheme"))?;
        let (tls, cluster, sentinel) = match scheme {
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
        // Take our own options out of the query; the driver's (`protocol`) go on to it, and
        // anything else is refused: an option nobody reads must not look set.
        let (rest, fragment) = match rest.split_once('#') {
            Some((r, f)) => (r, Some(f)),
            None => (rest, None),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let mut prefix = None;
        let mut allow_eviction = None;
        let mut native_claim = None;
        let mut replicas = None;
        let mut replica_timeout_ms = None;
        let mut resp3 = false;
        let mut kept = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("native_claim", value)) => {
                    native_claim = Some(
                        parse_bool(value)
                            .ok_or_else(|| invalid("native_claim takes true or false"))?,
                    );
                }
                Some(("replicas", value)) => {
                    replicas = Some(value.parse::<u32>().map_err(|_| {
                        invalid(&format!(
                            "replicas takes a number of replicas (0 or more), not {value:?}"
                        ))
                    })?);
                }
                Some(("replica_timeout_ms", value)) => {
                    replica_timeout_ms = Some(
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
                Some(("protocol", value)) => {
                    resp3 = matches!(value, "3" | "resp3");
                    kept.push(pair);
                }
                Some(("prefix", value)) => {
                    prefix = Some(percent_decode(value).ok_or_else(|| invalid("bad prefix"))?);
                }
                Some(("allow_eviction", value)) => {
                    allow_eviction = Some(
                        parse_bool(value)
                            .ok_or_else(|| invalid("allow_eviction takes true or false"))?,
                    );
                }
                Some((name, _)) => {
                    return Err(unknown_option(
                        "Redis",
                        &percent_decode(name).unwrap_or_default(),
                        OPTIONS,
                    ));
                }
                None => {
                    return Err(unknown_option(
                        "Redis",
                        &percent_decode(pair).unwrap_or_default(),
                        OPTIONS,
                    ));
                }
            }
        }
        let suffix = format!(
            "{}{}",
            if kept.is_empty() {
                String::new()
            } else {
                format!("?{}", kept.join("&"))
            },
            fragment.map(|f| format!("#{f}")).unwrap_or_default()
        );
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let node_scheme = if tls { "rediss" } else { "redis" };
        let auth = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let host_list: Vec<&str> = if cluster || sentinel {
            hosts.split(',').filter(|h| !h.is_empty()).collect()
        } else {
            vec![hosts]
        };
        if host_list.is_empty() || host_list.iter().any(|h| h.is_empty()) {
            return Err(invalid("no host"));
        }
        // The driver's own word for these is "did not parse": say what is wrong instead.
        for host in &host_list {
            check_host(host).map_err(|why| invalid(&why))?;
        }
        if sentinel {
            return Self::sentinel(url, tls, &host_list, userinfo, path, resp3, &suffix).map(
                |mut t| {
                    t.prefix = prefix;
                    t.allow_eviction = allow_eviction;
                    t.native_claim = native_claim;
                    t.replicas = replicas;
                    t.replica_timeout_ms = replica_timeout_ms;
                    t
                },
            );
        }
        let database = path.trim_start_matches('/');
        if !database.is_empty() && !database.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid(&format!(
                "the database {database:?} after the host is not a number (redis://host:6379/0)"
            )));
        }
        let nodes = host_list
            .iter()
            .map(|h| format!("{node_scheme}://{auth}{h}{path}{suffix}"))
            .collect();
        Ok(Target {
            cluster,
            sentinel: None,
            tls,
            nodes,
            prefix,
            allow_eviction,
            native_claim,
            replicas,
            replica_timeout_ms,
            display: redact_url(url),
        })
    }

    /// The rest of a Sentinel URL: `/MASTER-NAME` or `/MASTER-NAME/DB` after the Sentinels'
    /// addresses. The userinfo logs in to the master (and its replicas), not to the Sentinels.
    fn sentinel(
        url: &str,
        tls: bool,
        sentinels: &[&str],
        userinfo: Option<&str>,
        path: &str,
        resp3: bool,
        suffix: &str,
    ) -> Result<Target> {
        let invalid =
            |why: &str| Error::Config(format!("invalid Redis URL {}: {why}", redact_url(url)));
        let mut parts = path.trim_start_matches('/').splitn(2, '/');
        let master = parts.next().unwrap_or("");
        if master.is_empty() {
            return Err(invalid(
                "a Sentinel URL names its master after the Sentinels, as in \
                 redis+sentinel://h1:26379,h2:26379/mymaster",
            ));
        }
        let master = percent_decode(master).ok_or_else(|| invalid("bad master name"))?;
        let db = match parts.next().map(|d| d.trim_end_matches('/')) {
            None | Some("") => 0,
            Some(d) => d.parse::<i64>().ok().filter(|d| *d >= 0).ok_or_else(|| {
                invalid(&format!(
                    "the database {d:?} after the master name is not a number \
                     (redis+sentinel://h:26379/mymaster/0)"
                ))
            })?,
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (user, pass) = match u.split_once(':') {
                    Some((user, pass)) => (user, Some(pass)),
                    None => ("", Some(u)),
                };
                let decode = |t: &str| percent_decode(t).ok_or_else(|| invalid("bad userinfo"));
                (
                    (!user.is_empty()).then(|| decode(user)).transpose()?,
                    pass.map(decode).transpose()?,
                )
            }
        };
        let node_scheme = if tls { "rediss" } else { "redis" };
        Ok(Target {
            cluster: false,
            sentinel: Some(SentinelTarget {
                master,
                db,
                username,
                password,
                resp3,
            }),
            tls,
            nodes: sentinels
                .iter()
                .map(|h| format!("{node_scheme}://{h}/{suffix}"))
                .collect(),
            prefix: None,
            allow_eviction: None,
            native_claim: None,
            replicas: None,
            replica_timeout_ms: None,
            display: redact_url(url),
        })
    }
}

/// Checks one `host[:port]` of a URL: a closed IPv6 bracket, a port from 1 to 65535. The
/// error says what is wrong with it.
fn check_host(host: &str) -> std::result::Result<(), String> {
    let port = if let Some(v6) = host.strip_prefix('[') {
        let (_, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("the IPv6 address in {host:?} has no closing \"]\""))?;
        match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or_else(|| {
                format!("{host:?}: after an IPv6 address in brackets comes \":PORT\" or nothing")
            })?),
        }
    } else {
        match host.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Err(format!(
                    "{host:?}: an IPv6 address goes in brackets, as in redis://[::1]:6379"
                ));
            }
            Some((_, port)) => Some(port),
            None => None,
        }
    };
    match port {
        Some(port) if port.parse::<u16>().map_or(true, |p| p == 0) => Err(format!(
            "the port {port:?} of {host:?} is not a number from 1 to 65535"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared vectors (`tests/data/store_urls.json`, read by the TypeScript package too):
    /// one URL, one prefix (or one refusal) in every implementation.
    #[test]
    fn every_shared_url_vector_gives_its_prefix_or_is_refused() {
        let data: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/data/store_urls.json")).unwrap();
        let vectors = data["redis"].as_array().unwrap();
        assert!(vectors.len() > 10);
        for v in vectors {
            let url = v["url"].as_str().unwrap();
            let parsed = Target::parse(url);
            if v["refused"] == true {
                assert!(parsed.is_err(), "{url} was accepted");
            } else {
                let t = parsed.unwrap_or_else(|e| panic!("{url}: {e}"));
                let prefix = t.prefix.unwrap_or_default();
                assert_eq!(prefix, v["prefix"].as_str().unwrap(), "{url}");
            }
        }
    }

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
