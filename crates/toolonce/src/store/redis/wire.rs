//! The shared wire format of an entry, read: the decoder of every entry a script or `GET`
//! returns, whichever writer made it (this store, the scripts, a TypeScript worker of the
//! reference design), with the server's clock deciding whether a lease ran out. What a claim
//! writes is built in `running`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::redis::Value;
use serde_json::Value as Json;

use crate::key::{Fingerprint, OperationKey};
use crate::store::contract::{About, Entry, EntryState};
use crate::store::json::read_lenient;
use crate::store::settled_by::SettledBy;
use crate::tool::ToolError;
use crate::{Error, Result};

use super::members::{Borrowed, Wire};
use super::plain::read_plain;

/// Decodes `{value, PTTL, now}` from the claim, read and resolve scripts.
///
/// Redis decides the expiry and the server's clock (`now`) whether a lease ran out; the
/// remaining times it reports are turned into instants on this machine's clock, which is what
/// a caller compares them with.
pub(super) fn decode_read(key: &OperationKey, reply: Value) -> Result<Entry> {
    let bad = |what: &str| Error::store(format!("unexpected reply from the script: {what}"));
    let Value::Array(parts) = reply else {
        return Err(bad("not an array"));
    };
    // The server's clock comes only with a value that has a `leaseUntil` (see `existing` in
    // entry.lua).
    let mut parts = parts.into_iter();
    let (Some(raw), Some(pttl), now, None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("not two or three elements"));
    };
    let Value::BulkString(raw) = raw else {
        return Err(bad("value"));
    };
    let Value::Int(pttl) = pttl else {
        return Err(bad("PTTL"));
    };
    let now = match now {
        None => None,
        Some(Value::Int(now)) => Some(now),
        Some(_) => return Err(bad("TIME")),
    };
    decode_entry(key, &raw, Some(pttl), now, SystemTime::now())
}

/// Milliseconds since the epoch to a time (negative or non-finite values clamp to the epoch).
pub(super) fn epoch_ms(ms: f64) -> SystemTime {
    if ms.is_finite() && ms > 0.0 {
        UNIX_EPOCH + Duration::from_micros((ms * 1000.0).round() as u64)
    } else {
        UNIX_EPOCH
    }
}

/// `local_now` moved by `ms` (negative: back), saturating at the epoch.
pub(super) fn shifted(local_now: SystemTime, ms: f64) -> SystemTime {
    let by = Duration::from_millis(ms.abs().min(u64::MAX as f64) as u64);
    if ms >= 0.0 {
        local_now.checked_add(by).unwrap_or(local_now)
    } else {
        local_now.checked_sub(by).unwrap_or(UNIX_EPOCH)
    }
}

/// Decodes the value `raw` of `key`, read when its key had `pttl` ms left (-1: no expiry;
/// `None`: not read, as by the native claim, which never decodes a running entry) and the
/// server's clock said `server_now` (ms since the epoch), on this machine at `local_now`.
///
/// A running entry with a `retention` is `unknown` once its key's PTTL is down to it; one with
/// a `leaseUntil` (the previous version's) once `server_now` reached it; one with neither
/// (a TypeScript worker's, or older) is running for as long as its key lives, as its writer
/// meant.
pub(super) fn decode_entry(
    key: &OperationKey,
    raw: &[u8],
    pttl: Option<i64>,
    server_now: Option<i64>,
    local_now: SystemTime,
) -> Result<Entry> {
    let mut readable = None;
    let wire = parse_wire(key, raw, &mut readable)?;
    entry_of(key, wire, pttl, server_now, local_now)
}

/// The entry of `raw` if it is settled (or not an entry toolonce can fence at all), `None` if
/// it says `running`: what the native claim's `GET` answer needs, since a running entry is only
/// judged with its key's expiry, which that answer does not carry.
pub(super) fn decode_unless_running(
    key: &OperationKey,
    raw: &[u8],
    local_now: SystemTime,
) -> Result<Option<Entry>> {
    let mut readable = None;
    let wire = parse_wire(key, raw, &mut readable)?;
    if wire.status == "running" {
        return Ok(None);
    }
    entry_of(key, wire, None, None, local_now).map(Some)
}

/// The wire form of `raw`: read straight from the text when it is in the form its writers give
/// it (`plain`), else by serde, reading another writer's lone surrogate escapes as U+FFFD
/// rather than calling the entry corrupt (see `json::without_lone_surrogates`); `readable`
/// holds the repaired text the result borrows from when it had to be repaired.
fn parse_wire<'a>(
    key: &OperationKey,
    raw: &'a [u8],
    readable: &'a mut Option<Vec<u8>>,
) -> Result<Wire<'a>> {
    if let Ok(text) = std::str::from_utf8(raw)
        && let Some(wire) = read_plain(text)
    {
        return Ok(wire);
    }
    read_lenient(raw, readable).map_err(|e| Error::corrupt(key, e))
}

