//! The `toolonce` command (being written).

fn main() {}
