//! The editor's filesystem under the policy.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
#[cfg(target_os = "linux")]
use dsh_editor::fs::blocking;
use dsh_editor::fs::{DirEntry, Fs, FsError, LocalFs, Metadata, Version};

use crate::{SandboxMode, SandboxPolicy, WriteRules};

/// The local filesystem under the policy.
///
/// **Reads** in the restricted modes (Linux) are made inside the same walls
/// as the shell's: a small confined helper process of the sandbox's (its
/// own namespaces and read-only view, hidden paths hidden, the caller's uid
/// without capabilities, Landlock and seccomp) opens each path and hands
/// the descriptor back, so the editor reads exactly what the shell could
/// read — not the host's `/tmp`, `/run` or `/dev/shm`, not another uid's
/// 0600 file when the host runs as root — and a rename or symlink swapped
/// in meanwhile cannot send a read elsewhere (the path is resolved once,
/// by the kernel, in that process). What was opened is checked on the
/// descriptor: a FIFO or device is refused, never waited on. The helper
/// starts with the first read; one that does not answer within 10 s is
/// killed and the call fails saying so, and the next call starts another.
/// Where it cannot run (no user namespaces) reads fail with the reason,
/// unless the policy sets `degrade`: then this process reads, with the
/// path checks below.
///
/// Every **mutation** is checked against the writable roots of the current
/// mode:
///
/// * `read-only`: every create and edit is refused;
/// * `workspace-write`: the write runs on a thread whose capabilities are
///   out of effect (so, as root, it has the shell's file permissions: no
///   `CAP_DAC_OVERRIDE`); the writable root is opened by the confined
///   reader, in the shell's view, so that view's read-only mounts (`.git`,
///   hidden paths) hold for every step beneath it (a write they stop is
///   refused); and the path is resolved beneath that open directory of the
///   writable root, and every step of the write (missing directories, the
///   temporary file, the version check, the final link or rename) is made
///   relative to it, so that no rename or symlink swap made meanwhile can
///   send the write elsewhere. A symbolic link whose target leaves the root
///   (including any absolute target) is refused, as is any path through a
///   `.git` or into a protected git directory. The shell's private `/tmp`
///   is not a writable root for the editor;
/// * `danger-full-access`: [`LocalFs`], unrestricted.
///
/// In the restricted modes the editor also refuses `/proc` (the helper's
/// view has none: a process's own `/proc` is no file of the workspace),
/// and finds nothing at a hidden path ([`SandboxPolicy::hidden_paths`]),
/// which it never writes.
///
/// A refusal is `[sandbox: file access denied under <mode> mode]` and
/// changes nothing.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use dsh_editor::Editor;
/// use dsh_sandbox::{SandboxFs, SandboxMode, SandboxPolicy};
/// let dir = tempfile::tempdir().unwrap();
/// let fs = SandboxFs::new(SandboxPolicy::default(), dir.path());
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
pub struct SandboxFs {
    local: LocalFs,
    policy: SandboxPolicy,
    workspace: PathBuf,
    rules: Mutex<Arc<WriteRules>>,
    /// The confined helper that opens files for reads (restricted modes,
    /// Linux): made on the first read.
    #[cfg(target_os = "linux")]
    reader: Mutex<Reader>,
}

/// Who reads for the editor in the restricted modes.
#[cfg(target_os = "linux")]
#[derive(Debug, Default)]
enum Reader {
    /// Not asked yet.
    #[default]
    Unknown,
    /// The confined helper.
    Helper(Arc<crate::linux::files::Files>),
    /// This process, with path checks: the helper cannot run here and the
    /// policy allows the weaker mode (`degrade`).
    Host,
}

impl SandboxFs {
    /// The local filesystem under `policy`, in the policy's default mode.
    pub fn new(policy: SandboxPolicy, workspace: impl Into<PathBuf>) -> Self {
        let workspace = workspace.into();
        let rules = WriteRules::new(&policy, policy.mode, &workspace);
        SandboxFs {
            local: LocalFs::new(),
            policy,
            workspace,
            rules: Mutex::new(Arc::new(rules)),
            #[cfg(target_os = "linux")]
            reader: Mutex::new(Reader::Unknown),
        }
    }

