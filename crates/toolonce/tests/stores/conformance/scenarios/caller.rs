//! One caller of a scenario: its own [`Layer`], on the shared store behind a switchboard of
//! faults (a claim applied whose reply is lost, renewals that never arrive), and its call in
//! the background while the tool blocks. Dropping the call's task is how a caller vanishes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use toolonce::{Claim, ClaimRequest, Error, Layer, OperationKey, OwnerToken, Store, WriteAnswer};
use toolonce_testsupport::{Intercept, Intercepted};

/// The faults a scenario's `fault` step switches on for one caller.
#[derive(Debug, Default)]
pub struct Faults {
    pub lose_next_claim_reply: AtomicBool,
    pub lose_renewals: AtomicBool,
}

fn lost(what: &str) -> Error {
    Error::unavailable(format!("injected by the scenario: {what}"))
}

#[async_trait]
impl Intercept for Faults {
    async fn claim(&self, inner: &dyn Store, req: &ClaimRequest<'_>) -> toolonce::Result<Claim> {
        let answer = inner.claim(req).await?;
        if self.lose_next_claim_reply.swap(false, Ordering::SeqCst) {
            return Err(lost("the reply to the claim was lost"));
        }
        Ok(answer)
    }

    async fn renew(
        &self,
        inner: &dyn Store,
        key: &OperationKey,
        owner: &OwnerToken,
        lease: Duration,
    ) -> toolonce::Result<bool> {
        if self.lose_renewals.load(Ordering::SeqCst) {
            return Err(lost("the renewal never arrived"));
        }
        inner.renew(key, owner, lease).await
    }
}

/// A caller: its layer, its faults, and its call running in the background, if any.
pub struct Caller {
    pub layer: Layer,
    pub faults: Arc<Intercepted<Faults>>,
    pub running: Option<tokio::task::JoinHandle<WriteAnswer>>,
    /// Lets the blocked tool go on.
    pub release: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Caller {
    pub fn new(store: Arc<dyn Store>) -> Caller {
        let faults = Arc::new(Intercepted::new(store, Faults::default()));
        Caller {
            layer: Layer::new(faults.clone()),
            faults,
            running: None,
            release: None,
        }
    }
}
