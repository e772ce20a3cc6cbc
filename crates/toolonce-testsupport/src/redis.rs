//! Real `redis-server` processes: a single server (`server`), a three-node cluster of them
//! (`cluster`, with a replica per master in `cluster_replicas`), and a primary with a replica
//! behind proxies, for failovers (`replicated`).

mod cluster;
mod cluster_replicas;
mod replicated;
mod server;

pub use cluster::RedisCluster;
pub use replicated::ReplicatedRedis;
pub use server::RedisServer;
