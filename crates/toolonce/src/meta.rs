//! The names of the `_meta` members through which toolonce tells an MCP client (and the
//! framework adapters their callers) what it did: exported here, the one place the CLI's proxy,
//! the Python package and the rmcp servers take them from (data/limits.json holds the same names
//! for the TypeScript package; a test checks they agree).

/// The member under `params._meta` that carries the operation key (and a key of the client's
/// own); replays carry it too.
pub const KEY: &str = "toolonce/key";
/// The member that says what toolonce did with the call (`executed`, `replayed`, `in_flight`, …).
pub const OUTCOME: &str = "toolonce/outcome";
/// The member of an executed call's answer that says its outcome was not simply recorded.
pub const NOTICE: &str = "toolonce/notice";
/// The member of a replay's answer that says when the earlier call's outcome was recorded, in
/// ISO 8601 UTC to the second (the replay's note says it to the model too).
pub const RECORDED_AT: &str = "toolonce/recorded_at";
