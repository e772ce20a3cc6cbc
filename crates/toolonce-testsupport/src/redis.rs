//! Real `redis-server` processes: a single server (`server`), a three-node cluster of them
//! (`cluster`), and a primary with a replica behind proxies, for failovers (`replicated`).

mod cluster;
mod replicated;
mod server;

pub use cluster::RedisCluster;
pub use replicated::ReplicatedRedis;
pub use server::RedisServer;
