//! The real filesystem.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::blocking::on_blocking_pool;
use super::{BlockingFs, DirEntry, FileKind, Fs, FsError, Metadata, Version};

/// The local filesystem, through `std::fs`: as [`Fs`], each operation on
/// tokio's blocking pool (on the calling thread where no runtime runs); as
/// [`BlockingFs`], on the calling thread.
///
/// Writes are atomic: the new content goes to a temporary file in the same
/// directory as the target, is flushed to disk (`fsync`), given the target's
/// permission bits, and renamed over the target; the directory is then synced.
/// A crash at any point leaves either the old file or the new one, never a
/// truncated mix (a temporary `.NAME.dsh-*` file may be left beside it).
///
/// * A symbolic link is written *through*: the link stays a link, its target
///   gets the new content.
/// * A file with several hard links gets a new inode: the other links keep
///   the old content (an in-place write could not be atomic).
/// * [`Fs::create_new`] creates missing parent directories and gives the new
///   file the mode `0o666` minus the process umask, as `open(2)` would.
/// * [`Fs::replace`] with content of the old size gives it a modification
///   time in a later whole second than the old content's, never in the
///   future ([`LocalFs::later_second`]), so a cache keyed on the time in
///   seconds and the size (Python's bytecode) never takes the edit for the
///   old content.
/// * [`Fs::replace`] leaves the file newer than every file written before
///   it began, even in the same tick of the kernel's clock for file times
///   ([`LocalFs::after_the_tick`]), so `make` rebuilds what an edit made
///   right after a build changed.
///
/// ```no_run
/// # async fn demo() -> Result<(), dsh_editor::fs::FsError> {
/// use dsh_editor::fs::{Fs, LocalFs};
/// let fs = LocalFs::new();
/// let path = std::path::Path::new("/tmp/dsh-demo/hello.txt");
/// fs.create_new(path, b"hello\n".to_vec()).await?;
/// let (bytes, version) = fs.read(path, 1 << 20).await?;
/// fs.replace(path, b"bye\n".to_vec(), &version).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct LocalFs {
    _private: (),
}

impl LocalFs {
    /// The local filesystem.
    pub fn new() -> Self {
        LocalFs::default()
    }

    /// The version [`LocalFs`] gives a file with this metadata, for other
    /// filesystems over the same files (the sandbox's confined writer).
    pub fn version(meta: &std::fs::Metadata) -> Version {
        version_of(meta)
    }

    /// Gives `new` (the new content of a file, written but not yet renamed
    /// into place) a modification time in a later whole second than `old`'s
    /// (the metadata of the content it replaces) when the sizes are equal,
    /// for other filesystems over the same files (the sandbox's confined
    /// writer).
    ///
    /// Tools that cache what a file held by its modification time in whole
    /// seconds and its size (Python's bytecode cache, `rsync`'s quick check)
    /// would otherwise take an edit of the same size made within the second
    /// of the last write for the old content. The rule: when the new content
    /// has the old one's size and the time `new` got from its write falls in
    /// the same second as `old`'s (or the one before: file times come from a
    /// coarse clock, a tick behind), wait until the clock is in the next
    /// second and give `new` the time a write then gets (on Linux by
    /// truncating it to its own length) — before the rename, so no reader
    /// sees the new content with the old second.
    ///
    /// * No time is set in the future: GNU `make` warns `has modification
    ///   time 0.43 s in the future` and `Clock skew detected` for a source
    ///   even 0.01 s ahead, and `make` and cargo build it again on the next
    ///   run (their outputs are older than it).
    /// * A time never goes back, so `make`, cargo (nanosecond times) and
    ///   editors watching the file see every edit as newer.
    /// * The wait is at most a second, and only for a same-size edit of a
    ///   file written less than a second before; an edit that changes the
    ///   size is told apart by it and never waits.
    /// * Not caught: a cache of a first content taken within the second,
    ///   then two edits in that second, the last back to the first's size;
    ///   or a file deleted and created again within the second (`create`
    ///   replaces nothing, so it has no old time to follow).
    /// * An old time in a later second than the clock's (a file from an
    ///   archive, another host's clock) is a different second already:
    ///   nothing is changed then.
    pub fn later_second(new: &std::fs::File, old: &std::fs::Metadata) -> std::io::Result<()> {
        later_second(new, old)
    }

