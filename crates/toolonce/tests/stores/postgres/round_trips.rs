//! Round trips.

use super::*;

/// A TCP proxy in front of the server that counts the client's round trips: each ends with a
/// `Sync` (the extended protocol that prepared statements use) or is a simple `Query`. While
/// frozen, it holds the client's bytes back, as a server that stopped answering would.
pub(super) struct CountingProxy {
    pub(super) port: u16,
    pub(super) round_trips: Arc<AtomicU64>,
    pub(super) frozen: Arc<std::sync::atomic::AtomicBool>,
}

impl CountingProxy {
    pub(super) async fn start(server: std::net::SocketAddr) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let round_trips = Arc::new(AtomicU64::new(0));
        let frozen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let counter = round_trips.clone();
        let freeze = frozen.clone();
        tokio::spawn(async move {
            loop {
                let (client, _) = listener.accept().await.unwrap();
                let server = TcpStream::connect(server).await.unwrap();
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_rx, &mut client_tx).await;
                });
                let (counter, freeze) = (counter.clone(), freeze.clone());
                tokio::spawn(async move {
                    let mut parser = MessageCounter::default();
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match client_rx.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        while freeze.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        let trips = parser.feed(&buf[..n]);
                        counter.fetch_add(trips, Ordering::SeqCst);
                        if server_tx.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        CountingProxy {
            port,
            round_trips,
            frozen,
        }
    }

    fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::SeqCst)
    }
}

/// Splits the client's byte stream into protocol messages: untyped ones (SSL request, startup)
/// until the startup message, then `type byte + length + body`.
#[derive(Default)]
struct MessageCounter {
    pending: Vec<u8>,
    started: bool,
}

impl MessageCounter {
    fn feed(&mut self, bytes: &[u8]) -> u64 {
        self.pending.extend_from_slice(bytes);
        let mut trips = 0;
        loop {
            let header = if self.started { 5 } else { 4 };
            if self.pending.len() < header {
                return trips;
            }
            let len_at = header - 4;
            let len = u32::from_be_bytes(self.pending[len_at..header].try_into().unwrap()) as usize;
            let total = len_at + len;
            if self.pending.len() < total {
                return trips;
            }
            if self.started {
                if matches!(self.pending[0], b'S' | b'Q') {
                    trips += 1;
                }
            } else {
                let code = u32::from_be_bytes(self.pending[4..8].try_into().unwrap());
                // 80877103: SSL request, 80877104: GSS encryption request; else the startup.
                self.started = !matches!(code, 80_877_103 | 80_877_104);
            }
            self.pending.drain(..total);
        }
    }
}

async fn statements_executed(pg: &'static PostgresServer, database: &str) -> u64 {
    let sql = format!(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '{database}')"
    );
    tokio::task::spawn_blocking(move || pg.psql(&sql))
        .await
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_time_call_costs_two_round_trips_and_a_replay_one() {
    let pg = tokio::task::spawn_blocking(shared_postgres).await.unwrap();
    let db_url = tokio::task::spawn_blocking(|| shared_postgres().create_unique_database())
        .await
        .unwrap();
    let database = database_of(&db_url).to_owned();
    let proxy = CountingProxy::start(pg.addr()).await;
    let url = format!("postgres://postgres@127.0.0.1:{}/{database}", proxy.port);
    let store = PostgresStore::builder(url)
        .table(unique_table())
        .pool_size(1)
        .connect()
        .await
        .unwrap();
    let layer = Layer::new(Arc::new(store));
    let options = WriteOptions::new();
    let call = |n: u64| {
        let layer = layer.clone();
        let options = options.clone();
        async move {
            let op = key::derive("round-trips", "charge", &json!({"n": n}), None).unwrap();
            layer
                .run("charge", &op, &options, |_| async move {
                    Ok(json!({"receipt": n}))
                })
                .await
                .outcome
        }
    };

    // Connecting, migrating and preparing happen once per connection, before any call.
    let pgss = pg.has_pg_stat_statements();
    if pgss {
        tokio::task::spawn_blocking(move || {
            pg.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        })
        .await
        .unwrap();
    } else {
        eprintln!("pg_stat_statements is not installed: counting round trips only");
    }
    for n in 0..3 {
        let trips = proxy.round_trips();
        let statements = if pgss {
            statements_executed(pg, &database).await
        } else {
            0
        };
        assert_eq!(call(n).await, Outcome::Executed);
        assert_eq!(
            proxy.round_trips() - trips,
            2,
            "first-time call {n}: claim + complete"
        );
        if pgss {
            assert_eq!(statements_executed(pg, &database).await - statements, 2);
        }

        let trips = proxy.round_trips();
        let statements = if pgss {
            statements_executed(pg, &database).await
        } else {
            0
        };
        assert_eq!(call(n).await, Outcome::Replayed);
        assert_eq!(proxy.round_trips() - trips, 1, "replay {n}: claim only");
        if pgss {
            assert_eq!(statements_executed(pg, &database).await - statements, 1);
        }
    }
}
