//! The store-case file's shape (`tests/data/store_cases/README.md`), read with serde: unknown
//! fields are refused, so a misspelt step or expectation fails loudly instead of being ignored.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    pub about: String,
    /// Named durations in ms, which a step may give instead of a number.
    pub durations: BTreeMap<String, u64>,
    pub defaults: Defaults,
    #[serde(default)]
    pub unchecked: BTreeMap<String, BTreeMap<String, String>>,
    pub cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    pub lease: Value,
    pub retention: Value,
    pub tool: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub id: String,
    pub description: String,
    /// How many times the steps run, each time with fresh names.
    #[serde(default = "one")]
    pub rounds: u32,
    /// The case needs a store no other case uses (every Rust case has one anyway).
    #[serde(default)]
    pub isolated: bool,
    pub steps: Vec<Step>,
    #[serde(default)]
    pub unsupported: BTreeMap<String, String>,
}

fn one() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    #[serde(rename = "do")]
    pub action: String,
    pub key: Option<String>,
    pub owner: Option<String>,
    pub fingerprint: Option<String>,
    pub lease: Option<Value>,
    pub retention: Option<Value>,
    #[serde(default)]
    pub takeover: bool,
    pub about: Option<AboutNames>,
    pub callers: Option<usize>,
    pub result: Option<Value>,
    pub error: Option<ErrorValue>,
    #[serde(rename = "as")]
    pub label: Option<String>,
    pub seen: Option<String>,
    #[serde(default)]
    pub force: bool,
    pub resolution: Option<Value>,
    pub scope: Option<String>,
    pub tool: Option<String>,
    pub state: Option<String>,
    pub limit: Option<usize>,
    pub ms: Option<Value>,
    pub until: Option<String>,
    /// A note for the reader of the file.
    pub why: Option<String>,
    #[serde(default)]
    pub expect: Expect,
}

/// What a claim records: a scope by name (each name a scope of the run's own), tool, detail.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct AboutNames {
    pub scope: Option<String>,
    pub tool: Option<String>,
    pub detail: Option<String>,
}

/// A tool error as a step writes or expects it.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct ErrorValue {
    pub message: String,
    pub class: Option<String>,
    pub detail: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub claim: Option<String>,
    pub won: Option<usize>,
    pub took_over: Option<usize>,
    pub existing: Option<EntryExpect>,
    pub renewed: Option<bool>,
    pub fenced: Option<String>,
    pub deleted: Option<bool>,
    pub purged: Option<u64>,
    pub purged_at_most: Option<u64>,
    pub answer: Option<String>,
    pub keys: Option<Vec<String>>,
    pub each: Option<EntryExpect>,
    /// `Some(None)`: no entry; absent: not checked.
    #[serde(default, deserialize_with = "present")]
    pub entry: Option<Option<EntryExpect>>,
}

/// What an entry must show; every field is optional.
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct EntryExpect {
    pub state: Option<String>,
    pub attempts: Option<u32>,
    pub fingerprint: Option<String>,
    pub owner: Option<String>,
    pub result: Option<Value>,
    pub error: Option<ErrorValue>,
    pub about: Option<AboutNames>,
    pub expires: Option<bool>,
    pub expires_in_ms: Option<(i64, Option<i64>)>,
    pub started_ago_ms: Option<(i64, i64)>,
    pub first_start: Option<String>,
    pub settled: Option<bool>,
    pub same_as: Option<Compare>,
    pub differs_from: Option<Compare>,
}

/// Fields of an entry compared with those of an entry read earlier `as` a label.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Compare {
    pub label: String,
    pub fields: Vec<String>,
}

/// Keeps an explicit `null` as `Some(None)`, apart from a missing field.
fn present<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<EntryExpect>>, D::Error> {
    Option::<EntryExpect>::deserialize(d).map(Some)
}
