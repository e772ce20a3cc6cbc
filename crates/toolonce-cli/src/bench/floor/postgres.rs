//! PostgreSQL: the store on a table of the run's own, the raw floor on a table of its own
//! too, through one prepared-statement connection per caller. The floor's connections use
//! TLS where the store's do (the URL's `sslmode`; under the default `prefer`, whenever the
//! server offers it), so both sides pay the same encryption on every round trip.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use toolonce::Store;
use toolonce::store::postgres::{self, PostgresStore};

use crate::bench::workload::{RawTask, Workload, raw_done, raw_running};

/// The PostgreSQL floor: its connections, one per caller, and the run's tables.
pub(crate) struct Raw {
    /// The store's URL: the floor's connections are made as the store makes its own.
    url: String,
    /// Whether the floor's connections are encrypted (as the store's are then).
    pub(super) encrypted: bool,
    table: String,
    raw_table: String,
    /// Whether the store's schema-version table existed before the run.
    version_table_existed: bool,
    clients: tokio::sync::Mutex<Vec<Arc<tokio_postgres::Client>>>,
}

/// One connection of the floor, made by the store's own `connect_client`.
async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    postgres::connect_client(url).await.map_err(|e| {
        // A refused TLS handshake (a server without TLS under a mode that requires it)
        // or login (a wrong password) is the URL's matter, not the server's availability.
        let code =
            if matches!(e, toolonce::Error::Config(_)) || e.report().to_string().contains("TLS") {
                crate::exit::USAGE
            } else {
                crate::exit::UNAVAILABLE
            };
        crate::exit::with_code(
            code,
            anyhow::Error::new(e).context("cannot open the raw floor's connection"),
        )
    })
}

pub(super) async fn open(url: &str, run_id: &str) -> anyhow::Result<(Arc<dyn Store>, Raw)> {
    let admin = connect(url).await?;
    let encrypted: bool = admin
        .query_one(
            "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
            &[],
        )
        .await?
        .get(0);
    let version_table_existed = admin
        .query_one("SELECT to_regclass('toolonce_schema') IS NOT NULL", &[])
        .await?
        .get(0);
    let table = format!("toolonce_bench_{run_id}");
    let raw_table = format!("toolonce_bench_raw_{run_id}");
    let raw = Raw {
        url: url.to_owned(),
        encrypted,
        table: table.clone(),
        raw_table: raw_table.clone(),
        version_table_existed,
        clients: tokio::sync::Mutex::new(Vec::new()),
    };
    admin
        .batch_execute(&format!(
            "CREATE TABLE \"{raw_table}\" (key text COLLATE \"C\" PRIMARY KEY, state text NOT NULL, value json NOT NULL, expires_at timestamptz NOT NULL)"
        ))
        .await?;
    let store = match PostgresStore::builder(url).table(table).connect().await {
        Ok(store) => store,
        Err(e) => {
            let _ = raw.clean_up().await;
            return Err(e.into());
        }
    };
    Ok((Arc::new(store), raw))
}

impl Raw {
    /// One connection per caller, opened before the rounds (the store's pool opens its
    /// connections during the first rounds, as it would in a program).
    async fn clients(&self, n: usize) -> anyhow::Result<Vec<Arc<tokio_postgres::Client>>> {
        let mut clients = self.clients.lock().await;
        while clients.len() < n {
            clients.push(Arc::new(connect(&self.url).await?));
        }
        Ok(clients[..n].to_vec())
    }

    pub(super) async fn prepare_replays(&self, concurrency: u64) -> anyhow::Result<()> {
        let clients = self.clients(concurrency as usize).await?;
        let insert = format!(
            "INSERT INTO \"{}\" VALUES ($1, 'done', $2::text::json, now() + interval '10 minutes') ON CONFLICT DO NOTHING",
            self.raw_table
        );
        for task in 0..concurrency {
            clients[0]
                .execute(&insert, &[&format!("replay:{task}"), &raw_done(task)])
                .await?;
        }
        Ok(())
    }

