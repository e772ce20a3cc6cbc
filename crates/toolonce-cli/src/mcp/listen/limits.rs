//! What bounds the gateway's HTTP server, so that no client can hold more than its share: how
//! long a client may take to send a request's head and its body, how large a body may be, and
//! how many connections may be open at once (within the file-descriptor limit, so the gateway
//! never runs out of descriptors and stops answering everyone; which one makes room at the cap
//! is [`crate::connections`]'s rule). The log line for a failed `accept` is said at most once a
//! second.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming as Body;
use hyper::header;
use hyper::{Request, StatusCode};

use super::request::{Answer, refuse};

/// The gateway's bounds, as flags of `toolonce mcp --listen`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct BoundsArgs {
    /// With --listen: how long a client may take to send a request's head (the request line
    /// and headers) once it has connected or its previous request was answered; then the
    /// connection is closed.
    #[arg(
        long,
        value_name = "SECONDS",
        value_parser = crate::args::read_timeout,
        default_value = "10",
        requires = "listen"
    )]
    header_timeout: Duration,
    /// With --listen: how long a client may take to send a request's body once its head came;
    /// then it gets 408.
    #[arg(
        long,
        value_name = "SECONDS",
        value_parser = crate::args::read_timeout,
        default_value = "30",
        requires = "listen"
    )]
    body_timeout: Duration,
    /// With --listen: the largest request body accepted, in bytes; a larger one gets 413
    /// (before it is read, when its Content-Length says so).
    #[arg(
        long,
        value_name = "BYTES",
        value_parser = clap::value_parser!(u64).range(1..=1 << 30),
        default_value = "4194304",
        requires = "listen"
    )]
    max_body: u64,
    /// With --listen: how many client connections may be open at once (lowered to half the
    /// file-descriptor limit if that is less). When a connection comes at the cap, the oldest
    /// one that has not sent a whole request head yet is closed to make room, else the oldest
    /// idle one (no request in progress); while every one has a request in progress, the new
    /// connection waits.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        default_value = "1024",
        requires = "listen"
    )]
    max_connections: u32,
}

/// The bounds the server applies.
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    pub(super) header_timeout: Duration,
    pub(super) body_timeout: Duration,
    pub(super) max_body: usize,
    pub(super) max_connections: usize,
}

impl BoundsArgs {
    pub(crate) fn bounds(&self) -> Bounds {
        Bounds {
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            max_body: usize::try_from(self.max_body).unwrap_or(usize::MAX),
            max_connections: self.max_connections as usize,
        }
    }
}

impl Bounds {
    /// The connection cap within the file-descriptor limit: the soft limit is first raised to
    /// the hard one (as servers commonly do), and connections get at most half of it, the rest
    /// being for the servers' pipes, the store and the upstream connections.
    pub(super) fn connection_cap(&self) -> usize {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let mut soft = limit.current;
        if let (Some(current), Some(maximum)) = (limit.current, limit.maximum)
            && current < maximum
            && setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(maximum),
                    maximum: Some(maximum),
                },
            )
            .is_ok()
        {
            soft = Some(maximum);
        }
        let within = soft.map_or(usize::MAX, |soft| {
            usize::try_from(soft / 2).unwrap_or(usize::MAX).max(1)
        });
        if within < self.max_connections {
            tracing::warn!(
                target: "toolonce::mcp",
                max_connections = within,
                "--max-connections lowered to half the file-descriptor limit (raise it with \
                 ulimit -n)"
            );
        }
        self.max_connections.min(within)
    }
}

/// A request's body within `--max-body` and `--body-timeout`; else the refusal to answer with
/// (413 before anything is read when the `Content-Length` is too large, 408 when the body is
/// not whole in time).
pub(super) async fn read_body(request: Request<Body>, bounds: &Bounds) -> Result<Bytes, Answer> {
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the body is larger than {} bytes, the limit (--max-body)",
                bounds.max_body
            ),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > bounds.max_body as u64) {
        return Err(too_large());
    }
    let collect = Limited::new(request.into_body(), bounds.max_body).collect();
    match tokio::time::timeout(bounds.body_timeout, collect).await {
        Ok(Ok(body)) => Ok(body.to_bytes()),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(_)) => Err(refuse(
            StatusCode::BAD_REQUEST,
            "the body was not received whole",
        )),
        Err(_) => Err(refuse(
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "the body did not arrive within {:?} (--body-timeout)",
                bounds.body_timeout
            ),
        )),
    }
}

/// Says a failed `accept` at most once a second, with how many were not said.
#[derive(Default)]
pub(super) struct AcceptErrors {
    last: Option<Instant>,
    unsaid: u64,
}

impl AcceptErrors {
    pub(super) fn failed(&mut self, error: &std::io::Error) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < Duration::from_secs(1))
        {
            self.unsaid += 1;
            return;
        }
        tracing::warn!(
            target: "toolonce::mcp",
            %error,
            not_said = self.unsaid,
            "cannot accept a connection (said at most once a second)"
        );
        self.last = Some(now);
        self.unsaid = 0;
    }
}
