//! What a replay tells the model beside the recorded result: that the identical call already
//! took effect (or failed) in this scope, when, under which key, and how to perform it again
//! on purpose. The recorded result itself stays exactly as it was first answered; the note is
//! data of the [`WriteAnswer`](super::WriteAnswer), which each surface renders in its format.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::key::Derived;
use crate::repeat::Repeat;

use crate::texts::Text;

/// The note of a replay (`replayed` or `replayed_failure`), for the model.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayNote {
    /// When the earlier call's outcome was recorded (its result or its error), if the store
    /// kept it.
    pub recorded_at: Option<SystemTime>,
    /// The ordinal of this call (see [`crate::repeat`]); a repeat on purpose has the next.
    pub repeat: Repeat,
    /// The text for the model: the `replayed` (or `replayed_failure`) text, then how to repeat
    /// it on purpose (`repeat_hint`), or that it cannot be (`repeat_off`).
    pub text: String,
}

impl ReplayNote {
    /// The note of a replay of `op` by `tool`; `failed` for a replayed failure; `argument` the
    /// tool's repeat argument, if it has one.
    pub(crate) fn new(
        tool: &str,
        op: &Derived,
        failed: bool,
        recorded_at: Option<SystemTime>,
        argument: Option<&str>,
    ) -> ReplayNote {
        // The store may not have recorded it (an entry written by a writer that keeps no
        // settle time).
        let when = recorded_at.map_or_else(|| Text::TimeUnrecorded.fill(&[]), utc_seconds);
        let first = if failed {
            Text::ReplayedFailure
        } else {
            Text::Replayed
        };
        let mut text = first.fill(&[("tool", tool), ("when", &when), ("key", op.key.as_str())]);
        text.push(' ');
        text.push_str(&match argument {
            // At the largest ordinal there is no next one to offer.
            Some(name) if op.repeat.get() >= crate::repeat::MAX => Text::RepeatLimit
                .fill(&[("repeat", name), ("max", &crate::repeat::MAX.to_string())]),
            Some(name) => Text::RepeatHint.fill(&[
                ("tool", tool),
                ("repeat", name),
                ("next", &op.repeat.next().to_string()),
            ]),
            None => Text::RepeatOff.fill(&[]),
        });
        ReplayNote {
            recorded_at,
            repeat: op.repeat,
            text,
        }
    }
}

/// `time` in ISO 8601, UTC, to the second: `2026-12-07T12:30:01Z` (a time before 1970 as 1970).
pub fn utc_seconds(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, of_day) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// The Gregorian date of a day count since 1970-01-01 (Howard Hinnant's `civil_from_days`, for
/// days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let (era, doe) = (z / 146_097, z % 146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn derived(repeat: u32) -> Derived {
        let repeat = Repeat::new(u64::from(repeat)).unwrap();
        crate::key::derive_repeat(
            "run-1",
            "pay",
            &serde_json::json!({"to": "bob"}),
            None,
            repeat,
        )
        .unwrap()
    }

    #[test]
    fn at_the_largest_ordinal_the_note_offers_no_next_one_and_says_the_limit_is_reached() {
        let max = crate::repeat::MAX;
        let note = ReplayNote::new("pay", &derived(max), false, None, Some("repeat"));
        assert!(!note.text.contains(&(max + 1).to_string()), "{}", note.text);
        assert!(
            note.text.ends_with(
                &Text::RepeatLimit.fill(&[("repeat", "repeat"), ("max", &max.to_string())])
            ),
            "{}",
            note.text
        );
        let below = ReplayNote::new("pay", &derived(max - 1), false, None, Some("repeat"));
        assert!(
            below.text.contains(&format!("\"repeat\": {max}")),
            "{}",
            below.text
        );
    }

    #[test]
    fn an_unrecorded_time_is_the_files_text() {
        let note = ReplayNote::new("pay", &derived(1), false, None, None);
        assert!(
            note.text.contains(&Text::TimeUnrecorded.fill(&[])),
            "{}",
            note.text
        );
    }

    #[test]
    fn times_are_utc_to_the_second() {
        assert_eq!(utc_seconds(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_000_000_923);
        assert_eq!(utc_seconds(t), "2026-11-30T00:53:20Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_661);
        assert_eq!(utc_seconds(leap), "2000-02-29T01:01:01Z");
    }
}
