-- How long one statement waits for another connection's lock. Placeholder: ms, a number.
-- (The Rust store sets it through rusqlite's busy_timeout, which is this pragma.)
PRAGMA busy_timeout = {{ms}}
