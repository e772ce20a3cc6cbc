//! The connection behind a `redis+sentinel://` URL: a multiplexed connection to the master the
//! Sentinels name, which follows the master across a failover. The driver's Sentinel client
//! finds the master (and checks with `ROLE` that it is one) but does not reconnect by itself:
//! here a request that fails because the connection broke, timed out or reached a server that
//! is now a replica (`READONLY`) drops the connection, and the next request asks the Sentinels
//! again. The failed request itself is never re-sent: whether it was applied is for the store's
//! caller to decide, as on any lost reply.

use std::sync::{Arc, Mutex as SyncMutex};

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::sentinel::SentinelClient;
use ::redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisFuture, Value};
use tokio::sync::Mutex;

use super::error::is_unavailable;

/// A connection to the current master of a Sentinel-watched group. Cloning shares it.
#[derive(Clone)]
pub struct SentinelConn {
    inner: Arc<Inner>,
}

struct Inner {
    /// The Sentinels, asked one connection at a time.
    client: Mutex<SentinelClient>,
    config: AsyncConnectionConfig,
    /// The connection to the master as last found, with a number that tells a stale one from
    /// its replacement (so that one failed request drops only the connection it failed on).
    current: SyncMutex<Option<(u64, MultiplexedConnection)>>,
}

impl SentinelConn {
    /// Finds the master and connects to it.
    pub(super) async fn connect(
        client: SentinelClient,
        config: AsyncConnectionConfig,
    ) -> Result<SentinelConn, RedisError> {
        let conn = SentinelConn {
            inner: Arc::new(Inner {
                client: Mutex::new(client),
                config,
                current: SyncMutex::new(None),
            }),
        };
        conn.connection().await?;
        Ok(conn)
    }

    /// The connection to the master, asking the Sentinels for it first when there is none.
    async fn connection(&self) -> Result<(u64, MultiplexedConnection), RedisError> {
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let mut client = self.inner.client.lock().await;
        // Another request may have reconnected while this one waited for the Sentinels.
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let conn = client
            .async_get_client()
            .await?
            .get_multiplexed_async_connection_with_config(&self.inner.config)
            .await?;
        let mut current = self.lock();
        let generation = current.as_ref().map_or(0, |(g, _)| g + 1);
        *current = Some((generation, conn.clone()));
        Ok((generation, conn))
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(u64, MultiplexedConnection)>> {
        self.inner.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After a failed request: forget the connection it used if the failure means the master
    /// may have moved, so that the next request asks the Sentinels.
    fn after(&self, generation: u64, e: &RedisError) {
        if is_unavailable(e) {
            let mut current = self.lock();
            if current.as_ref().is_some_and(|(g, _)| *g == generation) {
                // Keep the number, drop the connection: the next one counts on from it.
                *current = None;
                drop(current);
                tracing::debug!(
                    target: "toolonce",
                    error = %e,
                    "the connection to the Redis master failed; the next request asks the \
                     Sentinels where the master is"
                );
            }
        }
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut conn) = self.connection().await?;
            let reply = conn.req_packed_command(cmd).await;
            if let Err(e) = &reply {
                self.after(generation, e);
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut conn) = self.connection().await?;
            let reply = conn.req_packed_commands(pipeline, offset, count).await;
            match &reply {
                Err(e) => self.after(generation, e),
                // A pipeline's server errors come back as values: a `READONLY` among them
                // means the server is no longer the master.
                Ok(values) => {
                    for value in values {
                        if let Value::ServerError(err) = value {
                            let e = RedisError::from(err.clone());
                            self.after(generation, &e);
                        }
                    }
                }
            }
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.current().map_or(0, |(_, c)| c.get_db())
    }
}