/// The entry of a decoded value: see [`decode_entry`].
pub(super) fn entry_of(
    key: &OperationKey,
    mut wire: Wire<'_>,
    pttl: Option<i64>,
    server_now: Option<i64>,
    local_now: SystemTime,
) -> Result<Entry> {
    let fingerprint = match &wire.fingerprint {
        Some(Borrowed(f)) => Some(
            f.parse::<Fingerprint>()
                .map_err(|e| Error::corrupt(key, e))?,
        ),
        None => None,
    };
    let key_expiry = pttl
        .and_then(|ms| u64::try_from(ms).ok())
        .map(|ms| shifted(local_now, ms as f64));
    let completed_at = wire.completed_at.map(epoch_ms);
    let failed_at = wire.failed_at.map(epoch_ms);
    // A settled entry keeps the digest of the owner whose attempt settled it (older writers
    // and the reference design do not).
    let settled_by = match &*wire.status {
        "done" | "failed" => wire.owner.take().map(SettledBy::new),
        _ => None,
    };
    let (state, expires_at) = match &*wire.status {
        "running" => running(
            wire.owner,
            wire.retention,
            wire.lease_until,
            pttl,
            server_now,
            local_now,
            key_expiry,
        )?,
        "done" => (
            EntryState::Done {
                result: wire
                    .result
                    .ok_or_else(|| Error::corrupt(key, "a done entry without a result"))?,
                completed_at,
            },
            key_expiry,
        ),
        "failed" => (
            EntryState::Failed {
                error: decode_error(key, wire.error)?,
                failed_at,
            },
            key_expiry,
        ),
        other => return Err(Error::corrupt(key, format!("unknown status {other:?}"))),
    };
    let settled_at = wire.settled_at.map(epoch_ms).or(completed_at).or(failed_at);
    // `startedAt` is required of running entries only; a settled entry of another writer
    // without one reads as started when it settled (or at the epoch, if that is unknown too).
    let started_at = wire
        .started_at
        .map(epoch_ms)
        .or(settled_at)
        .unwrap_or(UNIX_EPOCH);
    let attempts = wire
        .attempts
        .filter(|n| n.is_finite() && *n >= 0.0)
        .map_or(0, |n| n.min(f64::from(u32::MAX)) as u32);
    Ok(
        Entry::new(key.clone(), fingerprint, started_at, expires_at, state)
            .with_about(
                About::default()
                    .with_scope(wire.scope)
                    .with_tool(wire.tool)
                    .with_detail(wire.detail),
            )
            .with_first_started_at(wire.first_started_at.map(epoch_ms))
            .with_attempts(attempts)
            .with_settled_at(settled_at)
            .with_settled_by(settled_by),
    )
}

/// The state and deadline of a running entry: running while its lease lasts, else unknown.
/// Today's writers keep the key for the lease plus `retention`; the previous version wrote a
/// `lease_until` on the server's clock.
fn running(
    owner: Option<String>,
    retention: Option<f64>,
    lease_until: Option<f64>,
    pttl: Option<i64>,
    server_now: Option<i64>,
    local_now: SystemTime,
    key_expiry: Option<SystemTime>,
) -> Result<(EntryState, Option<SystemTime>)> {
    match (retention, lease_until) {
        (Some(retention), _) => {
            let pttl =
                pttl.ok_or_else(|| Error::store("a running entry read without its key's expiry"))?;
            // The key lives for the lease plus the retention: what is left above the
            // retention is what is left of the lease (-1, no expiry, is not ours: unknown).
            let left = if pttl < 0 {
                0.0
            } else {
                pttl as f64 - retention
            };
            let deadline = Some(shifted(local_now, left));
            if left > 0.0 {
                Ok((EntryState::Running { owner }, deadline))
            } else {
                Ok((EntryState::Unknown { owner }, deadline))
            }
        }
        (None, Some(until)) => {
            let server_now = server_now.ok_or_else(|| {
                Error::store("unexpected reply from the script: a leaseUntil without TIME")
            })?;
            let left = until - server_now as f64;
            let deadline = Some(shifted(local_now, left));
            if left > 0.0 {
                Ok((EntryState::Running { owner }, deadline))
            } else {
                Ok((EntryState::Unknown { owner }, deadline))
            }
        }
        (None, None) => Ok((EntryState::Running { owner }, key_expiry)),
    }
}

