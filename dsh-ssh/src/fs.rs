//! [`SftpFs`]: the editor's filesystem on an SSH host, over SFTP.

use std::ffi::OsString;
use std::path::Path;

use async_trait::async_trait;
use dsh_editor::fs::{DirEntry, FileKind, Fs, FsError, Metadata, Version};
use russh_sftp::client::error::Error as SftpError;
use russh_sftp::client::{RawSftpSession, SftpSession};
use russh_sftp::protocol::{FileAttributes, OpenFlags, Packet, StatusCode};
use tokio::io::AsyncWriteExt;

use crate::{SshError, SshHost};

/// The editor's filesystem on an SSH host, over the SFTP subsystem of the
/// same connection as the shells.
///
/// What it keeps of [`dsh_editor::fs::LocalFs`]'s guarantees:
/// * **Atomic replace**: the new content goes to a temporary file in the same
///   directory, created exclusively with the old file's mode, flushed
///   (`fsync@openssh.com` where offered), given the old owner when allowed
///   (then the mode again, which a change of owner clears), and renamed over
///   the old file with `posix-rename@openssh.com`; a reader sees the old or
///   the new file, never a mix.
/// * **Replace-if-version**: SFTP times have whole seconds only, so the
///   version a read returns also holds a hash of the content; a replace
///   reads the file again right before writing and refuses when either
///   changed.
/// * **Edits the next command sees**: a file replaced by content of its
///   size gets a modification time in a later whole second than the old
///   content's, never ahead of the host's clock (when the write lands in the
///   old second, the replace waits one second and sets the next one).
/// * **Create-new** never overwrites: the file is written aside and
///   hard-linked into place (`hardlink@openssh.com`), or renamed with the
///   plain SFTP rename, which refuses an existing target.
///
/// What differs: paths must be UTF-8 (SFTP names are strings); versions
/// from [`Fs::stat`] lack the content hash (only [`Fs::read`]'s are
/// compared); the read-compare-rename of a replace is three requests, so a
/// writer racing it in that window can be overwritten.
pub struct SftpFs {
    sftp: SftpSession,
    raw: RawSftpSession,
}

impl std::fmt::Debug for SftpFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SftpFs").finish_non_exhaustive()
    }
}

async fn sftp_channel(
    host: &SshHost,
) -> Result<russh::ChannelStream<russh::client::Msg>, SshError> {
    let channel = host.channel().await?;
    channel
        .request_subsystem(true, "sftp")
        .await
        .map_err(|source| SshError::Channel {
            what: "starting the SFTP subsystem",
            source,
        })?;
    Ok(channel.into_stream())
}

impl SftpFs {
    /// Opens SFTP on `host` (two subsystem channels: one for files, one
    /// for the protocol extensions the atomic replace needs).
    pub async fn open(host: &SshHost) -> Result<SftpFs, SshError> {
        let sftp = SftpSession::new(sftp_channel(host).await?)
            .await
            .map_err(|source| SshError::Sftp {
                what: "starting SFTP",
                source,
            })?;
        let raw = RawSftpSession::new(sftp_channel(host).await?);
        raw.init().await.map_err(|source| SshError::Sftp {
            what: "starting SFTP",
            source,
        })?;
        Ok(SftpFs { sftp, raw })
    }

