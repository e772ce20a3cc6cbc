//! The toolbox: registers read and write tools, describes them to the model in the two tool
//! formats agents use most, and dispatches the model's tool calls — reads directly, writes
//! through the [`Layer`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::canonical::{self, Limits};
use crate::key::{self, KeyFields, OperationKey};
use crate::layer::{Layer, NO_PROBE, Outcome, ReplayNote, WriteCall};
use crate::policy::{OnExpired, WriteOptions};
use crate::repeat::{self, Repeat};
use crate::store::{About, Recorded, Store};
use crate::texts::Text;
use crate::tool::{ReadTool, ToolError, Verified, WriteContext, WriteTool};
use crate::{Error, Result};

mod args;
pub mod formats;

use args::{Parsed, parse_typed};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type Prepared = Box<dyn FnOnce(WriteContext) -> BoxFuture<Result<Value, ToolError>> + Send>;
type Probe = Box<dyn FnOnce(WriteContext) -> BoxFuture<Verified> + Send>;

/// One answer to the model: a well-formed tool result whatever happened.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolResult {
    /// The text the model reads.
    pub content: String,
    /// Whether the result is an error.
    pub is_error: bool,
    /// How the call ended.
    pub outcome: Outcome,
    /// The operation key, for write calls that got as far as deriving one.
    pub key: Option<OperationKey>,
    /// The structured result, when the call produced one (executed or replayed): a replayed
    /// one as the store kept it, decoded when asked ([`Recorded::to_value`]).
    pub value: Option<Recorded>,
    /// For a replay: the note for the model (when the identical call took effect, its key, how
    /// to repeat it on purpose). [`content`](Self::content) stays the recorded result; the
    /// provider formats send the note as a second text block after it.
    pub replay: Option<ReplayNote>,
}

impl ToolResult {
    fn ok(value: Recorded, outcome: Outcome, key: Option<OperationKey>) -> Self {
        ToolResult {
            content: value.content(),
            is_error: false,
            outcome,
            key,
            value: Some(value),
            replay: None,
        }
    }

    fn error(message: String, outcome: Outcome, key: Option<OperationKey>) -> Self {
        ToolResult {
            content: message,
            is_error: true,
            outcome,
            key,
            value: None,
            replay: None,
        }
    }

    fn with_replay(self, replay: Option<ReplayNote>) -> Self {
        ToolResult { replay, ..self }
    }

    /// The content as the provider formats send it: the text alone, or, for a replay, the
    /// recorded text and the note as two text blocks (`kind` names the block type).
    fn provider_content(&self, kind: &str) -> Value {
        match &self.replay {
            None => Value::String(self.content.clone()),
            Some(note) => json!([
                {"type": kind, "text": self.content},
                {"type": kind, "text": note.text},
            ]),
        }
    }

    /// The result as an Anthropic Messages `tool_result` content block. A replay's content is
    /// two text blocks: the recorded result, then the note.
    pub fn to_anthropic(&self, tool_use_id: &str) -> Value {
        let mut block = json!({
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": self.provider_content("text"),
        });
        if self.is_error {
            block["is_error"] = Value::Bool(true);
        }
        block
    }

    /// The result as an OpenAI chat completions `tool` message. That format has no error flag:
    /// the content says so. A replay's content is an array of two text parts (the recorded
    /// result, then the note), which the format accepts in place of a string.
    pub fn to_openai(&self, tool_call_id: &str) -> Value {
        json!({
            "role": "tool",
            "tool_call_id": tool_call_id,
            "content": self.provider_content("text"),
        })
    }
}

/// A read tool with its argument type erased, so that tools of every type share one map: the
/// call parses the arguments into the tool's own type, or says why they do not fit.
trait ErasedRead: Send + Sync {
    fn call(self: Arc<Self>, args: &Value) -> Result<BoxFuture<Result<Value, ToolError>>, String>;
}

impl<T: ReadTool> ErasedRead for T {
    fn call(self: Arc<Self>, args: &Value) -> Result<BoxFuture<Result<Value, ToolError>>, String> {
        let args: T::Args = parse_typed(args)?.args;
        Ok(Box::pin(async move {
            to_result(ReadTool::call(&*self, args).await)
        }))
    }
}

/// A write tool with its argument type erased, as `ErasedRead` is a read tool.
trait ErasedWrite: Send + Sync {
    /// The run of the tool with these arguments, and the arguments as the tool sees them when
    /// its type ignores some of them (see `args`).
    fn prepare(self: Arc<Self>, args: &Value) -> Result<(Prepared, Option<Value>), String>;
    /// The tool's verify probe for these arguments (parsed again: `Args` need not be `Clone`,
    /// and this runs only under [`OnExpired::Verify`]).
    fn probe(self: Arc<Self>, args: &Value) -> Result<Probe, String>;
}

