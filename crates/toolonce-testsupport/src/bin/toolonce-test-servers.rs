//! Starts a Redis server, a Redis Cluster and a PostgreSQL server (with a fresh database) for
//! test suites that are not written in Rust — the Node package's `npm test` — and prints their
//! URLs as one JSON line on stdout: `{"redis": …, "redisCluster": …, "postgres": …}`. The
//! servers live until stdin closes (the caller exits or closes the pipe), then are stopped and
//! their directories removed; the watchdogs end them even if this process is killed.

use std::io::Read;

use toolonce_testsupport::{PostgresServer, RedisCluster, RedisServer};

fn main() {
    let redis = RedisServer::start();
    let cluster = RedisCluster::start();
    let postgres = PostgresServer::start();
    let database = postgres.create_unique_database();
    let seeds: Vec<String> = cluster
        .ports()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    // The URLs hold no characters JSON needs escaped (loopback hosts, ports, plain names).
    println!(
        "{{\"redis\":\"{}\",\"redisCluster\":\"redis+cluster://{}/\",\"postgres\":\"{}\"}}",
        redis.url(),
        seeds.join(","),
        database
    );
    // Until the caller is done: EOF or an error both mean it is gone.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop((redis, cluster, postgres));
}
