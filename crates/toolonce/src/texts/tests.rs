//! The file and the table agree, every template is used by some implementation, and filling
//! puts each value in once and as it is.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::*;

/// The placeholders of a template: the names in single braces.
fn placeholders(template: &str) -> BTreeSet<&str> {
    template
        .split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(name, _)| name))
        .collect()
}

#[test]
fn the_file_has_exactly_the_templates_named_here_with_their_placeholders() {
    let names: BTreeSet<&str> = Text::ALL.iter().map(|t| t.name()).collect();
    let file: BTreeSet<&str> = TEXTS.keys().map(String::as_str).collect();
    assert_eq!(names, file);
    for text in Text::ALL {
        let declared: BTreeSet<&str> = text.placeholders().iter().copied().collect();
        assert_eq!(placeholders(&TEXTS[text.name()]), declared, "{text:?}");
        assert_eq!(Text::named(text.name()), Some(*text));
    }
    assert_eq!(Text::named("no_such_text"), None);
}

/// The repository's files under `dir` whose names end with `ext`.
fn sources(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "node_modules") {
            found.extend(sources(&path, ext));
        } else if path.to_string_lossy().ends_with(ext) {
            found.push(path);
        }
    }
    found
}

/// The names of the templates the repository's sources use: `Text::Variant` in Rust,
/// `text("name"` in TypeScript and Python.
fn used() -> BTreeSet<String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let read = |p: &PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    let mut used = BTreeSet::new();
    let rust = [repo.join("crates"), repo.join("bindings/python/src")];
    for file in rust.iter().flat_map(|d| sources(d, ".rs")) {
        // The table and its tests name every template: a use is elsewhere.
        if file.ends_with("src/texts.rs") || file.ends_with("src/texts/tests.rs") {
            continue;
        }
        for after in read(&file).split("Text::").skip(1) {
            let variant: String = after
                .chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect();
            if let Some(text) = Text::ALL.iter().find(|t| format!("{t:?}") == variant) {
                used.insert(text.name().to_owned());
            }
        }
    }
    let others = [
        (repo.join("typescript/src"), ".ts"),
        (repo.join("bindings/python/python/toolonce"), ".py"),
    ];
    for (dir, ext) in others {
        for file in sources(&dir, ext) {
            for call in read(&file).split("text(\"").skip(1) {
                if let Some((name, _)) = call.split_once('"') {
                    used.insert(name.to_owned());
                }
            }
        }
    }
    used
}

#[test]
fn every_template_is_used_by_some_implementation_and_every_use_has_one() {
    let used = used();
    let names: BTreeSet<String> = Text::ALL.iter().map(|t| t.name().to_owned()).collect();
    let unused: Vec<&String> = names.difference(&used).collect();
    assert!(unused.is_empty(), "no implementation uses {unused:?}");
    let unknown: Vec<&String> = used.difference(&names).collect();
    assert!(
        unknown.is_empty(),
        "the sources use {unknown:?}, which the file lacks"
    );
}

#[test]
fn a_value_with_braces_is_put_in_as_it_is() {
    let filled = fill("a {x} b {y}", &[("x", "{y}"), ("y", "2")]);
    assert_eq!(filled, "a {y} b 2");
    assert_eq!(fill("{ not } {x", &[("x", "1")]), "{ not } {x");
}

#[test]
fn values_fit_a_template_only_when_they_name_each_placeholder_and_nothing_else() {
    let both = [("tool", "pay"), ("key", "idem:1")];
    assert!(Text::Conflict.fits(&both));
    assert!(!Text::Conflict.fits(&both[..1]));
    assert!(!Text::Conflict.fits(&[("tool", "pay"), ("key", "k"), ("stray", "x")]));
    assert!(!Text::Conflict.fits(&[("tool", "pay"), ("tool", "pay")]));
    assert!(Text::NoticeNotOwner.fits(&[]));
    let filled = Text::Conflict.fill(&both);
    assert!(
        filled.starts_with("Conflict: an earlier call of `pay`"),
        "{filled}"
    );
    assert!(!filled.contains('{'), "{filled}");
}
