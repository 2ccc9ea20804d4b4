//! The editor's reads in the restricted modes, through the confined opener
//! ([`dsh_confine::Opener`]): every path is opened by a process under the
//! shell's confinement, and this process only reads from, or looks at, the
//! descriptors it passes back.
//!
//! * Files are opened `O_NONBLOCK | O_NOCTTY`, and what was opened is
//!   checked (`fstat` on the descriptor): a FIFO swapped in never blocks.
//! * A helper that does not answer in time, or died, is killed and the call
//!   fails with a sentence saying so; the next call starts a new one.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use dsh_confine::{Found, OpenError, Opener};
use dsh_editor::fs::{DirEntry, FileKind, FsError, LocalFs, Metadata, Version};
use libc::c_int;

use crate::{SandboxError, WriteRules};

/// The editor's confined reads (see the module docs).
#[derive(Debug)]
pub(crate) struct Files {
    opener: Opener,
}

fn io_error(path: &Path, message: String) -> FsError {
    FsError::Io {
        path: path.to_owned(),
        source: io::Error::other(message),
    }
}

/// The model's text for why the opener gave no descriptor for `path`.
fn fs_error(path: &Path, error: OpenError) -> FsError {
    match error {
        OpenError::Open(e) => FsError::from_io(path, e),
        OpenError::Start(e) => io_error(
            path,
            format!("the sandbox could not start its confined file reader: {e}"),
        ),
        OpenError::NoFile => io_error(path, "the sandbox's file reader sent no file".into()),
        OpenError::Stopped(e) => io_error(
            path,
            format!(
                "the sandbox's confined file reader stopped answering ({e}); a new one starts with the next call"
            ),
        ),
        other => io_error(path, other.to_string()),
    }
}

impl Files {
    /// The reader for `rules` over `workspace` (its helper started on first
    /// use).
    pub(crate) fn new(rules: &WriteRules, workspace: &Path) -> Result<Files, SandboxError> {
        let workspace = crate::confine::canonical_workspace(workspace)?;
        let policy = crate::confine::resolved(rules, workspace);
        Ok(Files {
            opener: Opener::new(&policy).map_err(crate::error::from_confine)?,
        })
    }

    /// The reader of another view of the filesystem, whose `/` is `root`
    /// (a copy-on-write workspace's shell's): this process opens each
    /// path there ([`Opener::in_root`]).
    pub(crate) fn in_root(root: OwnedFd) -> Files {
        Files {
            opener: Opener::in_root(root),
        }
    }

    /// `path` with the links of its existing part resolved in the view
    /// ([`Opener::canonicalize`]).
    pub(crate) fn canonicalize(&self, path: &Path) -> io::Result<std::path::PathBuf> {
        self.opener.canonicalize(path).map_err(|e| match e {
            OpenError::Open(e) => e,
            other => io::Error::other(other.to_string()),
        })
    }

    /// Starts the helper now if it is not running (a host that allows the
    /// weaker mode learns here whether the helper can run at all).
    pub(crate) fn ensure_started(&self) -> io::Result<()> {
        self.opener.ensure_started()
    }

    /// Opens `path` in the helper with `flags`; the descriptor, or the
    /// error the helper's `open` got.
    fn open(&self, path: &Path, flags: c_int) -> Result<OwnedFd, FsError> {
        self.opener.open(path, flags).map_err(|e| fs_error(path, e))
    }