impl<T: WriteTool> ErasedWrite for T {
    fn prepare(self: Arc<Self>, args: &Value) -> Result<(Prepared, Option<Value>), String> {
        let Parsed { args, seen } = parse_typed::<T::Args>(args)?;
        let prepared: Prepared = Box::new(move |ctx| {
            Box::pin(async move { to_result(WriteTool::call(&*self, ctx, args).await) })
        });
        Ok((prepared, seen))
    }

    fn probe(self: Arc<Self>, args: &Value) -> Result<Probe, String> {
        let args: T::Args = parse_typed(args)?.args;
        Ok(Box::new(move |ctx| {
            Box::pin(async move { WriteTool::verify(&*self, &ctx, &args).await })
        }))
    }
}

/// A tool's output as the JSON value the store records.
fn to_result<O: serde::Serialize + 'static>(out: Result<O, ToolError>) -> Result<Value, ToolError> {
    let out = out?;
    // A tool that already returns a `Value` needs no round through the serializer, which
    // would copy the whole result.
    let out: Box<dyn std::any::Any> = Box::new(out);
    match out.downcast::<Value>() {
        Ok(value) => Ok(*value),
        Err(out) => {
            let out = out
                .downcast::<O>()
                .expect("the result has the tool's output type");
            serde_json::to_value(*out).map_err(|e| {
                ToolError::permanent(Text::Unserializable.fill(&[("error", &e.to_string())]))
            })
        }
    }
}

enum Kind {
    Read(Arc<dyn ErasedRead>),
    Write {
        tool: Arc<dyn ErasedWrite>,
        options: WriteOptions,
        key_fields: Option<KeyFields>,
        /// What the claim records for a call in the toolbox's own scope, made once (set by
        /// [`ToolboxBuilder::build`]) rather than per call.
        about: About,
    },
}

struct Registered {
    description: String,
    schema: Value,
    kind: Kind,
}

/// Read and write tools behind one dispatcher.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> toolonce::Result<()> {
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use toolonce::{MemoryStore, Outcome, Toolbox, ToolError, WriteContext, WriteTool};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Charge { customer: String, cents: u64 }
///
/// struct ChargeCard { charges: AtomicU32 }
///
/// impl WriteTool for ChargeCard {
///     type Args = Charge;
///     type Output = serde_json::Value;
///     fn name(&self) -> &str { "charge_card" }
///     fn description(&self) -> &str { "Charge a customer's card." }
///     async fn call(&self, ctx: WriteContext, args: Charge) -> Result<serde_json::Value, ToolError> {
///         // A real tool sends ctx.idempotency_header() to the payment provider.
///         let n = self.charges.fetch_add(1, Ordering::SeqCst) + 1;
///         Ok(serde_json::json!({"receipt": n, "customer": args.customer, "cents": args.cents}))
///     }
/// }
///
/// let toolbox = Toolbox::builder(Arc::new(MemoryStore::new()))
///     .scope("run-42")
///     .write(ChargeCard { charges: AtomicU32::new(0) })
///     .build()?;
///
/// let args = serde_json::json!({"customer": "cus_1", "cents": 500});
/// let first = toolbox.call("charge_card", args.clone()).await;
/// // The model calls again (a retry, a new tool_use_id, a resumed run): nothing is charged.
/// let again = toolbox.call("charge_card", args).await;
/// assert_eq!(first.outcome, Outcome::Executed);
/// assert_eq!(again.outcome, Outcome::Replayed);
/// assert_eq!(first.content, again.content);
/// # Ok(()) }
/// ```
pub struct Toolbox {
    layer: Layer,
    scope: String,
    limits: Limits,
    tools: HashMap<String, Registered>,
    order: Vec<String>,
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbox")
            .field("scope", &self.scope)
            .field("tools", &self.order)
            .field("store", self.layer.store())
            .finish()
    }
}

/// Builds a [`Toolbox`].
#[must_use]
pub struct ToolboxBuilder {
    store: Arc<dyn Store>,
    scope: Option<String>,
    limits: Limits,
    defaults: WriteOptions,
    tools: Vec<(String, Result<Registered>)>,
}

impl ToolboxBuilder {
    /// The scope of the operation keys: by default the run id, so the same call in another run
    /// is another operation. Required.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// Limits on the size and nesting of arguments.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The write options of tools registered without their own.
    pub fn write_options(mut self, options: WriteOptions) -> Self {
        self.defaults = options;
        self
    }

