//! One write call as the layer runs it: the tool's name, the operation, what its entry records
//! and the options travel together as a [`WriteCall`], and the work and the verify probe are
//! named by what their futures yield ([`ToolFuture`], [`ProbeFuture`]), so the layer's
//! functions state their bounds once instead of in a four-part `where` clause each.

use std::future::Future;

use serde_json::Value;

use crate::key::Derived;
use crate::policy::WriteOptions;
use crate::store::{About, OwnerToken};
use crate::tool::{ToolError, Verified, WriteContext};

/// The future of a write tool's run: its result, or its own error. Any `Send` future with that
/// output is one; the name exists so that signatures read `impl FnOnce(WriteContext) -> Fut`
/// with `Fut: ToolFuture`, which also lets a closure's argument type be inferred.
pub trait ToolFuture: Future<Output = Result<Value, ToolError>> + Send {}

impl<T: Future<Output = Result<Value, ToolError>> + Send> ToolFuture for T {}

/// The future of a verify probe: what it learned about an interrupted earlier attempt.
pub trait ProbeFuture: Future<Output = Verified> + Send {}

impl<T: Future<Output = Verified> + Send> ProbeFuture for T {}

/// What the layer needs to know of a call besides its work.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriteCall<'a> {
    /// The tool's name, for messages, logs and metrics.
    pub(crate) tool: &'a str,
    /// The operation: its key and fingerprint.
    pub(crate) op: &'a Derived,
    /// What the entry records about the operation, for operators.
    pub(crate) about: &'a About,
    /// The options, as validated by the layer before it claims anything.
    pub(crate) options: &'a WriteOptions,
}

/// No verify probe (the type the layer needs when there is none).
pub(crate) type NoProbe = fn(WriteContext) -> std::future::Ready<Verified>;
/// The absent probe, typed.
pub(crate) const NO_PROBE: Option<NoProbe> = None;

/// How the claim that runs the tool got the entry: the layer gives back a takeover's entry,
/// never deleting it.
pub(crate) enum Claimed {
    /// The claim created the entry (the key was absent, or expired).
    Fresh(OwnerToken),
    /// The claim took over an `unknown` entry: an earlier attempt may have taken effect.
    TookOver(OwnerToken),
}

impl Claimed {
    /// The owner token, and whether the claim took over.
    pub(crate) fn into_parts(self) -> (OwnerToken, bool) {
        match self {
            Claimed::Fresh(owner) => (owner, false),
            Claimed::TookOver(owner) => (owner, true),
        }
    }
}
