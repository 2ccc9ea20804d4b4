#![doc = include_str!("../README.md")]
//!
//! # The modes
//!
//! Three modes ([`SandboxMode`]): `read-only` (the default), `workspace-write`
//! and `danger-full-access`. The policy ([`SandboxPolicy`]) is a plain serde
//! type. This crate composes the two tools; neither depends on it:
//!
//! * [`SandboxedShell`] runs the shell tool. Every owner (agent) has one
//!   persistent shell, confined when it is created in the restricted modes:
//!   the working directory, exports, functions and an activated virtualenv
//!   persist as in `danger-full-access`, and the tool description says which
//!   sandbox runs the commands. An owner given a directory of its own
//!   ([`SandboxedShell::set_owner_dir`]) works there instead of the shared
//!   workspace: its shells start there after every reset, and in
//!   `workspace-write` it is its writable root, for its editor too. [`Persistence::OneShot`] runs every
//!   restricted call in a fresh confined shell instead. A call may carry
//!   `sandbox_permissions` + `justification`; an [`Approver`] must allow it,
//!   for that call only (it runs in a fresh shell with the wider mode; the
//!   persistent one stays confined), and every other case fails closed with
//!   its own error ([`SandboxError`]).
//! * [`SandboxFs`] is the editor's filesystem under the same rules: writes
//!   are resolved beneath an open directory of a writable root, so no
//!   rename or symlink swap can send them elsewhere.
//!
//! # Copy-on-write workspaces
//!
//! With [`SandboxConfig::copy_on_write`] (a [`dsh_workspace::Workspace`]:
//! a base directory and a directory for the layers), every owner sees the
//! base **at its own path** as a view of its own (Linux, overlayfs): reads
//! come from the base, writes go to the owner's layer, deletions hide base
//! files; nothing reaches the base or another owner. The view is made with
//! the owner's shell, in time independent of the base's size, and costs the
//! disk of the owner's changes only. The shell runs in a mount and a PID
//! namespace of its own (and a user namespace unless the host is root), so
//! owners are apart in processes too; the network and the user are the
//! host's, as in danger-full-access. The layers' directory is covered by an
//! empty read-only mount in every view, and the view's mounts are locked
//! against the shell: unmounting it, a nested `unshare -Urm`, a bind mount
//! over it change nothing outside. A root host's shells run without
//! `CAP_SYS_ADMIN`, `CAP_DAC_READ_SEARCH`, `CAP_SYS_PTRACE`,
//! `CAP_SYS_MODULE`, `CAP_SYS_RAWIO`, `CAP_MKNOD` and `CAP_BPF` (what
//! would undo the view); they are still root otherwise, with the raw disk
//! devices in reach: run the host as another user where an owner must not
//! be able to write beneath the view.
//!
//! The editor works in the same view inside [`SandboxedShell::in_view`]
//! (paths resolved as the owner's shell resolves them, through its
//! `/proc/<pid>/root` with `RESOLVE_IN_ROOT`; a write through a link with
//! an absolute target is refused). A host then asks, in the owner's turn:
//! [`SandboxedShell::changes`] and [`SandboxedShell::diff`] (computed from
//! the layer without following any link the owner made),
//! [`SandboxedShell::reset_workspace`], [`SandboxedShell::fork`] (a new
//! owner whose view is a copy of the source's now, and whose shell starts
//! with the source's working directory, variables, functions, aliases,
//! options and umask: no process is copied), [`SandboxedShell::snapshot`],
//! [`SandboxedShell::restore`] (any owner from any snapshot) and
//! [`SandboxedShell::delete_snapshot`]. Closing an owner removes its
//! layer.
//!
//! Views work in every mode. In the restricted modes the confinement is
//! built inside the view: its namespaces are made in the view's (the shell
//! one PID namespace deeper), its Landlock rules name the view's paths,
//! and its read-only mounts, hidden paths (the layers' directory among
//! them), private `/tmp` and limits stand over the overlay; the editor
//! works in that confined view. No git placeholder is made in a view (a
//! repository the shell makes there lives in its layer, which no host's
//! git reads as the workspace); a base's own `.git` is read-only as
//! usual. Bubblewrap is not used over a view
//! ([`SandboxError::CopyOnWriteBubblewrap`]). Where the kernel cannot make
//! the view (no user namespaces, an overlay it refuses), the owner's first
//! call fails with [`SandboxError::CopyOnWriteUnavailable`], naming what
//! was refused; [`SandboxedShell::check_copy_on_write`] finds that out at
//! a host's start.
//!
//! # Enforcement on Linux
//!
//! Modelled on bubblewrap and nsjail, with Landlock and seccomp as extra
//! layers. Each confined shell gets, before `exec`:
//!
//! * new **user, mount, PID, IPC, UTS and cgroup namespaces**, and a
//!   network namespace with only its own loopback when the network is off.
//!   The caller's uid and gid map to themselves (root stays uid 0, without
//!   any capability over the host). The shell is pid 2 under an init of its
//!   own; when it ends, or is reset or killed, the kernel kills everything
//!   left in the namespace, whatever it did (`setsid`, double fork, `nohup`).
//! * a **read-only view of the whole filesystem** (`nosuid`, `nodev`); the
//!   workspace and extra writable roots bound read-write on top (read-only
//!   in `read-only` mode); `.git` of each writable root — a directory, a
//!   symlink or a `gitdir:` file with its git and common directories — bound
//!   read-only over itself, so it cannot be written, renamed, replaced or
//!   removed; a private `/tmp` (writable in workspace-write unless
//!   `tmp_writable: false`; its files are the shell's own); `/run` and
//!   `/var/run` empty; a minimal `/dev` (null, zero, full, random, urandom,
//!   tty, a private devpts and `/dev/shm`); a fresh `/proc` of its PID
//!   namespace with `sys`, `sysrq-trigger`, `irq` and `bus` read-only.
//!   A writable root without a repository gets empty read-only `.git` and
//!   `HEAD` placeholders for its owner's lifetime, so that none can be
//!   created there (see below).
//! * **no capabilities** (bounding, permitted, effective, inheritable,
//!   ambient cleared; securebits locked so that `exec` grants none), and
//!   `no_new_privs`; no core dumps (`RLIMIT_CORE` of 1 byte, which also
//!   stops a `core_pattern` pipe).
//! * **Landlock** (ABI 3+, where available): writes only beneath the
//!   writable roots and the private mounts, no device nodes; signals and
//!   abstract Unix sockets scoped to the sandbox (ABI 6+); connecting to
//!   Unix sockets only beneath the writable roots, the private mounts and
//!   [`SandboxPolicy::unix_sockets`] (ABI 9+, as a second layer).
//! * **Unix sockets the sandbox did not make are out of reach**, on every
//!   kernel: the supervisor (the sandbox's first process, in the host's PID
//!   namespace) makes every `connect`, `sendto` with an address, `sendmsg`
//!   and `sendmmsg` for the confined processes, through a seccomp user
//!   notification, from one copy of the arguments. A pathname socket is
//!   reached only beneath a writable root (its `.git` excepted), the private
//!   `/tmp` or `/dev/shm`, or an entry of [`SandboxPolicy::unix_sockets`];
//!   any other — a Docker, Podman, systemd, ssh-agent or tmux socket, one
//!   made after the shell started, one reached through a symlink, `..` or
//!   `/proc/self/fd` — gets `Permission denied`. Sockets the sandbox makes
//!   (test servers, `multiprocessing`, a tmux of its own, descriptors
//!   passed over a `socketpair`) work as usual; a connection's peer
//!   credentials name the supervisor's pid (0 inside) with the same uid.
//!   Abstract names are the sandbox's own with the network off; with it on
//!   they would be the host's, so binding or reaching one is refused
//!   (`Operation not permitted`; an automatic `bind("")` still works).
//!   [`Enforcement::unix_sockets`] says which mechanism holds (none under
//!   `bubblewrap`, which has no supervisor).
//! * **seccomp** for what the namespaces do not already cover: file handles
//!   (`open_by_handle_at`), the keyring, `bpf`, `perf_event_open`,
//!   `userfaultfd`, `io_uring`, new namespaces, every mount call,
//!   `ptrace` and `process_vm_*` of the sandbox's init and shell,
//!   `prlimit64`/`setpriority` of any other process, device nodes, raw and
//!   packet sockets and every family but Unix and IP (even with the network
//!   on), and the x32 system-call ABI.
//! * **nothing planted for the host**: no file gets a set-user-ID or
//!   set-group-ID bit (`chmod`, `fchmod*`, `open`/`creat` with `O_CREAT` or
//!   `O_TMPFILE`, `mknod`; `cp -p`, `install -m`, `tar x` fail with
//!   `Operation not permitted`, and `openat2`, whose mode seccomp cannot
//!   read, with `ENOSYS`, which makes callers fall back to `openat`); no
//!   file capability (setting one needs `CAP_SETFCAP`, which the shell does
//!   not have); no lease (`F_SETLEASE`), which would hold back a host
//!   process opening the file. `flock` and POSIX record locks stay: they
//!   are advisory, build tools in the workspace need them, and a host
//!   writer that does not ask for them is never held back.
//! * the host's **environment** left out: the shell gets `PATH`, `HOME`,
//!   `USER`, `LOGNAME`, `LANG`, `LANGUAGE`, `LC_*`, `TZ`, `SHELL`,
//!   `TMPDIR=/tmp` and [`ShellConfig::env`](dsh_shell_persistent::ShellConfig::env),
//!   with messages in the C locale (`LC_MESSAGES=C`; an `LC_ALL` is given
//!   to every other category instead), so that the errors
//!   [`SandboxOutcome::likely_denial`] reads are the same on every host.
//!
//! It works as root and as an unprivileged user (unprivileged user
//! namespaces). Where namespaces cannot be created (some container runtimes
//! forbid user namespaces or mounting `proc` in them), calls fail closed with
//! the reason, unless the policy sets `degrade`: then the weaker mode runs
//! (capabilities, `no_new_privs`, Landlock and seccomp only, in the host's
//! process table and filesystem view — it does not hold against root) and
//! [`Enforcement::missing`] says so. `SandboxPolicy::bubblewrap` hands the
//! namespaces and mounts to `bwrap` with equivalent flags (same seccomp
//! programs, no Landlock).
//!
//! **Reading** anything outside the sandbox's hidden directories is allowed
//! by design: the modes limit writes, processes and the network, not
//! what can be read (the host's secrets in its environment are kept out —
//! the shell has its own `/proc`, and [`SandboxFs`] does not read `/proc` in
//! the restricted modes — but files readable by the caller's uid stay
//! readable).
//!
//! A workspace without a repository stays without one, for the shell and the
//! editor alike: its `.git` and `HEAD` are protected (the editor refuses
//! them by name), and empty placeholder directories are made there on the
//! host from the owner's first confined shell until the owner is closed or
//! the tool dropped (removed then if still empty), bound read-only in the
//! shell's view; `git init` in the workspace fails with `Read-only file
//! system`. Git takes neither an empty `.git` nor a directory `HEAD` for a
//! repository, so what a killed server leaves is none either.
//!
//! On macOS, a generated Seatbelt profile runs through
//! `/usr/bin/sandbox-exec` (compiled and tested only as text here). On other
//! platforms the restricted modes report "not supported".
//!
//! # Egress by name
//!
//! [`SandboxPolicy::allow_domains`] (feature `egress`, Linux with
//! namespaces) lets the restricted modes reach the hosts named over HTTP(S)
//! and nothing else: the shell keeps its own network namespace, whose init
//! hands a listener on `127.0.0.1:`[`EGRESS_PORT`] to this process; a
//! hyper proxy here serves it ([`egress_env`] is what the shell is told),
//! resolving names itself (`SandboxConfig::egress_resolver`), within
//! `EgressLimits`, and answers 403 naming any host and port not listed.
//!
//! ```
//! use dsh_sandbox::{SandboxMode, SandboxPolicy};
//! let policy = SandboxPolicy::default()
//!     .mode(SandboxMode::WorkspaceWrite)
//!     .allow_domains(vec!["pypi.org".into(), "files.pythonhosted.org".into()]);
//! assert!(dsh_sandbox::AllowList::parse(&policy.allow_domains).unwrap().allows("pypi.org", 443));
//! ```
//!
//! # Messages
//!
//! A confined command that failed on a denied file access — `Read-only file
//! system` (everything outside the writable roots is a read-only mount) or
//! `Invalid cross-device link` (a link or rename out of them) — gets, after
//! its output and `[exit code: N]`, the line `[sandbox: file access denied
//! under <mode> mode]` and, when an approver is configured, one line telling
//! how to ask for more with `sandbox_permissions`. Other failures (an
//! `Operation not permitted` from a denied system call, say) get no such
//! line. An editor write that is refused answers with the marker line alone
//! and leaves the file unchanged.

