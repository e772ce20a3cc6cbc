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
/// | `redis://…`, `rediss://…`, `redis+cluster://…`, `redis+sentinel://…` | Redis, Redis Cluster, Redis behind Sentinel | `redis` |
/// | `postgres://…`, `postgresql://…` | PostgreSQL | `postgres` |
///
/// # Errors
///
/// [`Error::Config`](crate::Error::Config) for an unknown scheme or one this build was compiled
/// without, and for an option that no backend reads (`memory://` and `sqlite://` take none: a
/// `?` there would otherwise become part of the file name); the backend's own errors when it
/// cannot open or connect.
pub async fn open(url: &str) -> Result<std::sync::Arc<dyn Store>> {
    #[allow(unused_variables)]
    let missing = |feature: &str| {
        crate::Error::Config(format!(
            "store URL {:?} needs the `{feature}` feature, which this build of toolonce was compiled without",
            redact_url(url)
        ))
    };
    #[allow(unused_variables)]
    let (named, url) = name(url)?;
    match named {
        Named::Memory => Ok(std::sync::Arc::new(memory::MemoryStore::new())),
        #[allow(unused_variables)]
        Named::Sqlite(path) => {
            #[cfg(feature = "sqlite")]
            {
                Ok(std::sync::Arc::new(sqlite::SqliteStore::open(path)?))
            }
            #[cfg(not(feature = "sqlite"))]
            Err(missing("sqlite"))
        }
        Named::Redis => {
            #[cfg(feature = "redis")]
            {
                Ok(std::sync::Arc::new(redis::RedisStore::connect(&url).await?))
            }
            #[cfg(not(feature = "redis"))]
            Err(missing("redis"))
        }
        Named::Postgres => {
            #[cfg(feature = "postgres")]
            {
                Ok(std::sync::Arc::new(
                    postgres::PostgresStore::connect(&url).await?,
                ))
            }
            #[cfg(not(feature = "postgres"))]
            Err(missing("postgres"))
        }
    }
}

/// The backend a store URL names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Named {
    Memory,
    /// The path after `sqlite://`, as written (`:memory:`, `toolonce.db`, `/abs/path.db`).
    Sqlite(String),
    Redis,
    Postgres,
}

/// Which backend `url` names, and the URL with its scheme in lower case (schemes are
/// case-insensitive, RFC 3986 3.1). Refuses a URL without `://`, an unknown scheme, anything
/// after `memory://`, a query on `sqlite://PATH` and an empty SQLite path.
pub(crate) fn name(url: &str) -> Result<(Named, String)> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(crate::Error::Config(format!(
            "store URL {:?} has no scheme: expected memory://, sqlite://PATH, redis://HOST or postgres://HOST",
            redact_url(url)
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    let named = match scheme.as_str() {
        "memory" if !rest.is_empty() => return Err(no_options("memory", url)),
        "memory" => Named::Memory,
        "sqlite" if rest.contains('?') => return Err(no_options("SQLite", url)),
        "sqlite" if rest.is_empty() => {
            return Err(crate::Error::Config(
                "a sqlite:// URL needs a path: sqlite://toolonce.db or sqlite:///abs/path.db"
                    .to_owned(),
            ));
        }
        "sqlite" => Named::Sqlite(rest.to_owned()),
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" | "redis+sentinel"
        | "rediss+sentinel" => Named::Redis,
        "postgres" | "postgresql" => Named::Postgres,
        other => {
            return Err(crate::Error::Config(format!(
                "unknown store scheme {other:?} in {:?}: expected memory, sqlite, redis, rediss, redis+cluster, redis+sentinel, postgres or postgresql",
                redact_url(url)
            )));
        }
    };
    Ok((named, format!("{scheme}://{rest}")))
}

/// The refusal of anything after `memory://`, or of a query on `sqlite://PATH`: neither store
/// reads options from its URL.
fn no_options(store: &str, url: &str) -> crate::Error {
    crate::Error::Config(format!(
        "the {store} store URL {:?} has options, and the {store} store reads none from its URL \
         (memory://, sqlite://PATH; SqliteOptions in code)",
        redact_url(url)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_memory_and_sqlite_stores_refuse_options_they_would_ignore() {
        for url in [
            "memory://?x=1",
            "memory://anything",
            "sqlite://t.db?busy_timeout=5",
        ] {
            match open(url).await {
                Err(crate::Error::Config(m)) => assert!(m.contains("reads none"), "{url}: {m}"),
                other => panic!("{url}: expected a refusal, got {:?}", other.err()),
            }
        }
        assert!(open("memory://").await.is_ok());
    }
}
