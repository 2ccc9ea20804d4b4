//! The crate's error type.

use std::io;
use std::path::PathBuf;

/// Why a workspace operation failed. Each `Display` is one sentence naming
/// what failed and where; I/O causes are kept as the `#[source]`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// Copy-on-write workspaces need Linux (overlayfs).
    #[error("copy-on-write workspaces need Linux (overlayfs); this system is {os}")]
    Unsupported {
        /// The operating system this build is for.
        os: &'static str,
    },
    /// The base is missing or not a directory.
    #[error("the workspace base {path} is not an existing directory")]
    BaseNotDirectory {
        /// The base as given.
        path: PathBuf,
        /// Why it could not be used.
        #[source]
        source: Option<io::Error>,
    },
    /// The layers directory and the base overlap, which overlayfs refuses.
    #[error(
        "the layers directory {cow_dir} and the base {base} overlap (one is inside the other), \
         which overlayfs refuses: put the layers directory outside the base"
    )]
    Overlap {
        /// The base.
        base: PathBuf,
        /// The layers directory.
        cow_dir: PathBuf,
    },
    /// An owner name that cannot be used.
    #[error("the owner name {owner:?} cannot name a layer: {reason}")]
    InvalidOwner {
        /// The owner name (cut to 64 characters).
        owner: String,
        /// Why.
        reason: &'static str,
    },
    /// No snapshot has this id (never made, or deleted).
    #[error("there is no snapshot {id}")]
    SnapshotNotFound {
        /// The id asked for.
        id: String,
    },
    /// A snapshot id that is not one this crate makes.
    #[error("{text:?} is not a snapshot id (16 lowercase hexadecimal digits)")]
    InvalidSnapshotId {
        /// The text given.
        text: String,
    },
    /// A layer nests deeper than the walks go.
    #[error(
        "{path} in a layer nests deeper than {max} directories; the layer was not read further"
    )]
    TooDeep {
        /// The path, relative to the layer.
        path: PathBuf,
        /// The limit.
        max: usize,
    },
    /// A filesystem call failed.
    #[error("could not {action} {path}")]
    Io {
        /// What was being done ("read", "copy", "remove", ...).
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl WorkspaceError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        WorkspaceError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
