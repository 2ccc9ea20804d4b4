#![doc = include_str!("../README.md")]
//!
//! # Layout of the layers directory
//!
//! ```text
//! COW_DIR/layers/<owner>/upper     the owner's upper layer (overlayfs upperdir)
//! COW_DIR/layers/<owner>/work      its work directory (overlayfs workdir)
//! COW_DIR/snapshots/<id>           a snapshot: a copy of an upper layer
//! COW_DIR/staging/                 copies being made and layers being removed
//! ```
//!
//! `<owner>` is the owner's name with every byte other than ASCII letters,
//! digits, `-` and `_` written `%XX`, behind an `o` (one to one, and never
//! `.`, `..` or a path). An owner without a layer directory sees the base:
//! its changes are none, and forking or snapshotting it copies nothing.
//! Fork, restore and reset build the new layer under `staging` and rename it
//! into place, so a layer is never seen half-copied.
//!
//! # What the crate reads, and how
//!
//! The owner — possibly a hostile model — controls what is in its upper
//! layer and may change it while the host reads it. Every walk therefore
//! opens each directory from its parent's descriptor with
//! `O_DIRECTORY | O_NOFOLLOW`, opens each file `O_NOFOLLOW | O_NONBLOCK` and
//! reads it only if `fstat` then says it is a regular file (never a FIFO or
//! a device), and reads a symbolic link's target as text: a link to
//! `/etc/shadow` is reported, diffed and copied as a link whose target is
//! the text `/etc/shadow`. A hard link is read as the file it is (it is in
//! the layer). The base is read the same way. Files are compared in 64 KiB
//! blocks, never whole in memory; the diff reads at most
//! [`DIFF_MAX_FILE`] bytes of a side and reports a larger file as
//! `Binary files ... differ`, and once it is [`DIFF_MAX_TOTAL`] long names
//! the remaining files only. Walks stop with an error below [`MAX_DEPTH`]
//! nested directories.
//!
//! # What an upper layer holds
//!
//! The crate reads the layer as overlayfs writes it (the kernel's
//! `Documentation/filesystems/overlayfs.rst`): a character device 0/0 is a
//! whiteout (a deleted path); a directory with `trusted.overlay.opaque` or
//! `user.overlay.opaque` (the `userxattr` form of a mount in a user
//! namespace) set to `y` hides the base's directory beneath it; an empty
//! regular file with `*.overlay.whiteout` (Linux 6.7's form) is a whiteout
//! too. A file copied up and changed back (same content, mode and link
//! target) is no change; a path deleted and made again is
//! [`Modified`](ChangeKind::Modified) (and has both entries, which differ
//! in kind when its type changed); a renamed directory is the deletion of
//! every old path and the addition of every new one (overlayfs without
//! `redirect_dir` copies it as an opaque directory beside a whiteout).
//! Mount the view with `redirect_dir=off` and `metacopy=off` (the defaults
//! of most kernels): a redirect or a metadata-only copy-up is not read.
//! Owners, groups and times are not compared.
//!
//! # Copies
//!
//! Fork, snapshot and restore copy an upper layer without following any
//! link: regular files (content through `copy_file_range` where the
//! filesystem has it, mode, times), directories (mode, times), symbolic
//! links (target text, times), whiteouts (`mknod` of a character device
//! 0/0, which needs no `CAP_MKNOD` since Linux 5.8), FIFOs and sockets, and
//! the `user.*` and `trusted.overlay.*` extended attributes of files and
//! directories (the latter where the process may read them). Hard links
//! within a layer are copied as separate files; ownership is the copying
//! process's; devices other than whiteouts are copied only where the
//! process may make them (skipped, with a `tracing` warning, elsewhere).
//!
//! # The diff
//!
//! [`Workspace::diff`] writes what `git diff` would between the base and
//! the view, with paths relative to the base: `diff --git` headers,
//! `new file mode`, `deleted file mode`, `old mode`/`new mode`, text hunks
//! with three lines of context, and links as git shows them (mode 120000,
//! the target as the content). It applies with `git apply` to a copy of the
//! base. A file with a NUL byte in its first 8000 bytes (git's test), or
//! not valid UTF-8, or larger than [`DIFF_MAX_FILE`], is
//! `Binary files a/X and b/X differ`, which names the file but carries no
//! content (`git apply` refuses such a patch). Directories, FIFOs, sockets
//! and devices have no place in a git diff and are left out of it (they are
//! in [`Workspace::changes`]). The hunks come from the `similar` crate
//! (Myers' algorithm, the one git uses by default; well kept, no
//! dependencies of its own), with a one-second deadline per file after
//! which the diff is still correct but may be longer than the shortest.
//!
//! # Platforms
//!
//! Linux only in substance: elsewhere the crate builds and
//! [`Workspace::new`] returns [`WorkspaceError::Unsupported`].
#![deny(missing_docs)]

mod change;
mod error;
mod id;
mod owner;
mod workspace;

#[cfg(target_os = "linux")]
mod copy;
#[cfg(target_os = "linux")]
mod patch;
#[cfg(target_os = "linux")]
mod sys;
#[cfg(target_os = "linux")]
mod walk;

pub use change::{Change, ChangeKind, Entry, EntryKind};
pub use error::WorkspaceError;
pub use id::SnapshotId;
pub use workspace::{Layer, RetiredLayer, Workspace};

/// The most bytes of one side of a file the diff reads; a larger file is
/// reported as `Binary files ... differ`.
pub const DIFF_MAX_FILE: u64 = 8 << 20;

/// The size past which the diff names the remaining changed files only
/// (`Binary files ... differ`, as for binary files) instead of showing
/// their content, so a diff stays within about this size plus
/// [`DIFF_MAX_FILE`] whatever the owner wrote.
pub const DIFF_MAX_TOTAL: u64 = 64 << 20;

/// How deep the walks go into nested directories before they stop with
/// [`WorkspaceError::TooDeep`] (each level holds one or two descriptors).
pub const MAX_DEPTH: usize = 256;