    /// Moves `new`'s modification time 1 ns past `began`, the time the
    /// kernel gave the file when it was created (read right then), if the
    /// writes since left it that time: the kernel stamps writes from a
    /// coarse clock, the same for every file written in one tick, so a file
    /// written just before the edit began (`make`'s target, copied from
    /// this very source) would otherwise have the edit's time exactly and
    /// `make` would take the edit as no newer. Never ahead of the clock
    /// (the tick began before the file was created); a file written later
    /// in that same tick gets the tick's time, 1 ns earlier, so a build run
    /// within the tick may run once more: an extra build, where the other
    /// way was a missed one. Where the kernel has multigrain file times
    /// (Linux ≥ 6.13 on ext4, XFS, Btrfs and tmpfs), a write to a file whose
    /// time was read since its last change, as reading `began` does, gets a
    /// fine-grained time, so there this rarely changes anything.
    pub fn after_the_tick(new: &std::fs::File, began: Option<SystemTime>) -> std::io::Result<()> {
        let Some(began) = began else {
            return Ok(());
        };
        if new.metadata()?.modified().ok() == Some(began) {
            new.set_modified(began + Duration::from_nanos(1))?;
        }
        Ok(())
    }
}

/// Whole seconds since the epoch (`None` before it, or where the platform
/// has no such time).
fn second_of(t: std::io::Result<SystemTime>) -> Option<u64> {
    t.ok()?.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

fn later_second(new: &std::fs::File, old: &std::fs::Metadata) -> std::io::Result<()> {
    let Some(old_second) = second_of(old.modified()) else {
        return Ok(());
    };
    let meta = new.metadata()?;
    let Some(second) = second_of(meta.modified()) else {
        return Ok(());
    };
    // A second behind counts as the old one: the time of a write comes from
    // the kernel's coarse clock, which may be a tick behind the one that set
    // the old time (`set_modified` here). Further ahead, the old time is
    // somebody else's, and a different second already.
    if meta.len() != old.len() || second > old_second || old_second - second > 1 {
        return Ok(());
    }
    let next = UNIX_EPOCH + Duration::from_secs(old_second.saturating_add(1));
    // Bounded, whatever the clock does meanwhile.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        if let Ok(wait) = next.duration_since(SystemTime::now()) {
            std::thread::sleep(wait.min(Duration::from_secs(1)));
        }
        stamp_now(new, meta.len())?;
        if second_of(new.metadata()?.modified()).is_some_and(|s| s > old_second) {
            return Ok(());
        }
        // The coarse clock is a tick behind: a tick is at most 10 ms.
        std::thread::sleep(Duration::from_millis(2));
    }
    new.set_modified(SystemTime::now().max(next))
}

/// Gives `file` (of `len` bytes) the time a write made now would: on Linux
/// by truncating it to its own length, which sets the time from the
/// kernel's clock for file times (as every write does); elsewhere this
/// process's clock.
fn stamp_now(file: &std::fs::File, len: u64) -> std::io::Result<()> {
    if cfg!(target_os = "linux") {
        file.set_len(len)
    } else {
        file.set_modified(SystemTime::now())
    }
}

#[cfg(unix)]
fn version_of(meta: &std::fs::Metadata) -> Version {
    use std::os::unix::fs::MetadataExt;
    Version(vec![
        meta.dev(),
        meta.ino(),
        meta.len(),
        meta.mtime() as u64,
        meta.mtime_nsec() as u64,
        meta.ctime() as u64,
        meta.ctime_nsec() as u64,
    ])
}

