//! The editor's filesystem under the policy.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use dsh_editor::fs::{BlockingFs, DirEntry, Fs, FsError, LocalFs, Metadata, Version};

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
///   `.git` or into a protected git directory, and a root's `HEAD` where
///   the root has no repository ([`WriteRules::protected`], by name, so
///   before any shell made its placeholder too). The shell's private
///   `/tmp` is not a writable root for the editor;
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
/// In every mode, a write that would make a file larger than
/// [`SandboxFs::set_file_size`]'s limit (the shell's `RLIMIT_FSIZE`, which
/// [`SandboxedShell::editor_fs`](crate::SandboxedShell::editor_fs) takes
/// from the shell config's limits) fails with [`FsError::FileTooLarge`]
/// (`File too large`, the system's text the shell's programs report for
/// the same write) and changes nothing.
///
/// Each operation is a system call of this machine (or the helper's
/// answer): through [`Fs`] it runs on tokio's blocking pool, and
/// [`Fs::blocking`] hands out the same operations as blocking calls
/// ([`BlockingFs`]), so the editor makes a whole call in one hop there.
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
/// assert_eq!(
///     dsh_editor::contract::render_error(&err),
///     "[sandbox: file access denied under read-only mode]"
/// );
/// # });
/// ```
#[derive(Debug)]
pub struct SandboxFs {
    /// Shared with the operations running on the blocking pool.
    shared: Arc<Shared>,
}

/// What [`SandboxFs`] holds.
#[derive(Debug)]
struct Shared {
    local: LocalFs,
    policy: SandboxPolicy,
    workspace: PathBuf,
    rules: Mutex<Arc<WriteRules>>,
    /// The largest file a write may leave, in bytes (the shell's
    /// `RLIMIT_FSIZE`).
    file_size: Mutex<Option<u64>>,
    /// The confined helper that opens files for reads (restricted modes,
    /// Linux): made on the first read.
    #[cfg(target_os = "linux")]
    reader: Mutex<Reader>,
    /// The owner's copy-on-write view, where the editor reads and writes
    /// instead (Linux).
    #[cfg(target_os = "linux")]
    view: Mutex<View>,
}

/// Whether the editor works in an owner's copy-on-write view.
#[cfg(target_os = "linux")]
#[derive(Debug, Default)]
enum View {
    /// No: the host's files.
    #[default]
    Host,
    /// Yes, but the view is not running (no shell of the owner holds it).
    Closed,
    /// Yes: paths resolved in the view of the owner's shell.
    Open(Arc<crate::reader::Files>),
}

/// Who reads for the editor in the restricted modes.
#[cfg(target_os = "linux")]
#[derive(Debug, Default)]
enum Reader {
    /// Not asked yet.
    #[default]
    Unknown,
    /// The confined helper.
    Helper(Arc<crate::reader::Files>),
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
            shared: Arc::new(Shared {
                local: LocalFs::new(),
                policy,
                workspace,
                rules: Mutex::new(Arc::new(rules)),
                file_size: Mutex::new(None),
                #[cfg(target_os = "linux")]
                reader: Mutex::new(Reader::Unknown),
                #[cfg(target_os = "linux")]
                view: Mutex::new(View::Host),
            }),
        }
    }

    /// The current mode.
    pub fn mode(&self) -> SandboxMode {
        self.shared.rules().mode
    }

    /// Switches the mode (the writable roots are resolved again).
    pub fn set_mode(&self, mode: SandboxMode) {
        self.shared.set_mode(mode);
    }

    /// Bounds every write, in every mode, to files of at most `limit`
    /// bytes, as the shell's `RLIMIT_FSIZE`
    /// ([`ResourceLimits::file_size`](dsh_pty::ResourceLimits::file_size))
    /// bounds its programs' (`None`: no bound, the default). A longer write
    /// fails with [`FsError::FileTooLarge`] and changes nothing.
    pub fn set_file_size(&self, limit: Option<u64>) {
        *self
            .shared
            .file_size
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = limit;
    }

    /// Makes the editor work in the owner's copy-on-write view: every path
    /// resolved as the owner's shell resolves it, through `root` (its
    /// shell's `/proc/<pid>/root`); `None` while no shell holds the view,
    /// when every operation fails saying so.
    #[cfg(target_os = "linux")]
    pub(crate) fn set_view(&self, root: Option<std::os::fd::OwnedFd>) {
        *self.shared.view.lock().unwrap_or_else(|p| p.into_inner()) = match root {
            Some(root) => View::Open(Arc::new(crate::reader::Files::in_root(root))),
            None => View::Closed,
        };
    }

    /// The bound [`SandboxFs::set_file_size`] set.
    pub fn file_size(&self) -> Option<u64> {
        self.shared.file_size()
    }

    /// Runs `op` on tokio's blocking pool (here, where no runtime runs).
    async fn on_blocking_pool<T: Send + 'static>(
        &self,
        path: &Path,
        op: impl FnOnce(&Shared, &Path) -> Result<T, FsError> + Send + 'static,
    ) -> Result<T, FsError> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return op(&self.shared, path);
        };
        let shared = Arc::clone(&self.shared);
        let p = path.to_owned();
        runtime
            .spawn_blocking(move || op(&shared, &p))
            .await
            .map_err(|e| FsError::Io {
                path: path.to_owned(),
                source: std::io::Error::other(e.to_string()),
            })?
    }
}

