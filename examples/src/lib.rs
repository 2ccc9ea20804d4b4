//! Runnable examples of the dsh-rs crates (see `examples/examples/`), and the
//! minimal agent runtime behind `cargo run --example minimal`.

pub mod minimal;
