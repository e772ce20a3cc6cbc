-- Begins the Rust inline writer's claim: a read that becomes a write only when the row does not
-- answer it (crates/toolonce/src/store/sqlite/claim.rs).
BEGIN