#[cfg(not(unix))]
fn version_of(meta: &std::fs::Metadata) -> Version {
    let nanos = |t: std::io::Result<std::time::SystemTime>| {
        t.ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as u64)
    };
    Version(vec![
        meta.len(),
        nanos(meta.modified()),
        nanos(meta.created()),
    ])
}

#[cfg(unix)]
fn mode_of(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    Some(meta.permissions().mode() & 0o7777)
}

#[cfg(not(unix))]
fn mode_of(_meta: &std::fs::Metadata) -> Option<u32> {
    None
}

fn stat_sync(path: &Path) -> Result<Metadata, FsError> {
    let link = std::fs::symlink_metadata(path).map_err(|e| FsError::from_io(path, e))?;
    let is_symlink = link.file_type().is_symlink();
    let meta = if is_symlink {
        match std::fs::metadata(path) {
            Ok(m) => m,
            // A dangling link: it exists, but is nothing the editor can use.
            Err(_) => {
                return Ok(Metadata {
                    kind: FileKind::Other,
                    is_symlink,
                    len: 0,
                    mode: None,
                    version: version_of(&link),
                });
            }
        }
    } else {
        link
    };
    Ok(Metadata {
        kind: meta.file_type().into(),
        is_symlink,
        len: meta.len(),
        mode: mode_of(&meta),
        version: version_of(&meta),
    })
}

/// The process umask, read without changing it where the platform allows
/// (Linux); elsewhere the common `022`.
#[cfg(unix)]
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

fn temp_in(dir: &Path, name: &std::ffi::OsStr) -> Result<tempfile::NamedTempFile, FsError> {
    let prefix = format!(".{}.dsh-", name.to_string_lossy());
    tempfile::Builder::new()
        .prefix(&prefix)
        .tempfile_in(dir)
        .map_err(|e| FsError::from_io(dir, e))
}

fn sync_dir(dir: &Path) {
    // Best effort: some filesystems refuse to fsync a directory.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

fn split_parent(path: &Path) -> Result<(PathBuf, std::ffi::OsString), FsError> {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => Ok((dir.to_owned(), name.to_owned())),
        _ => Err(FsError::Io {
            path: path.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
        }),
    }
}

fn replace_sync(path: &Path, data: &[u8], expected: &Version) -> Result<Version, FsError> {
    // Write through links: the target is what gets replaced.
    let target = std::fs::canonicalize(path).map_err(|e| FsError::from_io(path, e))?;
    let before = std::fs::metadata(&target).map_err(|e| FsError::from_io(path, e))?;
    if version_of(&before) != *expected {
        return Err(FsError::Changed(path.to_owned()));
    }
    let (dir, name) = split_parent(&target)?;
    let mut tmp = temp_in(&dir, &name)?;
    let io = |e| FsError::from_io(path, e);
    let began = tmp.as_file().metadata().and_then(|m| m.modified()).ok();
    tmp.write_all(data).map_err(io)?;
    later_second(tmp.as_file(), &before).map_err(io)?;
    LocalFs::after_the_tick(tmp.as_file(), began).map_err(io)?;
    std::fs::set_permissions(tmp.path(), before.permissions()).map_err(io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // Keep the owner where we may (as root); elsewhere chown fails harmlessly.
        let _ = std::os::unix::fs::fchown(tmp.as_file(), Some(before.uid()), Some(before.gid()));
    }
    tmp.as_file().sync_all().map_err(io)?;
    // Last look before the rename: a change made while we wrote wins.
    let now = std::fs::metadata(&target).map_err(io)?;
    if version_of(&now) != *expected {
        return Err(FsError::Changed(path.to_owned()));
    }
    let file = tmp
        .persist(&target)
        .map_err(|e| FsError::from_io(path, e.error))?;
    sync_dir(&dir);
    let after = file.metadata().map_err(io)?;
    Ok(version_of(&after))
}

