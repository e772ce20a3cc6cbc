//! toolonce makes every side-effecting tool call of an AI agent take effect once.
//!
//! An agent's write tool (charge a card, send an email, open a ticket) gets asked to run twice
//! for the same logical operation: the loop retries after a provider timeout, the model calls
//! again with a new `tool_use_id`, a crashed agent resumes from a checkpoint taken before the
//! call, or two parallel calls duplicate each other. toolonce does not try to prevent the
//! duplicates; it makes them harmless:
//!
//! 1. The operation's identity is derived from `(scope, tool, canonical arguments)` — the
//!    [operation key](key), never the attempt's `tool_use_id`.
//! 2. The key is **claimed** atomically in a [`Store`]. Exactly one caller wins and runs the
//!    tool, with a heartbeat renewing a short lease.
//! 3. The result is recorded and **replayed** to every duplicate, exactly as the first caller
//!    got it. A duplicate that arrives while the tool runs is told it is in flight.
//! 4. The key is handed to the tool ([`WriteContext`]) to pass downstream as an
//!    `Idempotency-Key`, which covers a crash between the downstream success and the record.
//!
//! If the caller crashes between the claim and the record, the operation becomes **unknown**
//! when its lease expires: it may or may not have taken effect. A duplicate then does what the
//! tool's [`OnExpired`] policy says: `hold` (the default) answers outcome `unknown` and runs
//! nothing until a person settles it ([`Store::resolve`], `toolonce resolve`); `rerun` (the
//! default for a tool whose downstream [honours the key](WriteTool::honours_key)) runs it again
//! with the same key; `verify` asks the tool's [probe](WriteTool::verify) whether it took
//! effect.
//!
//! If the store cannot be reached, a write tool is not run (fail closed). Every answer, including
//! duplicates, conflicts, invalid input and outages, is a well-formed [`ToolResult`] rather than
//! an error of the agent loop.
//!
//! # Contract
//!
//! The rules this crate keeps — how the key is made, the entry's states, what each store
//! operation promises, what the layer does with a write call, and the Redis wire format shared
//! with TypeScript workers — are written out in `docs/contract.md` at the root of the
//! repository, linked from its README. The [`Store`] trait restates the store operations in Rust
//! terms, and `examples/agent_loop.rs` of this crate (the quickstart of `docs/rust.md`) shows a
//! whole agent loop.
//!
//! # Layout
//!
//! - [`canonical`]: RFC 8785 JSON canonicalization, the basis of the key.
//! - [`key`]: operation keys, fingerprints and key fields.
//! - [`tool`]: the two tool kinds, [`ReadTool`] and [`WriteTool`], and [`ToolError`].
//! - [`store`]: the [`Store`] contract and its backends: [`MemoryStore`] always,
//!   SQLite, Redis and PostgreSQL behind the features of the same names.
//! - [`policy`]: what a write call's duplicates do and how long things last:
//!   [`WriteOptions`], [`InFlight`], [`OnExpired`].
//! - [`layer`]: the protocol of a write call, [`Layer`], which applies the policy.
//! - [`repeat`]: the repeat ordinal, by which a model says it performs the same action again on
//!   purpose, and the note a replay tells the model ([`ReplayNote`]).
//! - [`toolbox`]: [`Toolbox`], which registers tools, describes them to the model in the
//!   Anthropic and OpenAI formats, and dispatches calls.
//!
//! # Metrics
//!
//! The layer counts every write call in `toolonce_calls_total{tool, outcome}` (the outcome as
//! [`Outcome::as_str`] spells it: `executed`, `replayed`, `in_flight`, `conflict`, `unknown`,
//! `store_unavailable`, …) and every takeover of an `unknown` operation in
//! `toolonce_takeovers_total{tool}`, and records each call's duration in the histogram
//! `toolonce_call_duration_seconds{tool, outcome}`, through the
//! [`metrics`](https://docs.rs/metrics) facade; [`Store::census`] counts a store's entries by
//! state for gauges.
//! Nothing is recorded until the program installs a recorder; any exporter works. With the
//! Prometheus one (`metrics-exporter-prometheus`, a dependency of your program, not of this
//! crate; shown as text, since this crate does not depend on it):
//!
//! ```text
//! // Serves the counters on http://0.0.0.0:9000/metrics; call once at start-up, inside the
//! // Tokio runtime.
//! metrics_exporter_prometheus::PrometheusBuilder::new()
//!     .with_http_listener(([0, 0, 0, 0], 9000))
//!     .install()?;
//! // ... build the Toolbox and run the agent as usual:
//! // toolonce_calls_total{tool="charge_card",outcome="replayed"} 3
//! ```
//!
//! `unknown` outcomes are also logged at warn level (target `toolonce`) with the scope, the
//! tool and the key, since a person must act on them.
//!
//! # MCP servers on rmcp
//!
//! An MCP server written with [rmcp](https://docs.rs/rmcp) (the official MCP Rust SDK) gets
//! toolonce in-process by forwarding each `#[tool]` handler's call to a [`Toolbox`] that holds
//! the same tools as [`WriteTool`]s and [`ReadTool`]s: the toolbox keys a write by (its scope,
//! the tool's name, the canonical arguments), runs it once and replays its result to every
//! duplicate, whichever session or server process sends it. rmcp is not a dependency of this
//! crate; in your server (shown as text):
//!
//! ```text
//! #[tool_router]
//! impl RefundServer {
//!     #[tool(description = "Refund an order.")]
//!     async fn issue_refund(&self, Parameters(args): Parameters<Refund>)
//!         -> Result<CallToolResult, ErrorData> {
//!         let args = serde_json::to_value(&args).map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
//!         let answer = self.toolbox.call("issue_refund", args).await; // a ToolResult
//!         Ok(mcp_result(answer)) // content, is_error, and _meta {"toolonce/outcome", "toolonce/key"}
//!     }
//! }
//! ```
//!
//! Scope the toolbox ([`ToolboxBuilder::scope`]) by what one agent's duplicates share (an
//! agent or a deployment, as `toolonce mcp --scope` does), or call
//! [`Toolbox::call_in`] with a scope the request carries. Every outcome, `in_flight` and
//! `unknown` included, is a tool result the client shows, never a protocol error. The crate's
//! `examples/rmcp_server.rs` is a whole server, and checks itself with an rmcp client over an
//! in-memory pipe: `cargo run -p toolonce --example rmcp_server` ends with
//! `effects: 1 (expected 1)` after a duplicate call and a restarted server.
//!
//! # Example
//!
//! See [`Toolbox`] for a write tool called twice and executed once.

#![warn(missing_docs)]

pub mod canonical;
mod error;
mod heartbeat;
pub mod key;
pub mod layer;
#[cfg(test)]
mod limits;
pub mod meta;
pub mod policy;
pub mod repeat;
pub mod store;
pub mod texts;
pub mod tool;
pub mod toolbox;

pub use error::{BoxError, Error, Result, error_report};
pub use key::{Fingerprint, KeyFields, OperationKey};
pub use layer::{Layer, Outcome, ReplayNote, WriteAnswer};
pub use policy::{InFlight, OnExpired, WriteOptions};
pub use store::memory::{ManualClock, MemoryStore};
pub use store::{
    About, Census, Claim, ClaimRequest, Entry, EntryState, Fenced, ListQuery, OwnerToken, Page,
    Recorded, Removed, Resolution, Resolved, Seen, SeenSettled, SettledBy, State, Store,
    Unreadable, owner_digest,
};
pub use tool::{ErrorClass, ReadTool, ToolError, Verified, WriteContext, WriteTool};
pub use toolbox::formats::Reply;
pub use toolbox::{ToolResult, Toolbox, ToolboxBuilder};
