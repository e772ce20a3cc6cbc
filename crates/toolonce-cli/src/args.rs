//! Command-line pieces shared by the subcommands: the `--store` option, durations given in
//! seconds, and `--args` JSON read from the command line or standard input.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;
use toolonce::Store;
use toolonce::canonical::{self, Limits};
use toolonce::key::KeyFields;
use toolonce::store::redact_url;

use crate::DEFAULT_STORE;

/// `--store URL`, shared by every subcommand that opens a store.
#[derive(clap::Args, Clone)]
pub(crate) struct StoreArg {
    /// The store: memory://, sqlite://PATH, redis://HOST, postgres://HOST.
    #[arg(long = "store", value_name = "URL", env = "TOOLONCE_STORE", default_value = DEFAULT_STORE)]
    pub(crate) url: String,
}

impl StoreArg {
    /// Opens the store, naming the URL (without its password) in the error.
    pub(crate) async fn open(&self) -> anyhow::Result<Arc<dyn Store>> {
        toolonce::store::open(&self.url)
            .await
            .with_context(|| format!("cannot open the store {}", redact_url(&self.url)))
    }
}

impl std::fmt::Debug for StoreArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreArg")
            .field("url", &redact_url(&self.url))
            .finish()
    }
}

/// Parses a non-negative number of seconds, fractions allowed (`30`, `0.5`).
pub(crate) fn seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("{text:?} is not a non-negative, finite number of seconds"))
}

/// Reads `--args`: JSON text, or `-` for standard input. The error names the line and column of
/// a syntax error.
pub(crate) fn read_args(text: &str) -> anyhow::Result<Value> {
    let stdin;
    let text = if text == "-" {
        let mut buf = String::new();
        std::io::stdin()
            .read_to_string(&mut buf)
            .context("cannot read --args from standard input")?;
        stdin = buf;
        &stdin
    } else {
        text
    };
    canonical::parse_args(text, &Limits::default()).context("invalid --args")
}

/// The key fields given with `--key-field`, if any.
pub(crate) fn key_fields(pointers: &[String]) -> anyhow::Result<Option<KeyFields>> {
    if pointers.is_empty() {
        return Ok(None);
    }
    Ok(Some(KeyFields::new(pointers.iter().cloned())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_accept_fractions_and_refuse_negatives() {
        assert_eq!(seconds("30"), Ok(Duration::from_secs(30)));
        assert_eq!(seconds("0.25"), Ok(Duration::from_millis(250)));
        assert!(seconds("-1").is_err());
        assert!(seconds("soon").is_err());
        assert!(seconds("inf").is_err());
    }

    #[test]
    fn invalid_args_name_the_line_and_column() {
        let err = read_args("{\"a\":\n  }").unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("line 2 column 3"), "{text}");
    }
}
