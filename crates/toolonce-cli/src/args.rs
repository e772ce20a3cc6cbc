//! Command-line pieces shared by the subcommands: the `--store` option, durations given in
//! seconds (validated, or capped where a huge value means "forever"), and `--args` JSON read from the command line or standard input.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;
use toolonce::Store;
use toolonce::canonical::{self, Limits};
use toolonce::key::KeyFields;
use toolonce::layer::{MAX_DURATION, MIN_LEASE};
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

impl StoreArg {
    /// Opens a store that must exist already, for the commands that inspect or settle what is
    /// in one (`ls`, `show`, `rm`, `resolve`, `purge`): a SQLite file that is not there is an
    /// error naming it, and nothing is created. Otherwise a typo in the path, or a command run
    /// in the wrong directory, would look like an empty store and leave a new database behind.
    /// `exec` and `mcp` create the database, as the library does.
    pub(crate) async fn open_existing(&self) -> anyhow::Result<Arc<dyn Store>> {
        if let Some(path) = missing_sqlite_file(&self.url) {
            bail!(
                "no SQLite database at {}: the file does not exist (check --store; ls, show, \
                 rm, resolve and purge never create a database, exec and mcp do)",
                path.display()
            );
        }
        self.open().await
    }
}

/// The file of a `sqlite://PATH` URL when that file does not exist, as an absolute path. A
/// database in memory or given as an SQLite `file:` URI is left to the store.
fn missing_sqlite_file(url: &str) -> Option<PathBuf> {
    let path = url.strip_prefix("sqlite://")?;
    if path.is_empty() || path == ":memory:" || path.starts_with("file:") {
        return None;
    }
    let path = Path::new(path);
    if path.exists() {
        return None;
    }
    Some(std::path::absolute(path).unwrap_or_else(|_| path.to_owned()))
}

impl std::fmt::Debug for StoreArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreArg")
            .field("url", &redact_url(&self.url))
            .finish()
    }
}

/// A number of seconds as given (`30`, `0.5`, `1e3`, `inf`): never negative or NaN.
fn secs(text: &str) -> Result<f64, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if secs.is_nan() {
        return Err(format!("{text:?} is not a number of seconds"));
    }
    if secs < 0.0 {
        return Err(format!("{text} seconds: it must be 0 or more"));
    }
    Ok(secs)
}

/// A number of seconds from `min` to 100 years ([`MAX_DURATION`]); the error gives the range.
fn bounded(text: &str, min: Duration) -> Result<Duration, String> {
    let secs = secs(text)?;
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| (min..=MAX_DURATION).contains(d))
        .ok_or_else(|| {
            format!(
                "{text} seconds is out of range: it must be between {} and {} seconds (100 years)",
                min.as_secs_f64(),
                MAX_DURATION.as_secs()
            )
        })
}

/// `--lease SECONDS`: from [`MIN_LEASE`] (the heartbeat renews every third of it) to 100 years.
pub(crate) fn lease(text: &str) -> Result<Duration, String> {
    bounded(text, MIN_LEASE)
}

/// `--session-idle SECONDS` (mcp --listen): from a millisecond to 100 years.
pub(crate) fn session_idle(text: &str) -> Result<Duration, String> {
    bounded(text, Duration::from_millis(1))
}

/// `--header-timeout`, `--body-timeout SECONDS` (mcp --listen): from a millisecond to 100 years.
pub(crate) fn read_timeout(text: &str) -> Result<Duration, String> {
    bounded(text, Duration::from_millis(1))
}

/// `--retention SECONDS`: from a millisecond to 100 years.
pub(crate) fn retention(text: &str) -> Result<Duration, String> {
    bounded(text, Duration::from_millis(1))
}

/// `--grace SECONDS`: how long a stopped command gets before SIGKILL, from 0 to 100 years.
pub(crate) fn grace(text: &str) -> Result<Duration, String> {
    bounded(text, Duration::ZERO)
}