fn create_sync(path: &Path, data: &[u8]) -> Result<(), FsError> {
    let (dir, name) = split_parent(path)?;
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(FsError::AlreadyExists(path.to_owned()));
    }
    std::fs::create_dir_all(&dir).map_err(|e| FsError::from_io(&dir, e))?;
    let mut tmp = temp_in(&dir, &name)?;
    let io = |e| FsError::from_io(path, e);
    tmp.write_all(data).map_err(io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            tmp.path(),
            std::fs::Permissions::from_mode(0o666 & !umask()),
        )
        .map_err(io)?;
    }
    tmp.as_file().sync_all().map_err(io)?;
    // No-clobber: fails if something appeared at `path` meanwhile.
    tmp.persist_noclobber(path)
        .map_err(|e| FsError::from_io(path, e.error))?;
    sync_dir(&dir);
    Ok(())
}

/// The file at `p` opened for reading at most `limit + 1` bytes, and its
/// metadata; [`FsError::TooLarge`] if it is already longer than `limit`.
///
/// What was opened is checked, not what a look before showed: the open
/// never waits (`O_NONBLOCK`, so a FIFO swapped in meanwhile cannot hang
/// it; `O_NOCTTY`), and anything but a regular file is
/// [`FsError::NotRegular`].
fn open_within(
    p: &Path,
    limit: u64,
) -> Result<(std::io::Take<std::fs::File>, std::fs::Metadata), FsError> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = options.open(p).map_err(|e| FsError::from_io(p, e))?;
    let meta = file.metadata().map_err(|e| FsError::from_io(p, e))?;
    if !meta.is_file() {
        return Err(FsError::NotRegular(p.to_owned()));
    }
    FsError::check_len(p, meta.len(), limit)?;
    Ok((file.take(limit.saturating_add(1)), meta))
}

/// In blocks of 64 KiB (see [`read_file_blocks`](super::read_file_blocks)).
fn read_blocks_sync(p: &Path, limit: u64, each: &mut dyn FnMut(&[u8])) -> Result<Version, FsError> {
    let (file, meta) = open_within(p, limit)?;
    super::read_file_blocks(p, &mut file.into_inner(), meta.len(), limit, each)?;
    Ok(version_of(&meta))
}

fn read_sync(p: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
    let (mut file, meta) = open_within(p, limit)?;
    let mut buf = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut buf)
        .map_err(|e| FsError::from_io(p, e))?;
    FsError::check_len(p, buf.len() as u64, limit)?;
    Ok((buf, version_of(&meta)))
}

fn read_dir_sync(p: &Path) -> Result<Vec<DirEntry>, FsError> {
    let entries = std::fs::read_dir(p).map_err(|e| FsError::from_io(p, e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| FsError::from_io(p, e))?;
        let Ok(ft) = entry.file_type() else { continue };
        let is_symlink = ft.is_symlink();
        let kind = if is_symlink {
            std::fs::metadata(entry.path()).map_or(FileKind::Other, |m| m.file_type().into())
        } else {
            ft.into()
        };
        out.push(DirEntry {
            name: entry.file_name(),
            kind,
            is_symlink,
        });
    }
    Ok(out)
}

impl BlockingFs for LocalFs {
    fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        stat_sync(path)
    }

    /// `true` when this machine mounts only local filesystems (disks,
    /// memory, the kernel's own), as its mount table says when first asked.
    fn reads_quickly(&self) -> bool {
        super::mounts::only_local()
    }

    fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        read_sync(path, limit)
    }

    fn read_blocks(
        &self,
        path: &Path,
        limit: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<Version, FsError> {
        read_blocks_sync(path, limit, each)
    }

    fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        read_dir_sync(path)
    }

    fn create_new(&self, path: &Path, data: &[u8]) -> Result<(), FsError> {
        create_sync(path, data)
    }

    fn replace(&self, path: &Path, data: &[u8], expected: &Version) -> Result<Version, FsError> {
        replace_sync(path, data, expected)
    }
}

