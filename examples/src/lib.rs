//! Runnable examples of the dsh-rs crates; see `examples/examples/`.
