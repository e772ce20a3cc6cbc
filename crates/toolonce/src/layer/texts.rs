//! The texts the layer answers with instead of the tool, from one file shared with the
//! TypeScript package (`data/texts.json`): parsed once, each a template whose `{name}`
//! placeholders are filled in one pass (a value that holds braces is never read as one).
//! [`Text`] names every template and its placeholders; a test checks the file has exactly these.

use std::collections::HashMap;
use std::sync::LazyLock;

/// The file, embedded at build time.
const FILE: &str = include_str!("../../data/texts.json");

static TEXTS: LazyLock<HashMap<String, String>> = LazyLock::new(|| {
    let file: serde_json::Value = serde_json::from_str(FILE).expect("data/texts.json is JSON");
    serde_json::from_value(file["texts"].clone()).expect("data/texts.json has its texts")
});

/// A template of the file, by its name there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Text {
    Held,
    Unreadable,
    StoreUnavailable,
    InFlight,
    Conflict,
    Misconfigured,
    Unstorable,
    NoticeUnreplicated,
    NoticeNotOwner,
    NoticeUnrecorded,
}

impl Text {
    #[cfg(test)]
    const ALL: [Text; 10] = [
        Text::Held,
        Text::Unreadable,
        Text::StoreUnavailable,
        Text::InFlight,
        Text::Conflict,
        Text::Misconfigured,
        Text::Unstorable,
        Text::NoticeUnreplicated,
        Text::NoticeNotOwner,
        Text::NoticeUnrecorded,
    ];

    fn name(self) -> &'static str {
        match self {
            Text::Held => "held",
            Text::Unreadable => "unreadable",
            Text::StoreUnavailable => "store_unavailable",
            Text::InFlight => "in_flight",
            Text::Conflict => "conflict",
            Text::Misconfigured => "misconfigured",
            Text::Unstorable => "unstorable",
            Text::NoticeUnreplicated => "notice_unreplicated",
            Text::NoticeNotOwner => "notice_not_owner",
            Text::NoticeUnrecorded => "notice_unrecorded",
        }
    }

    /// The text with `values` (name, value) in place of its placeholders.
    pub(crate) fn fill(self, values: &[(&str, &str)]) -> String {
        let template = TEXTS.get(self.name()).map_or("", String::as_str);
        fill(template, values)
    }
}

/// `template` with each `{name}` that `values` names replaced, in one pass; other braces stay.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let value = after.find('}').and_then(|close| {
            let name = &after[..close];
            values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v, close))
        });
        match value {
            Some((v, close)) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The placeholders of a template: the names in single braces.
    fn placeholders(template: &str) -> BTreeSet<String> {
        template
            .split('{')
            .skip(1)
            .filter_map(|s| s.split_once('}').map(|(name, _)| name.to_owned()))
            .collect()
    }

    fn declared(text: Text) -> BTreeSet<String> {
        let names: &[&str] = match text {
            Text::Held | Text::InFlight | Text::Conflict => &["tool", "key"],
            Text::Unreadable => &["tool", "key", "report"],
            Text::StoreUnavailable => &["tool", "report"],
            Text::Misconfigured => &["tool", "error"],
            Text::Unstorable => &["tool", "why"],
            Text::NoticeUnreplicated => &["short"],
            Text::NoticeNotOwner | Text::NoticeUnrecorded => &[],
        };
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn the_file_has_exactly_the_templates_the_layer_uses_with_the_placeholders_it_fills() {
        let names: BTreeSet<&str> = Text::ALL.iter().map(|t| t.name()).collect();
        let file: BTreeSet<&str> = TEXTS.keys().map(String::as_str).collect();
        assert_eq!(names, file);
        for text in Text::ALL {
            assert_eq!(
                placeholders(&TEXTS[text.name()]),
                declared(text),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_value_with_braces_is_put_in_as_it_is() {
        let filled = fill("a {x} b {y}", &[("x", "{y}"), ("y", "2")]);
        assert_eq!(filled, "a {y} b 2");
        assert_eq!(fill("{ not } {x", &[("x", "1")]), "{ not } {x");
    }
}