    /// The helper that reads in the restricted modes; `None` when this
    /// process reads (danger-full-access, or the weaker mode).
    #[cfg(target_os = "linux")]
    fn helper(&self, path: &Path) -> Result<Option<Arc<crate::linux::files::Files>>, FsError> {
        let rules = Arc::clone(&self.rules());
        if rules.mode == SandboxMode::DangerFullAccess {
            return Ok(None);
        }
        let mut reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        match &*reader {
            Reader::Helper(files) => return Ok(Some(Arc::clone(files))),
            Reader::Host => return Ok(None),
            Reader::Unknown => {}
        }
        let unusable = |e: String| FsError::Io {
            path: path.to_owned(),
            source: std::io::Error::other(format!(
                "the sandbox could not start its confined file reader: {e}"
            )),
        };
        let files = crate::linux::files::Files::new(&rules, &self.workspace)
            .map_err(|e| unusable(e.to_string()))?;
        match files.ensure_started() {
            Ok(()) => {
                let files = Arc::new(files);
                *reader = Reader::Helper(Arc::clone(&files));
                Ok(Some(files))
            }
            Err(e) if self.policy.degrade => {
                tracing::warn!(%e, "the confined file reader cannot run; the editor reads from this process (degrade)");
                *reader = Reader::Host;
                Ok(None)
            }
            Err(e) => Err(unusable(e.to_string())),
        }
    }

    fn rules(&self) -> MutexGuard<'_, Arc<WriteRules>> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current mode.
    pub fn mode(&self) -> SandboxMode {
        self.rules().mode
    }

    /// Switches the mode (the writable roots are resolved again).
    pub fn set_mode(&self, mode: SandboxMode) {
        *self.rules() = Arc::new(WriteRules::new(&self.policy, mode, &self.workspace));
        // The confined reader's view is the mode's: the next call starts
        // one for the new mode.
        #[cfg(target_os = "linux")]
        {
            *self.reader.lock().unwrap_or_else(|p| p.into_inner()) = Reader::Unknown;
        }
    }

    /// How a workspace-write write opens its root: in the confined reader,
    /// so that the shell's view (read-only `.git`, hidden paths) holds for
    /// every step beneath it, where the reader runs; else in this process.
    #[cfg(unix)]
    fn root_opener(&self, path: &Path) -> Result<RootOpener, FsError> {
        #[cfg(target_os = "linux")]
        if let Some(files) = self.helper(path)? {
            return Ok(Arc::new(move |root: &Path| files.open_dir(root)));
        }
        let _ = path;
        Ok(Arc::new(crate::beneath::ambient))
    }

    /// Refuses reads of this process's `/proc` in the restricted modes;
    /// a hidden path does not exist.
    fn check_read(&self, path: &Path) -> Result<(), FsError> {
        let rules = Arc::clone(&self.rules());
        if rules.mode == SandboxMode::DangerFullAccess {
            return Ok(());
        }
        let real = crate::resolve(path).unwrap_or_else(|| path.to_owned());
        if real.starts_with("/proc") || path.starts_with("/proc") {
            return Err(Self::refused(path, &rules));
        }
        if rules.hides_resolved(path, &real) {
            return Err(FsError::NotFound(path.to_owned()));
        }
        Ok(())
    }

    /// Refuses writes to a hidden path in the restricted modes.
    fn check_hidden(&self, path: &Path, rules: &WriteRules) -> Result<(), FsError> {
        if rules.hides(path) {
            return Err(Self::refused(path, rules));
        }
        Ok(())
    }

    fn refused(path: &Path, rules: &WriteRules) -> FsError {
        tracing::info!(path = %path.display(), mode = %rules.mode, "sandbox refused a write");
        FsError::Refused {
            path: path.to_owned(),
            message: rules.mode.denial_line(),
        }
    }
}

/// Opens a writable root for [`crate::beneath`].
#[cfg(unix)]
type RootOpener = Arc<dyn Fn(&Path) -> Result<cap_std::fs::Dir, FsError> + Send + Sync>;

