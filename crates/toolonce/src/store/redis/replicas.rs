//! Replicated writes (`replicas=N`): every write of the store (a claim, a result, a failure, a
//! takeover, an operator's resolve) is followed by `WAIT N M`, which answers how many replicas
//! acknowledged everything the connection wrote before it, after at most `M` ms.
//!
//! # Why a pipeline, on connections of their own
//!
//! `WAIT` counts the writes of *its connection*. The store's connection is multiplexed (every
//! task's requests share it) and reconnects by itself, so a `WAIT` sent after the write's reply
//! could go out on a fresh connection that wrote nothing, and answer at once that every
//! replica is up to date: a false acknowledgement. So the write and its `WAIT` go together as
//! one pipeline, one buffer on one connection: both reach the server on the same connection,
//! in that order, or neither reply comes back. (Another task's write between them on the same
//! connection only makes the `WAIT` cover more.) On a cluster the pipeline goes to the node of
//! the write's key, `WAIT` with it; sent alone, the driver would broadcast it to every master.
//!
//! Redis blocks a connection for as long as its `WAIT` waits, and every request behind it on
//! that connection waits too. The replicated writes therefore go over a small pool of
//! connections of their own, and everything that must never queue behind a `WAIT` (renewing a
//! lease, reads, listings) keeps to the store's main connection.
//!
//! # What the answer means
//!
//! Fewer acknowledgements than asked, in time: after a claim the tool has not run, so the claim
//! fails as [`Error::Unavailable`] (the layer releases it and answers `store_unavailable`:
//! fail closed); after a result or a failure the tool did run, so the write counts as applied
//! (its caller gets its result; a rerun would be the very double effect this guards against)
//! and a warning says the entry may not survive a failover.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ::redis::{Cmd, ErrorKind, Pipeline, RedisError, Script, ServerErrorKind, Value};

use super::error::to_error;
use super::link::Conn;
use crate::key::OperationKey;
use crate::store::contract::Unreplicated;
use crate::{Error, Result};

/// How many connections carry the replicated writes: each is blocked while its `WAIT` waits,
/// so this many writes wait for their replicas at once.
pub(super) const WRITE_CONNECTIONS: usize = 8;

/// What `replicas=N` asks, and the connections its writes go over.
pub(super) struct Replication {
    pub(super) replicas: u32,
    pub(super) timeout: Duration,
    pub(super) conns: Vec<Conn>,
    next: AtomicUsize,
}

impl Replication {
    pub(super) fn new(replicas: u32, timeout: Duration, conns: Vec<Conn>) -> Replication {
        Replication {
            replicas,
            timeout,
            conns,
            next: AtomicUsize::new(0),
        }
    }

    fn conn(&self) -> Conn {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        self.conns[i].clone()
    }

    fn timeout_ms(&self) -> u64 {
        u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

/// How many replicas acknowledged a write, when replication was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Acks {
    /// No replication asked (`replicas=0`), or as many as asked acknowledged.
    Enough,
    /// Fewer than asked acknowledged within the timeout.
    Short(Unreplicated),
}

impl fmt::Display for Acks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Acks::Enough => f.write_str("acknowledged by the replicas asked"),
            Acks::Short(short) => short.fmt(f),
        }
    }
}

/// The `EVALSHA` of `script` on one key: `args` more arguments of about `bytes` bytes in all
/// follow with `.arg`. Sized up front: a command's buffer otherwise grows, copying what it
/// holds, as each argument goes in (a complete's five arguments, two of them whole entries,
/// cost ten allocations and 3 KB of copies that way).
pub(super) fn evalsha(script: &Script, key: &str, args: usize, bytes: usize) -> Cmd {
    // Each argument's RESP header (`$<len>\r\n`) and trailer take at most 16 bytes.
    let mut cmd = Cmd::with_capacity(4 + args, 96 + key.len() + bytes + 16 * args);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(1).arg(key);
    cmd
}