impl Shared {
    /// The helper that reads in the restricted modes; `None` when this
    /// process reads (danger-full-access, or the weaker mode).
    #[cfg(target_os = "linux")]
    fn helper(&self, path: &Path) -> Result<Option<Arc<crate::reader::Files>>, FsError> {
        if let Some(view) = self.view(path)? {
            return Ok(Some(view));
        }
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
        let files = crate::reader::Files::new(&rules, &self.workspace)
            .map_err(|e| unusable(crate::contract::render_error(&e)))?;
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

    /// The copy-on-write view's reader, if the editor works in one (an
    /// error when it is not running).
    #[cfg(target_os = "linux")]
    fn view(&self, path: &Path) -> Result<Option<Arc<crate::reader::Files>>, FsError> {
        match &*self.view.lock().unwrap_or_else(|p| p.into_inner()) {
            View::Host => Ok(None),
            View::Open(files) => Ok(Some(Arc::clone(files))),
            View::Closed => Err(FsError::Io {
                path: path.to_owned(),
                source: std::io::Error::other(
                    "the copy-on-write workspace's view is not running (the editor works in it only in the owner's turn, through SandboxedShell::in_view)",
                ),
            }),
        }
    }

    /// A danger-full-access write in the copy-on-write view `files`:
    /// beneath the view's `/`, every step resolved there, so that no link
    /// leads it to the host's base (a link with an absolute target is
    /// refused).
    #[cfg(target_os = "linux")]
    fn in_view<T>(
        &self,
        files: &crate::reader::Files,
        path: &Path,
        write: impl FnOnce(
            &WriteRules,
            (crate::beneath::OpenRoot<'_>, crate::beneath::Resolve<'_>),
        ) -> Result<T, crate::beneath::Outcome>,
    ) -> Result<T, FsError> {
        let rules = WriteRules {
            mode: SandboxMode::DangerFullAccess,
            roots: vec![PathBuf::from("/")],
            protected: Vec::new(),
            tmp: true,
            hidden: Vec::new(),
            shown: Vec::new(),
        };
        let open_root = |root: &Path| files.open_dir(root);
        let resolve = |p: &Path| crate::policy::resolve_with(p, &|q| files.canonicalize(q));
        match write(&rules, (&open_root, &resolve)) {
            Ok(v) => Ok(v),
            Err(crate::beneath::Outcome::Fs(e)) => Err(e),
            Err(crate::beneath::Outcome::Refused) => Err(FsError::Refused {
                path: path.to_owned(),
                message: format!(
                    "[copy-on-write workspace: {} is behind a link that leaves the filesystem's root or into a .git directory; the editor does not write there, the shell may]",
                    path.display()
                ),
            }),
        }
    }

    fn file_size(&self) -> Option<u64> {
        *self.file_size.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn rules(&self) -> MutexGuard<'_, Arc<WriteRules>> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_mode(&self, mode: SandboxMode) {
        *self.rules() = Arc::new(WriteRules::new(&self.policy, mode, &self.workspace));
        // The confined reader's view is the mode's: the next call starts
        // one for the new mode.
        #[cfg(target_os = "linux")]
        {
            *self.reader.lock().unwrap_or_else(|p| p.into_inner()) = Reader::Unknown;
        }
    }

    /// How a workspace-write write opens its root and resolves its path:
    /// in the confined reader, so that the shell's view (read-only `.git`,
    /// hidden paths) holds for every step beneath it, where the reader
    /// runs (in a copy-on-write view, the path resolved there too); else
    /// in this process.
    #[cfg(unix)]
    fn root_opener(&self, path: &Path) -> Result<(RootOpener, Resolver), FsError> {
        #[cfg(target_os = "linux")]
        if let Some(view) = self.view(path)? {
            let resolving = Arc::clone(&view);
            return Ok((
                Arc::new(move |root: &Path| view.open_dir(root)),
                Arc::new(move |p: &Path| {
                    crate::policy::resolve_with(p, &|q| resolving.canonicalize(q))
                }),
            ));
        }
        #[cfg(target_os = "linux")]
        if let Some(files) = self.helper(path)? {
            return Ok((
                Arc::new(move |root: &Path| files.open_dir(root)),
                Arc::new(crate::resolve),
            ));
        }
        let _ = path;
        Ok((Arc::new(crate::beneath::ambient), Arc::new(crate::resolve)))
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
            return Err(refused(path, &rules));
        }
        if rules.hides_resolved(path, &real) {
            return Err(FsError::NotFound(path.to_owned()));
        }
        Ok(())
    }

