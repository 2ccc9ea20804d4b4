//! [`Workspace`]: the layers of every owner over one base.

use std::path::{Path, PathBuf};

use crate::{Change, SnapshotId, WorkspaceError, owner};

/// The copy-on-write layers of many owners over one base directory.
///
/// Each owner's view is an overlayfs mount the caller makes with
/// `lowerdir=<base>,upperdir=<Layer::upper>,workdir=<Layer::work>`; this
/// type makes, copies, compares and removes those layers on the host. It
/// holds no descriptors or locks: any number of `Workspace` values may
/// name the same directories, and the methods take `&self`. Calls for one
/// owner must not overlap, and [`reset`](Self::reset),
/// [`fork`](Self::fork)'s target, [`restore`](Self::restore) and
/// [`remove`](Self::remove) need that no mount uses the owner's layer at
/// the time (overlayfs forbids changing a mounted upper layer).
#[derive(Debug, Clone)]
pub struct Workspace {
    base: PathBuf,
    cow_dir: PathBuf,
}

/// An owner's layer directories, to mount as
/// `upperdir=upper,workdir=work`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// The upper layer: the owner's changes.
    pub upper: PathBuf,
    /// The overlay's work directory (empty, on the same filesystem).
    pub work: PathBuf,
}

impl Workspace {
    /// A workspace over `base` with its layers and snapshots in `cow_dir`.
    ///
    /// `base` must be an existing directory; it is made canonical. `cow_dir`
    /// is created (mode 0700) if missing, and must not be inside `base` nor
    /// `base` inside it: overlayfs refuses overlapping layers. Layers and
    /// snapshots already in `cow_dir` are kept.
    pub fn new(
        base: impl Into<PathBuf>,
        cow_dir: impl Into<PathBuf>,
    ) -> Result<Workspace, WorkspaceError> {
        let (base, cow_dir) = (base.into(), cow_dir.into());
        if !cfg!(target_os = "linux") {
            return Err(WorkspaceError::Unsupported {
                os: std::env::consts::OS,
            });
        }
        let canonical_base = match std::fs::canonicalize(&base) {
            Ok(p) if p.is_dir() => p,
            Ok(_) => {
                return Err(WorkspaceError::BaseNotDirectory {
                    path: base,
                    source: None,
                });
            }
            Err(e) => {
                return Err(WorkspaceError::BaseNotDirectory {
                    path: base,
                    source: Some(e),
                });
            }
        };
        // Checked before anything is made: a layers directory refused for
        // being inside the base leaves nothing there.
        let overlap =
            |cow: &Path| cow.starts_with(&canonical_base) || canonical_base.starts_with(cow);
        if let Some(planned) = planned_path(&cow_dir)
            && overlap(&planned)
        {
            return Err(WorkspaceError::Overlap {
                base: canonical_base,
                cow_dir: planned,
            });
        }
        create_private_dir_all(&cow_dir)?;
        let canonical_cow =
            std::fs::canonicalize(&cow_dir).map_err(|e| WorkspaceError::io("open", &cow_dir, e))?;
        if overlap(&canonical_cow) {
            return Err(WorkspaceError::Overlap {
                base: canonical_base,
                cow_dir: canonical_cow,
            });
        }
        for sub in [LAYERS, SNAPSHOTS, STAGING] {
            create_private_dir_all(&canonical_cow.join(sub))?;
        }
        Ok(Workspace {
            base: canonical_base,
            cow_dir: canonical_cow,
        })
    }

    /// The base directory (canonical).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The directory holding the layers and snapshots (canonical).
    pub fn cow_dir(&self) -> &Path {
        &self.cow_dir
    }

    fn layer_dir(&self, owner: &str) -> Result<PathBuf, WorkspaceError> {
        Ok(self.cow_dir.join(LAYERS).join(owner::encode(owner)?))
    }

    fn layer_paths(dir: &Path) -> Layer {
        Layer {
            upper: dir.join(UPPER),
            work: dir.join(WORK),
        }
    }

