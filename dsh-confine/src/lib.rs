#![doc = include_str!("../README.md")]
//!
//! # What is here
//!
//! A resolved [`Policy`] goes in; out come:
//!
//! * on Linux, a [`Confinement`]: the [`dsh_pty::PreExec`] hook that makes
//!   a forked child the confined shell (namespaces and the read-only view,
//!   the socket supervisor, capabilities, Landlock, seccomp; see
//!   [`Confinement`] for the process layout), and its [`Enforcement`]
//!   report; or [`bubblewrap_command`], the same with `bwrap` building the
//!   namespaces and the view; and the [`Opener`], a process under the same
//!   confinement that opens files for the host and passes the descriptors
//!   back;
//! * everywhere, [`seatbelt_command`] (the macOS profile, generated as
//!   text on every platform).
//!
//! **Architecture Invariant:** code between `fork` and `exec` is
//! async-signal-safe. Everything the hook needs (mount plan, C strings,
//! Landlock ruleset, BPF programs, the supervisor's guard) is prepared in
//! the parent by [`Confinement::build`]; the processes it forks only make
//! raw system calls on that memory (or memory mapped after the fork), and
//! never allocate, lock or log. The raw calls follow one convention
//! (`linux/sys.rs`): descriptors are [`OwnedFd`](std::os::fd::OwnedFd) or
//! [`BorrowedFd`](std::os::fd::BorrowedFd), buffers slices, and every
//! `unsafe` block says why it holds.

mod enforcement;
mod error;
#[cfg(target_os = "linux")]
mod linux;
mod policy;
mod seatbelt;

pub use enforcement::{Enforcement, UnixSocketGuard};
pub use error::Error;
#[cfg(target_os = "linux")]
pub use linux::bubblewrap::{Handoff, bubblewrap_command};
#[cfg(target_os = "linux")]
pub use linux::cow::CopyOnWriteView;
#[cfg(target_os = "linux")]
pub use linux::files::{Found, OpenError, Opener};
#[cfg(target_os = "linux")]
pub use linux::landlock::landlock_abi;
#[cfg(target_os = "linux")]
pub use linux::{Confinement, EgressListeners, Received, without_capabilities};
pub use policy::{Policy, TmpHeld, TmpLimit, TmpLimits};
pub use seatbelt::{seatbelt_command, seatbelt_profile};

/// The crate whose hook trait ([`dsh_pty::PreExec`]) and limits report
/// ([`dsh_pty::LimitsReport`]) this one's signatures use.
pub use dsh_pty;
