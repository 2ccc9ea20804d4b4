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

    /// As [`BlockingFs::stat`], and, when `path` is a regular file, that
    /// file opened for reading in the same step, which the editor's `view`
    /// then reads instead of opening the path again (see
    /// [`read_file_blocks`]). For a filesystem whose opens are answered by
    /// another process (the sandbox's confined reader) this makes a view one
    /// round trip instead of two. The default makes the `stat` alone.
    fn stat_open(&self, path: &Path) -> Result<(Metadata, Option<std::fs::File>), FsError> {
        Ok((self.stat(path)?, None))
    }
}

/// Reads `file` (opened from `path`, of about `len` bytes) as
/// [`BlockingFs::read_blocks`] does: in blocks of 64 KiB read into one
/// buffer, so each is handed to `each` while it is in the CPU's cache, and
/// [`FsError::TooLarge`] past `limit`.
pub fn read_file_blocks(
    path: &Path,
    file: &mut std::fs::File,
    len: u64,
    limit: u64,
    each: &mut dyn FnMut(&[u8]),
) -> Result<(), FsError> {
    use std::io::Read;
    const BLOCK: usize = 64 * 1024;
    FsError::check_len(path, len, limit)?;
    // A small file needs no more than its length (and one byte to see its end).
    let size = usize::try_from(len).map_or(BLOCK, |len| len.saturating_add(1).min(BLOCK));
    let mut block = vec![0; size];
    let mut file = file.take(limit.saturating_add(1));
    let mut total = 0u64;
    loop {
        let n = match file.read(&mut block) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FsError::from_io(path, e)),
        };
        total += n as u64;
        FsError::check_len(path, total, limit)?;
        each(&block[..n]);
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
/// blocking pool (with the `tokio` feature), or right here where no tokio
/// runtime is running. A task that panicked is an [`FsError::Io`] on
/// `path`.
pub(crate) async fn on_blocking_pool<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> Result<T, FsError> + Send + 'static,
) -> Result<T, FsError> {
    #[cfg(feature = "tokio")]
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        return runtime.spawn_blocking(f).await.map_err(|e| FsError::Io {
            path: path.to_owned(),
            source: std::io::Error::other(e.to_string()),
        })?;
    }
    let _ = path;
    f()
}
