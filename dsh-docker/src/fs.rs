//! [`DockerFs`]: the editor's filesystem inside a container.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use dsh_editor::fs::{DirEntry, FileKind, Fs, FsError, Metadata, Version};

use crate::{Container, DockerError};

mod channel;

use channel::{Answer, Channel};

/// The editor's filesystem inside a Docker container, reached through one
/// long-lived helper process there: an `sh` running a small script
/// (started with `docker exec` on first use, so the image needs only `sh`,
/// `stat`, `head`, `ln`, `mv`, `readlink -f`, `touch`, `date` and `sleep`, as GNU
/// coreutils and BusyBox provide; nothing is copied in). Every operation is
/// one request and one answer on its standard input and output, one at a
/// time (concurrent calls wait their turn); clones share the helper.
///
/// What it keeps of [`dsh_editor::fs::LocalFs`]'s guarantees:
/// * **Atomic replace**: the new content goes to a temporary file in the same
///   directory, gets the old file's mode (and owner, when allowed), and is
///   renamed over it; a reader sees the old or the new file, never a mix.
/// * **Replace-if-version**: the version is the text of `stat` (device,
///   inode, size, modification and change times, to the nanosecond where the
///   filesystem keeps them), compared inside the container once the new
///   content is written, before its owner, mode and time are set and it is
///   renamed.
/// * **Create-new** never overwrites: the file is written aside and
///   hard-linked into place, which fails if anything appeared there.
/// * **An edit is seen by mtime-and-size caches**: a replace that keeps the
///   size and would keep the modification time's whole second waits for the
///   next second and is stamped then (Python's bytecode cache compares
///   exactly those), never with a time in the future, as
///   [`LocalFs::later_second`](dsh_editor::fs::LocalFs::later_second) does.
///
/// A helper that ends (killed, or the container restarted) is started again
/// on the next call; a call it was answering fails with
/// [`DockerError::HelperEnded`] and is not repeated, as a write may have
/// happened. A call abandoned halfway (its future dropped) ends the helper
/// too. Dropping the last clone ends the helper (its input closes).
///
/// What differs: nothing is `fsync`ed (a crash of the container's host right
/// after an edit can lose it); the check-then-rename of a replace runs in one
/// script but is not a single system call, so a writer racing it between the
/// check and the rename can be overwritten (usually microseconds; up to the
/// next second or two when a same-size edit waits for a later second; the
/// local filesystem has the same window, narrower); every operation costs a
/// round trip to the container.
#[derive(Debug, Clone)]
pub struct DockerFs {
    channel: Arc<Channel>,
}

impl DockerFs {
    /// The filesystem of `container`, as the image's default user.
    pub fn new(container: Container) -> Self {
        DockerFs {
            channel: Arc::new(Channel::new(container, None)),
        }
    }

    /// Acts as `user` (`name`, `uid` or `uid:gid`), with a helper of its
    /// own.
    pub fn user(self, user: impl Into<String>) -> Self {
        DockerFs {
            channel: Arc::new(Channel::new(
                self.channel.container().clone(),
                Some(user.into()),
            )),
        }
    }

    async fn run(
        &self,
        op: &str,
        path: &Path,
        extra: &str,
        data: &[u8],
    ) -> Result<Answer, FsError> {
        self.channel
            .call(op, path, extra, data)
            .await
            .map_err(|e| io_error(path, e))
    }
}

fn io_error(path: &Path, e: DockerError) -> FsError {
    FsError::Io {
        path: path.to_owned(),
        source: std::io::Error::other(e),
    }
}

/// The error an exit code of the helper's script stands for.
fn failure(path: &Path, what: &'static str, answer: &Answer) -> FsError {
    let kind = match Some(answer.code) {
        Some(2) => return FsError::NotFound(path.to_owned()),
        Some(13) => return FsError::PermissionDenied(path.to_owned()),
        Some(16) => return FsError::Changed(path.to_owned()),
        Some(17) => return FsError::AlreadyExists(path.to_owned()),
        Some(20) => std::io::ErrorKind::NotADirectory,
        Some(21) => std::io::ErrorKind::IsADirectory,
        _ => {
            return io_error(
                path,
                DockerError::Helper {
                    what,
                    code: i64::from(answer.code),
                    stderr: tail_text(&answer.out),
                },
            );
        }
    };
    FsError::Io {
        path: path.to_owned(),
        source: kind.into(),
    }
}

/// The end of what a failed operation printed (at most 500 bytes), as text.
fn tail_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(500)..]);
    text.trim().to_owned()
}

/// The version text, packed into [`Version`] parts (its length, then eight
/// bytes per part) so that `replace` can hand the exact text back.
fn version_of(text: &[u8]) -> Version {
    let len = text.len() as u64;
    Version::from_parts(std::iter::once(len).chain(text.chunks(8).map(|c| {
        let mut word = [0u8; 8];
        word[..c.len()].copy_from_slice(c);
        u64::from_le_bytes(word)
    })))
}

fn version_text(version: &Version) -> Option<String> {
    let (&len, words) = version.parts().split_first()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let text = bytes.get(..usize::try_from(len).ok()?)?;
    String::from_utf8(text.to_vec()).ok()
}

