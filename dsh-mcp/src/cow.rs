//! `--copy-on-write`: the workspace every owner sees a view of, and its
//! layers directory, made at start and removed when the server ends.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_sandbox::dsh_workspace::{Workspace, WorkspaceError};

/// Why the copy-on-write workspace could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum CopyOnWriteError {
    /// The default layers directory could not be made.
    #[error("cannot make a layers directory under {dir} (give one with --cow-dir DIR)")]
    TempDir {
        /// The system's temporary directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The workspace refused the base or the layers directory.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

/// The copy-on-write workspace of a server: owners' layers and snapshots
/// in a layers directory, all of it removed when this is dropped (the
/// directory too when it was made here; a `--cow-dir` the host named is
/// kept, emptied of what the workspace made in it).
///
/// Drop it after every owner's shell ended (their views are mounted
/// while they run).
#[derive(Debug)]
pub struct CopyOnWrite {
    workspace: Arc<Workspace>,
    /// The layers directory, when it was made here.
    made: Option<PathBuf>,
}

impl CopyOnWrite {
    /// A workspace over `base` with its layers in `cow_dir`, or, when
    /// `None`, in a new directory under the system's temporary directory.
    pub fn open(base: &Path, cow_dir: Option<&Path>) -> Result<CopyOnWrite, CopyOnWriteError> {
        let (dir, made) = match cow_dir {
            Some(dir) => (dir.to_owned(), None),
            None => {
                let tmp = std::env::temp_dir();
                let mut builder = tempfile::Builder::new();
                builder.prefix("dsh-cow-");
                // Only this user may reach the owners' layers.
                #[cfg(unix)]
                builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
                let dir = builder
                    .tempdir_in(&tmp)
                    .map_err(|source| CopyOnWriteError::TempDir { dir: tmp, source })?
                    .keep();
                (dir.clone(), Some(dir))
            }
        };
        match Workspace::new(base, &dir) {
            Ok(workspace) => Ok(CopyOnWrite {
                workspace: Arc::new(workspace),
                made,
            }),
            Err(err) => {
                if let Some(made) = made {
                    let _ = std::fs::remove_dir(made);
                }
                Err(err.into())
            }
        }
    }

    /// The workspace, for [`SandboxConfig::copy_on_write`](dsh_sandbox::SandboxConfig::copy_on_write).
    pub fn workspace(&self) -> &Arc<Workspace> {
        &self.workspace
    }
}

impl Drop for CopyOnWrite {
    fn drop(&mut self) {
        if let Err(err) = self.workspace.clear() {
            tracing::warn!(%err, "removing the copy-on-write layers and snapshots failed");
            return;
        }
        if let Some(dir) = &self.made
            && let Err(err) = std::fs::remove_dir(dir)
        {
            tracing::warn!(%err, dir = %dir.display(), "removing the layers directory failed");
        }
    }
}