    async fn posix_rename(&self, from: &str, to: &str) -> Result<(), SftpError> {
        let mut data = Vec::with_capacity(8 + from.len() + to.len());
        for s in [from, to] {
            data.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes());
            data.extend_from_slice(s.as_bytes());
        }
        match self.raw.extended("posix-rename@openssh.com", data).await? {
            Packet::Status(status) if status.status_code == StatusCode::Ok => Ok(()),
            Packet::Status(status) => Err(SftpError::Status(status)),
            _ => Err(SftpError::UnexpectedPacket),
        }
    }

    /// Creates the missing ancestors of `path`.
    async fn make_parents(&self, path: &Path) -> Result<(), FsError> {
        let mut missing = Vec::new();
        let mut dir = path.parent();
        while let Some(d) = dir {
            if d.as_os_str().is_empty() || self.sftp.metadata(utf8(d)?).await.is_ok() {
                break;
            }
            missing.push(d);
            dir = d.parent();
        }
        for d in missing.into_iter().rev() {
            if let Err(e) = self.sftp.create_dir(utf8(d)?).await
                && self.sftp.metadata(utf8(d)?).await.is_err()
            {
                return Err(error(d, e));
            }
        }
        Ok(())
    }

    /// Writes `data` to a new temporary file next to `path` (mode `mode`
    /// when given) and returns its name.
    async fn write_aside(
        &self,
        path: &Path,
        data: &[u8],
        mode: Option<u32>,
    ) -> Result<String, FsError> {
        let parent = path.parent().unwrap_or(Path::new("/"));
        let mut attrs = FileAttributes::empty();
        attrs.permissions = mode;
        let suffix = dsh_pty::remote::new_tag().map_err(|e| FsError::Io {
            path: path.to_owned(),
            source: std::io::Error::other(e),
        })?;
        let temp = format!("{}/.dsh-edit.{suffix}", utf8(parent)?);
        let mut file = self
            .sftp
            .open_with_flags_and_attributes(
                &temp,
                OpenFlags::CREATE | OpenFlags::EXCLUDE | OpenFlags::WRITE,
                attrs,
            )
            .await
            .map_err(|e| error(path, e))?;
        let written = async {
            file.write_all(data).await?;
            file.flush().await?;
            Ok::<_, std::io::Error>(())
        }
        .await;
        if let Err(e) = written {
            let _ = file.shutdown().await;
            let _ = self.sftp.remove_file(&temp).await;
            return Err(FsError::from_io(path, e));
        }
        let _ = file.sync_all().await;
        let _ = file.shutdown().await;
        Ok(temp)
    }

    /// Gives the temporary file `temp` a modification time in a later whole
    /// second than `old`'s (the file it replaces) when their sizes are equal,
    /// as `LocalFs::later_second` does: SFTP times are whole seconds of the
    /// other host's clock, so when the write left `temp` in `old`'s second
    /// this waits a whole second (the other clock is then past it, whatever
    /// fraction it was at) and sets `temp`'s time to the next second, which
    /// is not in that clock's future.
    async fn later_second(&self, temp: &str, old: &FileAttributes) -> Result<(), SftpError> {
        let Some(old_second) = old.mtime else {
            return Ok(());
        };
        let new = self.sftp.metadata(temp).await?;
        if new.size != old.size || new.mtime != Some(old_second) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let mut times = FileAttributes::empty();
        times.atime = new.atime.or(Some(old_second));
        times.mtime = Some(old_second.saturating_add(1));
        self.sftp.set_metadata(temp, times).await
    }

    /// The version of a file read as `content` with metadata `attrs`.
    fn version_of(attrs: &FileAttributes, content: Option<&[u8]>) -> Version {
        let base = [
            attrs.size.unwrap_or(0),
            u64::from(attrs.mtime.unwrap_or(0)),
            u64::from(attrs.permissions.unwrap_or(0)),
            u64::from(attrs.uid.unwrap_or(0)),
            u64::from(attrs.gid.unwrap_or(0)),
        ];
        Version::from_parts(base.into_iter().chain(content.map(fnv1a)))
    }
}

/// FNV-1a, 64 bits: a content fingerprint for versions (not a security
/// boundary: the check guards against accidents, not adversaries).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn utf8(path: &Path) -> Result<&str, FsError> {
    path.to_str().ok_or_else(|| FsError::Io {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "SFTP paths must be UTF-8"),
    })
}

fn error(path: &Path, e: SftpError) -> FsError {
    match &e {
        SftpError::Status(s) if s.status_code == StatusCode::NoSuchFile => {
            FsError::NotFound(path.to_owned())
        }
        SftpError::Status(s) if s.status_code == StatusCode::PermissionDenied => {
            FsError::PermissionDenied(path.to_owned())
        }
        _ => FsError::Io {
            path: path.to_owned(),
            source: std::io::Error::other(e),
        },
    }
}

fn kind_of(attrs: &FileAttributes) -> FileKind {
    let ft = attrs.file_type();
    if ft.is_dir() {
        FileKind::Directory
    } else if ft.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    }
}

fn meta(attrs: &FileAttributes, is_symlink: bool) -> Metadata {
    Metadata {
        kind: kind_of(attrs),
        is_symlink,
        len: attrs.size.unwrap_or(0),
        mode: attrs.permissions.map(|p| p & 0o7777),
        version: SftpFs::version_of(attrs, None),
    }
}