/// Our `{"message","class","detail"?}`, or, from other writers, a bare message or an object
/// with a `message` (read as permanent: it was stored to be replayed).
pub(super) fn decode_error(key: &OperationKey, error: Option<Json>) -> Result<ToolError> {
    match error {
        Some(Json::String(message)) => Ok(ToolError::permanent(message)),
        Some(value) => match serde_json::from_value::<ToolError>(value.clone()) {
            Ok(error) => Ok(error),
            Err(e) => match value.get("message").and_then(Json::as_str) {
                Some(message) => Ok(ToolError::permanent(message).with_detail(value.clone())),
                None => Err(Error::corrupt(key, format!("undecodable error: {e}"))),
            },
        },
        None => Err(Error::corrupt(key, "a failed entry without an error")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> OperationKey {
        "idem:0123456789abcdef0123456789abcdef".parse().unwrap()
    }

    /// The server's clock in the decoding tests.
    const SERVER_NOW: i64 = 1_764_400_010_000;

    /// Decodes `raw` read with a minute of `PTTL` left at [`SERVER_NOW`].
    fn decode(raw: &[u8]) -> Result<Entry> {
        decode_entry(
            &key(),
            raw,
            Some(60_000),
            Some(SERVER_NOW),
            SystemTime::now(),
        )
    }

    #[test]
    fn a_running_entry_past_its_lease_deadline_on_the_server_clock_is_unknown() {
        let raw = br#"{"status":"running","startedAt":1764400000000,"leaseUntil":1764400010000,"owner":"ab","fingerprint":"0000000000000000000000000000000000000000000000000000000000000000","firstStartedAt":1764390000000,"attempts":2,"scope":"run-1","tool":"send_email","detail":"smtp \"x\""}"#;
        let local = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let e = decode_entry(&key(), raw, Some(86_400_000), Some(SERVER_NOW), local).unwrap();
        assert_eq!(
            e.state,
            EntryState::Unknown {
                owner: Some("ab".into())
            }
        );
        assert_eq!(
            e.expires_at,
            Some(local),
            "the lease deadline, on the local clock"
        );
        assert_eq!(e.attempts, 2);
        assert_eq!(
            e.first_started_at,
            Some(UNIX_EPOCH + Duration::from_millis(1_764_390_000_000))
        );
        assert_eq!(e.about.scope.as_deref(), Some("run-1"));
        assert_eq!(e.about.tool.as_deref(), Some("send_email"));
        assert_eq!(e.about.detail.as_deref(), Some("smtp \"x\""));
        // One millisecond earlier on the server's clock it was still running.
        let e = decode_entry(&key(), raw, Some(86_400_000), Some(SERVER_NOW - 1), local).unwrap();
        assert!(matches!(e.state, EntryState::Running { .. }), "{e:?}");
        assert_eq!(e.expires_at, Some(local + Duration::from_millis(1)));
    }

    #[test]
    fn a_running_entry_of_today_is_running_while_its_key_outlives_its_retention() {
        let raw = br#"{"status":"running","startedAt":1,"owner":"ab","retention":60000,"fingerprint":"0000000000000000000000000000000000000000000000000000000000000000","firstStartedAt":1,"attempts":1}"#;
        let local = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        // No server clock needed, and the start (from a client's clock) plays no part.
        let e = decode_entry(&key(), raw, Some(60_001), None, local).unwrap();
        assert!(matches!(e.state, EntryState::Running { .. }), "{e:?}");
        assert_eq!(e.expires_at, Some(local + Duration::from_millis(1)));
        let e = decode_entry(&key(), raw, Some(60_000), None, local).unwrap();
        assert!(matches!(e.state, EntryState::Unknown { .. }), "{e:?}");
        assert_eq!(e.expires_at, Some(local));
        // Without the key's TTL it cannot be judged.
        assert!(decode_entry(&key(), raw, None, None, local).is_err());
    }

    #[test]
    fn a_running_entry_without_a_lease_deadline_is_running_while_its_key_lives() {
        // Today's version's shape: the key's PTTL is the lease.
        let raw = br#"{"status":"running","startedAt":1700000000000,"owner":"ab","fingerprint":"0000000000000000000000000000000000000000000000000000000000000000"}"#;
        let local = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let e = decode_entry(&key(), raw, Some(5_000), Some(SERVER_NOW), local).unwrap();
        assert_eq!(
            e.state,
            EntryState::Running {
                owner: Some("ab".into())
            }
        );
        assert_eq!(e.expires_at, Some(local + Duration::from_secs(5)));
        assert_eq!((e.attempts, e.first_started_at), (0, None));
        assert!(e.about.is_empty());
    }

    #[test]
    fn a_settled_entry_read_without_the_server_clock_decodes_and_a_lease_without_it_is_refused() {
        let done = br#"{"status":"done","result":{"n":1},"startedAt":1764400000000,"completedAt":1764400000001,"settledAt":1764400000001,"fingerprint":"0000000000000000000000000000000000000000000000000000000000000000"}"#;
        let two =
            |raw: &[u8]| Value::Array(vec![Value::BulkString(raw.to_vec()), Value::Int(60_000)]);
        let e = decode_read(&key(), two(done)).unwrap();
        assert!(matches!(e.state, EntryState::Done { .. }), "{e:?}");
        // A running entry of another writer (no lease deadline) needs no clock either.
        let theirs = br#"{"status":"running","startedAt":1700000000000}"#;
        let e = decode_read(&key(), two(theirs)).unwrap();
        assert!(matches!(e.state, EntryState::Running { .. }), "{e:?}");
        // Ours has a lease deadline: without the server's clock it cannot be judged.
        let ours = br#"{"status":"running","startedAt":1764400000000,"leaseUntil":1764400010000,"owner":"ab","fingerprint":"0000000000000000000000000000000000000000000000000000000000000000","firstStartedAt":1764390000000,"attempts":1}"#;
        assert!(decode_read(&key(), two(ours)).is_err());
        let three = Value::Array(vec![
            Value::BulkString(ours.to_vec()),
            Value::Int(60_000),
            Value::Int(SERVER_NOW),
        ]);
        assert!(matches!(
            decode_read(&key(), three).unwrap().state,
            EntryState::Unknown { .. }
        ));
        let four = Value::Array(vec![Value::Nil, Value::Nil, Value::Nil, Value::Nil]);
        assert!(decode_read(&key(), four).is_err());
    }

    #[test]
    fn a_fingerprint_written_with_escapes_reads_as_the_same_fingerprint() {
        // Borrowed from the value when it can be; another writer's escaped hex digits are
        // still the same digits.
        let hex = format!("{:064x}", 0xabcu32);
        let escaped = hex.replacen('a', "\\u0061", 1);
        let raw = |fp: &str| {
            format!(
                r#"{{"status":"done","result":1,"startedAt":1764400000000,"fingerprint":"{fp}"}}"#
            )
        };
        let plain = decode(raw(&hex).as_bytes()).unwrap();
        let other = decode(raw(&escaped).as_bytes()).unwrap();
        assert!(plain.fingerprint.is_some());
        assert_eq!(plain.fingerprint, other.fingerprint);
    }

    #[test]
    fn an_entry_of_the_reference_design_decodes_without_owner_or_fingerprint() {
        let raw = br#"{"status":"done","result":{"id":"ch_1","amount":500},"startedAt":1764400000000,"worker":"ts"}"#;
        let e = decode(raw).unwrap();
        assert_eq!(e.fingerprint, None);
        assert_eq!(
            e.started_at,
            UNIX_EPOCH + Duration::from_millis(1_764_400_000_000)
        );
        assert_eq!(
            e.state,
            EntryState::Done {
                result: serde_json::json!({"id": "ch_1", "amount": 500}).into(),
                completed_at: None
            }
        );
        let raw = br#"{"status":"running","startedAt":1764400000000}"#;
        let e = decode(raw).unwrap();
        assert_eq!(e.state, EntryState::Running { owner: None });
    }

    #[test]
    fn a_null_result_is_a_result_and_a_missing_one_is_corrupt() {
        let e = decode(br#"{"status":"done","result":null}"#).unwrap();
        assert!(matches!(
            &e.state,
            EntryState::Done { result, .. } if *result == Json::Null
        ));
        assert!(matches!(
            decode(br#"{"status":"done"}"#),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn garbage_and_unknown_states_are_corrupt() {
        for raw in [&b"not json"[..], b"[1]", br#"{"status":"paused"}"#, b"null"] {
            assert!(
                matches!(decode(raw), Err(Error::Corrupt { .. })),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn errors_of_other_writers_decode_leniently() {
        let e = decode(br#"{"status":"failed","error":"declined"}"#).unwrap();
        assert!(
            matches!(e.state, EntryState::Failed { ref error, .. } if error.message == "declined")
        );
        let e = decode(br#"{"status":"failed","error":{"message":"declined","code":42}}"#).unwrap();
        assert!(
            matches!(e.state, EntryState::Failed { ref error, .. } if error.message == "declined")
        );
    }
}
