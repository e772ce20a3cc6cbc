//! The model providers' shapes of tools and tool calls: definitions in the Anthropic and OpenAI
//! formats, calls answered in each one's own result shape, and the [`Reply`] that carries the
//! outcome and key beside the JSON for the model.

use serde_json::{Value, json};

use super::{ToolResult, Toolbox};
use crate::key::OperationKey;
use crate::layer::Outcome;
use crate::texts::Text;

impl Toolbox {
    /// The tool definitions for the Anthropic Messages API (`tools`: name, description,
    /// `input_schema`).
    pub fn anthropic_tools(&self) -> Value {
        Value::Array(
            self.order
                .iter()
                .map(|name| {
                    let t = &self.tools[name];
                    json!({"name": name, "description": t.description, "input_schema": t.schema})
                })
                .collect(),
        )
    }

    /// The tool definitions for OpenAI chat completions (`tools`: `type: function` with
    /// `function.parameters`).
    pub fn openai_tools(&self) -> Value {
        Value::Array(
            self.order
                .iter()
                .map(|name| {
                    let t = &self.tools[name];
                    json!({
                        "type": "function",
                        "function": {
                            "name": name,
                            "description": t.description,
                            "parameters": t.schema,
                        }
                    })
                })
                .collect(),
        )
    }

    /// Answers an Anthropic `tool_use` content block with a `tool_result` block.
    ///
    /// The block is the JSON the model sent, as it appears in the `content` of an assistant
    /// message (`{"type": "tool_use", "id", "name", "input"}`). To also learn how the call
    /// ended (executed, replayed, in flight…) and its operation key, use
    /// [`call_anthropic_with_outcome`](Self::call_anthropic_with_outcome).
    pub async fn call_anthropic(&self, tool_use: &Value) -> Value {
        self.call_anthropic_with_outcome(tool_use).await.json
    }

    /// Like [`call_anthropic`](Self::call_anthropic), and also returns the [`ToolResult`]
    /// behind the block: its [`Outcome`], the operation key, the structured value.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> toolonce::Result<()> {
    /// # use std::sync::Arc;
    /// # use toolonce::{MemoryStore, Outcome, Toolbox, ToolError, WriteContext, WriteTool};
    /// # #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// # struct Args { to: String }
    /// # struct SendEmail;
    /// # impl WriteTool for SendEmail {
    /// #     type Args = Args;
    /// #     type Output = String;
    /// #     fn name(&self) -> &str { "send_email" }
    /// #     fn description(&self) -> &str { "Send an email." }
    /// #     async fn call(&self, _: WriteContext, args: Args) -> Result<String, ToolError> {
    /// #         Ok(format!("sent to {}", args.to))
    /// #     }
    /// # }
    /// let toolbox = Toolbox::builder(Arc::new(MemoryStore::new()))
    ///     .scope("run-7")
    ///     .write(SendEmail)
    ///     .build()?;
    /// let tool_use = serde_json::json!({
    ///     "type": "tool_use", "id": "toolu_01", "name": "send_email", "input": {"to": "ada@example.com"}
    /// });
    /// let reply = toolbox.call_anthropic_with_outcome(&tool_use).await;
    /// assert_eq!(reply.outcome(), Outcome::Executed);
    /// assert_eq!(reply.json["tool_use_id"], "toolu_01"); // what goes back to the model
    /// let key = reply.key().expect("a write call has a key").clone();
    ///
    /// // The model asks again with a new id: same operation, nothing is sent twice.
    /// let again = serde_json::json!({
    ///     "type": "tool_use", "id": "toolu_02", "name": "send_email", "input": {"to": "ada@example.com"}
    /// });
    /// let reply = toolbox.call_anthropic_with_outcome(&again).await;
    /// assert_eq!(reply.outcome(), Outcome::Replayed);
    /// assert_eq!(reply.key(), Some(&key));
    /// # Ok(()) }
    /// ```
    pub async fn call_anthropic_with_outcome(&self, tool_use: &Value) -> Reply {
        let id = tool_use["id"].as_str().unwrap_or_default();
        let result = match tool_use["name"].as_str() {
            None => self.invalid("?", &Text::NoToolUseName.fill(&[])),
            Some(name) => {
                let input = tool_use.get("input").cloned().unwrap_or_else(|| json!({}));
                self.call(name, input).await
            }
        };
        Reply {
            json: result.to_anthropic(id),
            result,
        }
    }

    /// Answers an OpenAI chat completions tool call (`{"id", "function": {"name",
    /// "arguments"}}`, with the arguments as JSON text) with a `tool` message. To also learn
    /// how the call ended and its operation key, use
    /// [`call_openai_with_outcome`](Self::call_openai_with_outcome).
    pub async fn call_openai(&self, tool_call: &Value) -> Value {
        self.call_openai_with_outcome(tool_call).await.json
    }

    /// Like [`call_openai`](Self::call_openai), and also returns the [`ToolResult`] behind the
    /// message: its [`Outcome`], the operation key, the structured value. The OpenAI format has
    /// no error flag, so this is the only way to tell an error answer from a result there.
    pub async fn call_openai_with_outcome(&self, tool_call: &Value) -> Reply {
        let id = tool_call["id"].as_str().unwrap_or_default();
        let function = &tool_call["function"];
        let result = match function["name"].as_str() {
            None => self.invalid("?", &Text::NoFunctionName.fill(&[])),
            Some(name) => match &function["arguments"] {
                Value::String(text) => self.call_json(name, text).await,
                Value::Null => self.call(name, json!({})).await,
                other => self.call(name, other.clone()).await,
            },
        };
        Reply {
            json: result.to_openai(id),
            result,
        }
    }
}

/// A tool call answered in a provider's format, together with what happened: from
/// [`Toolbox::call_anthropic_with_outcome`] and [`Toolbox::call_openai_with_outcome`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Reply {
    /// What to send back to the model: an Anthropic `tool_result` block or an OpenAI `tool`
    /// message.
    pub json: Value,
    /// The answer behind it: outcome, operation key, content, structured value.
    pub result: ToolResult,
}

impl Reply {
    /// How the call ended.
    pub fn outcome(&self) -> Outcome {
        self.result.outcome
    }

    /// The operation key, for write calls that got as far as deriving one (`None` for reads,
    /// unknown tools and invalid arguments).
    pub fn key(&self) -> Option<&OperationKey> {
        self.result.key.as_ref()
    }
}