/// `--wait SECONDS`: any number of seconds from 0; beyond 100 years (`1e19`, `inf`) it means
/// "as long as it takes", and is capped to 100 years.
pub(crate) fn wait(text: &str) -> Result<Duration, String> {
    let secs = secs(text)?;
    Ok(Duration::try_from_secs_f64(secs)
        .unwrap_or(MAX_DURATION)
        .min(MAX_DURATION))
}

/// Reads `--args`: JSON text, or `-` for standard input. The error names the line and column of
/// a syntax error.
pub(crate) fn read_args(text: &str) -> anyhow::Result<Value> {
    read_value(text, "--args")
}

/// Reads the JSON value of option `option` (`--args`, `--done`): JSON text, or `-` for
/// standard input. The error names the option, and the line and column of a syntax error.
pub(crate) fn read_value(text: &str, option: &str) -> anyhow::Result<Value> {
    let stdin;
    let text = if text == "-" {
        let mut buf = String::new();
        std::io::stdin()
            .read_to_string(&mut buf)
            .with_context(|| format!("cannot read {option} from standard input"))?;
        stdin = buf;
        &stdin
    } else {
        text
    };
    canonical::parse_args(text, &Limits::default()).with_context(|| format!("invalid {option}"))
}

/// The key fields given with `--key-field`, if any.
pub(crate) fn key_fields(pointers: &[String]) -> anyhow::Result<Option<KeyFields>> {
    if pointers.is_empty() {
        return Ok(None);
    }
    let fields = KeyFields::new(pointers.iter().cloned());
    // A field name given bare (`--key-field id`) is the likely mistake: show it as a pointer.
    let bare = pointers
        .iter()
        .find(|p| !p.is_empty() && !p.starts_with('/'));
    match (fields, bare) {
        (Err(e), Some(bare)) => bail!("{e}; did you mean --key-field \"/{bare}\"?"),
        (fields, _) => Ok(Some(fields?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_fractions_and_refuse_negatives_nan_and_absurd_values() {
        assert_eq!(lease("30"), Ok(Duration::from_secs(30)));
        assert_eq!(retention("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(wait(" 1e3 "), Ok(Duration::from_secs(1000)));
        for bad in ["-1", "soon", "NaN", "inf", "1e19", "0", "0.001", ""] {
            assert!(lease(bad).is_err(), "{bad}");
        }
        assert!(retention("0").is_err());
        assert!(wait("-0.5").is_err());
        assert!(wait("nan").is_err());
        assert_eq!(wait("inf"), Ok(MAX_DURATION));
        assert_eq!(wait("1e19"), Ok(MAX_DURATION));
        let e = lease("1e19").unwrap_err();
        assert!(e.contains("1e19") && e.contains("between 0.03 and"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn no_text_makes_a_duration_parser_panic_or_leave_its_range(text in "\\PC{0,24}") {
            check(&text);
        }

        #[test]
        fn no_number_makes_a_duration_parser_panic_or_leave_its_range(x in proptest::num::f64::ANY) {
            for text in [format!("{x}"), format!("{x:e}"), format!("{x:.3}")] {
                check(&text);
            }
        }
    }

    fn check(text: &str) {
        if let Ok(d) = lease(text) {
            assert!((MIN_LEASE..=MAX_DURATION).contains(&d), "{text}: {d:?}");
        }
        if let Ok(d) = retention(text) {
            assert!(
                (Duration::from_millis(1)..=MAX_DURATION).contains(&d),
                "{text}: {d:?}"
            );
        }
        if let Ok(d) = wait(text) {
            assert!(d <= MAX_DURATION, "{text}: {d:?}");
        }
    }

    #[test]
    fn invalid_args_name_the_line_and_column() {
        let err = read_args("{\"a\":\n  }").unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("line 2 column 3"), "{text}");
    }
}
