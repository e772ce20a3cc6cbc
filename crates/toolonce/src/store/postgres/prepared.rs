//! The store's prepared statements, held per pooled connection and found by the connection's
//! id and the statement's place in [`Sql::all`](super::sql::Sql::all). The pool's own cache
//! finds a statement by its text, so every operation hashed and compared the whole text (650
//! bytes for the claim): about 2.9k instructions per statement under callgrind, against a
//! lookup by a number here. Operations get them through [`Prepared::statement`].

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, RwLock};

use deadpool_postgres::tokio_postgres::{self, Statement};
use deadpool_postgres::{Object, ObjectId};

use super::sql::Sql;

/// The statements of each connection that has run one, in the order of `Sql::all`.
pub(super) struct Prepared {
    by_connection: RwLock<HashMap<ObjectId, Arc<[Statement]>, BuildHasherDefault<IdHasher>>>,
    /// More entries than this means connections went away unseen (the pool drops a closed
    /// one on checkout without telling): the map is emptied, and live connections fill it
    /// again from the pool's cache on their next operation.
    limit: usize,
}

/// A connection's id hashed by one multiplication (Fibonacci hashing, which spreads the
/// pool's small sequential ids over the high bits the map's tags use): ids are the pool's
/// counter, not chosen by anyone who could aim them at one bucket, so SipHash's ~140
/// instructions per lookup buy nothing here.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not reached for an id (a `usize`); kept correct for any other shape.
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

impl Prepared {
    pub(super) fn new(pool_size: usize) -> Prepared {
        Prepared {
            by_connection: RwLock::new(HashMap::default()),
            limit: pool_size.saturating_mul(2),
        }
    }

    pub(super) fn get(&self, id: ObjectId, slot: usize) -> Option<Statement> {
        let map = self.by_connection.read().unwrap_or_else(|e| e.into_inner());
        map.get(&id).and_then(|all| all.get(slot).cloned())
    }

    pub(super) fn insert(&self, id: ObjectId, statements: Vec<Statement>) {
        let mut map = self
            .by_connection
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if map.len() >= self.limit {
            map.clear();
        }
        map.insert(id, statements.into());
    }

    /// Forgets a connection the store discards.
    pub(super) fn forget(&self, id: ObjectId) {
        let mut map = self
            .by_connection
            .write()
            .unwrap_or_else(|e| e.into_inner());
        map.remove(&id);
    }
}

impl Prepared {
    /// The prepared statement of `text` on this connection: from this map for the store's
    /// own statements (`sql`), which a connection's first operation fills from the pool's cache (where
    /// `post_create` prepared them); from the pool's cache for any other text, or while one of
    /// the store's statements cannot be prepared (a table not migrated yet).
    pub(super) async fn statement(
        &self,
        sql: &Sql,
        client: &Object,
        text: &str,
    ) -> Result<Statement, tokio_postgres::Error> {
        let id = Object::id(client);
        let Some(slot) = sql.slot(text) else {
            return client.prepare_cached(text).await;
        };
        if let Some(statement) = self.get(id, slot) {
            return Ok(statement);
        }
        let mut all = Vec::new();
        for each in sql.all() {
            match client.prepare_cached(each).await {
                Ok(statement) => all.push(statement),
                Err(_) => return client.prepare_cached(text).await,
            }
        }
        let statement = all[slot].clone();
        self.insert(id, all);
        Ok(statement)
    }
}
