//! Real `redis-server` processes: a single server (`server`) and a three-node cluster of them
//! (`cluster`).

mod cluster;
mod server;

pub use cluster::RedisCluster;
pub use server::RedisServer;
