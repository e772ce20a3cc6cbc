//! The members of an entry in the shared wire format, as its two readers fill them: serde's
//! derived reader (in `wire`, for any text) and the fast one for the form writers give
//! (`plain`). Which members mean what, and when, is `wire`'s to judge.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::Value as Json;

use crate::store::recorded::Recorded;

/// An entry in the wire format. Every field but `status` is optional: workers of the reference
/// design write only `status`, `startedAt` and `result`, today's version of toolonce writes no
/// `leaseUntil` and none of what an entry says it is, and fields we do not know are ignored.
#[derive(Deserialize, Default)]
#[cfg_attr(test, derive(Debug, PartialEq))]
#[serde(rename_all = "camelCase")]
pub(super) struct Wire<'a> {
    /// Borrowed from the value unless it has escapes (then owned), like `fingerprint`: one
    /// allocation less each on every replay.
    #[serde(borrow)]
    pub(super) status: Cow<'a, str>,
    #[serde(default)]
    pub(super) started_at: Option<f64>,
    /// The lease deadline of a running entry of the previous version, on the server's clock.
    #[serde(default)]
    pub(super) lease_until: Option<f64>,
    /// How long a running entry of today's shape is kept after its lease (ms): its lease is
    /// live while the key's PTTL is above this.
    #[serde(default)]
    pub(super) retention: Option<f64>,
    #[serde(default)]
    pub(super) completed_at: Option<f64>,
    #[serde(default)]
    pub(super) failed_at: Option<f64>,
    #[serde(default)]
    pub(super) settled_at: Option<f64>,
    #[serde(default)]
    pub(super) first_started_at: Option<f64>,
    #[serde(default)]
    pub(super) attempts: Option<f64>,
    #[serde(default)]
    pub(super) owner: Option<String>,
    #[serde(default, borrow)]
    pub(super) fingerprint: Option<Borrowed<'a>>,
    #[serde(default)]
    pub(super) scope: Option<String>,
    #[serde(default)]
    pub(super) tool: Option<String>,
    #[serde(default)]
    pub(super) detail: Option<String>,
    /// `Some(Null)` for a stored `null` result, `None` when the field is missing.
    #[serde(default, deserialize_with = "present")]
    pub(super) result: Option<Recorded>,
    #[serde(default)]
    pub(super) error: Option<Json>,
}

/// Text borrowed from the value unless it has escapes. serde borrows a `Cow` only where it is
/// the field itself, not inside an `Option`, so an optional one is wrapped in this.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(super) struct Borrowed<'a>(#[serde(borrow)] pub(super) Cow<'a, str>);

/// A present member, even `null`: serde reads a `null` `Option` as `None` otherwise.
fn present<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Recorded>, D::Error> {
    Recorded::deserialize(d).map(Some)
}