    /// The owner's layer directories, created on first use: two `mkdir`s,
    /// whatever the base's size. The upper directory gets the base's
    /// permission bits (overlayfs shows the upper root's attributes as the
    /// view's root); the rest is mode 0700.
    pub fn layer(&self, owner: &str) -> Result<Layer, WorkspaceError> {
        let dir = self.layer_dir(owner)?;
        let layer = Self::layer_paths(&dir);
        if layer.upper.is_dir() && layer.work.is_dir() {
            return Ok(layer);
        }
        imp::create_layer(&self.base, &dir)?;
        Ok(layer)
    }

    /// Empties the owner's layer (upper and work): its view is the base
    /// again. The layer must not be mounted now.
    pub fn reset(&self, owner: &str) -> Result<(), WorkspaceError> {
        let dir = self.layer_dir(owner)?;
        imp::install_layer(self, &dir, None)
    }

    /// [`reset`](Self::reset) for a layer that may still be mounted by a
    /// view being torn down: the owner's layer is replaced with an empty
    /// one at once (a new view may be mounted on it), and the old one is
    /// moved aside, not removed: the caller removes it with
    /// [`RetiredLayer::remove`] once no mount uses it (what is left is
    /// removed by [`clear`](Self::clear)). `None` when the owner had no
    /// layer.
    pub fn reset_retiring(&self, owner: &str) -> Result<Option<RetiredLayer>, WorkspaceError> {
        let dir = self.layer_dir(owner)?;
        Ok(
            imp::replace_layer(self, &dir, None)?.map(|name| RetiredLayer {
                staging: self.cow_dir.join(STAGING),
                name,
            }),
        )
    }

    /// Makes `to`'s layer a copy of `from`'s upper layer now, replacing
    /// any layer `to` had (which must not be mounted). `from` may be
    /// mounted and in use: what it changes while the copy runs may or may
    /// not be in the copy.
    pub fn fork(&self, from: &str, to: &str) -> Result<(), WorkspaceError> {
        let src = self.layer_dir(from)?.join(UPPER);
        let dir = self.layer_dir(to)?;
        if from == to {
            return Ok(());
        }
        imp::install_layer(self, &dir, Some(&src))
    }

    /// Copies the owner's upper layer to a new snapshot and returns its id.
    /// An owner without a layer gives a snapshot of the base itself.
    pub fn snapshot(&self, owner: &str) -> Result<SnapshotId, WorkspaceError> {
        let src = self.layer_dir(owner)?.join(UPPER);
        imp::snapshot(self, &src)
    }

    /// Replaces the owner's layer with a copy of `snapshot` (taken from
    /// any owner). The layer must not be mounted now.
    pub fn restore(&self, owner: &str, snapshot: &SnapshotId) -> Result<(), WorkspaceError> {
        let src = self.snapshot_dir(snapshot);
        if !src.is_dir() {
            return Err(WorkspaceError::SnapshotNotFound {
                id: snapshot.to_string(),
            });
        }
        let dir = self.layer_dir(owner)?;
        imp::install_layer(self, &dir, Some(&src))
    }

    /// Deletes a snapshot; [`WorkspaceError::SnapshotNotFound`] when there
    /// is none with this id.
    pub fn delete_snapshot(&self, snapshot: &SnapshotId) -> Result<(), WorkspaceError> {
        imp::discard(self, &self.snapshot_dir(snapshot), true).map_err(|e| match e {
            WorkspaceError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                WorkspaceError::SnapshotNotFound {
                    id: snapshot.to_string(),
                }
            }
            e => e,
        })
    }

    /// Forgets the owner's layer (nothing happens when it has none). The
    /// layer must not be mounted now.
    pub fn remove(&self, owner: &str) -> Result<(), WorkspaceError> {
        let dir = self.layer_dir(owner)?;
        imp::discard(self, &dir, false)
    }

    /// Removes every layer and snapshot: the `layers`, `snapshots` and
    /// `staging` directories [`Workspace::new`] made in the layers
    /// directory (which is kept, with anything else in it). What a host
    /// does when it ends; no owner's view may be mounted now, and the
    /// workspace is of no use after.
    pub fn clear(&self) -> Result<(), WorkspaceError> {
        [LAYERS, SNAPSHOTS, STAGING]
            .into_iter()
            .try_for_each(|sub| imp::remove_all(&self.cow_dir.join(sub)))
    }

    /// What the owner's view has differently from the base, sorted by
    /// path (relative to the base). Read without following any link the
    /// owner made; see the crate docs for what counts as a change.
    pub fn changes(&self, owner: &str) -> Result<Vec<Change>, WorkspaceError> {
        let upper = self.layer_dir(owner)?.join(UPPER);
        imp::changes(&self.base, &upper)
    }

    /// The owner's changes as a unified diff in git's format, with paths
    /// relative to the base: `git apply` of it to a copy of the base gives
    /// the owner's view (binary files excepted: they are named only).
    pub fn diff(&self, owner: &str) -> Result<String, WorkspaceError> {
        let upper = self.layer_dir(owner)?.join(UPPER);
        imp::diff(&self.base, &upper)
    }

    fn snapshot_dir(&self, snapshot: &SnapshotId) -> PathBuf {
        self.cow_dir.join(SNAPSHOTS).join(snapshot.to_string())
    }
}

