//! The editor's filesystem under the policy.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use dsh_editor::fs::{DirEntry, Fs, FsError, Metadata, Version};

use crate::{SandboxMode, SandboxPolicy, WriteRules};

/// An [`Fs`] that applies the policy to every mutation after resolving the
/// real path (symlinks of the existing part, then `.`/`..`): a write outside
/// the writable roots, into a protected `.git`, or any write in read-only
/// mode is refused with `[sandbox: file access denied under <mode> mode]`
/// and changes nothing. Reads pass through (the policy reads everywhere).
///
/// Bind mounts are not visible to path resolution: a directory bound into
/// the workspace from elsewhere counts as inside it.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use dsh_editor::{Editor, fs::LocalFs};
/// use dsh_sandbox::{SandboxFs, SandboxMode, SandboxPolicy};
/// let dir = tempfile::tempdir().unwrap();
/// let fs = SandboxFs::new(LocalFs::new(), SandboxPolicy::default(), dir.path());
/// assert_eq!(fs.mode(), SandboxMode::ReadOnly);
/// let editor = Editor::new(fs);
/// let path = dir.path().join("x.txt");
/// let err = editor
///     .execute(&serde_json::json!({"command": "create", "path": path, "file_text": "x"}))
///     .await
///     .unwrap_err();
/// assert_eq!(err.to_string(), "[sandbox: file access denied under read-only mode]");
/// # });
/// ```
#[derive(Debug)]
pub struct SandboxFs<F> {
    inner: F,
    policy: SandboxPolicy,
    workspace: PathBuf,
    rules: Mutex<WriteRules>,
}

impl<F: Fs> SandboxFs<F> {
    /// `inner` under `policy`, in the policy's default mode.
    pub fn new(inner: F, policy: SandboxPolicy, workspace: impl Into<PathBuf>) -> Self {
        let workspace = workspace.into();
        let rules = WriteRules::new(&policy, policy.mode, &workspace);
        SandboxFs {
            inner,
            policy,
            workspace,
            rules: Mutex::new(rules),
        }
    }

    fn rules(&self) -> MutexGuard<'_, WriteRules> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current mode.
    pub fn mode(&self) -> SandboxMode {
        self.rules().mode
    }

    /// Switches the mode (the writable roots are resolved again).
    pub fn set_mode(&self, mode: SandboxMode) {
        *self.rules() = WriteRules::new(&self.policy, mode, &self.workspace);
    }

    fn check(&self, path: &Path) -> Result<(), FsError> {
        let rules = self.rules();
        if rules.allows(path) {
            Ok(())
        } else {
            tracing::info!(path = %path.display(), mode = %rules.mode, "sandbox refused a write");
            Err(FsError::Refused {
                path: path.to_owned(),
                message: rules.mode.denial_line(),
            })
        }
    }
}

#[async_trait]
impl<F: Fs> Fs for SandboxFs<F> {
    async fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        self.inner.stat(path).await
    }

    async fn read(&self, path: &Path) -> Result<(Vec<u8>, Version), FsError> {
        self.inner.read(path).await
    }

    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        self.inner.read_dir(path).await
    }

    async fn create_new(&self, path: &Path, data: Vec<u8>) -> Result<(), FsError> {
        self.check(path)?;
        self.inner.create_new(path, data).await
    }

    async fn replace(
        &self,
        path: &Path,
        data: Vec<u8>,
        expected: &Version,
    ) -> Result<Version, FsError> {
        self.check(path)?;
        self.inner.replace(path, data, expected).await
    }
}
