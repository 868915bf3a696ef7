//! The `sluice` command: `serve`, `pub`, `sub`, `stream`, `bench`.

fn main() {}
