#![doc = include_str!("../README.md")]
//!
//! # What it gets right
//!
//! This crate starts a program (usually an interactive shell) in a real
//! pseudo-terminal and lets async code talk to it as a byte stream, while
//! getting right the things agent harnesses tend to get wrong:
//!
//! * **How it ended.** Exit is detected by *waiting on the process*, not by
//!   end-of-file on the terminal, so a shell that exits while a background job
//!   still holds the terminal is reported at once. The [`ExitStatus`] carries
//!   the exit code *or* the signal, named the conventional way (`SIGKILL`).
//! * **Nothing left behind.** [`PtySession::end`] ends every process of
//!   the terminal session (job-control groups and double-forked children
//!   included) with `SIGTERM`, a bounded grace, then `SIGKILL`, and reaps the
//!   program. Dropping a session does the same without the grace.
//! * **Output you can page back through.** Every chunk is recorded in a
//!   bounded [`Scrollback`] addressed by absolute byte offsets from the start
//!   of the session; pages can be read backwards from any offset, and a
//!   request for bytes that were dropped says so instead of returning others.
//! * **Limits on the whole tree.** [`ResourceLimits`] on a [`SpawnSpec`]
//!   bounds processes, memory and CPU through a cgroup per session (which is
//!   then also what ending the session kills), and open files and file size
//!   through rlimits; a limit that cannot be kept fails the spawn unless the
//!   host asked for best effort.
//! * **A hook for confinement.** [`PreExec`] actions run in the child between
//!   `fork` and `exec`, which is how the sandbox crate applies Landlock.
//!
//! # Backends
//!
//! | backend | platforms | cost per session | confinement hooks |
//! |---|---|---|---|
//! | [`NativeBackend`] | Unix | two tokio tasks, no thread | yes |
//! | `PortableBackend` (always on Windows; on Unix with the feature `portable`) | Linux, macOS, Windows ConPTY | two threads + a tokio task | no (refused) |
//!
//! [`default_backend`] picks the native backend on Unix: it keeps the signal
//! number of the exit (portable-pty turns it into `strsignal` text), owns the
//! process-group setup, and registers a non-blocking master with tokio
//! (`AsyncFd`) so thousands of idle sessions cost no threads.
//!
//! # Platform notes
//!
//! * Linux: the session's members are found in `/proc`, and foreground
//!   inspection reads `/proc/<pid>/syscall` to tell a command blocked reading
//!   the terminal, and `/proc/<pid>/exe` and `stat` for the program's own
//!   state ([`Leader`]). Tested here.
//! * macOS: the session's members are listed with `proc_listallpids` and
//!   `getsid`, so the tree kill reaches all of them; whether the foreground
//!   waits for input and the program's state are not seen
//!   ([`Foreground::waiting_for_input`] and [`Foreground::leader`] are
//!   `None`). The master is made close-on-exec right after `posix_openpt`
//!   (which takes no `O_CLOEXEC` there), so a child forked by another thread
//!   in between could inherit it. Type-checked, not run here.
//! * Other Unixes: as macOS, but without a way to list a session's members
//!   the tree kill reaches the leader's process group only. Not built here.
//! * Windows: the `PortableBackend` over ConPTY; [`PtySession::end`] kills
//!   the program (and its Job Object) through portable-pty. Type-checked,
//!   not run here.
//! * Processes reparented to `init` after the tree kill are reaped by `init`
//!   (or the host's subreaper), not by this crate: only the program itself is
//!   this process's child.
//!
//! Without the feature `native` (see [Features](#features)) the backends
//! above are not built: what is left is what a backend or a host needs to
//! name (the traits, [`SpawnSpec`], [`PreExec`], the outcomes, the limits
//! as data).
//!
#![cfg_attr(feature = "native", doc = "[`NativeBackend`]: crate::NativeBackend")]
#![cfg_attr(
    feature = "native",
    doc = "[`default_backend`]: crate::default_backend"
)]
#![cfg_attr(not(feature = "native"), doc = "[`NativeBackend`]: #backends")]
#![cfg_attr(not(feature = "native"), doc = "[`default_backend`]: #backends")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
#[cfg(feature = "native")]
mod blocking;
pub mod contract;
mod error;
mod exit;
#[cfg(all(windows, feature = "native"))]
mod job;
mod keeps;
mod limits;
#[cfg(feature = "native")]
mod native_limits;
mod output;
mod plumbing;
#[cfg(all(feature = "native", any(windows, feature = "portable")))]
mod portable;
mod pump;
mod quote;
mod random;
#[cfg(feature = "remote")]
#[cfg_attr(docsrs, doc(cfg(feature = "remote")))]
pub mod remote;
#[cfg(feature = "native")]
mod scans;
mod scrollback;
mod setters;
mod signal;
mod spec;
#[cfg(all(unix, feature = "native"))]
mod unix;

/// The byte buffers of the terminal's output ([`OutputStream`]),
/// re-exported so a host needs no matching version of its own.
pub use bytes;

#[cfg(feature = "native")]
pub use backend::default_backend;
pub use backend::{Foreground, InputMode, Leader, PtyBackend, PtySession};
pub use error::PtyError;
pub use exit::ExitStatus;
pub use keeps::{SpecField, SpecSupport};
pub use limits::{
    CgroupParent, CgroupVersion, Held, Limit, LimitEvents, LimitsError, LimitsReport,
    ResourceLimits, format_bytes, parse_size,
};
pub use output::OutputStream;
pub use plumbing::{OutputFeeder, SessionPlumbing};
#[cfg(all(feature = "native", any(windows, feature = "portable")))]
#[cfg_attr(
    docsrs,
    doc(cfg(all(feature = "native", any(windows, feature = "portable"))))
)]
pub use portable::{PortableBackend, PortableSession};
pub use quote::sh_quote;
pub use random::random_hex;
#[cfg(feature = "native")]
#[cfg_attr(docsrs, doc(cfg(feature = "native")))]
pub use scans::SharedScans;
pub use scrollback::{
    CHUNK_COST, Page, Scrollback, ScrollbackError, ScrollbackHandle, ScrollbackLimits,
};
pub use signal::{Signal, signal_name};
pub use spec::{PreExec, SpawnSpec, TermSize};
#[cfg(all(unix, feature = "native"))]
#[cfg_attr(docsrs, doc(cfg(all(unix, feature = "native"))))]
pub use unix::{NativeBackend, NativeSession, foreground_of_leader};
