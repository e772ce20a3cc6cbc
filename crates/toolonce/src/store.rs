//! The store: where operation entries live. This file is the map of the folder: it declares
//! the modules and re-exports the public API, and defines nothing itself. `store/contract.rs`
//! holds the contract (the [`Store`] trait and the types its operations take and return); the
//! backends live beside it, each behind a feature named after it (the in-memory store is always
//! there) and each importing only the contract and the shared helpers (`store/url.rs`,
//! `store/json.rs`, `store/owner.rs`), never this file; `store/open.rs` picks a backend by URL,
//! and `store/owner.rs` makes the owner tokens that fence writes.

mod about;
mod census;
mod contract;
mod entry;
// Parts only the backends behind features read: a memory-only build (no store feature) leaves
// them unused, which is no defect.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "redis", feature = "postgres")),
    allow(dead_code)
)]
pub(crate) mod json;
pub mod memory;
mod open;
#[cfg_attr(
    not(any(feature = "sqlite", feature = "redis", feature = "postgres")),
    allow(dead_code)
)]
mod owner;
#[cfg_attr(
    not(any(feature = "sqlite", feature = "redis", feature = "postgres")),
    allow(dead_code)
)]
mod plain_json;
#[cfg(feature = "postgres")]
pub mod postgres;
mod recorded;
#[cfg(feature = "redis")]
pub mod redis;
mod removal;
mod settled_by;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod unreadable;
#[cfg_attr(
    not(any(feature = "sqlite", feature = "redis", feature = "postgres")),
    allow(dead_code)
)]
mod url;
#[cfg(all(test, feature = "redis", feature = "postgres", feature = "sqlite"))]
mod url_vectors;

pub use census::Census;
pub use contract::{
    About, Claim, ClaimRequest, DEFAULT_UNKNOWN_RETENTION, Entry, EntryState, Fenced, ListQuery,
    Page, Removed, Resolution, Resolved, Seen, SeenSettled, State, Store, Unreadable, Unreplicated,
    owner_digest,
};
pub use json::MAX_STORED_DEPTH;
pub use open::open;
pub use owner::OwnerToken;
pub use recorded::Recorded;
pub use settled_by::SettledBy;
pub use url::redact_url;
