//! `dsh-mcp`: the persistent shell and `str_replace_editor` as a Model Context
//! Protocol server over stdio, so any MCP client can use the two tools.
//!
//! One server process is one owner: one persistent shell, calls in arrival
//! order. The binary's flags are documented in the README and in
//! `dsh-mcp --help`; this library holds the server so it can be embedded.
//!
//! ```no_run
//! use std::sync::Arc;
//! use dsh_editor::{Editor, fs::Fs};
//! use dsh_mcp::DshServer;
//! use dsh_sandbox::{SandboxConfig, SandboxFs, SandboxMode, SandboxPolicy, SandboxedShell};
//! use dsh_shell_persistent::ShellConfig;
//! use rmcp::ServiceExt;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = SandboxPolicy::default().mode(SandboxMode::WorkspaceWrite);
//! let shell = SandboxedShell::new(SandboxConfig::new(
//!     policy.clone(),
//!     ShellConfig::new("/workspace"),
//! ))?;
//! // Any filesystem: here this machine's, under the sandbox's rules
//! // (`dsh_docker::DockerFs` works in a container).
//! let editor = Editor::new(Arc::new(SandboxFs::new(policy, "/workspace")) as Arc<dyn Fs>);
//! let server = DshServer::new(shell, editor, None, None);
//! let running = server.clone().serve(rmcp::transport::stdio()).await?;
//! running.waiting().await?;
//! server.shell().close_all().await;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod approve;
mod log;
mod server;
pub mod transport;

pub use approve::ElicitApprover;

pub use log::SessionLog;
pub use server::{DshServer, OWNER};

/// The crates this one's signatures use, re-exported so a host needs no
/// matching versions of its own: [`rmcp`] (the MCP server traits
/// [`DshServer`] implements), [`dsh_sandbox`] (the shell it serves; it
/// re-exports the shell crate) and [`dsh_editor`] (the editor and its `Fs`).
pub use dsh_editor;
pub use dsh_sandbox;
pub use rmcp;
