//! The filesystem the editor works on: a small async trait, [`Fs`], and two
//! implementations, [`LocalFs`] (the real filesystem) and [`MemFs`] (in
//! memory). A filesystem of this machine's system calls also offers them as
//! blocking calls, [`BlockingFs`].

mod blocking;
mod local;
mod mem;
mod mounts;

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

pub(crate) use blocking::Inline;
pub use blocking::{BlockingFs, QUICK_READ_BYTES, read_file_blocks};
pub use local::LocalFs;
pub use mem::MemFs;

/// What a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// Anything else (device, socket, fifo, dangling link, ...).
    Other,
}

impl From<std::fs::FileType> for FileKind {
    /// What a file type of `std::fs` is (a symbolic link is
    /// [`FileKind::Other`]: follow it first).
    fn from(ft: std::fs::FileType) -> Self {
        if ft.is_file() {
            FileKind::File
        } else if ft.is_dir() {
            FileKind::Directory
        } else {
            FileKind::Other
        }
    }
}

/// A token that changes whenever a file's content may have changed.
///
/// [`LocalFs`] builds it from device, inode, size, modification and status
/// change times; [`MemFs`] from a counter. Two equal versions mean "nothing
/// observable changed" as far as the filesystem can tell.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version(pub(crate) Vec<u64>);

impl Version {
    /// A version from parts chosen by an [`Fs`] implementation.
    pub fn from_parts(parts: impl IntoIterator<Item = u64>) -> Self {
        Version(parts.into_iter().collect())
    }

    /// The parts it was made from (an [`Fs`] implementation reads back its own).
    pub fn parts(&self) -> &[u64] {
        &self.0
    }
}

/// What `stat` tells about a path (following symbolic links).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// What the path (or the target of its links) is.
    pub kind: FileKind,
    /// `true` if the path itself is a symbolic link.
    pub is_symlink: bool,
    /// Size in bytes.
    pub len: u64,
    /// Permission bits (Unix mode), where the filesystem has them.
    pub mode: Option<u32>,
    /// The version token of the content.
    pub version: Version,
}

/// One entry of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's file name.
    pub name: OsString,
    /// What it is (links followed).
    pub kind: FileKind,
    /// `true` if the entry is a symbolic link.
    pub is_symlink: bool,
}

/// Why a filesystem operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    /// Nothing exists at the path.
    #[error("{} does not exist", .0.display())]
    NotFound(PathBuf),
    /// Something already exists at the path (create-new).
    #[error("{} already exists", .0.display())]
    AlreadyExists(PathBuf),
    /// The file changed since the version the caller read.
    #[error("{} changed since it was read", .0.display())]
    Changed(PathBuf),
    /// The operating system refused access.
    #[error("permission denied: {}", .0.display())]
    PermissionDenied(PathBuf),
    /// The path, once opened, is not a regular file (a FIFO, a device, a
    /// directory swapped in after a look at it).
    #[error("{} is not a regular file", .0.display())]
    NotRegular(PathBuf),
    /// The file is longer than the limit given to [`Fs::read`].
    #[error("{} is larger than {limit} bytes", path.display())]
    TooLarge {
        /// The path concerned.
        path: PathBuf,
        /// Its length, or at least how much was seen of it.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// A write of `len` bytes would make a file larger than the largest
    /// file the host lets a process write (`limit`, as `RLIMIT_FSIZE`);
    /// nothing was written.
    #[error("{}: File too large ({len} bytes, the limit is {limit})", path.display())]
    FileTooLarge {
        /// The path concerned.
        path: PathBuf,
        /// The size the file would have had.
        len: u64,
        /// The largest file a process may write, in bytes.
        limit: u64,
    },
    /// A policy layer refused the operation; the message is shown to the model verbatim.
    #[error("{message}")]
    Refused {
        /// The path concerned.
        path: PathBuf,
        /// The exact model-visible message.
        message: String,
    },
    /// Any other I/O error.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path concerned.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl FsError {
    /// [`FsError::TooLarge`] unless `len` is within `limit`.
    pub fn check_len(path: &Path, len: u64, limit: u64) -> Result<(), FsError> {
        if len > limit {
            return Err(FsError::TooLarge {
                path: path.to_owned(),
                len,
                limit,
            });
        }
        Ok(())
    }

    /// [`FsError::FileTooLarge`] when writing `len` bytes at `path` would
    /// pass `limit` (a file of exactly `limit` bytes may be written, as
    /// under `RLIMIT_FSIZE`).
    pub fn check_file_size(path: &Path, len: u64, limit: Option<u64>) -> Result<(), FsError> {
        match limit {
            Some(limit) if len > limit => Err(FsError::FileTooLarge {
                path: path.to_owned(),
                len,
                limit,
            }),
            _ => Ok(()),
        }
    }

    /// Maps an `io::Error` on `path` to the matching variant.
    pub fn from_io(path: &Path, source: io::Error) -> Self {
        match source.kind() {
            io::ErrorKind::NotFound => FsError::NotFound(path.to_owned()),
            io::ErrorKind::AlreadyExists => FsError::AlreadyExists(path.to_owned()),
            io::ErrorKind::PermissionDenied => FsError::PermissionDenied(path.to_owned()),
            _ => FsError::Io {
                path: path.to_owned(),
                source,
            },
        }
    }
}

