//! The tools the agent calls, without toolonce (straight to the provider and the mail server,
//! no key) and with it (`charge_card`, which hands the operation key downstream, and
//! `send_email`, which cannot); in the crashing child they stop right after the effect.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use toolonce::{
    OperationKey, Outcome, Store, ToolError, Toolbox, WriteContext, WriteOptions, WriteTool,
};

use super::model::ToolCall;
use super::provider::{ChargeArgs, EmailArgs, Mailer, Provider};

/// What the crashing child prints once the effect (a charge, an email) happened, so the parent
/// kills it then.
pub(super) const DONE_IT: &str = "done it";

/// Calls the provider and the mail server; in the crashing child, stops right after the
/// effect.
#[derive(Clone)]
pub(super) struct Charger {
    pub(super) provider: Arc<Provider>,
    pub(super) mailer: Arc<Mailer>,
    pub(super) crash_after_effect: bool,
}

impl Charger {
    async fn charge(
        &self,
        args: &ChargeArgs,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<String> {
        let receipt = self.provider.charge(&args.payment, idempotency_key).await?;
        if self.crash_after_effect {
            match crash_here().await {}
        }
        Ok(receipt)
    }

    async fn send(&self, email: &EmailArgs) -> anyhow::Result<usize> {
        let number = self.mailer.send(email).await?;
        if self.crash_after_effect {
            match crash_here().await {}
        }
        Ok(number)
    }
}

/// Where the crashing child stops: it tells the parent that the effect happened, then waits to
/// be killed before it can record anything (toolonce's result, the agent's checkpoint).
async fn crash_here() -> std::convert::Infallible {
    {
        let mut stdout = std::io::stdout().lock();
        // If the parent is gone there is nobody to kill us; waiting forever is still right.
        let _ = writeln!(stdout, "{DONE_IT}").and_then(|()| stdout.flush());
    }
    std::future::pending().await
}

/// `charge_card` as a toolonce write tool: it hands the operation key to the provider.
struct ChargeCard {
    charger: Charger,
    /// Set when the layer says an earlier run of the operation may have started (a reclaim).
    reclaimed: Arc<AtomicBool>,
}

impl WriteTool for ChargeCard {
    type Args = ChargeArgs;
    type Output = Value;

    fn name(&self) -> &str {
        "charge_card"
    }

    fn description(&self) -> &str {
        "Charge a card."
    }

    /// The provider deduplicates by the Idempotency-Key it is handed: running the operation
    /// again after an unknown outcome is safe (policy `rerun`).
    fn honours_key(&self) -> bool {
        true
    }

    async fn call(&self, ctx: WriteContext, args: ChargeArgs) -> Result<Value, ToolError> {
        if ctx.may_have_run_before() {
            self.reclaimed.store(true, Ordering::SeqCst);
        }
        let (_header, key) = ctx.idempotency_header();
        let receipt = self
            .charger
            .charge(&args, Some(key))
            .await
            .map_err(|e| ToolError::transient(format!("the payment provider failed: {e:#}")))?;
        Ok(json!({"receipt": receipt, "card": args.payment.card, "cents": args.payment.cents}))
    }
}

/// `send_email` as a toolonce write tool. Its mail server takes no key, so it declares nothing:
/// an unknown outcome is held (policy `hold`, the default).
struct SendEmail {
    charger: Charger,
}

impl WriteTool for SendEmail {
    type Args = EmailArgs;
    type Output = Value;

    fn name(&self) -> &str {
        "send_email"
    }

    fn description(&self) -> &str {
        "Send an email."
    }

    async fn call(&self, _ctx: WriteContext, args: EmailArgs) -> Result<Value, ToolError> {
        let number = self
            .charger
            .send(&args)
            .await
            .map_err(|e| ToolError::transient(format!("the mail server failed: {e:#}")))?;
        Ok(json!({"sent": number, "to": args.to}))
    }
}

/// How the agent loop runs its tool calls: straight to the provider, or through toolonce.
pub(super) enum Tools {
    Direct(Charger),
    Toolonce(Toolbox),
}

impl Tools {
    pub(super) fn toolonce(
        store: Arc<dyn Store>,
        scope: &str,
        charger: Charger,
        options: WriteOptions,
        reclaimed: Arc<AtomicBool>,
    ) -> anyhow::Result<Tools> {
        let email = SendEmail {
            charger: charger.clone(),
        };
        let tool = ChargeCard { charger, reclaimed };
        let toolbox = Toolbox::builder(store)
            .scope(scope)
            .write_with(tool, options.clone())
            .write_with(email, options)
            .build()?;
        Ok(Tools::Toolonce(toolbox))
    }

    /// Runs one tool call; through toolonce, returns how it ended and its key.
    pub(super) async fn call(
        &self,
        call: &ToolCall,
    ) -> anyhow::Result<Option<(Outcome, Option<OperationKey>)>> {
        match self {
            // No key: a direct call cannot tell a duplicate from a new charge.
            Tools::Direct(charger) if call.tool == "send_email" => {
                charger
                    .send(&serde_json::from_value(call.args.clone())?)
                    .await?;
                Ok(None)
            }
            Tools::Direct(charger) => {
                let args: ChargeArgs = serde_json::from_value(call.args.clone())?;
                charger.charge(&args, None).await?;
                Ok(None)
            }
            Tools::Toolonce(toolbox) => {
                let result = toolbox.call(call.tool, call.args.clone()).await;
                Ok(Some((result.outcome, result.key)))
            }
        }
    }
}