#[async_trait]
impl Fs for SftpFs {
    async fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        let p = utf8(path)?;
        let link = self
            .sftp
            .symlink_metadata(p)
            .await
            .map_err(|e| error(path, e))?;
        if !link.file_type().is_symlink() {
            return Ok(meta(&link, false));
        }
        match self.sftp.metadata(p).await {
            Ok(target) => Ok(meta(&target, true)),
            // A dangling link: it exists, but is nothing the editor can use.
            Err(_) => Ok(Metadata {
                kind: FileKind::Other,
                mode: None,
                len: 0,
                ..meta(&link, true)
            }),
        }
    }

    async fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        let p = utf8(path)?;
        let attrs = self.sftp.metadata(p).await.map_err(|e| error(path, e))?;
        if attrs.file_type().is_dir() {
            return Err(FsError::Io {
                path: path.to_owned(),
                source: std::io::ErrorKind::IsADirectory.into(),
            });
        }
        FsError::check_len(path, attrs.size.unwrap_or(0), limit)?;
        let file = self.sftp.open(p).await.map_err(|e| error(path, e))?;
        let mut content = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(
            &mut tokio::io::AsyncReadExt::take(file, limit.saturating_add(1)),
            &mut content,
        )
        .await
        .map_err(|e| FsError::from_io(path, e))?;
        FsError::check_len(path, content.len() as u64, limit)?;
        let version = SftpFs::version_of(&attrs, Some(&content));
        Ok((content, version))
    }

    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        let p = utf8(path)?;
        let entries = self.sftp.read_dir(p).await.map_err(|e| error(path, e))?;
        let mut out = Vec::new();
        for entry in entries {
            let name = entry.file_name();
            if name == "." || name == ".." {
                continue;
            }
            let is_symlink = entry.file_type().is_symlink();
            let kind = if is_symlink {
                let target = format!("{}/{name}", p.trim_end_matches('/'));
                self.sftp
                    .metadata(target)
                    .await
                    .map_or(FileKind::Other, |m| kind_of(&m))
            } else {
                kind_of(&entry.metadata())
            };
            out.push(DirEntry {
                name: OsString::from(name),
                kind,
                is_symlink,
            });
        }
        Ok(out)
    }

    async fn create_new(&self, path: &Path, data: Vec<u8>) -> Result<(), FsError> {
        let p = utf8(path)?;
        if self.sftp.symlink_metadata(p).await.is_ok() {
            return Err(FsError::AlreadyExists(path.to_owned()));
        }
        self.make_parents(path).await?;
        let temp = self.write_aside(path, &data, None).await?;
        let placed = match self.sftp.hardlink(&temp, p).await {
            Ok(true) => {
                let _ = self.sftp.remove_file(&temp).await;
                Ok(())
            }
            // No hardlink extension: the plain SFTP rename refuses an
            // existing target.
            Ok(false) => self.sftp.rename(&temp, p).await,
            Err(e) => Err(e),
        };
        if let Err(e) = placed {
            let _ = self.sftp.remove_file(&temp).await;
            return Err(if self.sftp.symlink_metadata(p).await.is_ok() {
                FsError::AlreadyExists(path.to_owned())
            } else {
                error(path, e)
            });
        }
        Ok(())
    }

    async fn replace(
        &self,
        path: &Path,
        data: Vec<u8>,
        expected: &Version,
    ) -> Result<Version, FsError> {
        // Write through links: work on the file they point to.
        let real = self
            .sftp
            .canonicalize(utf8(path)?)
            .await
            .map_err(|e| error(path, e))?;
        let real_path = Path::new(&real);
        // The version of the file as it is now, whatever its size.
        let (content, now) = self.read(real_path, u64::MAX).await?;
        if now != *expected {
            return Err(FsError::Changed(path.to_owned()));
        }
        drop(content);
        let attrs = self
            .sftp
            .metadata(real.as_str())
            .await
            .map_err(|e| error(path, e))?;
        let mode = attrs.permissions.map(|p| p & 0o7777);
        let temp = self.write_aside(real_path, &data, mode).await?;
        // Keep the owner where allowed; a change of owner clears set-id
        // bits, so the mode is set again after it.
        let mut owner = FileAttributes::empty();
        owner.uid = attrs.uid;
        owner.gid = attrs.gid;
        let _ = self.sftp.set_metadata(temp.as_str(), owner).await;
        let mut perms = FileAttributes::empty();
        perms.permissions = mode;
        let _ = self.sftp.set_metadata(temp.as_str(), perms).await;
        if let Err(e) = self.later_second(&temp, &attrs).await {
            let _ = self.sftp.remove_file(&temp).await;
            return Err(error(path, e));
        }
        if let Err(e) = self.posix_rename(&temp, &real).await {
            let _ = self.sftp.remove_file(&temp).await;
            return Err(error(path, e));
        }
        let after = self
            .sftp
            .metadata(real.as_str())
            .await
            .map_err(|e| error(path, e))?;
        Ok(SftpFs::version_of(&after, Some(&data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_is_fnv1a() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