/// Splits off one line.
fn line(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = memchr::memchr(b'\n', bytes)?;
    Some((&bytes[..at], &bytes[at + 1..]))
}

fn kind_of(byte: u8) -> FileKind {
    match byte {
        b'd' => FileKind::Directory,
        b'f' => FileKind::File,
        _ => FileKind::Other,
    }
}

/// Parses the line `meta` prints (kind and link flags, size, mode, then
/// the version text); returns the rest.
fn parse_meta<'a>(path: &Path, out: &'a [u8]) -> Result<(Metadata, &'a [u8]), FsError> {
    let bad = || {
        io_error(
            path,
            DockerError::Helper {
                what: "reading a file's metadata",
                code: 0,
                stderr: format!(
                    "unexpected output: {:?}",
                    String::from_utf8_lossy(&out[..out.len().min(200)])
                ),
            },
        )
    };
    let (first, rest) = line(out).ok_or_else(bad)?;
    let first = std::str::from_utf8(first).map_err(|_| bad())?;
    let mut fields = first.splitn(4, ' ');
    let flags = fields.next().ok_or_else(bad)?.as_bytes();
    let len = fields.next().and_then(|f| f.parse().ok()).ok_or_else(bad)?;
    let mode = fields.next().and_then(|f| u32::from_str_radix(f, 8).ok());
    let version = fields.next().ok_or_else(bad)?;
    Ok((
        Metadata {
            kind: kind_of(*flags.first().ok_or_else(bad)?),
            is_symlink: flags.get(1) == Some(&b'L'),
            len,
            mode,
            version: version_of(version.as_bytes()),
        },
        rest,
    ))
}

#[async_trait]
impl Fs for DockerFs {
    async fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        let answer = self.run("stat", path, "", &[]).await?;
        if answer.code != 0 {
            return Err(failure(path, "reading a file's metadata", &answer));
        }
        parse_meta(path, &answer.out).map(|(meta, _)| meta)
    }

    async fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        // One byte past the limit tells a file that is too large.
        let past = limit.saturating_add(1).to_string();
        let answer = self.run("read", path, &past, &[]).await?;
        if answer.code != 0 {
            return Err(failure(path, "reading a file", &answer));
        }
        let (meta, content) = parse_meta(path, &answer.out)?;
        FsError::check_len(path, meta.len.max(content.len() as u64), limit)?;
        Ok((content.to_vec(), meta.version))
    }

    /// One request: the metadata and, for a regular file, its content.
    async fn stat_read(
        &self,
        path: &Path,
        limit: u64,
    ) -> Result<(Metadata, Option<(Vec<u8>, Version)>), FsError> {
        let past = limit.saturating_add(1).to_string();
        let answer = self.run("view", path, &past, &[]).await?;
        if answer.code != 0 {
            return Err(failure(path, "reading a file", &answer));
        }
        let (meta, content) = parse_meta(path, &answer.out)?;
        // A file past the limit is left to `read`, which says so.
        let read =
            (meta.kind == FileKind::File && meta.len <= limit && content.len() as u64 <= limit)
                .then(|| (content.to_vec(), meta.version.clone()));
        Ok((meta, read))
    }

    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        let answer = self.run("list", path, "", &[]).await?;
        if answer.code != 0 {
            return Err(failure(path, "listing a directory", &answer));
        }
        Ok(answer
            .out
            .split(|&b| b == 0)
            .filter(|e| e.len() > 2)
            .map(|e| DirEntry {
                name: name_of(&e[2..]),
                kind: kind_of(e[0]),
                is_symlink: e[1] == b'L',
            })
            .collect())
    }

    async fn create_new(&self, path: &Path, data: Vec<u8>) -> Result<(), FsError> {
        let answer = self.run("create", path, "", &data).await?;
        if answer.code != 0 {
            return Err(failure(path, "creating a file", &answer));
        }
        Ok(())
    }

    async fn replace(
        &self,
        path: &Path,
        data: Vec<u8>,
        expected: &Version,
    ) -> Result<Version, FsError> {
        let Some(text) = version_text(expected) else {
            // Not a version this filesystem made: it cannot match.
            return Err(FsError::Changed(path.to_owned()));
        };
        let answer = self.run("replace", path, &text, &data).await?;
        if answer.code != 0 {
            return Err(failure(path, "replacing a file", &answer));
        }
        let out = answer.out.strip_suffix(b"\n").unwrap_or(&answer.out);
        Ok(version_of(out))
    }
}

#[cfg(unix)]
fn name_of(bytes: &[u8]) -> OsString {
    use std::os::unix::ffi::OsStringExt;
    OsString::from_vec(bytes.to_vec())
}

#[cfg(not(unix))]
fn name_of(bytes: &[u8]) -> OsString {
    OsString::from(String::from_utf8_lossy(bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_round_trip_their_text() {
        for text in [
            "",
            "2049 1234 7 2026-11-30 21:13:22.123456789 +0000 x",
            "12345678",
        ] {
            assert_eq!(
                version_text(&version_of(text.as_bytes())).as_deref(),
                Some(text)
            );
        }
        assert_eq!(version_text(&Version::from_parts([])), None);
        assert_eq!(version_text(&Version::from_parts([99, 1])), None);
    }
}
