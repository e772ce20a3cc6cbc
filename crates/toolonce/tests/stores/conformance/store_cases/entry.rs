//! Checks an entry against what a step expects of it (README, "Entries"): its state, what it
//! holds, its names resolved in the run, its times, and fields equal to (or apart from) those
//! of an entry read earlier.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use toolonce::{Entry, EntryState, ErrorClass, ToolError};

use super::format::{Compare, EntryExpect, ErrorValue};
use super::names::Names;

type Checked = Result<(), String>;

/// Whether `entry` shows everything `wanted` asks; `reads` are the entries read `as` labels.
pub fn matches(
    entry: &Entry,
    wanted: &EntryExpect,
    names: &Names,
    reads: &HashMap<String, Entry>,
) -> Checked {
    let shown = || format!("{entry:?}");
    let state = entry.state().as_str();
    if wanted.state.as_deref().is_some_and(|s| s != state) {
        return Err(format!(
            "state {state}, expected {:?}: {}",
            wanted.state,
            shown()
        ));
    }
    if wanted.attempts.is_some_and(|a| a != entry.attempts) {
        return Err(format!(
            "attempts {}, expected {:?}",
            entry.attempts, wanted.attempts
        ));
    }
    if let Some(name) = &wanted.fingerprint
        && entry.fingerprint.as_ref() != Some(&names.fingerprint(Some(name)))
    {
        return Err(format!("not the fingerprint {name}: {}", shown()));
    }
    if let Some(name) = &wanted.owner {
        owner_matches(entry, name, names)?;
    }
    if let Some(result) = &wanted.result {
        match &entry.state {
            EntryState::Done { result: got, .. } if got == result => {}
            other => return Err(format!("{other:?}, expected the result {result}")),
        }
    }
    if let Some(error) = &wanted.error {
        match &entry.state {
            EntryState::Failed { error: got, .. } => error_matches(got, error)?,
            other => return Err(format!("{other:?}, expected the error {:?}", error.message)),
        }
    }
    if let Some(about) = &wanted.about {
        let want = json!({
            "scope": about.scope.as_deref().map(|s| names.scope(Some(s))),
            "tool": about.tool, "detail": about.detail,
        });
        if field(entry, "about")? != want {
            return Err(format!("about {:?}, expected {want}", entry.about));
        }
    }
    times_match(entry, wanted)?;
    for (compare, same) in [(&wanted.same_as, true), (&wanted.differs_from, false)] {
        if let Some(compare) = compare {
            compared(entry, compare, same, reads)?;
        }
    }
    Ok(())
}

/// The entry shows `name`'s token as its holder: the token itself, or, where duplicates read
/// the entry's value (Redis), the token's SHA-1 in hex.
fn owner_matches(entry: &Entry, name: &str, names: &Names) -> Checked {
    let token = names
        .known_owner(name)
        .ok_or(format!("no owner {name} ever claimed"))?;
    let shown = match &entry.state {
        EntryState::Running { owner: Some(o) } | EntryState::Unknown { owner: Some(o) } => o,
        other => return Err(format!("{other:?}, expected {name} as its holder")),
    };
    let digest = sha1_smol::Sha1::from(token.as_str()).digest().to_string();
    if shown != token.as_str() && *shown != digest {
        return Err(format!(
            "the entry shows {shown:?}, not {name}'s token nor its digest"
        ));
    }
    Ok(())
}

fn error_matches(got: &ToolError, wanted: &ErrorValue) -> Checked {
    let class = match got.class {
        ErrorClass::Permanent => "permanent",
        _ => "transient",
    };
    if got.message != wanted.message
        || wanted.class.as_deref().is_some_and(|c| c != class)
        || wanted
            .detail
            .as_ref()
            .is_some_and(|d| got.detail.as_ref() != Some(d))
    {
        return Err(format!(
            "error {got:?}, expected {:?} {:?} {:?}",
            wanted.message, wanted.class, wanted.detail
        ));
    }
    Ok(())
}

/// Signed ms from now to `t`.
fn from_now(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::now()) {
        Ok(ahead) => ahead.as_millis() as i64,
        Err(behind) => -(behind.duration().as_millis() as i64),
    }
}

fn times_match(entry: &Entry, wanted: &EntryExpect) -> Checked {
    if wanted
        .expires
        .is_some_and(|e| e != entry.expires_at.is_some())
    {
        return Err(format!(
            "expiry {:?}, expected one: {:?}",
            entry.expires_at, wanted.expires
        ));
    }
    if let Some((lo, hi)) = wanted.expires_in_ms {
        let at = entry.expires_at.ok_or("no expiry known")?;
        let left = from_now(at);
        if left < lo || hi.is_some_and(|hi| left > hi) {
            return Err(format!(
                "expires in {left} ms, expected within [{lo}, {hi:?}]"
            ));
        }
    }
    if let Some((lo, hi)) = wanted.started_ago_ms {
        let ago = -from_now(entry.started_at);
        if ago < lo || ago > hi {
            return Err(format!(
                "started {ago} ms ago, expected within [{lo}, {hi}]"
            ));
        }
    }
    match wanted.first_start.as_deref() {
        None => {}
        Some("own") if entry.first_started_at == Some(entry.started_at) => {}
        Some("earlier") if entry.first_started_at.is_some_and(|f| f < entry.started_at) => {}
        Some(other) => {
            return Err(format!(
                "first start {:?}, start {:?}: expected {other}",
                entry.first_started_at, entry.started_at
            ));
        }
    }
    if let Some(settled) = wanted.settled {
        match (entry.settled_at, settled) {
            (None, false) => {}
            (Some(at), true) if entry.first_started_at.is_none_or(|f| at >= f) => {}
            (at, _) => return Err(format!("settled at {at:?}, expected settled: {settled}")),
        }
    }
    Ok(())
}

fn compared(
    entry: &Entry,
    compare: &Compare,
    same: bool,
    reads: &HashMap<String, Entry>,
) -> Checked {
    let earlier = reads
        .get(&compare.label)
        .ok_or(format!("nothing read as {}", compare.label))?;
    for name in &compare.fields {
        let (now, then) = (field(entry, name)?, field(earlier, name)?);
        if (now == then) != same {
            let how = if same { "the same as" } else { "other than" };
            return Err(format!(
                "{name} {now}, expected {how} {then} (read as {})",
                compare.label
            ));
        }
    }
    Ok(())
}

fn ms(t: Option<SystemTime>) -> Value {
    t.map_or(Value::Null, |t| {
        let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        Value::String(d.as_nanos().to_string())
    })
}

/// One field of an entry as a value, for comparisons.
fn field(entry: &Entry, name: &str) -> Result<Value, String> {
    Ok(match name {
        "state" => json!(entry.state().as_str()),
        "attempts" => json!(entry.attempts),
        "fingerprint" => json!(entry.fingerprint.as_ref().map(|f| f.as_str())),
        "about" => {
            json!({"scope": entry.about.scope, "tool": entry.about.tool, "detail": entry.about.detail})
        }
        "started_at" => ms(Some(entry.started_at)),
        "first_started_at" => ms(entry.first_started_at),
        "settled_at" => ms(entry.settled_at),
        "result" => match &entry.state {
            EntryState::Done { result, .. } => result.clone().into_value(),
            _ => Value::Null,
        },
        "error" => match &entry.state {
            EntryState::Failed { error, .. } => {
                serde_json::to_value(error).map_err(|e| e.to_string())?
            }
            _ => Value::Null,
        },
        other => return Err(format!("no entry field {other:?} to compare")),
    })
}
