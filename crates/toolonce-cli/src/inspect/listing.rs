//! The walk `toolonce ls` makes over a store: every page of the matching entries in the
//! store's order (its key order), keeping the newest `--limit` in a heap, so memory holds a page
//! and the limit whatever the size of the store; and the entries it could not read.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::process::ExitCode;
use std::time::SystemTime;

use serde_json::{Value, json};
use toolonce::{Entry, ListQuery, State, Store, Unreadable};

use crate::exit;
use crate::output::outln;

/// How many entries one page the walk asks the store for holds.
const PAGE: usize = 500;

/// Which entries `ls` lists.
#[derive(Default)]
pub(crate) struct Filters {
    pub(crate) state: Option<State>,
    pub(crate) scope: Option<String>,
    pub(crate) tool: Option<String>,
}

impl Filters {
    fn query(&self) -> ListQuery {
        let mut query = ListQuery::new().limit(PAGE);
        if let Some(state) = self.state {
            query = query.state(state);
        }
        if let Some(scope) = &self.scope {
            query = query.scope(scope.clone());
        }
        if let Some(tool) = &self.tool {
            query = query.tool(tool.clone());
        }
        query
    }

    /// The store filters; checked again here so that a store of another implementation (or an
    /// older version) that ignores a filter cannot show an operator the wrong entries.
    fn admit(&self, entry: &Entry) -> bool {
        !(self.state.is_some_and(|s| entry.state() != s)
            || self
                .scope
                .as_ref()
                .is_some_and(|s| entry.about.scope.as_ref() != Some(s))
            || self
                .tool
                .as_ref()
                .is_some_and(|t| entry.about.tool.as_ref() != Some(t)))
    }
}

/// What the walk found: the newest matching entries (newest first), how many matched in all,
/// and the entries it could not read.
pub(crate) struct Listing {
    pub(crate) entries: Vec<Entry>,
    pub(crate) matched: usize,
    pub(crate) unreadable: Unreadables,
}

/// Walks every page of `store`'s entries that pass `filters`, keeping the newest `limit`.
pub(crate) async fn newest(
    store: &dyn Store,
    filters: &Filters,
    limit: usize,
) -> anyhow::Result<Listing> {
    let mut newest: BinaryHeap<Reverse<Newest>> = BinaryHeap::new();
    let mut matched = 0usize;
    let mut unreadable = Unreadables::default();
    let mut cursor = None;
    loop {
        let mut query = filters.query();
        if let Some(c) = cursor.take() {
            query = query.cursor(c);
        }
        let page = store.list(&query).await?;
        unreadable.count += page.unreadable.len();
        unreadable.kept.extend(page.unreadable);
        unreadable.kept.truncate(limit.max(1));
        for entry in page.entries.into_iter().filter(|e| filters.admit(e)) {
            matched += 1;
            newest.push(Reverse(Newest(entry)));
            if newest.len() > limit {
                newest.pop();
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let entries = newest
        .into_sorted_vec()
        .into_iter()
        .map(|Reverse(Newest(e))| e)
        .collect();
    Ok(Listing {
        entries,
        matched,
        unreadable,
    })
}

/// The entries a listing could not decode: the first `--limit` kept, all counted. Shown
/// unless the store could tell the filters exclude them.
#[derive(Default)]
pub(crate) struct Unreadables {
    kept: Vec<Unreadable>,
    count: usize,
}

impl Unreadables {
    pub(super) fn json(&self) -> Value {
        let kept: Vec<Value> = self
            .kept
            .iter()
            .map(|u| json!({"key": u.key, "reason": u.reason}))
            .collect();
        json!({"entries": kept, "count": self.count})
    }

    pub(super) fn print(&self) -> anyhow::Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        outln!(
            "\n{} {} cannot be read (stored in a form this version does not decode). A call of \
             such an operation is answered that its outcome cannot be read, never run again, \
             until the entry's retention ends:",
            self.count,
            if self.count == 1 { "entry" } else { "entries" }
        );
        for u in &self.kept {
            outln!("  {}  {}", u.key, u.reason);
        }
        if self.count > self.kept.len() {
            outln!(
                "  ({} more: raise --limit to see them)",
                self.count - self.kept.len()
            );
        }
        Ok(())
    }

    /// Success when every entry was read; otherwise the code of an entry toolonce cannot read
    /// (70), after the whole listing, with the first on stderr for a script's log.
    pub(super) fn exit_code(&self) -> ExitCode {
        let Some(first) = self.kept.first() else {
            return ExitCode::SUCCESS;
        };
        eprintln!(
            "toolonce: {} listed {} cannot be read; the first: {}",
            self.count,
            if self.count == 1 { "entry" } else { "entries" },
            toolonce::Error::corrupt(&first.key, &first.reason)
        );
        ExitCode::from(exit::INTERNAL)
    }
}

/// An entry ordered by the start of its latest attempt (then by key, so the order is total).
struct Newest(Entry);

impl Newest {
    fn rank(&self) -> (SystemTime, &str) {
        (self.0.started_at, self.0.key.as_str())
    }
}

impl PartialEq for Newest {
    fn eq(&self, other: &Self) -> bool {
        self.rank() == other.rank()
    }
}

impl Eq for Newest {}

impl PartialOrd for Newest {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Newest {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}
