//! The editor's writes in workspace-write, resolved beneath an open
//! directory of a writable root (`cap-std`, which uses
//! `openat2(RESOLVE_BENEATH)` where the kernel has it).
//!
//! Every step — making missing directories, the temporary file, the version
//! checks, the final link or rename — is relative to a directory descriptor
//! opened beneath the root, so no rename or symlink swap between the check
//! and the write can send the write elsewhere: at worst the write fails.
//! The path is refused when it names a protected path (a `.git`, a root's
//! `HEAD` where the root has no repository), and the directory written in
//! is checked against the protected paths by identity (device and inode,
//! walking `..` up to the root), so a link that leads into `.git` is
//! refused too.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use dsh_editor::fs::{FsError, LocalFs, Version};

use crate::WriteRules;

type Id = (u64, u64);

/// Why a write was refused (the caller renders the denial line).
#[derive(Debug)]
pub(crate) enum Outcome {
    Refused,
    Fs(FsError),
}

impl From<FsError> for Outcome {
    fn from(e: FsError) -> Self {
        Outcome::Fs(e)
    }
}

/// Where `path` lands: a writable root and the path beneath it.
struct Target<'a> {
    root: &'a Path,
    parent: PathBuf,
    name: OsString,
}

fn locate<'a>(
    rules: &'a WriteRules,
    path: &Path,
    resolve: Resolve<'_>,
) -> Result<Target<'a>, Outcome> {
    let real = resolve(path).ok_or(Outcome::Refused)?;
    let root = rules
        .roots
        .iter()
        .filter(|r| real.starts_with(r))
        .max_by_key(|r| r.as_os_str().len())
        .ok_or(Outcome::Refused)?;
    let rel = real.strip_prefix(root).map_err(|_| Outcome::Refused)?;
    // The editor never writes in a `.git`, wherever it is, nor at a
    // protected path of the root (its `HEAD` when it has no repository),
    // by name: what the shell's view keeps read-only, whether or not a
    // placeholder is there now.
    if rel
        .components()
        .any(|c| c == Component::Normal(".git".as_ref()))
        || rules
            .protected
            .iter()
            .chain(&crate::policy::git_paths(root))
            .any(|g| real.starts_with(g))
    {
        return Err(Outcome::Refused);
    }
    let name = rel.file_name().ok_or(Outcome::Refused)?.to_owned();
    let parent = rel.parent().unwrap_or(Path::new("")).to_owned();
    Ok(Target { root, parent, name })
}

fn id_of(meta: &std::fs::Metadata) -> Id {
    (meta.dev(), meta.ino())
}

/// The identities of every protected directory or file, as they are now
/// (so a `.git` created since the rules were made is included).
fn protected_ids(rules: &WriteRules) -> HashSet<Id> {
    let mut paths = rules.protected.clone();
    for root in &rules.roots {
        paths.extend(crate::policy::git_paths(root));
    }
    paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| id_of(&m))
        .collect()
}

fn fstat(fd: &impl AsFd) -> io::Result<Id> {
    let file = std::fs::File::from(fd.as_fd().try_clone_to_owned()?);
    file.metadata().map(|m| id_of(&m))
}

/// How a parent directory is opened only to be looked at: `O_PATH` where it
/// exists (no read permission needed), else for reading.
#[cfg(any(target_os = "linux", target_os = "android"))]
const OPEN_DIR_ONLY: libc::c_int = libc::O_PATH;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const OPEN_DIR_ONLY: libc::c_int = libc::O_RDONLY;