    /// Registers a read tool.
    pub fn read<T: ReadTool>(mut self, tool: T) -> Self {
        let name = tool.name().to_owned();
        let registered = Ok(Registered {
            description: tool.description().to_owned(),
            schema: schema_of::<T::Args>(),
            kind: Kind::Read(Arc::new(tool)),
        });
        self.tools.push((name, registered));
        self
    }

    /// Registers a write tool with the builder's default options.
    pub fn write<T: WriteTool>(self, tool: T) -> Self {
        let options = self.defaults.clone();
        self.write_with(tool, options)
    }

    /// Registers a write tool with its own options. Options that leave
    /// [`on_expired`](WriteOptions::on_expired) unset take the tool's declaration
    /// ([`WriteTool::on_expired`]).
    pub fn write_with<T: WriteTool>(mut self, tool: T, mut options: WriteOptions) -> Self {
        let name = tool.name().to_owned();
        options.on_expired.get_or_insert_with(|| tool.on_expired());
        let fields = tool.key_fields();
        let registered = (|| {
            options
                .validate()
                .map_err(|e| Error::Config(format!("the write options of tool {name:?}: {e}")))?;
            let key_fields = if fields.is_empty() {
                None
            } else {
                Some(KeyFields::new(fields)?)
            };
            let mut schema = schema_of::<T::Args>();
            if let Some(argument) = options.repeat_argument.clone()
                && !repeat::add_to_schema(&mut schema, &argument)
            {
                // Its own property of that name is an ordinary argument: never taken out.
                tracing::warn!(
                    target: "toolonce",
                    tool = name.as_str(),
                    argument = argument.as_str(),
                    "the tool's schema already has a property named like the repeat argument \
                     (or is not an object schema); it keeps its own and gets no repeat argument"
                );
                options.repeat_argument = None;
            }
            Ok(Registered {
                description: tool.description().to_owned(),
                schema,
                kind: Kind::Write {
                    tool: Arc::new(tool),
                    options,
                    key_fields,
                    about: About::empty(),
                },
            })
        })();
        self.tools.push((name, registered));
        self
    }

    /// Builds the toolbox. Fails without a scope, on a duplicate or invalid tool name, on
    /// invalid key fields, and on invalid write options ([`WriteOptions::validate`]).
    pub fn build(self) -> Result<Toolbox> {
        let scope = self.scope.ok_or_else(|| {
            Error::Config(
                "a toolbox needs a scope (usually the run id): call .scope(run_id)".into(),
            )
        })?;
        // Validates the scope the way every key derivation will.
        key::OperationKey::derive(&scope, "-", "")?;
        let mut tools = HashMap::new();
        let mut order = Vec::new();
        for (name, registered) in self.tools {
            let mut registered = registered?;
            if let Kind::Write { about, .. } = &mut registered.kind {
                *about = About::new(scope.as_str(), name.as_str());
            }
            key::OperationKey::derive("-", &name, "")?;
            if tools.insert(name.clone(), registered).is_some() {
                return Err(Error::Config(format!("two tools are named {name:?}")));
            }
            order.push(name);
        }
        Ok(Toolbox {
            layer: Layer::new(self.store),
            scope,
            limits: self.limits,
            tools,
            order,
        })
    }
}

/// The JSON Schema of the arguments, as the tool formats want it: an object schema without
/// the `$schema` marker.
fn schema_of<A: schemars::JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(A).to_value();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
    }
    if schema == Value::Bool(true) {
        schema = json!({"type": "object"});
    }
    schema
}

impl Toolbox {
    /// Starts a toolbox on `store`.
    pub fn builder(store: Arc<dyn Store>) -> ToolboxBuilder {
        ToolboxBuilder {
            store,
            scope: None,
            limits: Limits::default(),
            defaults: WriteOptions::default(),
            tools: Vec::new(),
        }
    }

    /// The scope of [`call`](Self::call).
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The layer, for running other operations on the same store.
    pub fn layer(&self) -> &Layer {
        &self.layer
    }

