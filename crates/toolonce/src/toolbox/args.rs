//! How a toolbox reads a call's arguments: into the tool's own type, naming the offending field
//! when they do not fit, and noting the fields that type ignores. A field the tool never sees
//! cannot change what it does, so it must not make the call another operation: the key and the
//! fingerprint are derived from the arguments as the tool sees them.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::texts::Text;

/// Arguments read into the tool's type.
pub(super) struct Parsed<A> {
    /// The tool's arguments.
    pub(super) args: A,
    /// The arguments without the fields the type ignored, when it ignored any (`None`: the
    /// tool sees all of them).
    pub(super) seen: Option<Value>,
}

/// One step of the way to an ignored field.
enum Step {
    Index(usize),
    Member(String),
}

/// Deserializes the arguments, naming the offending field on error (`payment.amount: invalid
/// type: string "x", expected u64`), and noting every field the type ignored, at any depth.
pub(super) fn parse_typed<A: DeserializeOwned>(args: &Value) -> Result<Parsed<A>, String> {
    let mut ignored: Vec<Vec<Step>> = Vec::new();
    let parsed: Result<A, _> = serde_ignored::deserialize(args, |path| ignored.push(steps(&path)));
    match parsed {
        Ok(parsed) => {
            let seen = (!ignored.is_empty()).then(|| without(args, &ignored));
            Ok(Parsed { args: parsed, seen })
        }
        // Tracking the path costs as much as the rest of a replay, so it runs only to explain
        // a failure.
        Err(_) => Err(explain::<A>(args)),
    }
}

/// Why the arguments do not fit `A`, with the path of the offending field.
fn explain<A: DeserializeOwned>(args: &Value) -> String {
    match serde_path_to_error::deserialize::<_, A>(args) {
        Ok(_) => Text::MisfitType.fill(&[]),
        Err(e) => {
            let path = e.path().to_string();
            if path == "." {
                e.into_inner().to_string()
            } else {
                format!("{path}: {}", e.into_inner())
            }
        }
    }
}

/// The steps from the root to `path`'s field. `Some` and newtypes are the same JSON level.
fn steps(path: &serde_ignored::Path<'_>) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut at = path;
    loop {
        at = match at {
            serde_ignored::Path::Root => break,
            serde_ignored::Path::Seq { parent, index } => {
                steps.push(Step::Index(*index));
                parent
            }
            serde_ignored::Path::Map { parent, key } => {
                steps.push(Step::Member(key.clone()));
                parent
            }
            serde_ignored::Path::Some { parent }
            | serde_ignored::Path::NewtypeStruct { parent }
            | serde_ignored::Path::NewtypeVariant { parent } => parent,
        };
    }
    steps.reverse();
    steps
}

/// `args` without the fields at `ignored`. A path that does not lead to an object member (a
/// type that buffered its input, as `flatten` does, reports paths of its own) removes nothing:
/// keeping a field only makes the key stricter.
fn without(args: &Value, ignored: &[Vec<Step>]) -> Value {
    let mut seen = args.clone();
    for path in ignored {
        let Some((Step::Member(last), parents)) = path.split_last() else {
            continue;
        };
        let mut at = Some(&mut seen);
        for step in parents {
            at = match (at, step) {
                (Some(Value::Object(members)), Step::Member(name)) => members.get_mut(name),
                (Some(Value::Array(items)), Step::Index(index)) => items.get_mut(*index),
                _ => None,
            };
        }
        if let Some(Value::Object(members)) = at {
            members.remove(last);
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Ticket {
        title: String,
        labels: Vec<Label>,
        assignee: Option<Person>,
    }

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Label {
        name: String,
    }

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Person {
        login: String,
    }

    #[test]
    fn fields_the_type_ignores_are_left_out_at_every_depth() {
        let args = json!({
            "title": "x",
            "note": "retrying",
            "labels": [{"name": "bug", "colour": "red"}],
            "assignee": {"login": "ada", "mood": "busy"}
        });
        let parsed: Parsed<Ticket> = parse_typed(&args).unwrap();
        assert_eq!(
            parsed.seen,
            Some(json!({
                "title": "x",
                "labels": [{"name": "bug"}],
                "assignee": {"login": "ada"}
            }))
        );
    }

    #[test]
    fn arguments_the_type_reads_whole_are_seen_whole() {
        let args = json!({"title": "x", "labels": [], "assignee": null});
        let parsed: Parsed<Ticket> = parse_typed(&args).unwrap();
        assert!(parsed.seen.is_none());
        let anything: Parsed<Value> = parse_typed(&json!({"any": [1, {"thing": 2}]})).unwrap();
        assert!(anything.seen.is_none());
    }

    #[test]
    fn a_misfit_names_the_field() {
        let err = parse_typed::<Ticket>(&json!({"title": "x", "labels": [{"name": 1}]}))
            .err()
            .unwrap();
        assert!(err.starts_with("labels[0].name: invalid type"), "{err}");
    }
}
