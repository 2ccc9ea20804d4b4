#![doc = include_str!("../README.md")]
//!
//! # The server
//!
//! Over stdio, one server process is one owner: one persistent shell, calls
//! in arrival order. Over Streamable HTTP (`--listen`, the `http` module),
//! each MCP session is an owner. The binary's flags are documented in
//! `dsh-mcp --help`; [`ServerBuilder`] sets up the same server for a host
//! that embeds it (backend, sandbox, limits, copy-on-write, approvals,
//! stdio or HTTP). The parts it is made of are public too: the server
//! ([`DshServer`]), its session log ([`SessionLog`]), the approver that
//! asks the client's user ([`ElicitApprover`]), the stdio transport
//! ([`transport`]) and, with the `http` feature, the HTTP server
//! (`http::HttpServer`).
#![forbid(unsafe_code)]

mod approve;
mod builder;
mod cow;
#[cfg(feature = "http")]
pub mod http;
mod log;
mod place;
mod server;
pub mod transport;

pub use approve::ElicitApprover;
pub use builder::{ApprovalMode, BuildError, ServeError, Server, ServerBuilder};
pub use cow::{CopyOnWrite, CopyOnWriteError};
/// How the limits are kept ([`Server::enforcement`]): the sandbox's
/// report, named here as the sandbox crate names it.
pub use dsh_sandbox::Enforcement;
pub use place::{Backend, CloseError, DockerSettings, SshSettings};

pub use log::SessionLog;
pub use server::{DshServer, OWNER};

/// The crates this one's signatures use, re-exported so a host needs no
/// matching versions of its own: [`rmcp`] (the MCP server traits
/// [`DshServer`] implements), [`dsh_sandbox`] (the shell it serves; it
/// re-exports the shell crate) and [`dsh_editor`] (the editor and its `Fs`).
pub use dsh_editor;
pub use dsh_sandbox;
pub use rmcp;