    /// The names of the registered tools, in registration order.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(String::as_str)
    }

    /// Calls a tool in the toolbox's scope.
    pub async fn call(&self, name: &str, args: Value) -> ToolResult {
        self.call_in(&self.scope, name, args).await
    }

    /// Calls a tool with arguments given as JSON text (checked against the size limit first).
    pub async fn call_json(&self, name: &str, args: &str) -> ToolResult {
        match canonical::parse_args(args, &self.limits) {
            Ok(args) => self.call(name, args).await,
            Err(e) => self.invalid(name, &e.to_string()),
        }
    }

    /// Calls a tool with keys in another scope (another run, a session, a user and day).
    pub async fn call_in(&self, scope: &str, name: &str, args: Value) -> ToolResult {
        let Some(tool) = self.tools.get(name) else {
            return self.unknown(name);
        };
        match &tool.kind {
            Kind::Read(read) => self.call_read(name, read, &args).await,
            Kind::Write {
                tool,
                options,
                key_fields,
                about: own_about,
            } => {
                // The ordinal is the toolbox's, never the tool's: taken out before the
                // arguments are parsed, keyed or fingerprinted.
                let mut args = args;
                let repeat = match &options.repeat_argument {
                    Some(argument) => match repeat::take(&mut args, argument) {
                        Ok(repeat) => repeat,
                        Err(refused) => return self.refused(name, &refused.message(name)),
                    },
                    None => Repeat::FIRST,
                };
                // Validate before anything touches the store: bad input claims nothing.
                let (prepared, seen) = match tool.clone().prepare(&args) {
                    Ok(p) => p,
                    Err(e) => return self.invalid(name, &e),
                };
                // Keyed on what the tool sees: two calls it cannot tell apart are one operation.
                let keyed = seen.as_ref().unwrap_or(&args);
                let op = match key::derive_repeat(scope, name, keyed, key_fields.as_ref(), repeat) {
                    Ok(op) => op,
                    Err(e) => return self.invalid(name, &e.to_string()),
                };
                let about = if scope == self.scope {
                    std::borrow::Cow::Borrowed(own_about)
                } else {
                    std::borrow::Cow::Owned(About::new(scope, name))
                };
                let call = WriteCall {
                    tool: name,
                    op: &op,
                    about: &about,
                    options,
                };
                let answer = if options.expired_policy() == OnExpired::Verify {
                    // The arguments are parsed for the probe only when it is asked (they parsed
                    // above, so this cannot fail; if it did, holding is the safe answer).
                    let probe = |ctx| {
                        let probe = tool.clone().probe(&args);
                        async move {
                            match probe {
                                Ok(probe) => probe(ctx).await,
                                Err(_) => Verified::CannotTell,
                            }
                        }
                    };
                    self.layer.run_call(call, Some(probe), prepared).await
                } else {
                    self.layer.run_call(call, NO_PROBE, prepared).await
                };
                let result = match answer.result {
                    Ok(v) => ToolResult::ok(v, answer.outcome, Some(answer.key)),
                    Err(e) => ToolResult::error(e.message, answer.outcome, Some(answer.key)),
                };
                result.with_replay(answer.replay)
            }
        }
    }

    /// The answer to a call of a tool the toolbox does not have, naming those it has.
    fn unknown(&self, name: &str) -> ToolResult {
        let answer = ToolResult::error(
            Text::UnknownTool.fill(&[("tool", name), ("tools", &self.order.join(", "))]),
            Outcome::UnknownTool,
            None,
        );
        tracing::info!(target: "toolonce", tool = name, outcome = "unknown_tool", "tool call");
        crate::layer::count_unlisted_call(name, Outcome::UnknownTool);
        answer
    }

    /// A read tool runs as it is: nothing is claimed or recorded.
    async fn call_read(&self, name: &str, read: &Arc<dyn ErasedRead>, args: &Value) -> ToolResult {
        match read.clone().call(args) {
            Err(e) => self.invalid(name, &e),
            Ok(fut) => {
                let result = fut.await;
                tracing::info!(target: "toolonce", tool = name, outcome = "executed", "read call");
                match result {
                    Ok(v) => ToolResult::ok(v.into(), Outcome::Executed, None),
                    Err(e) => ToolResult::error(e.message, Outcome::Executed, None),
                }
            }
        }
    }

    fn invalid(&self, name: &str, reason: &str) -> ToolResult {
        self.refused(
            name,
            &Text::InvalidArguments.fill(&[("tool", name), ("reason", reason)]),
        )
    }

    /// The answer to a call refused before anything touched the store, with `text` for the
    /// model.
    fn refused(&self, name: &str, text: &str) -> ToolResult {
        tracing::info!(target: "toolonce", tool = name, outcome = "invalid_arguments", reason = text, "tool call");
        // Not a kept key: `call_json` gets here before it knows the name is registered.
        crate::layer::count_unlisted_call(name, Outcome::InvalidArguments);
        ToolResult::error(text.to_owned(), Outcome::InvalidArguments, None)
    }
}