mod approval;
#[cfg(unix)]
mod beneath;
mod config;
mod confine;
pub mod contract;
mod egress;
mod error;
mod escalation;
mod fs;
mod git;
mod policy;
#[cfg(target_os = "linux")]
mod reader;
mod request;
mod rollout;
mod seatbelt;
mod tool;

pub use approval::{Approval, Approver, EscalationRequest, FixedApprover};
pub use config::{ModeChange, Persistence, SandboxConfig};
pub use contract::{Denial, SandboxOutcome};
#[cfg(target_os = "linux")]
pub use dsh_confine::landlock_abi;
pub use dsh_confine::{Enforcement, TmpHeld, TmpLimit, TmpLimits, UnixSocketGuard};
pub use egress::{AllowList, EGRESS_PORT, egress_env};
#[cfg(all(feature = "egress", target_os = "linux"))]
pub use egress::{EgressLimits, Resolve, SystemResolver};
pub use error::SandboxError;
pub use fs::SandboxFs;
pub use policy::{SandboxMode, SandboxPolicy, WriteRules, resolve};
pub use request::SandboxRequest;
pub use seatbelt::seatbelt_profile;
pub use tool::SandboxedShell;

/// The crates this one's signatures use, re-exported so a host needs no
/// matching versions of its own: [`dsh_shell_persistent`] (the shell's
/// configuration, outcomes and errors; it re-exports `dsh_pty`, `dsh_tool`
/// and `serde_json`) and [`dsh_editor`] (the `Fs` trait [`SandboxFs`]
/// implements).
pub use dsh_editor;
pub use dsh_shell_persistent;
/// The copy-on-write workspaces' layers ([`SandboxConfig::copy_on_write`]).
pub use dsh_workspace;
