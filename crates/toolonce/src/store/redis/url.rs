//! Store URLs taken apart: `redis://`, `rediss://`, `redis+cluster://` and `rediss+cluster://`
//! with their credentials, database and parameters, into what the client connects with.

use crate::store::url::redact_url;
use crate::store::url::{parse_bool, percent_decode};
use crate::{Error, Result};

/// A store URL taken apart.
pub(super) struct Target {
    pub(super) cluster: bool,
    #[cfg_attr(not(feature = "redis-tls"), allow(dead_code))]
    pub(super) tls: bool,
    /// The URL for the redis client (one), or one per seed node of a cluster.
    pub(super) nodes: Vec<String>,
    pub(super) prefix: Option<String>,
    pub(super) allow_eviction: Option<bool>,
    /// The URL without its password, for `Debug`.
    pub(super) display: String,
}

impl Target {
    pub(super) fn parse(url: &str) -> Result<Target> {
        let invalid =
            |why: &str| Error::Config(format!("invalid Redis URL {}: {why}", redact_url(url)));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("no scheme"))?;
        let (tls, cluster) = match scheme {
            "redis" => (false, false),
            "rediss" => (true, false),
            "redis+cluster" => (false, true),
            "rediss+cluster" => (true, true),
            _ => {
                return Err(invalid(
                    "expected redis, rediss, redis+cluster or rediss+cluster",
                ));
            }
        };
        if tls && !cfg!(feature = "redis-tls") {
            return Err(Error::Config(format!(
                "{scheme}:// needs the `redis-tls` feature, which this build of toolonce was compiled without"
            )));
        }
        // Take our own `prefix` parameter out of the query; the rest goes to the driver.
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
        let mut kept = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("prefix", value)) => {
                    prefix = Some(percent_decode(value).ok_or_else(|| invalid("bad prefix"))?);
                }
                Some(("allow_eviction", value)) => {
                    allow_eviction = Some(
                        parse_bool(value)
                            .ok_or_else(|| invalid("allow_eviction takes true or false"))?,
                    );
                }
                _ => kept.push(pair),
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
        let host_list: Vec<&str> = if cluster {
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
            tls,
            nodes,
            prefix,
            allow_eviction,
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

    #[cfg(not(feature = "redis-tls"))]
    #[test]
    fn a_tls_url_without_the_tls_feature_names_the_feature() {
        match Target::parse("rediss://h:6380") {
            Err(Error::Config(m)) => assert!(m.contains("redis-tls"), "{m}"),
            _ => panic!("expected a configuration error"),
        }
    }
}
