//! A tool's result as a store hands it back ([`Recorded`]): the JSON text it was stored as,
//! kept as it is where that text is exactly what serde_json writes for its value, or the value
//! read from it otherwise. A replay passes the text on to the model without reading it into a
//! `serde_json::Value` and writing it out again (which, with dropping the value, was 5.5k of a
//! replay's 45.4k instructions on Redis under callgrind; it now runs 41.2k, the text's check
//! and copy included); a caller that wants the value decodes it when it asks.

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

use crate::store::json::read_stored;
use crate::store::plain_json::plain_end;

/// A tool's recorded result: what [`EntryState::Done`](crate::store::EntryState::Done) holds,
/// and what a replayed [`ToolResult`](crate::ToolResult) carries. Built from a value
/// (`Recorded::from(value)`, as a store outside this crate does) or read by a store from the
/// text it kept; either way [`to_value`](Recorded::to_value) gives the value and
/// [`to_json`](Recorded::to_json) its JSON text as serde_json writes it. Two are equal when
/// their values are, and one equals a [`Value`] when its value does.
#[derive(Clone)]
pub struct Recorded(Repr);

#[derive(Clone)]
enum Repr {
    // Only the stores that keep text (SQLite, Redis, PostgreSQL) read results as text.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "redis", feature = "postgres")),
        allow(dead_code)
    )]
    /// Text in the plain form (`plain_json::plain_end`): serde_json reads it, always, and
    /// writes the value it reads as these very bytes.
    Text(Box<str>),
    Value(Value),
}

impl Recorded {
    /// The result as a value (decoded now, when it was kept as text).
    pub fn to_value(&self) -> Value {
        match &self.0 {
            Repr::Text(text) => decode(text),
            Repr::Value(value) => value.clone(),
        }
    }

    /// The result as a value, without a copy when it is held as one.
    pub fn into_value(self) -> Value {
        match self.0 {
            Repr::Text(text) => decode(&text),
            Repr::Value(value) => value,
        }
    }

    /// The result as JSON text, exactly as `serde_json::to_string` writes its value; borrowed
    /// when it was kept as text.
    pub fn to_json(&self) -> Cow<'_, str> {
        match &self.0 {
            Repr::Text(text) => Cow::Borrowed(text),
            Repr::Value(value) => Cow::Owned(value_text(value)),
        }
    }

    /// What a model reads for this result: a string as it is, anything else as its JSON text.
    pub(crate) fn content(&self) -> String {
        match &self.0 {
            // A plain string has no escapes: its text between the quotes is the string.
            Repr::Text(text) if text.starts_with('"') => text[1..text.len() - 1].to_owned(),
            Repr::Value(Value::String(s)) => s.clone(),
            _ => self.to_json().into_owned(),
        }
    }

    // Only the stores that keep text (SQLite, Redis, PostgreSQL) read results as text.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "redis", feature = "postgres")),
        allow(dead_code)
    )]
    /// Reads a result a store kept as `text`: kept as it is when it is in the plain form,
    /// else read as every stored result is ([`read_stored`]: lone surrogates repaired).
    pub(crate) fn read(text: &str) -> serde_json::Result<Self> {
        if plain_end(text.as_bytes(), 0) == Some(text.len()) {
            Ok(Recorded(Repr::Text(text.into())))
        } else {
            read_stored(text).map(|value| Recorded(Repr::Value(value)))
        }
    }

    // Only the stores that keep text (SQLite, Redis, PostgreSQL) read results as text.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "redis", feature = "postgres")),
        allow(dead_code)
    )]
    /// The result whose text starts at `at` in `text`, and where it ends, if that text is in
    /// the plain form (for a reader that finds a result inside a larger document).
    pub(crate) fn plain_at(text: &str, at: usize) -> Option<(Self, usize)> {
        let end = plain_end(text.as_bytes(), at)?;
        Some((Recorded(Repr::Text(text[at..end].into())), end))
    }
}

/// `serde_json::to_string`, which cannot fail for a `Value` (its keys are strings). Straight
/// into a buffer: `Display` writes each token through a formatter, which cost about as much as
/// the rest of a replay on the memory store.
fn value_text(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// The value of text in the plain form.
fn decode(text: &str) -> Value {
    // The plain form is a subset of JSON serde_json reads without a limit it could meet
    // (no number it refuses, no escape, at most MAX_STORED_DEPTH levels): a property test
    // holds every text `plain_end` accepts to this.
    serde_json::from_str(text).expect("text in the plain form is JSON serde_json reads")
}

impl From<Value> for Recorded {
    fn from(value: Value) -> Self {
        Recorded(Repr::Value(value))
    }
}

impl From<Recorded> for Value {
    fn from(recorded: Recorded) -> Self {
        recorded.into_value()
    }
}

impl PartialEq for Recorded {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            // serde_json writes one text per value, and plain text is that text.
            (Repr::Text(a), Repr::Text(b)) => a == b,
            (Repr::Value(a), Repr::Value(b)) => a == b,
            _ => self.to_value() == other.to_value(),
        }
    }
}

impl PartialEq<Value> for Recorded {
    fn eq(&self, other: &Value) -> bool {
        match &self.0 {
            Repr::Text(text) => decode(text) == *other,
            Repr::Value(value) => value == other,
        }
    }
}

impl PartialEq<Recorded> for Value {
    fn eq(&self, other: &Recorded) -> bool {
        other == self
    }
}

/// As the value's own `Debug`, whichever form it is held in.
impl fmt::Debug for Recorded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Text(text) => decode(text).fmt(f),
            Repr::Value(value) => value.fmt(f),
        }
    }
}

/// As its value.
impl serde::Serialize for Recorded {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Repr::Text(text) => decode(text).serialize(serializer),
            Repr::Value(value) => value.serialize(serializer),
        }
    }
}

/// As a value.
impl<'de> serde::Deserialize<'de> for Recorded {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Recorded::from)
    }
}

#[cfg(test)]
mod tests;
