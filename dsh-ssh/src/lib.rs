//! The tools of dsh-rs on another machine over SSH: a [`PtyBackend`] whose
//! sessions are terminals on the host, and an editor [`Fs`] over SFTP.
//!
//! * **One connection**: [`SshHost::connect`] checks the host's key against
//!   a known-hosts file (unknown or changed keys are refused, never
//!   learned), authenticates with a private key, and is then shared by
//!   every shell ([`SshBackend`]) and the filesystem ([`SftpFs`]).
//! * **How it ended**: a program's end comes from the protocol's
//!   `exit-status` (a code) or `exit-signal` (the signal, by name), so
//!   `kill -9 $$` reads as `SIGKILL`, exactly as locally.
//! * **Nothing left behind**: every process a session starts carries a
//!   random tag in its environment; a reset or close signals the terminal's
//!   session *and* every tagged process on the host (see
//!   [`dsh_pty::remote`]), `SIGTERM` first, `SIGKILL` after a grace.
//! * **Clear failures**: a refused key, an unknown or changed host key, an
//!   unreachable host are errors that say so; a connection lost during a
//!   call ends it with a line that says so, and the shell is reset.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use dsh_editor::Editor;
//! use dsh_ssh::{SftpFs, SshBackend, SshHost, SshTarget};
//! use dsh_shell_persistent::{ShellConfig, ShellPool};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let host = SshHost::connect(SshTarget::parse("agent@build-7").ok_or("bad target")?).await?;
//! let mut config = ShellConfig::new("/home/agent");
//! config.backend = Arc::new(SshBackend::new(host.clone()));
//! let shell = ShellPool::new(config)?;
//! let editor = Editor::new(SftpFs::open(&host).await?);
//!
//! let args = serde_json::json!({"command": "create", "path": "/home/agent/a.py", "file_text": "print(1)\n"});
//! println!("{}", editor.execute(&args).await?);
//! println!("{}", shell.run("agent", "python3 a.py").await?);
//! shell.close_all().await;
//! # Ok(()) }
//! ```
//!
//! # What differs from a local shell
//!
//! The host's processes are not visible here: a small script next to each
//! shell ([`dsh_pty::remote::FOREGROUND_SCRIPT`], over its own channel)
//! tells which process group is in front of the terminal and whether it
//! waits for input, each time the shell asks (on Linux hosts; elsewhere a
//! command waiting for input runs until the call's timeout). Environment
//! variables are set through `env` on the command line (servers refuse most
//! `env` requests); the login environment of the user is the base.
//!
//! [`PtyBackend`]: dsh_pty::PtyBackend
//! [`Fs`]: dsh_editor::fs::Fs
#![forbid(unsafe_code)]

mod backend;
mod error;
mod fs;
mod host;
mod link;

pub use backend::SshBackend;
pub use dsh_pty::remote::Ran;
pub use error::SshError;
pub use fs::SftpFs;
pub use host::{SshHost, SshTarget};
pub use link::{SshLink, SshSession};

/// The crates this one's signatures use, re-exported so a host needs no
/// matching versions of its own: [`russh`] and [`russh_sftp`] (the errors
/// [`SshError`] carries), [`dsh_pty`] (the backend traits) and
/// [`dsh_editor`] (the `Fs` trait [`SftpFs`] implements).
pub use dsh_editor;
pub use dsh_pty;
pub use russh;
pub use russh_sftp;