/// An owner's former layer, moved aside by
/// [`Workspace::reset_retiring`] while a view may still use it.
#[derive(Debug)]
#[must_use = "a retired layer stays on disk until removed"]
pub struct RetiredLayer {
    staging: PathBuf,
    name: std::ffi::OsString,
}

impl RetiredLayer {
    /// Removes the layer; call it once no mount uses it (the view's
    /// processes have all ended).
    pub fn remove(self) -> Result<(), WorkspaceError> {
        imp::remove_staged(&self.staging, &self.name)
    }
}

const LAYERS: &str = "layers";
const SNAPSHOTS: &str = "snapshots";
const STAGING: &str = "staging";
const UPPER: &str = "upper";
const WORK: &str = "work";

fn create_private_dir_all(path: &Path) -> Result<(), WorkspaceError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(path)
        .map_err(|e| WorkspaceError::io("create", path, e))
}

#[cfg(target_os = "linux")]
mod imp {
    //! The Linux side: each change to the layers directory is built under
    //! `staging` and swapped in with one `renameat2`.

    use std::ffi::{OsStr, OsString};
    use std::io;
    use std::os::fd::OwnedFd;
    use std::path::Path;

    use super::{STAGING, UPPER, WORK, Workspace};
    use crate::id::random_u64;
    use crate::sys;
    use crate::{SnapshotId, WorkspaceError, copy, walk};

    pub(super) use walk::{changes, diff};

    fn open(path: &Path) -> Result<OwnedFd, WorkspaceError> {
        sys::open_dir_path(path).map_err(|e| WorkspaceError::io("open", path, e))
    }

    fn split(path: &Path) -> Result<(&Path, &OsStr), WorkspaceError> {
        match (path.parent(), path.file_name()) {
            (Some(p), Some(n)) => Ok((p, n)),
            _ => Err(WorkspaceError::io(
                "use",
                path,
                io::Error::from(io::ErrorKind::InvalidInput),
            )),
        }
    }

    /// Creates `dir`, `dir/upper` (the base's permission bits) and
    /// `dir/work`, those missing.
    pub(super) fn create_layer(base: &Path, dir: &Path) -> Result<(), WorkspaceError> {
        let (parent, name) = split(dir)?;
        let parent_fd = open(parent)?;
        mkdir_existing_ok(&parent_fd, name, 0o700, dir)?;
        let fd = open(dir)?;
        fill_empty_layer(base, &fd, dir)
    }

    fn fill_empty_layer(base: &Path, fd: &OwnedFd, dir: &Path) -> Result<(), WorkspaceError> {
        let perm = sys::fstat(&open(base)?)
            .map_err(|e| WorkspaceError::io("read", base, e))?
            .perm;
        if mkdir_existing_ok(fd, OsStr::new(UPPER), 0o700, &dir.join(UPPER))? {
            let upper = sys::open_dir(fd, OsStr::new(UPPER))
                .map_err(|e| WorkspaceError::io("open", dir.join(UPPER), e))?;
            sys::fchmod(&upper, perm)
                .map_err(|e| WorkspaceError::io("set the mode of", dir.join(UPPER), e))?;
        }
        mkdir_existing_ok(fd, OsStr::new(WORK), 0o700, &dir.join(WORK))?;
        Ok(())
    }

