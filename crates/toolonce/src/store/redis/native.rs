//! Fenced writes without a script: where the server has `SET key value IFEQ expected` (Valkey
//! 8.1 and later, Redis 8.4 and later), the owner's complete, sticky fail and renew are one
//! native command each, fenced by comparing the whole running value its claim wrote, which the
//! owner keeps byte for byte (see [`OwnerToken`](crate::store::owner::OwnerToken)'s memo). A
//! takeover, a resolve or another claim rewrites the value (a new owner digest, start or
//! attempt count), so an equal value means the entry is still exactly the one this owner
//! claimed: the same fence the scripts check by the owner's digest, with nothing to parse on
//! the server.
//!
//! The settled value is built here from the running one exactly as owned.lua's `settled`
//! builds it, except for the clock: `completedAt`/`failedAt` and `settledAt` come from this
//! machine's clock (the one that stamped `startedAt`), since a native `SET` cannot read the
//! server's. Expiry, and with it the lease and the retention, stays on the server's clock.
//!
//! Also used on servers without `IFEQ`: the settling scripts take the same whole value and
//! the settled one as optional arguments and compare them first (a plain `GET` and string
//! compare), falling back to the digest fence only when they differ.

use std::time::{SystemTime, UNIX_EPOCH};

use ::redis::{RedisError, Value};

use crate::store::contract::millis;
use crate::store::redis::conn::RedisStore;
use crate::{Error, Result};

/// The start of every running entry toolonce fences (see entry.lua).
const RUNNING: &str = r#"{"status":"running","startedAt":"#;

/// What the settled value of a running entry keeps of it, read from the value the owner's claim
/// wrote: borrowed slices of that value.
pub(super) struct Held<'a> {
    /// The whole running value, byte for byte.
    pub(super) value: &'a str,
    /// `startedAt`'s digits.
    started: &'a str,
    /// The owner's digest (40 hex), which the settled entry keeps.
    digest: &'a str,
    /// The retention in ms, which a renewal keeps after the new lease.
    pub(super) retention: u64,
    /// From `,"fingerprint":` to the end: what a settled entry keeps after its times.
    rest: &'a str,
}

