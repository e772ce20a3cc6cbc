//! The layer's behaviour (`docs/contract.md`, "The layer"), on `MemoryStore` and a store that
//! fails on demand: one test binary, a module per theme, the shared tools and log capture here.

#[path = "../blocking/mod.rs"]
mod blocking;

mod calls;
mod declared;
mod lifecycle;
mod outages;
mod unknown;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::{Value, json};
use toolonce::{
    Claim, ClaimRequest, Error, Fenced, InFlight, Layer, ListQuery, ManualClock, MemoryStore,
    OnExpired, OperationKey, Outcome, OwnerToken, ReadTool, Resolution, Resolved, State, Store,
    ToolError, Toolbox, WriteContext, WriteOptions, WriteTool, key,
};
use toolonce_testsupport::{Intercept, Intercepted};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ChargeArgs {
    payment: Payment,
    #[serde(default)]
    note: Option<String>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Payment {
    card: String,
    cents: u64,
}

/// A payment tool that counts its charges and can be told to stall, fail or panic.
#[derive(Clone, Default)]
struct Charge {
    charges: Arc<AtomicU32>,
    delay: Option<Duration>,
    fail_with: Option<ToolError>,
    panic: bool,
    keys_seen: Arc<std::sync::Mutex<Vec<String>>>,
    key_fields: Vec<String>,
}

impl WriteTool for Charge {
    type Args = ChargeArgs;
    type Output = Value;
    fn name(&self) -> &str {
        "charge_card"
    }
    fn description(&self) -> &str {
        "Charge a card."
    }
    fn key_fields(&self) -> Vec<String> {
        self.key_fields.clone()
    }
    async fn call(&self, ctx: WriteContext, args: ChargeArgs) -> Result<Value, ToolError> {
        let n = self.charges.fetch_add(1, Ordering::SeqCst) + 1;
        self.keys_seen
            .lock()
            .unwrap()
            .push(ctx.idempotency_header().1.to_owned());
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        if self.panic {
            panic!("the payment client crashed");
        }
        if let Some(e) = &self.fail_with {
            return Err(e.clone());
        }
        Ok(json!({
            "receipt": format!("rcpt_{n}"),
            "card": args.payment.card,
            "cents": args.payment.cents,
            "note": args.note,
        }))
    }
}

struct Balance;

impl ReadTool for Balance {
    type Args = Value;
    type Output = u64;
    fn name(&self) -> &str {
        "balance"
    }
    fn description(&self) -> &str {
        "Read a balance."
    }
    async fn call(&self, _args: Value) -> Result<u64, ToolError> {
        Ok(42)
    }
}

fn toolbox(store: Arc<dyn Store>, tool: Charge, options: WriteOptions) -> Toolbox {
    Toolbox::builder(store)
        .scope("run-1")
        .read(Balance)
        .write_with(tool, options)
        .build()
        .unwrap()
}

fn args(card: &str) -> Value {
    json!({"payment": {"card": card, "cents": 500}})
}

/// The log lines of this test binary that name `key`. A global subscriber (installed on first
/// use) sees every thread's events, which a thread-local one set by one test would not always
/// do, since tracing caches per call site whether anybody listens.
fn logged_about(key: &OperationKey) -> String {
    logs_text()
        .lines()
        .filter(|line| line.contains(key.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn logs_text() -> String {
    String::from_utf8_lossy(&log_buffer().lock().unwrap()).into_owned()
}

fn log_buffer() -> &'static Arc<std::sync::Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<std::sync::Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = logs.clone();
        tracing_subscriber::fmt()
            .with_writer(move || LogSink(sink.clone()))
            .with_ansi(false)
            .init();
        logs
    })
}

/// Collects log output for the tests.
struct LogSink(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
