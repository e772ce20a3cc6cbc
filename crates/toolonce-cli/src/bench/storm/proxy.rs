//! The storm's way to stop a store it did not start: a TCP proxy on a loopback port in front of
//! the store's one server, which the store under test connects through. Stopping it drops every
//! connection it carries and refuses new ones (accepted and closed at once), as a server that
//! died would; resuming lets connections through again, for the clean-up.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

pub(crate) struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: AbortHandle,
}

#[derive(Default)]
struct Shared {
    stopped: AtomicBool,
    /// The tasks carrying the open connections.
    links: Mutex<Vec<AbortHandle>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `target`.
    pub(crate) async fn start(target: String) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the storm's proxy")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let state = Arc::clone(&shared);
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if state.stopped.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let target = target.clone();
                let link = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&target).await {
                        let _ = server.set_nodelay(true);
                        let _ = client.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                let mut links = state.links.lock().unwrap_or_else(|e| e.into_inner());
                links.retain(|l| !l.is_finished());
                links.push(link.abort_handle());
            }
        })
        .abort_handle();
        Ok(Proxy {
            addr,
            shared,
            accept,
        })
    }

    /// The `host:port` to connect to instead of the server's.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drops every connection and refuses new ones until [`resume`](Self::resume).
    pub(crate) fn stop(&self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        let links =
            std::mem::take(&mut *self.shared.links.lock().unwrap_or_else(|e| e.into_inner()));
        for link in links {
            link.abort();
        }
    }

    pub(crate) fn resume(&self) {
        self.shared.stopped.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.stop();
    }
}

/// The URL of the store through a proxy, and the `host:port` the proxy forwards to, when the
/// bench can stop the store that way: one plain TCP server (`redis://` or `postgres://`
/// without TLS), whose host and port are in the URL. `None` otherwise (memory, SQLite, a
/// cluster, TLS, a socket path), with the reason.
pub(crate) fn stoppable(url: &str) -> Result<(String, impl FnOnce(SocketAddr) -> String), String> {
    let (scheme, rest) = url.split_once("://").ok_or("no scheme")?;
    let default_port = match scheme {
        "redis" => 6379,
        "postgres" | "postgresql" => 5432,
        _ => {
            return Err(format!(
                "the bench stops a store through a TCP proxy in front of its one server: \
                 {scheme}:// has none it can stand in front of (plain redis:// and postgres:// \
                 only)"
            ));
        }
    };
    if url.contains("sslmode=require") || url.contains("sslmode=verify") || url.contains("host=") {
        return Err("the URL asks for TLS or names its host in the query".into());
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if hostport.is_empty() || hostport.contains(',') {
        return Err("the URL names no single host".into());
    }
    let target = if hostport.starts_with('[') || hostport.rsplit_once(':').is_some() {
        hostport.to_owned()
    } else {
        format!("{hostport}:{default_port}")
    };
    let scheme = scheme.to_owned();
    let userinfo = userinfo.map(str::to_owned);
    let tail = tail.to_owned();
    Ok((target, move |proxy: SocketAddr| {
        let user = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        format!("{scheme}://{user}{proxy}{tail}")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(url: &str) -> Result<(String, String), String> {
        let (target, rewrite) = stoppable(url)?;
        Ok((target, rewrite("127.0.0.1:9".parse().unwrap())))
    }

    #[test]
    fn a_single_plain_server_is_reached_through_the_proxy_with_the_rest_of_its_url() {
        assert_eq!(
            through("redis://:pw@localhost:6390/2?prefix=a:").unwrap(),
            (
                "localhost:6390".into(),
                "redis://:pw@127.0.0.1:9/2?prefix=a:".into()
            )
        );
        assert_eq!(
            through("postgres://u:p@db/toolonce").unwrap(),
            (
                "db:5432".into(),
                "postgres://u:p@127.0.0.1:9/toolonce".into()
            )
        );
    }

    #[test]
    fn stores_without_one_plain_server_cannot_be_stopped() {
        for url in [
            "memory://",
            "sqlite:///tmp/x.db",
            "rediss://h:1",
            "redis+cluster://a:1,b:2",
            "postgres://u@h/db?sslmode=require",
            "postgres:///db?host=/run/postgresql",
        ] {
            assert!(through(url).is_err(), "{url}");
        }
    }
}