impl<'a> Held<'a> {
    /// Takes apart a running value of today's shape (`None` for anything else, which the
    /// scripts then settle by the owner's digest).
    pub(super) fn parse(value: &'a str) -> Option<Held<'a>> {
        let after = value.strip_prefix(RUNNING)?;
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let (started, after) = after.split_at(digits);
        // `,"owner":"<40 hex>","retention":`
        let after = after.strip_prefix(r#","owner":""#)?;
        let (digest, after) = after.split_at_checked(40)?;
        if !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let after = after.strip_prefix(r#"","retention":"#)?;
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let (retention, rest) = after.split_at(digits);
        if started.is_empty() || !rest.starts_with(r#","fingerprint":""#) || !rest.ends_with('}') {
            return None;
        }
        Some(Held {
            value,
            started,
            digest,
            retention: retention.parse().ok()?,
            rest,
        })
    }

    /// The settled entry of this running one: `head` (`{"status":"done","result":…` or
    /// `{"status":"failed","error":…`), the start, the settling time `now_ms` under `at_field`
    /// (`completedAt` or `failedAt`) and `settledAt`, the owner's digest, then the rest: what
    /// owned.lua's `settled` writes.
    pub(super) fn settled(&self, head: &str, at_field: &str, now_ms: u64) -> String {
        let mut at = itoa::Buffer::new();
        let at = at.format(now_ms);
        let mut out = String::with_capacity(head.len() + self.rest.len() + 144);
        out.push_str(head);
        out.push_str(r#","startedAt":"#);
        out.push_str(self.started);
        out.push_str(",\"");
        out.push_str(at_field);
        out.push_str("\":");
        out.push_str(at);
        out.push_str(r#","settledAt":"#);
        out.push_str(at);
        out.push_str(r#","owner":""#);
        out.push_str(self.digest);
        out.push('"');
        out.push_str(self.rest);
        out
    }
}

/// This machine's clock in ms since the epoch: what stamps a natively settled entry.
pub(super) fn now_ms() -> u64 {
    millis(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

/// What a native fenced `SET` did.
pub(super) enum Native {
    /// The value was the owner's and is now the new one.
    Applied,
    /// The value was not the one the owner wrote (or the key is gone): nothing was written,
    /// and the script decides by the owner's digest (the entry may be ours in another shape).
    Differs,
    /// The server refused the form (`ERR`: a server without `IFEQ`, say after a failover to an
    /// older one): nothing was written; the script does the write instead.
    Refused,
}

impl RedisStore {
    /// `SET key new IFEQ expected PX px`: one atomic compare-and-set on the server.
    pub(super) async fn set_ifeq(
        &self,
        key: &str,
        new: &str,
        expected: &str,
        px: u64,
    ) -> Result<Native> {
        // Sized up front, as the claim's `SET`: the buffer would otherwise grow, copying both
        // entries again, as each argument goes in.
        let mut set = ::redis::Cmd::with_capacity(7, key.len() + new.len() + expected.len() + 96);
        set.arg("SET")
            .arg(key)
            .arg(new)
            .arg("IFEQ")
            .arg(expected)
            .arg("PX")
            .arg(px);
        let reply: std::result::Result<Value, RedisError> = set.query_async(&mut self.conn()).await;
        match reply {
            Ok(Value::Okay) => Ok(Native::Applied),
            Ok(Value::SimpleString(s)) if s == "OK" => Ok(Native::Applied),
            Ok(Value::Nil) => Ok(Native::Differs),
            Ok(_) => Err(Error::store("unexpected reply to SET … IFEQ")),
            // `ERR` is a refusal of the command itself (`syntax error`): it was not applied.
            // Anything else (a lost connection, a timeout) may have been, and fails closed.
            Err(e) if e.code() == Some("ERR") => Ok(Native::Refused),
            Err(e) => Err(super::error::to_error(e)),
        }
    }

    /// Whether the server takes `SET … IFEQ`: probed once when the store connects, with a
    /// comparison that can never hold on a key under the store's prefix that nobody writes
    /// (so the probe writes nothing). A server without the option answers `ERR syntax error`;
    /// one that refuses it otherwise (an ACL) counts as without: the scripts fence the same.
    /// On a cluster the probe reaches the master of its key's slot; a master without the
    /// option met later refuses the form, and that write goes to the script instead.
    pub(super) async fn probe_set_ifeq(&self) -> Result<bool> {
        let key = format!("{}idem:probe-set-ifeq", self.prefix);
        let reply: std::result::Result<Value, RedisError> = ::redis::cmd("SET")
            .arg(&key)
            .arg("toolonce probe")
            .arg("IFEQ")
            .arg("toolonce probe: never equal")
            .query_async(&mut self.conn())
            .await;
        match reply {
            Ok(Value::Nil) => Ok(true),
            Ok(_) => Ok(false),
            Err(e) => {
                let error = super::error::to_error(e);
                if error.is_retryable() {
                    return Err(error);
                }
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &str = r#"{"status":"running","startedAt":1764400000123,"owner":"b1775a785f09a6ebaf2dc33d6eaeb98974d9cdb8","retention":86400000,"fingerprint":"ab","firstStartedAt":1764400000123,"attempts":1,"scope":"run \"1\""}"#;

    #[test]
    fn a_held_running_value_settles_as_the_scripts_settle_it() {
        let held = Held::parse(VALUE).unwrap();
        assert_eq!(held.retention, 86_400_000);
        assert_eq!(
            held.settled(r#"{"status":"done","result":7"#, "completedAt", 5),
            r#"{"status":"done","result":7,"startedAt":1764400000123,"completedAt":5,"settledAt":5,"owner":"b1775a785f09a6ebaf2dc33d6eaeb98974d9cdb8","fingerprint":"ab","firstStartedAt":1764400000123,"attempts":1,"scope":"run \"1\""}"#
        );
    }

    #[test]
    fn values_of_other_shapes_are_not_held() {
        for value in [
            "",
            r#"{"status":"done","result":1}"#,
            // The previous version's shape, with a lease deadline and the token itself.
            r#"{"status":"running","startedAt":1,"leaseUntil":2,"owner":"ab","fingerprint":"ab","firstStartedAt":1,"attempts":1}"#,
            // A digest that is not 40 hex digits, a missing retention, a cut-off value.
            r#"{"status":"running","startedAt":1,"owner":"xyz","retention":1,"fingerprint":"ab"}"#,
            r#"{"status":"running","startedAt":1,"owner":"b1775a785f09a6ebaf2dc33d6eaeb98974d9cdb8","retention":,"fingerprint":"ab"}"#,
            &VALUE[..VALUE.len() - 1],
        ] {
            assert!(Held::parse(value).is_none(), "{value}");
        }
    }
}