    /// `mkdir`; `Ok(false)` when it was there.
    fn mkdir_existing_ok(
        parent: &OwnedFd,
        name: &OsStr,
        mode: u32,
        path: &Path,
    ) -> Result<bool, WorkspaceError> {
        match sys::mkdir(parent, name, mode) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(WorkspaceError::io("create", path, e)),
        }
    }

    /// A new empty directory under `staging`: its descriptor and name.
    fn stage(ws: &Workspace) -> Result<(OwnedFd, OsString), WorkspaceError> {
        let staging = ws.cow_dir.join(STAGING);
        let fd = open(&staging)?;
        let name = OsString::from(format!("{:016x}", random_u64()));
        sys::mkdir(&fd, &name, 0o700)
            .map_err(|e| WorkspaceError::io("create", staging.join(&name), e))?;
        Ok((fd, name))
    }

    /// Builds a new layer (an empty one, or with a copy of `src` as its
    /// upper) under `staging` and swaps it in for `dir`; the old layer, if
    /// any, is removed afterwards.
    pub(super) fn install_layer(
        ws: &Workspace,
        dir: &Path,
        src: Option<&Path>,
    ) -> Result<(), WorkspaceError> {
        match replace_layer(ws, dir, src)? {
            Some(old) => remove_staged(&ws.cow_dir.join(STAGING), &old),
            None => Ok(()),
        }
    }

    /// [`install_layer`] without the removal: the old layer's name under
    /// `staging` (`None`: `dir` had none).
    pub(super) fn replace_layer(
        ws: &Workspace,
        dir: &Path,
        src: Option<&Path>,
    ) -> Result<Option<OsString>, WorkspaceError> {
        let (staging, name) = stage(ws)?;
        let staged = ws.cow_dir.join(STAGING).join(&name);
        let built = (|| {
            let fd = sys::open_dir(&staging, &name)
                .map_err(|e| WorkspaceError::io("open", &staged, e))?;
            match src {
                Some(src) if src.is_dir() => {
                    copy::copy_tree(src, &fd, OsStr::new(UPPER), &staged.join(UPPER))?;
                    sys::mkdir(&fd, OsStr::new(WORK), 0o700)
                        .map_err(|e| WorkspaceError::io("create", staged.join(WORK), e))
                }
                _ => fill_empty_layer(&ws.base, &fd, &staged),
            }
        })();
        if let Err(e) = built {
            let _ = copy::remove_tree(&staging, &name, &staged);
            return Err(e);
        }
        let (parent, target) = split(dir)?;
        let parent_fd = open(parent)?;
        match sys::rename2(&staging, &name, &parent_fd, target, true) {
            // Swapped: the old layer is now the staged name.
            Ok(()) => {
                tracing::debug!(layer = %dir.display(), from = ?src, "layer replaced");
                Ok(Some(name))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                sys::rename2(&staging, &name, &parent_fd, target, false)
                    .map(|()| None)
                    .map_err(|e| WorkspaceError::io("move into place", dir, e))
            }
            Err(e) => {
                let _ = copy::remove_tree(&staging, &name, &staged);
                Err(WorkspaceError::io("move into place", dir, e))
            }
        }
    }

    /// Removes `name` under the `staging` directory.
    pub(super) fn remove_staged(staging: &Path, name: &OsStr) -> Result<(), WorkspaceError> {
        copy::remove_tree(&open(staging)?, name, &staging.join(name))
    }

    pub(super) fn snapshot(ws: &Workspace, src: &Path) -> Result<SnapshotId, WorkspaceError> {
        let (staging, name) = stage(ws)?;
        let staged = ws.cow_dir.join(STAGING).join(&name);
        let built = (|| {
            let fd = sys::open_dir(&staging, &name)
                .map_err(|e| WorkspaceError::io("open", &staged, e))?;
            if src.is_dir() {
                copy::copy_tree(src, &fd, OsStr::new(UPPER), &staged.join(UPPER))
            } else {
                fill_empty_layer(&ws.base, &fd, &staged)
            }
        })();
        let result = built.and_then(|()| {
            let snapshots = open(&ws.cow_dir.join(super::SNAPSHOTS))?;
            let staged_fd = sys::open_dir(&staging, &name)
                .map_err(|e| WorkspaceError::io("open", &staged, e))?;
            loop {
                let id = SnapshotId::random();
                let target = OsString::from(id.to_string());
                match sys::rename2(&staged_fd, OsStr::new(UPPER), &snapshots, &target, false) {
                    Ok(()) => {
                        tracing::debug!(snapshot = %id, from = %src.display(), "snapshot made");
                        return Ok(id);
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => {
                        return Err(WorkspaceError::io(
                            "move into place",
                            ws.snapshot_dir(&id),
                            e,
                        ));
                    }
                }
            }
        });
        let _ = copy::remove_tree(&staging, &name, &staged);
        result
    }

    /// Removes `dir` and everything in it (a missing one is no error).
    pub(super) fn remove_all(dir: &Path) -> Result<(), WorkspaceError> {
        let (parent, name) = split(dir)?;
        copy::remove_tree(&open(parent)?, name, dir)
    }

    /// Moves `dir` to `staging` and removes it there. A missing `dir` is an
    /// error only when `must_exist`.
    pub(super) fn discard(
        ws: &Workspace,
        dir: &Path,
        must_exist: bool,
    ) -> Result<(), WorkspaceError> {
        let (parent, target) = split(dir)?;
        let parent_fd = open(parent)?;
        let (staging, name) = stage(ws)?;
        let staged = ws.cow_dir.join(STAGING).join(&name);
        // Swap the directory with the fresh empty one, then drop both.
        let r = sys::rename2(&parent_fd, target, &staging, &name, true);
        match r {
            Ok(()) => {
                sys::unlink(&parent_fd, target, true)
                    .map_err(|e| WorkspaceError::io("remove", dir, e))?;
                copy::remove_tree(&staging, &name, &staged)
            }
            Err(e) => {
                let _ = copy::remove_tree(&staging, &name, &staged);
                if e.kind() == io::ErrorKind::NotFound && !must_exist {
                    Ok(())
                } else {
                    Err(WorkspaceError::io("remove", dir, e))
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    //! Elsewhere no [`Workspace`](super::Workspace) is ever made
    //! ([`Workspace::new`](super::Workspace::new) refuses), so these are
    //! never reached; they keep the methods' bodies the same everywhere.

    use std::path::Path;

    use super::Workspace;
    use crate::{Change, SnapshotId, WorkspaceError};

    fn unsupported() -> WorkspaceError {
        WorkspaceError::Unsupported {
            os: std::env::consts::OS,
        }
    }

    pub(super) fn create_layer(_: &Path, _: &Path) -> Result<(), WorkspaceError> {
        Err(unsupported())
    }
    pub(super) fn install_layer(
        _: &Workspace,
        _: &Path,
        _: Option<&Path>,
    ) -> Result<(), WorkspaceError> {
        Err(unsupported())
    }
    pub(super) fn replace_layer(
        _: &Workspace,
        _: &Path,
        _: Option<&Path>,
    ) -> Result<Option<std::ffi::OsString>, WorkspaceError> {
        Err(unsupported())
    }
    pub(super) fn remove_staged(_: &Path, _: &std::ffi::OsStr) -> Result<(), WorkspaceError> {
        Err(unsupported())
    }
    pub(super) fn snapshot(_: &Workspace, _: &Path) -> Result<SnapshotId, WorkspaceError> {
        Err(unsupported())
    }
    pub(super) fn discard(_: &Workspace, _: &Path, _: bool) -> Result<(), WorkspaceError> {
        Err(unsupported())
    }
    pub(super) fn remove_all(_: &Path) -> Result<(), WorkspaceError> {
        Err(unsupported())
    }
    pub(super) fn changes(_: &Path, _: &Path) -> Result<Vec<Change>, WorkspaceError> {
        Err(unsupported())
    }
    pub(super) fn diff(_: &Path, _: &Path) -> Result<String, WorkspaceError> {
        Err(unsupported())
    }
}

/// Where `path` will be once made: its longest existing ancestor made
/// canonical, with the rest of its names after it (`None` when no ancestor
/// resolves, or the rest climbs with `..`).
fn planned_path(path: &Path) -> Option<PathBuf> {
    let mut existing = path.to_owned();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            let mut out = real;
            for name in rest.iter().rev() {
                out.push(name);
            }
            return Some(out);
        }
        rest.push(existing.file_name()?.to_owned());
        if !existing.pop() {
            return None;
        }
    }
}
