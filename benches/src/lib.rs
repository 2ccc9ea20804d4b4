//! Criterion benches of the dsh-rs crates; see `benches/benches/`.
