//! [`DockerFs`]: the editor's filesystem inside a container.

use std::ffi::OsString;
use std::path::Path;

use async_trait::async_trait;
use dsh_editor::fs::{DirEntry, FileKind, Fs, FsError, Metadata, Version};

use crate::Ran;
use crate::exec::run_sh;
use crate::{Container, DockerError};

/// One `sh` script for every operation, so each is a single exec. Exit
/// codes: 2 not found, 13 refused, 16 changed since read, 17 exists,
/// 20 not a directory, 21 a directory. `ver` prints the version text:
/// device, inode, size, modification and status-change times to the
/// nanosecond where `stat` shows them (GNU and BusyBox both do).
const SCRIPT: &str = r#"op=$1 p=$2
ver() { stat -L -c '%d %i %s %y %z' -- "$1"; }
meta() {
  if [ -L "$1" ]; then l=L; else l=-; fi
  if [ ! -e "$1" ]; then
    [ "$l" = L ] || return 2
    echo "o$l 0 -"; stat -c '%d %i %s %y %z' -- "$1"; return 0
  fi
  if [ -d "$1" ]; then k=d; elif [ -f "$1" ]; then k=f; else k=o; fi
  printf '%s%s %s\n' "$k" "$l" "$(stat -L -c '%s %a' -- "$1")" && ver "$1"
}
case $op in
stat) meta "$p" || exit 2 ;;
read)
  meta "$p" || exit 2
  [ -d "$p" ] && exit 21
  [ -e "$p" ] || exit 2
  head -c "$3" -- "$p" || exit 13 ;;
list)
  [ -e "$p" ] || exit 2
  [ -d "$p" ] || exit 20
  cd -- "$p" || exit 13
  for f in .* *; do
    case $f in .|..) continue;; esac
    [ -e "$f" ] || [ -L "$f" ] || continue
    if [ -L "$f" ]; then l=L; else l=-; fi
    if [ -d "$f" ]; then k=d; elif [ -f "$f" ]; then k=f; else k=o; fi
    printf '%s%s%s\0' "$k" "$l" "$f"
  done ;;
create)
  { [ -e "$p" ] || [ -L "$p" ]; } && exit 17
  d=$(dirname -- "$p")
  mkdir -p -- "$d" 2>/dev/null || exit 13
  t="$d/.dsh-new.$$"
  cat > "$t" || { rm -f -- "$t"; exit 13; }
  ln -- "$t" "$p" 2>/dev/null; r=$?
  rm -f -- "$t"
  [ "$r" = 0 ] || { [ -e "$p" ] && exit 17; exit 13; } ;;
replace)
  q=$(readlink -f -- "$p") && [ -f "$q" ] || exit 2
  [ "$(ver "$q")" = "$3" ] || exit 16
  d=$(dirname -- "$q")
  t="$d/.dsh-edit.$$"
  cat > "$t" || { rm -f -- "$t"; exit 13; }
  chown "$(stat -c %u:%g -- "$q")" "$t" 2>/dev/null
  chmod "$(stat -c %a -- "$q")" "$t" || { rm -f -- "$t"; exit 13; }
  mv -f -- "$t" "$q" || { rm -f -- "$t"; exit 13; }
  ver "$q" ;;
*) exit 64 ;;
esac
"#;