/// The filesystem operations the editor needs. Paths are absolute.
///
/// Implementations decide what "atomic" means for their storage, but must
/// keep the contract of each method: a failed write changes nothing, and
/// [`Fs::replace`] refuses a file that changed since the version it was
/// shown. That check is made before the final rename, not with it: a
/// change that lands between the two is overwritten (microseconds on a
/// local disk, where the check comes right before the rename; in a
/// container, the steps that set the new file's owner, mode and time; over
/// SFTP, the upload of the new content and what follows it).
///
/// The trait uses `async-trait` so that it can be used as `dyn Fs` (a host
/// picks the filesystem at run time: `dsh-mcp`'s server holds an
/// `Arc<dyn Fs>` of the local sandbox's, a container's or an SSH host's).
#[async_trait]
pub trait Fs: Send + Sync {
    /// Metadata of `path`, following symbolic links.
    async fn stat(&self, path: &Path) -> Result<Metadata, FsError>;

    /// The whole content of the file at `path` and the version it was read
    /// at. A file longer than `limit` bytes is not read into memory:
    /// [`FsError::TooLarge`] (implementations check the size first and stop
    /// reading past the limit, so a file that grows meanwhile is caught too).
    async fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError>;

    /// As [`Fs::stat`], and, when `path` is a regular file of at most
    /// `limit` bytes, its content and version as [`Fs::read`] gives them,
    /// in the same step: the editor's `view` makes one round trip instead of
    /// two on a filesystem reached over a channel (a container's). The
    /// default makes the `stat` alone (`None`), and the caller reads when it
    /// needs to.
    async fn stat_read(
        &self,
        path: &Path,
        limit: u64,
    ) -> Result<(Metadata, Option<(Vec<u8>, Version)>), FsError> {
        let _ = limit;
        Ok((self.stat(path).await?, None))
    }

    /// The entries of the directory at `path`, in no particular order.
    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError>;

    /// Creates a new file with `data`, creating missing parent directories.
    /// Fails with [`FsError::AlreadyExists`] if anything exists at `path`.
    async fn create_new(&self, path: &Path, data: Vec<u8>) -> Result<(), FsError>;

    /// Atomically replaces the content of the file at `path` with `data`
    /// (readers see the old or the new content, never a mix), if its version
    /// is still `expected` at the implementation's last check before the
    /// rename; otherwise fails with [`FsError::Changed`] and changes
    /// nothing. A change made after that last check and before the rename
    /// is lost (see the trait's docs). Keeps the file's permissions, and
    /// writes through a symbolic link to its target.
    ///
    /// Where files have modification times, content of the old size gets a
    /// time in a later whole second than the old content's, never one ahead
    /// of the clock: when the write lands in the old second, the
    /// implementation waits for the next one before the rename (see
    /// [`LocalFs::later_second`]), so a cache keyed on the time in seconds
    /// and the size (Python's bytecode) never takes the edit for the old
    /// content.
    async fn replace(
        &self,
        path: &Path,
        data: Vec<u8>,
        expected: &Version,
    ) -> Result<Version, FsError>;

    /// The same filesystem as blocking calls, where its operations are
    /// system calls of this machine ([`LocalFs`], the sandbox's
    /// filesystem); `None` (the default) for a filesystem that waits on a
    /// network or on nothing. A caller that makes several operations in a
    /// row (one editor call) can then make them all on one thread of
    /// tokio's blocking pool, and read a file block by block
    /// ([`BlockingFs::read_blocks`]).
    fn blocking(&self) -> Option<&dyn BlockingFs> {
        None
    }
}

macro_rules! forward_fs {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<F: Fs + ?Sized> Fs for $ty {
            async fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
                (**self).stat(path).await
            }
            async fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
                (**self).read(path, limit).await
            }
            async fn stat_read(
                &self,
                path: &Path,
                limit: u64,
            ) -> Result<(Metadata, Option<(Vec<u8>, Version)>), FsError> {
                (**self).stat_read(path, limit).await
            }
            async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
                (**self).read_dir(path).await
            }
            async fn create_new(&self, path: &Path, data: Vec<u8>) -> Result<(), FsError> {
                (**self).create_new(path, data).await
            }
            async fn replace(
                &self,
                path: &Path,
                data: Vec<u8>,
                expected: &Version,
            ) -> Result<Version, FsError> {
                (**self).replace(path, data, expected).await
            }
            fn blocking(&self) -> Option<&dyn BlockingFs> {
                (**self).blocking()
            }
        }
    )*};
}

forward_fs!(Arc<F>, Box<F>);
