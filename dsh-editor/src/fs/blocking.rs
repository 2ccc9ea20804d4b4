//! A filesystem's operations as blocking calls, for filesystems of this
//! machine's system calls.

use std::path::Path;

use async_trait::async_trait;

use super::{DirEntry, Fs, FsError, Metadata, Version};

/// The operations of [`Fs`] as blocking calls on the calling thread, for a
/// filesystem whose operations are system calls of this machine
/// ([`LocalFs`](super::LocalFs), the sandbox's filesystem). Each keeps the
/// contract of its [`Fs`] namesake; [`Fs::blocking`] hands them out.
///
/// The editor runs a whole tool call over such a filesystem as one job on
/// tokio's blocking pool, where it makes these calls directly: one hop to
/// the pool per tool call, not one per operation.
pub trait BlockingFs: Send + Sync {
    /// As [`Fs::stat`].
    fn stat(&self, path: &Path) -> Result<Metadata, FsError>;

    /// As [`Fs::read`].
    fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError>;

    /// Reads the file at `path` as [`Fs::read`] does, handing its content to
    /// `each` in order, one block at a time, instead of returning it: a
    /// reader that keeps only part of a file (the end of a long log) never
    /// holds all of it, and checks each block while it is in the CPU's
    /// cache. The same errors as [`Fs::read`]; after an error `each` may
    /// have seen part of the file.
    fn read_blocks(
        &self,
        path: &Path,
        limit: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<Version, FsError>;

    /// As [`Fs::read_dir`].
    fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError>;

    /// As [`Fs::create_new`].
    fn create_new(&self, path: &Path, data: &[u8]) -> Result<(), FsError>;

    /// As [`Fs::replace`].
    fn replace(&self, path: &Path, data: &[u8], expected: &Version) -> Result<Version, FsError>;

    /// Whether a `stat` and a small read on this filesystem wait on nothing
    /// slower than this machine's own disks: no network, FUSE or
    /// automounted filesystem can be reached through it, and no helper
    /// process answers. The editor then makes a `view` of a small file
    /// (at most [`QUICK_READ_BYTES`]) on the calling thread instead of a
    /// hop to tokio's blocking pool. `false` unless a filesystem says so.
    fn reads_quickly(&self) -> bool {
        false
    }
}

/// The largest file the editor views on the calling thread over a
/// filesystem that [reads quickly](BlockingFs::reads_quickly): at worst a
/// page-cache miss on a local disk.
pub const QUICK_READ_BYTES: u64 = 64 * 1024;

/// A [`BlockingFs`] as an [`Fs`] whose futures make the call when first
/// polled, on the polling thread: for code that already runs where it may
/// block (the editor's call on the blocking pool).
pub(crate) struct Inline<'a>(pub(crate) &'a dyn BlockingFs);

#[async_trait]
impl Fs for Inline<'_> {
    async fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        self.0.stat(path)
    }
    async fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        self.0.read(path, limit)
    }
    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        self.0.read_dir(path)
    }
    async fn create_new(&self, path: &Path, data: Vec<u8>) -> Result<(), FsError> {
        self.0.create_new(path, &data)
    }
    async fn replace(
        &self,
        path: &Path,
        data: Vec<u8>,
        expected: &Version,
    ) -> Result<Version, FsError> {
        self.0.replace(path, &data, expected)
    }
    fn blocking(&self) -> Option<&dyn BlockingFs> {
        Some(self.0)
    }
}

/// Runs `f`, blocking work on this machine's filesystem, on tokio's
/// blocking pool, or right here where no tokio runtime is running. A task
/// that panicked is an [`FsError::Io`] on `path`.
pub(crate) async fn on_blocking_pool<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> Result<T, FsError> + Send + 'static,
) -> Result<T, FsError> {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return f();
    };
    runtime.spawn_blocking(f).await.map_err(|e| FsError::Io {
        path: path.to_owned(),
        source: std::io::Error::other(e.to_string()),
    })?
}