/// The editor's filesystem inside a Docker container: each operation is one
/// small `sh` script run with `docker exec` (so the image needs `sh`, `stat`,
/// `cat`, `ln`, `mv`, `readlink -f`, as GNU coreutils and BusyBox provide).
///
/// What it keeps of [`dsh_editor::fs::LocalFs`]'s guarantees:
/// * **Atomic replace**: the new content goes to a temporary file in the same
///   directory, gets the old file's mode (and owner, when allowed), and is
///   renamed over it; a reader sees the old or the new file, never a mix.
/// * **Replace-if-version**: the version is the text of `stat` (device,
///   inode, size, modification and change times, to the nanosecond where the
///   filesystem keeps them), compared inside the container right before
///   the rename.
/// * **Create-new** never overwrites: the file is written aside and
///   hard-linked into place, which fails if anything appeared there.
///
/// What differs: nothing is `fsync`ed (a crash of the container's host right
/// after an edit can lose it); the check-then-rename of a replace runs in one
/// script but is not a single system call, so a writer racing it in the same
/// microseconds can be overwritten (the local filesystem has the same window,
/// narrower); every operation costs one exec round trip to the daemon.
#[derive(Debug, Clone)]
pub struct DockerFs {
    container: Container,
    user: Option<String>,
}

impl DockerFs {
    /// The filesystem of `container`, as the image's default user.
    pub fn new(container: Container) -> Self {
        DockerFs {
            container,
            user: None,
        }
    }

    /// Acts as `user` (`name`, `uid` or `uid:gid`).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    async fn run(
        &self,
        op: &str,
        path: &Path,
        extra: Option<&str>,
        stdin: Option<&[u8]>,
    ) -> Result<Ran, FsError> {
        let p = path.to_string_lossy();
        let mut args = vec![op, &p];
        args.extend(extra);
        run_sh(&self.container, self.user.as_deref(), SCRIPT, &args, stdin)
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

/// The error an exit code of [`SCRIPT`] stands for.
fn failure(path: &Path, what: &'static str, ran: &Ran) -> FsError {
    let kind = match ran.status.code() {
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
                    code: ran.status.code().map_or(-1, i64::from),
                    stderr: ran.stderr_text(),
                },
            );
        }
    };
    FsError::Io {
        path: path.to_owned(),
        source: kind.into(),
    }
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

/// Parses the two lines `meta` prints; returns the rest.
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
    let (version, rest) = line(rest).ok_or_else(bad)?;
    let first = std::str::from_utf8(first).map_err(|_| bad())?;
    let mut fields = first.split(' ');
    let flags = fields.next().ok_or_else(bad)?.as_bytes();
    let len = fields.next().and_then(|f| f.parse().ok()).ok_or_else(bad)?;
    let mode = fields.next().and_then(|f| u32::from_str_radix(f, 8).ok());
    Ok((
        Metadata {
            kind: kind_of(*flags.first().ok_or_else(bad)?),
            is_symlink: flags.get(1) == Some(&b'L'),
            len,
            mode,
            version: version_of(version),
        },
        rest,
    ))
}

#[async_trait]
impl Fs for DockerFs {
    async fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        let ran = self.run("stat", path, None, None).await?;
        if !ran.status.success() {
            return Err(failure(path, "reading a file's metadata", &ran));
        }
        parse_meta(path, &ran.stdout).map(|(meta, _)| meta)
    }

    async fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        // One byte past the limit tells a file that is too large.
        let past = limit.saturating_add(1).to_string();
        let ran = self.run("read", path, Some(&past), None).await?;
        if !ran.status.success() {
            return Err(failure(path, "reading a file", &ran));
        }
        let (meta, content) = parse_meta(path, &ran.stdout)?;
        FsError::check_len(path, meta.len.max(content.len() as u64), limit)?;
        Ok((content.to_vec(), meta.version))
    }

    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        let ran = self.run("list", path, None, None).await?;
        if !ran.status.success() {
            return Err(failure(path, "listing a directory", &ran));
        }
        Ok(ran
            .stdout
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
        let ran = self.run("create", path, None, Some(&data)).await?;
        if !ran.status.success() {
            return Err(failure(path, "creating a file", &ran));
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
        let ran = self.run("replace", path, Some(&text), Some(&data)).await?;
        if !ran.status.success() {
            return Err(failure(path, "replacing a file", &ran));
        }
        let out = ran.stdout.strip_suffix(b"\n").unwrap_or(&ran.stdout);
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
