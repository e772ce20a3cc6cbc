//! A store that opens itself when first needed and retries after a failure, so the proxy starts
//! (and serves reads) while its store is down, answers writes with "not executed" meanwhile,
//! and deduplicates again as soon as the store comes back. A store that can never work (a
//! malformed URL, a missing directory, a wrong password) stops the proxy at start instead.
//!
//! The proxy's shorter failure retention reaches the layer through the calls' options
//! (`WriteOptions::failure_retention`), not through the store.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::OnceCell;
use toolonce::key::OperationKey;
use toolonce::{
    Census, Claim, ClaimRequest, Entry, Error, Fenced, ListQuery, OwnerToken, Page, Removed,
    Resolution, Resolved, Seen, SeenSettled, Store, ToolError,
};

/// How long after a failed open the next call fails at once instead of trying again, so a
/// burst of write calls during an outage does not become a burst of connection attempts.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A [`Store`] opened from a URL when first needed.
pub(crate) struct LazyStore {
    url: String,
    store: OnceCell<Arc<dyn Store>>,
    last_failure: Mutex<Option<(Instant, String)>>,
}

impl LazyStore {
    /// Tries to open the store now. A store that is unreachable ([`Error::Unavailable`]:
    /// connection refused, timeout) is not fatal: the proxy still starts, reads work, and every
    /// write call is answered as not executed (with the reason) and tries to open the store
    /// again, since a server can come back. Any other error (a malformed URL, a missing
    /// directory, a wrong password, a schema it cannot use) will not go away by itself and is
    /// returned, so the proxy refuses to start rather than answer "try again later" forever.
    pub(crate) async fn open(url: &str) -> Result<LazyStore, Error> {
        let lazy = LazyStore {
            url: url.to_owned(),
            store: OnceCell::new(),
            last_failure: Mutex::new(None),
        };
        match toolonce::store::open(url).await {
            Ok(store) => {
                lazy.store.set(store).expect("a new cell is empty");
            }
            Err(e) if !e.is_retryable() => return Err(e),
            Err(e) => {
                let text = cause(&e);
                tracing::error!(
                    target: "toolonce::mcp",
                    store = %toolonce::store::redact_url(url),
                    error = %text,
                    "cannot open the store; write calls are answered as not executed until it opens"
                );
                *lazy.failure() = Some((Instant::now(), text));
            }
        }
        Ok(lazy)
    }

    fn failure(&self) -> std::sync::MutexGuard<'_, Option<(Instant, String)>> {
        self.last_failure.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn inner(&self) -> Result<&Arc<dyn Store>, Error> {
        if let Some(store) = self.store.get() {
            return Ok(store);
        }
        if let Some((at, text)) = &*self.failure()
            && at.elapsed() < RETRY_AFTER
        {
            return Err(Error::unavailable(text.clone()));
        }
        self.store
            .get_or_try_init(|| async {
                match toolonce::store::open(&self.url).await {
                    Ok(store) => {
                        tracing::info!(target: "toolonce::mcp", store = %toolonce::store::redact_url(&self.url), "store opened");
                        Ok(store)
                    }
                    Err(e) => {
                        let text = cause(&e);
                        *self.failure() = Some((Instant::now(), text.clone()));
                        Err(Error::unavailable(text))
                    }
                }
            })
            .await
    }
}

/// What made the open fail, without the "store unavailable" its error starts with: the error
/// made from it says that once (an answer that quoted the whole report said it twice).
fn cause(e: &Error) -> String {
    let report = e.report().to_string();
    match report.strip_prefix(&format!("{e}: ")) {
        Some(cause) if e.is_retryable() => cause.to_owned(),
        _ => report,
    }
}

impl std::fmt::Debug for LazyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyStore")
            .field("url", &toolonce::store::redact_url(&self.url))
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for LazyStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> toolonce::Result<Claim> {
        self.inner().await?.claim(req).await
    }

    async fn renew(
        &self,
        key: &OperationKey,
        owner: &OwnerToken,
        lease: Duration,
    ) -> toolonce::Result<bool> {
        self.inner().await?.renew(key, owner, lease).await
    }

    async fn complete(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> toolonce::Result<Fenced> {
        self.inner()
            .await?
            .complete(key, owner, result, retention)
            .await
    }

    async fn fail(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> toolonce::Result<Fenced> {
        // Never opened: no claim of this process reached a store, so none holds `owner`.
        // Answered at once, so the layer's release of a claim that failed to reach the store
        // does not retry for seconds an entry that cannot exist.
        let Some(store) = self.store.get() else {
            return Ok(Fenced::NotOwner);
        };
        store.fail(key, owner, error, sticky).await
    }

    async fn get(&self, key: &OperationKey) -> toolonce::Result<Option<Entry>> {
        self.inner().await?.get(key).await
    }

    async fn list(&self, query: &ListQuery) -> toolonce::Result<Page> {
        self.inner().await?.list(query).await
    }

    async fn resolve(
        &self,
        key: &OperationKey,
        seen: &Seen,
        resolution: &Resolution,
        retention: Duration,
    ) -> toolonce::Result<Resolved> {
        self.inner()
            .await?
            .resolve(key, seen, resolution, retention)
            .await
    }

    async fn remove(&self, key: &OperationKey, seen: &SeenSettled) -> toolonce::Result<Removed> {
        self.inner().await?.remove(key, seen).await
    }

    async fn delete(&self, key: &OperationKey) -> toolonce::Result<bool> {
        self.inner().await?.delete(key).await
    }

    async fn purge_expired(&self) -> toolonce::Result<u64> {
        self.inner().await?.purge_expired().await
    }

    async fn census(&self) -> toolonce::Result<Option<Census>> {
        self.inner().await?.census().await
    }
}
