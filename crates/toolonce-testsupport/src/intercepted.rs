//! A store that forwards every call to a real one, except the calls a test intercepts: one
//! forwarding `impl Store` for all the tests that count, hold, fail or watch some calls, each of
//! which implements [`Intercept`] for just those calls.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use toolonce::key::OperationKey;
use toolonce::{
    Claim, ClaimRequest, Entry, Fenced, ListQuery, OwnerToken, Page, Removed, Resolution, Resolved,
    Result, Seen, SeenSettled, Store, ToolError,
};

/// What a test does with the calls to a store. Each method gets the inner store and the call's
/// arguments, and by default forwards the call unchanged: an interceptor implements only the
/// calls it watches, and decides for each whether, when and how it reaches `inner`.
#[async_trait]
pub trait Intercept: Send + Sync + fmt::Debug + 'static {
    /// Decides, before every call, whether it reaches the store at all: an error here is the
    /// call's answer (a store that is down, or switched off by the test). By default every
    /// call is let through.
    fn admit(&self) -> Result<()> {
        Ok(())
    }
    async fn claim(&self, inner: &dyn Store, req: &ClaimRequest<'_>) -> Result<Claim> {
        inner.claim(req).await
    }
    async fn renew(
        &self,
        inner: &dyn Store,
        key: &OperationKey,
        owner: &OwnerToken,
        lease: Duration,
    ) -> Result<bool> {
        inner.renew(key, owner, lease).await
    }
    async fn complete(
        &self,
        inner: &dyn Store,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> Result<Fenced> {
        inner.complete(key, owner, result, retention).await
    }
    async fn fail(
        &self,
        inner: &dyn Store,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> Result<Fenced> {
        inner.fail(key, owner, error, sticky).await
    }
    async fn get(&self, inner: &dyn Store, key: &OperationKey) -> Result<Option<Entry>> {
        inner.get(key).await
    }
    async fn list(&self, inner: &dyn Store, query: &ListQuery) -> Result<Page> {
        inner.list(query).await
    }
    async fn resolve(
        &self,
        inner: &dyn Store,
        key: &OperationKey,
        seen: &Seen,
        resolution: &Resolution,
        retention: Duration,
    ) -> Result<Resolved> {
        inner.resolve(key, seen, resolution, retention).await
    }
    async fn remove(
        &self,
        inner: &dyn Store,
        key: &OperationKey,
        seen: &SeenSettled,
    ) -> Result<Removed> {
        inner.remove(key, seen).await
    }
    async fn delete(&self, inner: &dyn Store, key: &OperationKey) -> Result<bool> {
        inner.delete(key).await
    }
    async fn purge_expired(&self, inner: &dyn Store) -> Result<u64> {
        inner.purge_expired().await
    }
}

/// `inner` behind the interceptor `I`, itself a [`Store`]. It dereferences to the interceptor,
/// so a test reads what its interceptor recorded straight through the store it handed out.
#[derive(Debug)]
pub struct Intercepted<I> {
    inner: Arc<dyn Store>,
    intercept: I,
}

impl<I: Intercept> Intercepted<I> {
    pub fn new(inner: Arc<dyn Store>, intercept: I) -> Self {
        Intercepted { inner, intercept }
    }

    /// The store the calls reach.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }
}

impl<I> Deref for Intercepted<I> {
    type Target = I;

    fn deref(&self) -> &I {
        &self.intercept
    }
}

#[async_trait]
impl<I: Intercept> Store for Intercepted<I> {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim> {
        self.intercept.admit()?;
        self.intercept.claim(&*self.inner, req).await
    }
    async fn renew(&self, key: &OperationKey, owner: &OwnerToken, lease: Duration) -> Result<bool> {
        self.intercept.admit()?;
        self.intercept.renew(&*self.inner, key, owner, lease).await
    }
    async fn complete(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> Result<Fenced> {
        self.intercept.admit()?;
        let inner = &*self.inner;
        self.intercept
            .complete(inner, key, owner, result, retention)
            .await
    }
    async fn fail(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> Result<Fenced> {
        self.intercept.admit()?;
        self.intercept
            .fail(&*self.inner, key, owner, error, sticky)
            .await
    }
    async fn get(&self, key: &OperationKey) -> Result<Option<Entry>> {
        self.intercept.admit()?;
        self.intercept.get(&*self.inner, key).await
    }
    async fn list(&self, query: &ListQuery) -> Result<Page> {
        self.intercept.admit()?;
        self.intercept.list(&*self.inner, query).await
    }
    async fn resolve(
        &self,
        key: &OperationKey,
        seen: &Seen,
        resolution: &Resolution,
        retention: Duration,
    ) -> Result<Resolved> {
        self.intercept.admit()?;
        self.intercept
            .resolve(&*self.inner, key, seen, resolution, retention)
            .await
    }
    async fn remove(&self, key: &OperationKey, seen: &SeenSettled) -> Result<Removed> {
        self.intercept.admit()?;
        self.intercept.remove(&*self.inner, key, seen).await
    }
    async fn delete(&self, key: &OperationKey) -> Result<bool> {
        self.intercept.admit()?;
        self.intercept.delete(&*self.inner, key).await
    }
    async fn purge_expired(&self) -> Result<u64> {
        self.intercept.admit()?;
        self.intercept.purge_expired(&*self.inner).await
    }

    async fn census(&self) -> Result<Option<toolonce::Census>> {
        self.intercept.admit()?;
        self.inner.census().await
    }
}
