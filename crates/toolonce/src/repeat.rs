//! The repeat ordinal: how a model says it performs the same action again on purpose.
//!
//! An operation's identity is (scope, tool, canonical arguments), so an intended second "pay
//! Bob 5" looks exactly like a retry of the first. Only the model knows which it meant, so a
//! write tool shown to a model gets an optional top-level argument (by default `repeat`) by
//! which it says so. Every surface (the [`Toolbox`](crate::Toolbox), the `toolonce mcp` proxy,
//! the Python binding) takes it out of the arguments here with [`take`], before they are keyed,
//! fingerprinted or handed to the tool, and shows it in the tool's schema with
//! [`add_to_schema`]: one implementation of the rule, which `tests/data/key_repeats.json`
//! states as data for the TypeScript package too.
//!
//! Absent, `null` or 1 is the first time, whose key is the key every earlier version derived. A
//! whole number N from 2 to [`MAX`] appends `NUL "toolonce/repeat" NUL N` to the key text (see
//! [`crate::key::derive_repeat`]); canonical JSON never holds a raw NUL, so no arguments can
//! give the key of a repeat. Anything else is refused, and nothing is claimed or run.

use serde_json::{Map, Value, json};

use crate::texts::Text;
use crate::{Error, Result};

/// The argument's name unless configured otherwise.
pub const DEFAULT_NAME: &str = "repeat";

/// The largest ordinal: far beyond any intended repeat of one action in one scope, and small
/// enough that a model's runaway loop is refused rather than keyed.
pub const MAX: u32 = 1000;

/// What the key text of a repeat gets before its ordinal.
pub(crate) const MARKER: &str = "\0toolonce/repeat\0";

/// The longest part of a refused value quoted back, in characters.
const QUOTED_MAX: usize = 40;

/// Which time an action is performed on purpose in its scope: 1 (the first, the default) to
/// [`MAX`]. A retry of the same attempt keeps its ordinal, so it stays one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Repeat(u32);

impl Repeat {
    /// The first time: the key of the arguments alone.
    pub const FIRST: Repeat = Repeat(1);

    /// The ordinal `n`, for a caller that keys programmatically.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArguments`] naming the range if `n` is 0 or beyond [`MAX`].
    pub fn new(n: u64) -> Result<Repeat> {
        match u32::try_from(n) {
            Ok(n) if (1..=MAX).contains(&n) => Ok(Repeat(n)),
            _ => Err(Error::InvalidArguments(format!(
                "the repeat ordinal {n} is out of range: it must be a whole number from 1 to {MAX}"
            ))),
        }
    }

    /// The ordinal.
    pub fn get(self) -> u32 {
        self.0
    }

    /// The ordinal a further repeat on purpose would have.
    pub fn next(self) -> u32 {
        self.0 + 1
    }

    /// Appends what the key text of this ordinal gets: nothing for the first time.
    pub(crate) fn push_key_suffix(self, text: &mut String) {
        if self != Repeat::FIRST {
            text.push_str(MARKER);
            text.push_str(&self.0.to_string());
        }
    }
}

impl Default for Repeat {
    fn default() -> Self {
        Repeat::FIRST
    }
}

/// A value of the repeat argument that is not an ordinal. Nothing is claimed or run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidRepeat {
    /// The argument's name.
    pub name: String,
    /// The value as compact JSON, cut after 40 characters (then `…`).
    pub got: String,
}

impl InvalidRepeat {
    /// The text the model reads (`repeat_invalid`): what was wrong, that nothing ran, and how
    /// to call `tool` instead.
    pub fn message(&self, tool: &str) -> String {
        Text::RepeatInvalid.fill(&[
            ("repeat", &self.name),
            ("max", &MAX.to_string()),
            ("got", &self.got),
            ("tool", tool),
        ])
    }
}