    pub(super) fn task(&self, workload: Workload, task: u64, ops: Vec<u64>) -> RawTask {
        let table = self.raw_table.clone();
        let client = self
            .clients
            .try_lock()
            .ok()
            .and_then(|c| c.get(task as usize).cloned());
        tokio::spawn(async move {
            let client = client.context("the raw floor's connection was not opened")?;
            let insert = client
                .prepare(&format!(
                    "INSERT INTO \"{table}\" VALUES ($1, 'running', $2::text::json, now() + interval '1 minute') ON CONFLICT DO NOTHING"
                ))
                .await?;
            let update = client
                .prepare(&format!(
                    "UPDATE \"{table}\" SET state = 'done', value = $2::text::json, expires_at = now() + interval '10 minutes' WHERE key = $1"
                ))
                .await?;
            let select = client
                .prepare(&format!(
                    "SELECT state, value::text FROM \"{table}\" WHERE key = $1 AND expires_at > now()"
                ))
                .await?;
            let running = raw_running();
            let replay_key = format!("replay:{task}");
            let mut latencies = Vec::with_capacity(ops.len());
            for n in ops {
                let start = Instant::now();
                match workload {
                    Workload::FirstTime => {
                        let key = format!("first:{n}");
                        let won = client.execute(&insert, &[&key, &running]).await?;
                        anyhow::ensure!(won == 1, "raw key {key} existed");
                        client.execute(&update, &[&key, &raw_done(n)]).await?;
                    }
                    Workload::Replay => {
                        let row = client.query_opt(&select, &[&replay_key]).await?;
                        anyhow::ensure!(row.is_some(), "raw key {replay_key} missing");
                    }
                }
                latencies.push(start.elapsed());
            }
            Ok((latencies, Vec::new()))
        })
    }

    /// Drops the run's two tables and the store's claim function, and the run's row in the
    /// store's schema-version table (the table too, if the run created it and it is empty).
    pub(super) async fn clean_up(&self) -> anyhow::Result<()> {
        self.clients.lock().await.clear();
        let admin = connect(&self.url).await?;
        let t = &self.table;
        admin
            .batch_execute(&format!(
                "DROP TABLE IF EXISTS \"{t}\"; DROP TABLE IF EXISTS \"{}\";
                 DO $$ DECLARE f regprocedure; BEGIN
                   FOR f IN SELECT oid::regprocedure FROM pg_proc
                            WHERE proname = '{t}_claim' AND pg_function_is_visible(oid) LOOP
                     EXECUTE 'DROP FUNCTION ' || f;
                   END LOOP;
                 END $$",
                self.raw_table
            ))
            .await?;
        let exists: bool = admin
            .query_one("SELECT to_regclass('toolonce_schema') IS NOT NULL", &[])
            .await?
            .get(0);
        if exists {
            admin
                .execute("DELETE FROM toolonce_schema WHERE table_name = $1", &[t])
                .await?;
            if !self.version_table_existed {
                let left: i64 = admin
                    .query_one("SELECT count(*) FROM toolonce_schema", &[])
                    .await?
                    .get(0);
                if left == 0 {
                    admin.batch_execute("DROP TABLE toolonce_schema").await?;
                }
            }
        }
        Ok(())
    }

    /// Where the run's tables are, for a message that a run could not remove them.
    pub(super) fn whereabouts(&self) -> String {
        format!("the tables {} and {}", self.table, self.raw_table)
    }

    /// The store's table on disk with its indexes and TOAST (`pg_total_relation_size`), in
    /// bytes: dead rows a purge left count until a vacuum reclaims them.
    pub(super) async fn bytes_used(&self) -> anyhow::Result<u64> {
        let client = self.clients(1).await?;
        let bytes: i64 = client[0]
            .query_one(
                "SELECT pg_total_relation_size(quote_ident($1)::regclass)",
                &[&self.table],
            )
            .await?
            .get(0);
        Ok(bytes.max(0).unsigned_abs())
    }
}