/// Refuses when `dir`, or any directory between it and `root`, is protected.
fn check_dir(dir: &Dir, root: Id, protected: &HashSet<Id>) -> Result<(), Outcome> {
    let io = |e: io::Error| Outcome::Fs(FsError::from_io(Path::new("."), e));
    let mut current: OwnedFd = dir.as_fd().try_clone_to_owned().map_err(io)?;
    loop {
        let id = fstat(&current).map_err(io)?;
        if protected.contains(&id) {
            return Err(Outcome::Refused);
        }
        if id == root {
            return Ok(());
        }
        // SAFETY: openat on a descriptor we own with a constant path; the
        // result is checked before use.
        let parent = unsafe {
            libc::openat(
                current.as_raw_fd(),
                c"..".as_ptr(),
                OPEN_DIR_ONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if parent < 0 {
            return Err(io(io::Error::last_os_error()));
        }
        // SAFETY: `parent` was just opened and nothing else owns it.
        let parent = unsafe { OwnedFd::from_raw_fd(parent) };
        if fstat(&parent).map_err(io)? == id {
            // Reached `/` without passing the root: not beneath it.
            return Err(Outcome::Refused);
        }
        current = parent;
    }
}

fn temp_name(name: &OsString) -> OsString {
    let mut bytes = [0u8; 6];
    let _ = getrandom_bytes(&mut bytes);
    let suffix: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".dsh-{suffix}"));
    tmp
}

fn getrandom_bytes(buf: &mut [u8]) -> io::Result<()> {
    getrandom::fill(buf).map_err(|e| io::Error::other(e.to_string()))
}

fn sync_dir(dir: &Dir) {
    // Best effort: some filesystems refuse to fsync a directory.
    if let Ok(d) = dir.open(".") {
        let _ = d.into_std().sync_all();
    }
}

/// Opens (making missing directories) the directory `rel` beneath `root`.
fn open_parent(root: &Dir, rel: &Path, create: bool) -> io::Result<Dir> {
    if rel.as_os_str().is_empty() {
        return root.try_clone();
    }
    match root.open_dir(rel) {
        Ok(dir) => Ok(dir),
        Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
            let mut walked = PathBuf::new();
            for part in rel.components() {
                walked.push(part);
                match root.create_dir(&walked) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
            root.open_dir(rel)
        }
        Err(e) => Err(e),
    }
}

/// Creates `tmp` in `dir` with `data`; returns it and the time the kernel
/// gave it when it was created (for [`LocalFs::after_the_tick`]).
fn write_temp(
    dir: &Dir,
    tmp: &OsString,
    data: &[u8],
    mode: u32,
) -> io::Result<(std::fs::File, Option<std::time::SystemTime>)> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).mode(mode);
    let mut file = dir.open_with(tmp, &options)?.into_std();
    let began = file.metadata().and_then(|m| m.modified()).ok();
    file.write_all(data)?;
    Ok((file, began))
}

/// Where a write lands: the directory (opened beneath its root and
/// checked), the name in it, and the protected identities.
struct Place {
    dir: Dir,
    name: OsString,
    protected: HashSet<Id>,
}

/// Opens a writable root for a write beneath it: this process's view of
/// it ([`ambient`]), or a descriptor of another view (the sandbox's
/// confined reader opens it in the shell's, whose read-only mounts then
/// hold for every step beneath).
pub(crate) type OpenRoot<'a> = &'a (dyn Fn(&Path) -> Result<Dir, FsError> + Sync);

/// Resolves the links of a path's existing part ([`crate::resolve`] in
/// this process's view; a copy-on-write workspace resolves in its own).
pub(crate) type Resolve<'a> = &'a (dyn Fn(&Path) -> Option<PathBuf> + Sync);

/// Opens `root` in this process's view.
pub(crate) fn ambient(root: &Path) -> Result<Dir, FsError> {
    Dir::open_ambient_dir(root, ambient_authority()).map_err(|e| FsError::from_io(root, e))
}

