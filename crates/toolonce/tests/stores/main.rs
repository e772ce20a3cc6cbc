//! The stores, in one test binary: the `Store` conformance suite, compiled once and run against
//! every backend and configuration (a module each), and each backend's own tests beside its
//! runs of the suite. Backends behind a feature are compiled in with it.
//!
//! Tests that need several OS processes re-run this binary as the workers (`--exact` with the
//! worker test's full name, from [`conformance::multiprocess::test_name`]).

#[macro_use]
mod conformance;

#[cfg(feature = "sqlite")]
#[path = "../blocking/mod.rs"]
mod blocking;
#[cfg(feature = "redis")]
mod redis_round_trips;

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sqlite")]
mod sqlite;
