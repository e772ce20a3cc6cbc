//! An agent loop with one write tool, complete and offline: a scripted stand-in for the model
//! asks for a charge, asks again with a new `tool_use` id (a duplicate), then charges a blocked
//! customer; a fake payment provider honours the `Idempotency-Key`. Run it with
//! `cargo run -p toolonce --example agent_loop`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolonce::{Reply, Store, ToolError, Toolbox, WriteContext, WriteTool};

/// The tool's arguments: the model sees their JSON Schema and sends JSON that must fit it.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Charge {
    /// The customer to charge.
    customer: String,
    /// The amount, in cents.
    cents: u64,
}

/// The error type of your payment client.
#[derive(Debug)]
pub enum PaymentError {
    Declined(String),
    Network(std::io::Error),
}

/// Says which failures may succeed on another try. A declined card never will: the error is
/// stored and replayed to duplicates. A network error may: the operation is released, and a
/// duplicate runs it again with the same key.
impl From<PaymentError> for ToolError {
    fn from(error: PaymentError) -> Self {
        match error {
            PaymentError::Declined(why) => ToolError::permanent(format!("card declined: {why}")),
            PaymentError::Network(e) => ToolError::transient(format!("payments unreachable: {e}")),
        }
    }
}

/// A fake payment provider that charges at most once per `Idempotency-Key`, as real ones do.
#[derive(Clone, Default)]
pub struct Payments {
    receipts: Arc<Mutex<BTreeMap<String, String>>>,
}

impl Payments {
    async fn charge(&self, customer: &str, cents: u64, key: &str) -> Result<String, PaymentError> {
        match customer {
            "cus_blocked" => return Err(PaymentError::Declined("do not honor".into())),
            "cus_offline" => {
                return Err(PaymentError::Network(std::io::ErrorKind::TimedOut.into()));
            }
            _ => {}
        }
        let mut receipts = self.receipts.lock().unwrap();
        let receipt = format!("rcpt_{}: {cents} cents from {customer}", receipts.len() + 1);
        Ok(receipts.entry(key.to_owned()).or_insert(receipt).clone())
    }

    /// The idempotency keys of the charges made.
    pub fn charged_keys(&self) -> Vec<String> {
        self.receipts.lock().unwrap().keys().cloned().collect()
    }
}

pub struct ChargeCard {
    payments: Payments,
}

impl WriteTool for ChargeCard {
    type Args = Charge;
    type Output = Value;
    fn name(&self) -> &str {
        "charge_card"
    }
    fn description(&self) -> &str {
        "Charge a customer's card."
    }
    async fn call(&self, ctx: WriteContext, args: Charge) -> Result<Value, ToolError> {
        // Hand the operation key downstream: ("Idempotency-Key", "idem:…").
        let (_header, key) = ctx.idempotency_header();
        let receipt = self
            .payments
            .charge(&args.customer, args.cents, key)
            .await?;
        Ok(json!({ "receipt": receipt }))
    }
}

/// Stands in for the model: each turn is the `content` of an assistant message of the
/// Anthropic Messages API. A real loop sends `tools` and `messages` to the API here.
pub struct FakeModel {
    turns: std::vec::IntoIter<Value>,
}

impl FakeModel {
    pub fn scripted() -> Self {
        let charge = |id: &str, customer: &str| {
            json!({"type": "tool_use", "id": id, "name": "charge_card",
                   "input": {"customer": customer, "cents": 500}})
        };
        let turns = vec![
            json!([{"type": "text", "text": "Charging cus_1."}, charge("toolu_01", "cus_1")]),
            // Unsure it worked, the model asks again: a new id, the same operation.
            json!([charge("toolu_02", "cus_1")]),
            json!([charge("toolu_03", "cus_blocked")]),
            json!([{"type": "text", "text": "Done."}]),
        ];
        FakeModel {
            turns: turns.into_iter(),
        }
    }

    async fn respond(&mut self, _tools: &Value, _messages: &[Value]) -> Value {
        self.turns.next().unwrap_or_else(|| json!([]))
    }
}

/// Runs the loop until the model stops asking for tools; returns the reply to every call.
pub async fn run_agent(
    store: Arc<dyn Store>,
    payments: Payments,
    mut model: FakeModel,
) -> toolonce::Result<Vec<Reply>> {
    let toolbox = Toolbox::builder(store)
        .scope("run-0001") // the run id: the same call in another run is another operation
        .write(ChargeCard { payments })
        .build()?;
    let tools = toolbox.anthropic_tools(); // or toolbox.openai_tools()
    let mut messages = vec![json!({"role": "user", "content": "Charge cus_1 five dollars."})];
    let mut replies = Vec::new();
    loop {
        let content = model.respond(&tools, &messages).await;
        let mut results = Vec::new();
        // A `tool_use` is a serde_json::Value: one block of the assistant message's content.
        for tool_use in content.as_array().into_iter().flatten() {
            if tool_use["type"] == "tool_use" {
                let reply = toolbox.call_anthropic_with_outcome(tool_use).await; // or call_openai…
                println!("{} -> {}", tool_use["id"], reply.outcome());
                results.push(reply.json.clone()); // the tool_result block for the model
                replies.push(reply);
            }
        }
        messages.push(json!({"role": "assistant", "content": content}));
        if results.is_empty() {
            return Ok(replies);
        }
        messages.push(json!({"role": "user", "content": results}));
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // toolonce reports every call as a tracing event (target `toolonce`); print them to stderr.
    tracing_subscriber::fmt()
        .with_env_filter("toolonce=info")
        .with_writer(std::io::stderr)
        .init();
    // `memory://` lives in this process; `sqlite://toolonce.db` (feature `sqlite`) survives a
    // crash, and `redis://…` or `postgres://…` are shared by machines.
    let store = toolonce::store::open("memory://").await?;
    let payments = Payments::default();
    run_agent(store, payments.clone(), FakeModel::scripted()).await?;
    println!("charges made: {:?}", payments.charged_keys());
    Ok(())
}
