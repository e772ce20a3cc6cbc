//! What a store may hold, and how stores read it back: the nesting limit every writer checks
//! before it stores a result (so that every reader, in any language, can read what was
//! stored), and the lenient reading of text another writer produced.

/// The deepest a stored result, or a stored error's detail, may nest (levels of arrays and
/// objects; a scalar is 0). Readers parse an entry with its own wrapping around the result
/// (the Redis wire format puts a result one level and an error's detail two levels deep), and
/// serde_json reads 127 levels in all; 100 leaves room for that wrapping on every store, and
/// is the number every writer checks before storing.
pub const MAX_STORED_DEPTH: usize = 100;

use serde_json::Value;

/// How deep `value` nests: 0 for a scalar, 1 for `[]` or `{}`, one more per level. Walks
/// without recursion, so a value nested a million levels (which a Rust tool can build) cannot
/// overflow the stack here.
pub(crate) fn nesting_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, depth)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(members) => Box::new(members.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        pending.extend(children.map(|child| (child, depth + 1)));
    }
    deepest
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn depth_counts_levels_of_arrays_and_objects() {
        assert_eq!(nesting_depth(&json!(1)), 0);
        assert_eq!(nesting_depth(&json!([])), 1);
        assert_eq!(nesting_depth(&json!({"a": [1, {"b": []}]})), 4);
        assert_eq!(nesting_depth(&json!([[1], [[[2]]], 3])), 4);
    }

    #[test]
    fn depth_of_a_value_nested_a_hundred_thousand_levels_does_not_overflow() {
        let mut value = json!(0);
        for _ in 0..100_000 {
            value = Value::Array(vec![value]);
        }
        assert_eq!(nesting_depth(&value), 100_000);
        // Dropping it recursively would overflow the test thread's stack: take it apart.
        while let Value::Array(mut items) = value {
            value = items.pop().unwrap_or(Value::Null);
        }
    }
}
