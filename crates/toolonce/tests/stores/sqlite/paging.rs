//! A store far larger than a page or a purge batch: the operator's listing pages through every
//! live entry once, and a purge removes every expired row over several batches (ties at a
//! batch's cutoff included) and keeps every live one.

use super::*;

/// How many rows a purge deletes per transaction (the store's `PURGE_BATCH`).
const BATCH: i64 = 10_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Writes `n` settled rows straight into the file, one transaction, keys numbered from
/// `first`; `kept_until(i)` says until when row `i` is kept.
fn insert_done(path: &Path, first: u64, n: u64, kept_until: impl Fn(u64) -> i64) {
    let mut conn = raw(path);
    let tx = conn.transaction().unwrap();
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO toolonce_entries (key, state, started_at, kept_until, settled_at, \
                 payload, scope, tool, attempts) \
                 VALUES (?1, 'done', ?2, ?3, ?2, '{\"ok\":true}', 'paging', 'fill', 1)",
            )
            .unwrap();
        let started = now_ms() - 10_000_000;
        for i in first..first + n {
            insert
                .execute(rusqlite::params![
                    format!("idem:{i:032x}"),
                    started,
                    kept_until(i)
                ])
                .unwrap();
        }
    }
    tx.commit().unwrap();
}

#[tokio::test]
async fn a_purge_of_several_batches_removes_every_expired_row_and_the_listing_pages_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("paging.db");
    let store = SqliteStore::open(&path).unwrap();
    let now = now_ms();
    // Two batches and a half of expired rows, each its own millisecond, then a tie of more
    // than a batch sharing one, and live rows among them in key order.
    insert_done(&path, 0, 25_000, |i| now - 5_000_000 + i as i64);
    insert_done(&path, 25_000, BATCH as u64 + 7, |_| now - 1_000);
    insert_done(&path, 100_000, 1_234, |_| now + 3_600_000);

    // Every live row exactly once, in key order, a page of at most 100 at a time.
    let (mut listed, mut cursor, mut pages) = (Vec::new(), None, 0);
    loop {
        let mut query = ListQuery::new().scope("paging");
        if let Some(c) = cursor.take() {
            query = query.cursor(c);
        }
        let page = store.list(&query).await.unwrap();
        assert!(page.entries.len() <= 100, "{}", page.entries.len());
        pages += 1;
        listed.extend(page.entries.into_iter().map(|e| e.key.as_str().to_owned()));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let expected: Vec<String> = (100_000..101_234u64)
        .map(|i| format!("idem:{i:032x}"))
        .collect();
    assert_eq!(listed, expected);
    assert!(pages >= 13, "{pages} pages");

    assert_eq!(
        store.purge_expired().await.unwrap(),
        25_000 + BATCH as u64 + 7
    );
    let left: i64 = raw(&path)
        .query_row("SELECT count(*) FROM toolonce_entries", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 1_234);
    assert_eq!(store.purge_expired().await.unwrap(), 0);
}