#[async_trait]
impl Fs for LocalFs {
    async fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        let p = path.to_owned();
        on_blocking_pool(path, move || stat_sync(&p)).await
    }

    async fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        let p = path.to_owned();
        on_blocking_pool(path, move || read_sync(&p, limit)).await
    }

    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        let p = path.to_owned();
        on_blocking_pool(path, move || read_dir_sync(&p)).await
    }

    async fn create_new(&self, path: &Path, data: Vec<u8>) -> Result<(), FsError> {
        let p = path.to_owned();
        on_blocking_pool(path, move || create_sync(&p, &data)).await
    }

    async fn replace(
        &self,
        path: &Path,
        data: Vec<u8>,
        expected: &Version,
    ) -> Result<Version, FsError> {
        let p = path.to_owned();
        let expected = expected.clone();
        on_blocking_pool(path, move || replace_sync(&p, &data, &expected)).await
    }

    fn blocking(&self) -> Option<&dyn BlockingFs> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Polls `fut` to completion on this thread, without any runtime.
    fn run_here<F: std::future::Future>(fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let std::task::Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                return out;
            }
        }
    }

    #[test]
    fn works_without_a_tokio_runtime() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        let fs = LocalFs::new();
        run_here(Fs::create_new(&fs, &path, b"one\n".to_vec())).unwrap();
        let (bytes, version) = run_here(Fs::read(&fs, &path, u64::MAX)).unwrap();
        assert_eq!(bytes, b"one\n");
        run_here(Fs::replace(&fs, &path, b"two\n".to_vec(), &version)).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two\n");
    }

    /// `make`'s loop at the speed of a program: the target is written just
    /// before each edit of its source, mostly in the same tick of the
    /// kernel's clock for file times; the edited source is newer every time.
    #[test]
    fn an_edit_is_newer_than_a_file_written_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let (src, out) = (dir.path().join("src.txt"), dir.path().join("out.txt"));
        let fs = LocalFs::new();
        BlockingFs::create_new(&fs, &src, b"round 0\n").unwrap();
        for round in 1..=50 {
            let (text, version) = BlockingFs::read(&fs, &src, u64::MAX).unwrap();
            std::fs::write(&out, &text).unwrap();
            // Another size each round: the same-size rule stays out of it.
            let text = format!("round {}\n", "x".repeat(round));
            BlockingFs::replace(&fs, &src, text.as_bytes(), &version).unwrap();
            let (src_time, out_time) = (
                std::fs::metadata(&src).unwrap().modified().unwrap(),
                std::fs::metadata(&out).unwrap().modified().unwrap(),
            );
            assert!(
                src_time > out_time,
                "round {round}: {src_time:?} {out_time:?}"
            );
            assert!(src_time <= SystemTime::now());
        }
    }

    #[cfg(unix)]
    #[test]
    fn every_edit_is_in_a_later_second_never_in_the_future() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calc.py");
        let fs = LocalFs::new();
        BlockingFs::create_new(&fs, &path, b"a - b\n").unwrap();
        let mut second = std::fs::metadata(&path).unwrap().mtime();
        // Same size each time, as fast as the calls come.
        for text in [b"a + b\n", b"a * b\n", b"a / b\n"] {
            let (_, version) = BlockingFs::read(&fs, &path, u64::MAX).unwrap();
            BlockingFs::replace(&fs, &path, text, &version).unwrap();
            let meta = std::fs::metadata(&path).unwrap();
            assert!(meta.mtime() > second, "{} then {}", second, meta.mtime());
            assert!(meta.modified().unwrap() <= SystemTime::now());
            assert_eq!(std::fs::read(&path).unwrap(), text);
            second = meta.mtime();
        }
    }
}