    /// Refuses writes to a hidden path in the restricted modes.
    fn check_hidden(&self, path: &Path, rules: &WriteRules) -> Result<(), FsError> {
        if rules.hides(path) {
            return Err(refused(path, rules));
        }
        Ok(())
    }
}

fn refused(path: &Path, rules: &WriteRules) -> FsError {
    tracing::info!(path = %path.display(), mode = %rules.mode, "sandbox refused a write");
    FsError::Refused {
        path: path.to_owned(),
        message: crate::contract::denial_line(rules.mode),
    }
}

/// Opens a writable root for [`crate::beneath`].
#[cfg(unix)]
type RootOpener = Arc<dyn Fn(&Path) -> Result<cap_std::fs::Dir, FsError> + Send + Sync>;

/// Resolves a path's links for [`crate::beneath`].
#[cfg(unix)]
type Resolver = Arc<dyn Fn(&Path) -> Option<PathBuf> + Send + Sync>;

/// Runs a confined write on this thread, its capabilities out of effect
/// meanwhile.
#[cfg(unix)]
fn confined<T>(
    rules: &WriteRules,
    path: &Path,
    f: impl FnOnce(&WriteRules) -> Result<T, crate::beneath::Outcome>,
) -> Result<T, FsError> {
    use crate::beneath::Outcome;
    // The write has the shell's file permissions: this thread's
    // capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER... when the host runs as
    // root) are out of effect while it runs.
    #[cfg(target_os = "linux")]
    let out = dsh_confine::without_capabilities(|| f(rules));
    #[cfg(not(target_os = "linux"))]
    let out = f(rules);
    match out {
        Ok(v) => Ok(v),
        // A read-only mount of the shell's view, or a rename across its
        // mounts: what the shell would have been refused too.
        Err(Outcome::Fs(FsError::Io { source, .. }))
            if matches!(source.raw_os_error(), Some(libc::EROFS | libc::EXDEV)) =>
        {
            Err(refused(path, rules))
        }
        Err(Outcome::Fs(e)) => Err(e),
        Err(Outcome::Refused) => Err(refused(path, rules)),
    }
}

impl BlockingFs for Shared {
    /// As this machine's files: in the restricted modes a confined helper
    /// answers, but it opens from the same local filesystems, in one round
    /// trip per view ([`BlockingFs::stat_open`]).
    fn reads_quickly(&self) -> bool {
        self.local.reads_quickly()
    }

    /// Through the helper, the path checks run while it answers (a view's
    /// one round trip, with no wait of its own for them).
    fn stat_open(&self, path: &Path) -> Result<(Metadata, Option<std::fs::File>), FsError> {
        #[cfg(target_os = "linux")]
        match self.helper(path) {
            Ok(Some(files)) => return files.stat_open(path, &|| self.check_read(path)),
            Ok(None) => {}
            Err(e) => {
                self.check_read(path)?;
                return Err(e);
            }
        }
        self.check_read(path)?;
        self.local.stat_open(path)
    }

    fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        self.check_read(path)?;
        #[cfg(target_os = "linux")]
        if let Some(files) = self.helper(path)? {
            return files.stat(path);
        }
        BlockingFs::stat(&self.local, path)
    }

    fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        self.check_read(path)?;
        #[cfg(target_os = "linux")]
        if let Some(files) = self.helper(path)? {
            return files.read(path, limit);
        }
        BlockingFs::read(&self.local, path, limit)
    }

    fn read_blocks(
        &self,
        path: &Path,
        limit: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<Version, FsError> {
        self.check_read(path)?;
        #[cfg(target_os = "linux")]
        if let Some(files) = self.helper(path)? {
            return files.read_blocks(path, limit, each);
        }
        self.local.read_blocks(path, limit, each)
    }

    fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        self.check_read(path)?;
        #[cfg(target_os = "linux")]
        if let Some(files) = self.helper(path)? {
            return files.read_dir(path);
        }
        BlockingFs::read_dir(&self.local, path)
    }

    fn create_new(&self, path: &Path, data: &[u8]) -> Result<(), FsError> {
        let rules = Arc::clone(&self.rules());
        self.check_hidden(path, &rules)?;
        let limit = self.file_size();
        let size = || FsError::check_file_size(path, data.len() as u64, limit);
        match rules.mode {
            SandboxMode::DangerFullAccess => {
                size()?;
                #[cfg(target_os = "linux")]
                if let Some(files) = self.view(path)? {
                    return self.in_view(&files, path, |r, view| {
                        crate::beneath::create_new(r, path, data, limit, view)
                    });
                }
                BlockingFs::create_new(&self.local, path, data)
            }
            SandboxMode::ReadOnly => Err(refused(path, &rules)),
            #[cfg(unix)]
            SandboxMode::WorkspaceWrite => {
                let (open_root, resolve) = self.root_opener(path)?;
                confined(&rules, path, |r| {
                    crate::beneath::create_new(r, path, data, limit, (&*open_root, &*resolve))
                })
            }
            #[cfg(not(unix))]
            SandboxMode::WorkspaceWrite => {
                if !rules.allows(path) {
                    return Err(refused(path, &rules));
                }
                size()?;
                BlockingFs::create_new(&self.local, path, data)
            }
        }
    }

    fn replace(&self, path: &Path, data: &[u8], expected: &Version) -> Result<Version, FsError> {
        let rules = Arc::clone(&self.rules());
        self.check_hidden(path, &rules)?;
        let limit = self.file_size();
        let size = || FsError::check_file_size(path, data.len() as u64, limit);
        match rules.mode {
            SandboxMode::DangerFullAccess => {
                size()?;
                #[cfg(target_os = "linux")]
                if let Some(files) = self.view(path)? {
                    return self.in_view(&files, path, |r, view| {
                        crate::beneath::replace(r, path, data, expected, limit, view)
                    });
                }
                BlockingFs::replace(&self.local, path, data, expected)
            }
            SandboxMode::ReadOnly => Err(refused(path, &rules)),
            #[cfg(unix)]
            SandboxMode::WorkspaceWrite => {
                let (open_root, resolve) = self.root_opener(path)?;
                confined(&rules, path, |r| {
                    crate::beneath::replace(
                        r,
                        path,
                        data,
                        expected,
                        limit,
                        (&*open_root, &*resolve),
                    )
                })
            }
            #[cfg(not(unix))]
            SandboxMode::WorkspaceWrite => {
                if !rules.allows(path) {
                    return Err(refused(path, &rules));
                }
                size()?;
                BlockingFs::replace(&self.local, path, data, expected)
            }
        }
    }
}

#[async_trait]
impl Fs for SandboxFs {
    async fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        self.on_blocking_pool(path, BlockingFs::stat).await
    }

    async fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        self.on_blocking_pool(path, move |fs, p| BlockingFs::read(fs, p, limit))
            .await
    }

    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        self.on_blocking_pool(path, BlockingFs::read_dir).await
    }

    async fn create_new(&self, path: &Path, data: Vec<u8>) -> Result<(), FsError> {
        self.on_blocking_pool(path, move |fs, p| BlockingFs::create_new(fs, p, &data))
            .await
    }

    async fn replace(
        &self,
        path: &Path,
        data: Vec<u8>,
        expected: &Version,
    ) -> Result<Version, FsError> {
        let expected = expected.clone();
        self.on_blocking_pool(path, move |fs, p| {
            BlockingFs::replace(fs, p, &data, &expected)
        })
        .await
    }

    fn blocking(&self) -> Option<&dyn BlockingFs> {
        Some(&*self.shared)
    }
}
