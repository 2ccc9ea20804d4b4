//! The tools of dsh-rs inside Docker containers: a [`PtyBackend`] whose
//! sessions are `docker exec` terminals, and an editor [`Fs`] that works on
//! the container's files.
//!
//! Agents for benchmarks and RL rollouts run their commands in a container
//! per task. With this crate the persistent shell of
//! [`dsh-shell-persistent`](https://docs.rs/dsh-shell-persistent) and the
//! `str_replace_editor` of [`dsh-editor`](https://docs.rs/dsh-editor) work
//! there unchanged: same contract, same exact strings.
//!
//! * **Where**: an existing running container ([`Container::existing`]), one
//!   made from an image and removed afterwards ([`Container::create`]), or a
//!   fresh container per shell ([`DockerBackend::per_session`]).
//! * **Which daemon**: the local socket, `DOCKER_HOST`, or any address
//!   [`connect`] takes (`unix://`, `tcp://`), so one host can drive
//!   containers on several machines.
//! * **Nothing left behind**: every process a session starts carries a
//!   random tag in its environment; a reset or close signals the terminal's
//!   session *and* every tagged process (so `setsid` and double forks are
//!   reached), `SIGTERM` first, `SIGKILL` after a grace. A per-session
//!   container is removed instead.
//! * **The editor at shell speed**: [`DockerFs`] keeps one small `sh`
//!   helper running in the container (nothing copied into the image) and
//!   makes every file operation one round trip to it, instead of a
//!   `docker exec` each.
//! * **Network and limits**: a container this crate makes joins the
//!   network its [`ContainerTemplate`] names (`none`, `bridge`, `host` or a
//!   user-defined one) and carries its memory, process, CPU and file
//!   limits; a call during which the container's cgroup counted a memory
//!   kill or a refused fork ends with the shell's limit line, as locally.
//! * **Clear failures**: a daemon that is down, a container that is gone, an
//!   image that is missing are errors that say so; a connection lost during
//!   a call ends the call with a line that says so, and the shell is reset;
//!   a network that does not exist is named.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use dsh_docker::{Container, ContainerTemplate, DockerBackend, DockerFs};
//! use dsh_editor::Editor;
//! use dsh_shell_persistent::{ShellConfig, ShellPool};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let docker = dsh_docker::connect(None).await?;
//! let container = Container::create(docker, &ContainerTemplate::new("python:3.12-slim")).await?;
//!
//! let mut config = ShellConfig::new("/");
//! config.backend = Arc::new(DockerBackend::new(container.clone()));
//! let shell = ShellPool::new(config)?;
//! let editor = Editor::new(DockerFs::new(container.clone()));
//!
//! println!("{}", shell.run("agent", "cd /tmp && python3 -V").await?);
//! let args = serde_json::json!({"command": "create", "path": "/tmp/a.py", "file_text": "print(1)\n"});
//! println!("{}", editor.execute(&args).await?);
//! println!("{}", shell.run("agent", "python3 a.py").await?);
//!
//! shell.close_all().await;
//! container.remove().await?;
//! # Ok(()) }
//! ```
//!
//! # What differs from a local shell
//!
//! When the daemon runs on this machine, the backend sees the container's
//! processes in this host's `/proc` and gives the shell everything a local
//! terminal gives (which process group is in front, whether it waits for
//! input). Against a daemon elsewhere (or with
//! [`DockerBackend::host_proc`] off) a small script in the container answers
//! the same questions ([`dsh_pty::remote::FOREGROUND_SCRIPT`], Linux
//! containers), one exec kept open per shell. Exit codes come from the exec's inspection; the
//! daemon's code `128 + n` is read as signal `n`, named as elsewhere
//! (`SIGKILL`), also for a program that exits with such a code itself. The environment of
//! the container is the base of the shell's; the program starts through
//! the remote prologue ([`dsh_pty::remote::command_line`], `env -u`/`env -i`),
//! so a spec's removed variables and cleared environment hold there too.
//!
//! [`PtyBackend`]: dsh_pty::PtyBackend
//! [`Fs`]: dsh_editor::fs::Fs
#![forbid(unsafe_code)]

mod backend;
mod container;
mod error;
mod exec;
mod fs;
mod link;

pub use backend::DockerBackend;
pub use bollard::Docker;
pub use container::{Container, ContainerTemplate, connect};
pub use dsh_pty::remote::Ran;
pub use error::DockerError;
pub use fs::DockerFs;
pub use link::{DockerLink, DockerSession};

/// The crates this one's signatures use, re-exported so a host needs no
/// matching versions of its own: [`bollard`] (the Docker client and its
/// errors), [`dsh_pty`] (the backend traits) and [`dsh_editor`] (the `Fs`
/// trait [`DockerFs`] implements).
pub use bollard;
pub use dsh_editor;
pub use dsh_pty;
