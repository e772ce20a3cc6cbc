//! The fake downstream services: a payment provider that charges by appending to a ledger file
//! and honours an `Idempotency-Key`, and a mail server that sends by appending to an outbox
//! file and, like SMTP, knows no key. Files, so that a child process killed after the effect
//! and the run that resumes it count the same effects.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long the provider takes to answer: long enough for parallel calls to overlap.
const PROVIDER_LATENCY: Duration = Duration::from_millis(20);

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub(super) struct Payment {
    pub(super) card: String,
    pub(super) cents: u64,
}

/// The arguments of `charge_card`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub(super) struct ChargeArgs {
    pub(super) payment: Payment,
}

/// One line of the ledger: a charge the provider made.
#[derive(Serialize, Deserialize)]
pub(super) struct Charge {
    id: String,
    card: String,
    cents: u64,
    idempotency_key: Option<String>,
}

/// A payment provider that charges by appending to a ledger file, and answers a request whose
/// `Idempotency-Key` it has already seen with the original charge instead of a new one.
pub(super) struct Provider {
    pub(super) ledger: PathBuf,
    /// Makes "look up the key, then append" one step for the calls of this process. A std
    /// Mutex is enough: nothing awaits while it is held. Processes never share a ledger at the
    /// same time (the crashed child is dead before the resumed run starts).
    lock: Mutex<()>,
    /// Requests answered from an `Idempotency-Key` instead of charging.
    pub(super) answered_from_key: AtomicU32,
}

impl Provider {
    pub(super) fn new(ledger: PathBuf) -> Arc<Self> {
        Arc::new(Provider {
            ledger,
            lock: Mutex::new(()),
            answered_from_key: AtomicU32::new(0),
        })
    }

    /// Charges the card, or returns the original charge of an `Idempotency-Key` seen before.
    pub(super) async fn charge(
        &self,
        payment: &Payment,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<String> {
        tokio::time::sleep(PROVIDER_LATENCY).await;
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let charges = self.charges()?;
        if let Some(key) = idempotency_key
            && let Some(original) = charges
                .iter()
                .find(|c| c.idempotency_key.as_deref() == Some(key))
        {
            self.answered_from_key.fetch_add(1, Ordering::SeqCst);
            return Ok(original.id.clone());
        }
        let charge = Charge {
            id: format!("ch_{}", charges.len() + 1),
            card: payment.card.clone(),
            cents: payment.cents,
            idempotency_key: idempotency_key.map(str::to_owned),
        };
        // One write of one line to a file opened for appending: once it returns, the charge is
        // in the file even if the process is killed the next instant.
        let line = format!("{}\n", serde_json::to_string(&charge)?);
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.ledger)?
            .write_all(line.as_bytes())?;
        Ok(charge.id)
    }

    pub(super) fn charges(&self) -> anyhow::Result<Vec<Charge>> {
        let text = match std::fs::read_to_string(&self.ledger) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e.into()),
        };
        text.lines()
            .map(|line| Ok(serde_json::from_str(line)?))
            .collect()
    }
}

/// The arguments of `send_email`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub(super) struct EmailArgs {
    pub(super) to: String,
    subject: String,
}

/// A mail server that sends by appending to an outbox file. Like SMTP it knows no idempotency
/// key: every request it gets is one more email.
pub(super) struct Mailer {
    pub(super) outbox: PathBuf,
}

impl Mailer {
    pub(super) fn new(outbox: PathBuf) -> Arc<Self> {
        Arc::new(Mailer { outbox })
    }

    pub(super) async fn send(&self, email: &EmailArgs) -> anyhow::Result<usize> {
        tokio::time::sleep(PROVIDER_LATENCY).await;
        let line = format!("{}\n", serde_json::to_string(email)?);
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.outbox)?
            .write_all(line.as_bytes())?;
        self.sent()
    }

    pub(super) fn sent(&self) -> anyhow::Result<usize> {
        match std::fs::read_to_string(&self.outbox) {
            Ok(text) => Ok(text.lines().count()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e.into()),
        }
    }
}