/// Runs a confined write on the blocking pool.
#[cfg(unix)]
async fn confined<T: Send + 'static>(
    rules: Arc<WriteRules>,
    path: &Path,
    f: impl FnOnce(&WriteRules) -> Result<T, crate::beneath::Outcome> + Send + 'static,
) -> Result<T, FsError> {
    use crate::beneath::Outcome;
    let joined = tokio::task::spawn_blocking(move || {
        // The write has the shell's file permissions: this thread's
        // capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER... when the host runs
        // as root) are out of effect while it runs.
        #[cfg(target_os = "linux")]
        let out = crate::linux::without_capabilities(|| f(&rules));
        #[cfg(not(target_os = "linux"))]
        let out = f(&rules);
        (out, rules)
    })
    .await;
    match joined {
        Ok((Ok(v), _)) => Ok(v),
        // A read-only mount of the shell's view, or a rename across its
        // mounts: what the shell would have been refused too.
        Ok((Err(Outcome::Fs(FsError::Io { source, .. })), rules))
            if matches!(source.raw_os_error(), Some(libc::EROFS | libc::EXDEV)) =>
        {
            Err(SandboxFs::refused(path, &rules))
        }
        Ok((Err(Outcome::Fs(e)), _)) => Err(e),
        Ok((Err(Outcome::Refused), rules)) => Err(SandboxFs::refused(path, &rules)),
        Err(e) => Err(FsError::Io {
            path: path.to_owned(),
            source: std::io::Error::other(e.to_string()),
        }),
    }
}

#[async_trait]
impl Fs for SandboxFs {
    fn blocking_calls(&self) -> bool {
        self.local.blocking_calls()
    }

    async fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        self.check_read(path)?;
        #[cfg(target_os = "linux")]
        if let Some(files) = self.helper(path)? {
            let p = path.to_owned();
            return blocking(path, move || files.stat(&p)).await;
        }
        self.local.stat(path).await
    }

    async fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        self.check_read(path)?;
        #[cfg(target_os = "linux")]
        if let Some(files) = self.helper(path)? {
            let p = path.to_owned();
            return blocking(path, move || files.read(&p, limit)).await;
        }
        self.local.read(path, limit).await
    }

    async fn read_blocks(
        &self,
        path: &Path,
        limit: u64,
        each: &mut (dyn for<'b> FnMut(&'b [u8]) + Send),
    ) -> Result<Version, FsError> {
        self.check_read(path)?;
        #[cfg(target_os = "linux")]
        if let Some(files) = self.helper(path)? {
            // Blocks are read in place only where a whole call runs on the
            // blocking pool; elsewhere the file is read as one block there.
            if dsh_editor::fs::is_inline() {
                return files.read_blocks(path, limit, each);
            }
            let p = path.to_owned();
            let (bytes, version) = blocking(path, move || files.read(&p, limit)).await?;
            each(&bytes);
            return Ok(version);
        }
        self.local.read_blocks(path, limit, each).await
    }

    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        self.check_read(path)?;
        #[cfg(target_os = "linux")]
        if let Some(files) = self.helper(path)? {
            let p = path.to_owned();
            return blocking(path, move || files.read_dir(&p)).await;
        }
        self.local.read_dir(path).await
    }

    async fn create_new(&self, path: &Path, data: Vec<u8>) -> Result<(), FsError> {
        let rules = Arc::clone(&self.rules());
        self.check_hidden(path, &rules)?;
        match rules.mode {
            SandboxMode::DangerFullAccess => self.local.create_new(path, data).await,
            SandboxMode::ReadOnly => Err(Self::refused(path, &rules)),
            #[cfg(unix)]
            SandboxMode::WorkspaceWrite => {
                let p = path.to_owned();
                let open_root = self.root_opener(path)?;
                confined(rules, path, move |r| {
                    crate::beneath::create_new(r, &p, &data, &*open_root)
                })
                .await
            }
            #[cfg(not(unix))]
            SandboxMode::WorkspaceWrite => {
                if !rules.allows(path) {
                    return Err(Self::refused(path, &rules));
                }
                self.local.create_new(path, data).await
            }
        }
    }

    async fn replace(
        &self,
        path: &Path,
        data: Vec<u8>,
        expected: &Version,
    ) -> Result<Version, FsError> {
        let rules = Arc::clone(&self.rules());
        self.check_hidden(path, &rules)?;
        match rules.mode {
            SandboxMode::DangerFullAccess => self.local.replace(path, data, expected).await,
            SandboxMode::ReadOnly => Err(Self::refused(path, &rules)),
            #[cfg(unix)]
            SandboxMode::WorkspaceWrite => {
                let p = path.to_owned();
                let expected = expected.clone();
                let open_root = self.root_opener(path)?;
                confined(rules, path, move |r| {
                    crate::beneath::replace(r, &p, &data, &expected, &*open_root)
                })
                .await
            }
            #[cfg(not(unix))]
            SandboxMode::WorkspaceWrite => {
                if !rules.allows(path) {
                    return Err(Self::refused(path, &rules));
                }
                self.local.replace(path, data, expected).await
            }
        }
    }
}