impl std::fmt::Display for InvalidRepeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` must be a whole number from 1 to {MAX} (got {})",
            self.name, self.got
        )
    }
}

impl std::error::Error for InvalidRepeat {}

/// Takes the argument `name` out of the top level of `args` (arguments that are not an object
/// have none) and reads it as an ordinal: absent or `null` is the first time, and a number
/// whose value is a whole number from 1 to [`MAX`] (`2`, `2.0`, `2e0`) is that ordinal.
///
/// # Errors
///
/// [`InvalidRepeat`] for anything else (0, a negative, beyond [`MAX`], a fraction, text, a
/// boolean, an array, an object); `args` then still lacks the member, and must not be run.
///
/// ```
/// let mut args = serde_json::json!({"to": "bob", "cents": 500, "repeat": 2});
/// let repeat = toolonce::repeat::take(&mut args, "repeat").unwrap();
/// assert_eq!(repeat.get(), 2);
/// assert_eq!(args, serde_json::json!({"to": "bob", "cents": 500}));
/// ```
pub fn take(args: &mut Value, name: &str) -> std::result::Result<Repeat, InvalidRepeat> {
    let Some(value) = args
        .as_object_mut()
        .and_then(|members| members.remove(name))
    else {
        return Ok(Repeat::FIRST);
    };
    ordinal_of(&value).ok_or_else(|| InvalidRepeat {
        name: name.to_owned(),
        got: quoted(&value),
    })
}

/// The ordinal a value stands for, if it stands for one.
fn ordinal_of(value: &Value) -> Option<Repeat> {
    let number = match value {
        Value::Null => return Some(Repeat::FIRST),
        Value::Number(number) => number,
        _ => return None,
    };
    if let Some(n) = number.as_u64() {
        return Repeat::new(n).ok();
    }
    let n = number.as_f64()?;
    // A whole number written with a fraction or an exponent (2.0, 2e0) is that number.
    if n.fract() == 0.0 && (1.0..=f64::from(MAX)).contains(&n) {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        return Repeat::new(n as u64).ok();
    }
    None
}

/// `value` as compact JSON, cut after [`QUOTED_MAX`] characters.
fn quoted(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(QUOTED_MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The schema property of the argument, as a tool definition shows it to the model.
pub fn schema_property() -> Value {
    json!({
        "type": "integer",
        "minimum": 1,
        "maximum": MAX,
        "description": Text::RepeatDescription.fill(&[]),
    })
}

/// Adds the optional property `name` ([`schema_property`]) to a tool's JSON Schema of its
/// arguments; `false`, leaving the schema alone, if it already has a property of that name (the
/// tool's own, which it keeps: the caller should say so) or is not an object schema.
pub fn add_to_schema(schema: &mut Value, name: &str) -> bool {
    let Some(schema) = schema.as_object_mut() else {
        return false;
    };
    let properties = schema
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    match properties.as_object_mut() {
        Some(properties) if !properties.contains_key(name) => {
            properties.insert(name.to_owned(), schema_property());
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_value_is_quoted_compactly_and_cut_after_forty_characters() {
        let mut args = json!({"repeat": "é".repeat(60)});
        let refused = take(&mut args, "repeat").unwrap_err();
        assert_eq!(refused.got.chars().count(), QUOTED_MAX + 1);
        assert!(refused.got.starts_with("\"é") && refused.got.ends_with('…'));
        let mut args = json!({"repeat": {"n": 2}});
        assert_eq!(take(&mut args, "repeat").unwrap_err().got, r#"{"n":2}"#);
    }

    #[test]
    fn an_ordinal_in_code_is_checked_as_the_argument_is() {
        assert_eq!(Repeat::new(1).unwrap(), Repeat::FIRST);
        assert_eq!(Repeat::new(u64::from(MAX)).unwrap().get(), MAX);
        for bad in [0, u64::from(MAX) + 1, u64::MAX] {
            assert!(matches!(Repeat::new(bad), Err(Error::InvalidArguments(_))));
        }
    }

    #[test]
    fn a_schema_that_has_the_property_keeps_its_own() {
        let own = json!({"type": "object", "properties": {"repeat": {"type": "string"}}});
        let mut schema = own.clone();
        assert!(!add_to_schema(&mut schema, "repeat"));
        assert_eq!(schema, own);
        let mut bare = json!({"type": "object"});
        assert!(add_to_schema(&mut bare, "repeat"));
        assert_eq!(bare["properties"]["repeat"]["type"], "integer");
        assert!(!add_to_schema(&mut json!(true), "repeat"));
    }
}
