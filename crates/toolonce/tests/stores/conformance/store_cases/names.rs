//! The names a case uses (keys, fingerprints, owners, scopes), each mapped on first use to a
//! value of this run's own: keys and fingerprints derived in a scope unique to the run, owner
//! tokens generated, scopes suffixed with the run's id. A case's names never meet another's.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use toolonce::OwnerToken;
use toolonce::key::{self, Fingerprint, OperationKey};

use super::format::File;

pub struct Names {
    run: String,
    owners: HashMap<String, OwnerToken>,
}

impl Names {
    pub fn new(case: &str) -> Names {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let run = format!(
            "store-case-{case}-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            OwnerToken::generate().as_str()
        );
        Names {
            run,
            owners: HashMap::new(),
        }
    }

    /// The key named `name` (`k` when the step names none).
    pub fn key(&self, name: Option<&str>) -> OperationKey {
        let name = name.unwrap_or("k");
        key::derive(&self.run, "key", &json!({ "name": name }), None)
            .expect("a key")
            .key
    }

    /// The fingerprint named `name` (`f` when the step names none).
    pub fn fingerprint(&self, name: Option<&str>) -> Fingerprint {
        let name = name.unwrap_or("f");
        key::derive(&self.run, "fingerprint", &json!({ "name": name }), None)
            .expect("a fingerprint")
            .fingerprint
    }

    /// The scope named `name` (`own`, the case's own scope, when the step names none).
    pub fn scope(&self, name: Option<&str>) -> String {
        format!("{}-{}", name.unwrap_or("own"), self.run)
    }

    /// The token of the owner named `name`, made on first use.
    pub fn owner(&mut self, name: &str) -> OwnerToken {
        self.owners
            .entry(name.to_owned())
            .or_insert_with(OwnerToken::generate)
            .duplicate()
    }

    /// The token of `name` if it was ever used.
    pub fn known_owner(&self, name: &str) -> Option<&OwnerToken> {
        self.owners.get(name)
    }
}

/// A duration in ms, or the name of one of the file's `durations`.
pub fn duration(file: &File, value: &Value) -> Result<Duration, String> {
    match value {
        Value::Number(n) => n
            .as_u64()
            .map(Duration::from_millis)
            .ok_or(format!("duration {n}: expected whole ms")),
        Value::String(name) => file
            .durations
            .get(name)
            .map(|ms| Duration::from_millis(*ms))
            .ok_or(format!("no duration named {name:?}")),
        other => Err(format!("duration {other}: expected ms or a name")),
    }
}