    /// The directory at `path`, opened in the shell's view: a write
    /// beneath it meets that view's read-only mounts.
    pub(crate) fn open_dir(&self, path: &Path) -> Result<cap_std::fs::Dir, FsError> {
        let fd = self.open(path, libc::O_RDONLY | libc::O_DIRECTORY)?;
        Ok(cap_std::fs::Dir::from_std_file(std::fs::File::from(fd)))
    }
    /// What `stat` tells about `path`, as the shell would see it.
    pub(crate) fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        let link = self.open(path, libc::O_PATH | libc::O_NOFOLLOW)?;
        let link = std::fs::File::from(link)
            .metadata()
            .map_err(|e| FsError::from_io(path, e))?;
        let is_symlink = link.file_type().is_symlink();
        let meta = if is_symlink {
            match self.open(path, libc::O_PATH) {
                Ok(fd) => std::fs::File::from(fd)
                    .metadata()
                    .map_err(|e| FsError::from_io(path, e))?,
                Err(FsError::NotFound(_)) => {
                    return Ok(Metadata {
                        kind: FileKind::Other,
                        is_symlink,
                        len: 0,
                        mode: None,
                        version: LocalFs::version(&link),
                    });
                }
                Err(e) => return Err(e),
            }
        } else {
            link
        };
        Ok(metadata(&meta, is_symlink))
    }

    /// [`Files::stat`], and the regular file at `path` opened for reading,
    /// in one round trip with the helper (a view's stat and open), `check`
    /// run while the helper answers: what it refuses is the answer, and
    /// what the helper sent is dropped unused. A symbolic link takes
    /// [`Files::stat`]'s way and opens nothing.
    pub(crate) fn stat_open(
        &self,
        path: &Path,
        check: &dyn Fn() -> Result<(), FsError>,
    ) -> Result<(Metadata, Option<std::fs::File>), FsError> {
        let mut checked = None;
        let found = self
            .opener
            .stat_open_while(path, &mut || checked = Some(check()));
        checked.unwrap_or_else(check)?;
        let (fd, opened) = match found.map_err(|e| fs_error(path, e))? {
            Found::File(fd) => (fd, true),
            Found::Other(fd) => (fd, false),
            _ => return Err(fs_error(path, OpenError::NoFile)),
        };
        let fd = std::fs::File::from(fd);
        let meta = fd.metadata().map_err(|e| FsError::from_io(path, e))?;
        if meta.file_type().is_symlink() {
            return Ok((self.stat(path)?, None));
        }
        // What was opened for reading is read only if it is a regular file
        // (the helper's `fstat` said so too).
        let file = (opened && meta.is_file()).then_some(fd);
        Ok((metadata(&meta, false), file))
    }

    /// The regular file at `path`, opened in the helper, and its metadata.
    fn open_file(
        &self,
        path: &Path,
        limit: u64,
    ) -> Result<(std::fs::File, std::fs::Metadata), FsError> {
        let fd = self.open(path, libc::O_RDONLY | libc::O_NONBLOCK)?;
        let file = std::fs::File::from(fd);
        let meta = file.metadata().map_err(|e| FsError::from_io(path, e))?;
        if !meta.is_file() {
            return Err(FsError::NotRegular(path.to_owned()));
        }
        FsError::check_len(path, meta.len(), limit)?;
        Ok((file, meta))
    }

    /// The content of the file at `path` and its version.
    pub(crate) fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        let (file, meta) = self.open_file(path, limit)?;
        let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(limit.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| FsError::from_io(path, e))?;
        FsError::check_len(path, buf.len() as u64, limit)?;
        Ok((buf, LocalFs::version(&meta)))
    }

    /// The content of the file at `path`, 64 KiB at a time.
    pub(crate) fn read_blocks(
        &self,
        path: &Path,
        limit: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<Version, FsError> {
        let (mut file, meta) = self.open_file(path, limit)?;
        dsh_editor::fs::read_file_blocks(path, &mut file, meta.len(), limit, each)?;
        Ok(LocalFs::version(&meta))
    }

    /// The entries of the directory at `path`, links followed in the
    /// helper.
    pub(crate) fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        let dir = self.open(path, libc::O_RDONLY | libc::O_DIRECTORY)?;
        // Listed through this process's descriptor (no path is looked up).
        let listed = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let entries = std::fs::read_dir(&listed).map_err(|e| FsError::from_io(path, e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| FsError::from_io(path, e))?;
            let Ok(ft) = entry.file_type() else { continue };
            let is_symlink = ft.is_symlink();
            let name = entry.file_name();
            let kind = if is_symlink {
                self.open(&path.join(&name), libc::O_PATH)
                    .ok()
                    .and_then(|fd| std::fs::File::from(fd).metadata().ok())
                    .map_or(FileKind::Other, |m| FileKind::from(m.file_type()))
            } else {
                FileKind::from(ft)
            };
            out.push(DirEntry {
                name,
                kind,
                is_symlink,
            });
        }
        drop(dir);
        Ok(out)
    }
}

fn metadata(meta: &std::fs::Metadata, is_symlink: bool) -> Metadata {
    use std::os::unix::fs::PermissionsExt;
    Metadata {
        kind: meta.file_type().into(),
        is_symlink,
        len: meta.len(),
        mode: Some(meta.permissions().mode() & 0o7777),
        version: LocalFs::version(meta),
    }
}
