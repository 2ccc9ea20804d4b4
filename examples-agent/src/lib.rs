//! The examples that need the whole stack (the sandbox, the MCP server's
//! approver, an HTTP client): the minimal agent runtime behind
//! `cargo run --example minimal`, and `cargo run --example sandbox`. The
//! light examples (the quickstart among them) live in the `examples` package,
//! which builds only the shell, the editor and `dsh-pty`.

pub mod minimal;