fn place(
    rules: &WriteRules,
    path: &Path,
    create: bool,
    (open_root, resolve): (OpenRoot<'_>, Resolve<'_>),
) -> Result<Place, Outcome> {
    // `locate` resolves links, so a replaced file is the real one.
    let target = locate(rules, path, resolve)?;
    let io = |e: io::Error| Outcome::Fs(FsError::from_io(path, e));
    let root = open_root(target.root)?;
    let root_id = fstat(&root).map_err(io)?;
    let protected = protected_ids(rules);
    let dir = open_parent(&root, &target.parent, create).map_err(io)?;
    check_dir(&dir, root_id, &protected)?;
    Ok(Place {
        dir,
        name: target.name,
        protected,
    })
}

/// Creates a new file at `path` beneath a writable root, of at most
/// `file_size` bytes.
pub(crate) fn create_new(
    rules: &WriteRules,
    path: &Path,
    data: &[u8],
    file_size: Option<u64>,
    view: (OpenRoot<'_>, Resolve<'_>),
) -> Result<(), Outcome> {
    let Place { dir, name, .. } = place(rules, path, true, view)?;
    let io = |e: io::Error| Outcome::Fs(FsError::from_io(path, e));
    if dir.symlink_metadata(&name).is_ok() {
        return Err(FsError::AlreadyExists(path.to_owned()).into());
    }
    FsError::check_file_size(path, data.len() as u64, file_size)?;
    let tmp = temp_name(&name);
    // The process umask applies to 0o666, as `open(2)` would do.
    let (file, _) = write_temp(&dir, &tmp, data, 0o666).map_err(io)?;
    let result = file
        .sync_all()
        .and_then(|()| dir.hard_link(&tmp, &dir, &name));
    let _ = dir.remove_file(&tmp);
    result.map_err(io)?;
    sync_dir(&dir);
    Ok(())
}

/// Replaces the file at `path` beneath a writable root, if its version is
/// still `expected`, with at most `file_size` bytes.
pub(crate) fn replace(
    rules: &WriteRules,
    path: &Path,
    data: &[u8],
    expected: &Version,
    file_size: Option<u64>,
    view: (OpenRoot<'_>, Resolve<'_>),
) -> Result<Version, Outcome> {
    let Place {
        dir,
        name,
        protected,
    } = place(rules, path, false, view)?;
    let io = |e: io::Error| Outcome::Fs(FsError::from_io(path, e));
    let version_now = || -> Result<std::fs::Metadata, Outcome> {
        if dir
            .symlink_metadata(&name)
            .map_err(io)?
            .file_type()
            .is_symlink()
        {
            // Swapped for a link since it was read.
            return Err(FsError::Changed(path.to_owned()).into());
        }
        let meta = dir
            .open(&name)
            .and_then(|f| f.into_std().metadata())
            .map_err(io)?;
        if protected.contains(&id_of(&meta)) {
            return Err(Outcome::Refused);
        }
        if LocalFs::version(&meta) != *expected {
            return Err(FsError::Changed(path.to_owned()).into());
        }
        Ok(meta)
    };
    let before = version_now()?;
    FsError::check_file_size(path, data.len() as u64, file_size)?;
    let tmp = temp_name(&name);
    let (file, began) = write_temp(&dir, &tmp, data, 0o600).map_err(io)?;
    let finish = || -> Result<Version, Outcome> {
        // Edits the next command sees: a same-size edit gets a later second,
        // every edit a time after what was written before it.
        LocalFs::later_second(&file, &before).map_err(io)?;
        LocalFs::after_the_tick(&file, began).map_err(io)?;
        file.set_permissions(before.permissions()).map_err(io)?;
        // Keep the owner where we may (as root); elsewhere chown fails harmlessly.
        let _ = std::os::unix::fs::fchown(&file, Some(before.uid()), Some(before.gid()));
        file.sync_all().map_err(io)?;
        // Last look before the rename: a change made while we wrote wins.
        version_now()?;
        dir.rename(&tmp, &dir, &name).map_err(io)?;
        sync_dir(&dir);
        Ok(LocalFs::version(&file.metadata().map_err(io)?))
    };
    let result = finish();
    if result.is_err() {
        let _ = dir.remove_file(&tmp);
    }
    result
}
