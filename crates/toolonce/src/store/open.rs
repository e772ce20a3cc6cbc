//! The URL dispatch: which backend a store URL names, opened for programs that pick their
//! store at run time (the `toolonce` command, the bindings). The only module that knows every
//! backend; the backends know only the contract.

use super::memory;
#[cfg(feature = "postgres")]
use super::postgres;
#[cfg(feature = "redis")]
use super::redis;
#[cfg(feature = "sqlite")]
use super::sqlite;
use crate::Result;
use crate::store::contract::Store;
use crate::store::url::redact_url;

/// Opens the store a URL names, for programs that pick their store at run time:
///
/// | URL | store | feature |
/// |---|---|---|
/// | `memory://` | [`MemoryStore`](memory::MemoryStore) (this process only) | always |
/// | `sqlite://PATH` (`sqlite://toolonce.db`, `sqlite:///abs/path.db`) | SQLite file | `sqlite` |
/// | `redis://…`, `rediss://…`, `redis+cluster://…` | Redis, Redis Cluster | `redis` |
/// | `postgres://…`, `postgresql://…` | PostgreSQL | `postgres` |
///
/// # Errors
///
/// [`Error::Config`](crate::Error::Config) for an unknown scheme or one this build was compiled
/// without; the backend's own errors when it cannot open or connect.
pub async fn open(url: &str) -> Result<std::sync::Arc<dyn Store>> {
    let Some((scheme, _rest)) = url.split_once("://") else {
        return Err(crate::Error::Config(format!(
            "store URL {:?} has no scheme: expected memory://, sqlite://PATH, redis://HOST or postgres://HOST",
            redact_url(url)
        )));
    };
    #[allow(unused_variables)]
    let missing = |feature: &str| {
        crate::Error::Config(format!(
            "store URL {:?} needs the `{feature}` feature, which this build of toolonce was compiled without",
            redact_url(url)
        ))
    };
    match scheme {
        "memory" => Ok(std::sync::Arc::new(memory::MemoryStore::new())),
        "sqlite" => {
            #[cfg(feature = "sqlite")]
            {
                Ok(std::sync::Arc::new(sqlite::SqliteStore::open(_rest)?))
            }
            #[cfg(not(feature = "sqlite"))]
            Err(missing("sqlite"))
        }
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => {
            #[cfg(feature = "redis")]
            {
                Ok(std::sync::Arc::new(redis::RedisStore::connect(url).await?))
            }
            #[cfg(not(feature = "redis"))]
            Err(missing("redis"))
        }
        "postgres" | "postgresql" => {
            #[cfg(feature = "postgres")]
            {
                Ok(std::sync::Arc::new(
                    postgres::PostgresStore::connect(url).await?,
                ))
            }
            #[cfg(not(feature = "postgres"))]
            Err(missing("postgres"))
        }
        other => Err(crate::Error::Config(format!(
            "unknown store scheme {other:?} in {:?}: expected memory, sqlite, redis, rediss, redis+cluster, postgres or postgresql",
            redact_url(url)
        ))),
    }
}
