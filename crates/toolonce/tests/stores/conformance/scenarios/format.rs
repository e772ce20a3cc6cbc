//! The scenario file's shape (`tests/data/scenarios/README.md`), read with serde: unknown
//! fields are refused, so a misspelt step or expectation fails loudly instead of being ignored.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    pub about: String,
    pub defaults: Defaults,
    #[serde(default)]
    pub unchecked: BTreeMap<String, BTreeMap<String, String>>,
    pub scenarios: Vec<Scenario>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    pub policy: Policy,
    pub args: Value,
    pub tool: String,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub on_expired: Option<String>,
    pub in_flight: Option<Value>,
    pub lease_ms: Option<u64>,
    pub retention_ms: Option<u64>,
    pub key_fields: Option<Vec<String>>,
}

impl Policy {
    /// `self` over `base`, field by field.
    pub fn over(&self, base: &Policy) -> Policy {
        Policy {
            on_expired: self.on_expired.clone().or_else(|| base.on_expired.clone()),
            in_flight: self.in_flight.clone().or_else(|| base.in_flight.clone()),
            lease_ms: self.lease_ms.or(base.lease_ms),
            retention_ms: self.retention_ms.or(base.retention_ms),
            key_fields: self.key_fields.clone().or_else(|| base.key_fields.clone()),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub id: String,
    pub description: String,
    #[serde(default)]
    pub policy: Policy,
    pub steps: Vec<Step>,
    #[serde(default)]
    pub unsupported: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    #[serde(rename = "do")]
    pub action: String,
    pub caller: Option<String>,
    pub args: Option<Value>,
    pub tool: Option<Value>,
    pub probe: Option<Value>,
    pub fault: Option<String>,
    pub ms: Option<u64>,
    pub leases: Option<u64>,
    #[serde(rename = "as")]
    pub label: Option<String>,
    pub seen: Option<String>,
    pub resolution: Option<Value>,
    /// A note for the reader of the file.
    pub why: Option<String>,
    #[serde(default)]
    pub expect: Expect,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub outcome: Option<String>,
    pub result: Option<Value>,
    pub error: Option<ErrorExpect>,
    pub notice: Option<bool>,
    pub runs: Option<u32>,
    pub probes: Option<u32>,
    /// `Some(Value::Null)`: no entry; absent: not checked.
    #[serde(default, deserialize_with = "present")]
    pub entry: Option<Value>,
    pub answer: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorExpect {
    pub class: Option<String>,
    pub message: Option<String>,
}

/// Keeps an explicit `null` as `Some(Value::Null)`, apart from a missing field.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}