fn is_noscript(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// Sends a write alone on `conn` (no replicas asked). A script the server does not have
/// (`NOSCRIPT`: it restarted, or is a promoted replica) is loaded and the write sent again:
/// `NOSCRIPT` means it did not run.
pub(super) async fn write_alone(
    mut conn: Conn,
    cmd: &Cmd,
    script: Option<&Script>,
) -> Result<Value> {
    match cmd.query_async::<Value>(&mut conn).await {
        Err(e)
            if is_noscript(&e)
                && let Some(script) = script =>
        {
            script.load_async(&mut conn).await.map_err(to_error)?;
            cmd.query_async::<Value>(&mut conn).await.map_err(to_error)
        }
        reply => reply.map_err(to_error),
    }
}

impl Replication {
    /// Sends a write with `WAIT` right behind it in the same pipeline on a write connection.
    /// Returns the write's reply and how many replicas acknowledged it. `NOSCRIPT` is handled
    /// as by [`write_alone`].
    pub(super) async fn write(&self, cmd: &Cmd, script: Option<&Script>) -> Result<(Value, Acks)> {
        let replication = self;
        let mut conn = replication.conn();
        let mut pipe = Pipeline::with_capacity(2);
        pipe.add_command(cmd.clone())
            .cmd("WAIT")
            .arg(replication.replicas)
            .arg(replication.timeout_ms());
        // Server errors come back as values, so a refused write still shows its WAIT's reply.
        pipe.ignore_errors();
        let mut loaded = false;
        loop {
            let replies: Vec<Value> = pipe.query_async(&mut conn).await.map_err(to_error)?;
            let mut replies = replies.into_iter();
            let (Some(reply), Some(acked), None) = (replies.next(), replies.next(), replies.next())
            else {
                return Err(Error::store("unexpected reply to a write followed by WAIT"));
            };
            let reply = match reply {
                Value::ServerError(e) => {
                    let e = RedisError::from(e);
                    if is_noscript(&e)
                        && !loaded
                        && let Some(script) = script
                    {
                        script.load_async(&mut conn).await.map_err(to_error)?;
                        loaded = true;
                        continue;
                    }
                    return Err(to_error(e));
                }
                reply => reply,
            };
            let acked = match acked {
                Value::Int(n) => n,
                Value::ServerError(e) => return Err(to_error(RedisError::from(e))),
                _ => return Err(Error::store("unexpected reply to WAIT")),
            };
            let acks = if acked >= i64::from(replication.replicas) {
                Acks::Enough
            } else {
                Acks::Short(Unreplicated::new(
                    u32::try_from(acked.max(0)).unwrap_or(u32::MAX),
                    replication.replicas,
                    Duration::from_millis(replication.timeout_ms()),
                ))
            };
            return Ok((reply, acks));
        }
    }
}

/// The error of a claim that too few replicas acknowledged: retryable, so the layer releases
/// the claim (the tool never started) and answers `store_unavailable`.
pub(super) fn short_claim(key: &OperationKey, acks: Acks) -> Error {
    Error::unavailable(format!(
        "the claim of {key} was not run: {acks}, so it might not survive a failover of the \
         primary"
    ))
}

/// Says that a settle the tool's caller relies on may not survive a failover: the result
/// stands (the tool ran; running it again would be the double effect), the entry stays as
/// written on the primary. The caller hears it too, in its answer's notice (see
/// [`Fenced::AppliedUnreplicated`](crate::store::Fenced::AppliedUnreplicated)).
pub(super) fn warn_short_settle(key: &OperationKey, what: &str, acks: Acks) {
    if acks != Acks::Enough {
        tracing::warn!(
            target: "toolonce",
            key = %key,
            replication = %acks,
            "the {what} is recorded on the Redis primary, but {acks}: if the primary fails \
             before a replica has it, the entry may be lost and a duplicate call run the tool \
             again; the caller got its result, with a notice that says so"
        );
    }
}
