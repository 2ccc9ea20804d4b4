//! The confined shell's view of the filesystem, built in its own mount
//! namespace.
//!
//! The plan is computed in the parent ([`View::plan`]); the child replays it
//! with raw system calls ([`View::apply`]):
//!
//! 1. every mount becomes private, and the trees the view needs from the host
//!    (the workspace, writable roots, protected `.git` paths, a few device
//!    nodes) are cloned while they are still reachable;
//! 2. the whole tree is made read-only, `nosuid` and `nodev` in one
//!    recursive `mount_setattr(2)`;
//! 3. `/tmp` gets a private tmpfs, `/run` (and a real `/var/run`) an empty
//!    read-only one, `/dev` a minimal tmpfs (null, zero, full, random,
//!    urandom, tty bound from the host, a private `devpts` and `/dev/shm`),
//!    and `/proc` a fresh proc of the new PID namespace with `sys`,
//!    `sysrq-trigger`, `irq` and `bus` read-only;
//! 4. the workspace and writable roots are attached on top (read-write in
//!    workspace-write, read-only otherwise; the readable roots read-only),
//!    then every protected path,
//!    read-only, over them — a mount point cannot be renamed or removed, so
//!    a `.git` symlink or gitdir file cannot be swapped either;
//! 5. hidden paths ([`super::hiding`]): the directory holding them shown
//!    through a read-only overlay whose top layer holds a whiteout for each
//!    hidden name absent at start (made right after `/tmp`, before the
//!    roots, with the host's mounts beneath it attached again); over each
//!    hidden entry that exists, an empty read-only tmpfs over a directory
//!    (made before the roots when it holds one, so that the roots show
//!    through), the host's `/dev/null`, read-only, over a file;
//! 6. the shell's working directory is entered again, in the new view.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::hiding::{self, LayerEntry, Owner};
use super::sys::{self, ATTR_NODEV, ATTR_NOEXEC, ATTR_NOSUID, ATTR_RDONLY};
use crate::Error;

/// The most trees one view clones from the host (roots, protected paths,
/// device nodes): the child keeps their descriptors on its stack.
pub(crate) const MAX_CLONES: usize = 64;

/// Device nodes bound from the host into the minimal `/dev`.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Where an overlay's layer is built, in the view's private `/tmp`, before
/// it is detached (the overlay keeps its own reference).
const LAYER: &str = "/tmp/.dsh-hidden-layer";

/// Trees the view replaces with its own: no hidden path of the host's shows
/// there.
const PRIVATE: [&str; 5] = ["/tmp", "/dev", "/proc", "/run", "/var/run"];

/// Parts of `/proc` bound read-only over themselves (as bubblewrap does).
const PROC_READ_ONLY: [&str; 4] = ["sys", "sysrq-trigger", "irq", "bus"];

#[derive(Debug)]
struct Source {
    path: CString,
    follow: bool,
}

#[derive(Debug)]
enum Step {
    /// A fresh tmpfs.
    Tmpfs {
        target: CString,
        options: CString,
        read_only: bool,
    },
    Mkdir(CString),
    Touch(CString),
    Symlink {
        target: CString,
        link: CString,
    },
    /// Attach cloned tree `source` at `target`, then set `attrs` on it
    /// (recursively).
    Attach {
        source: usize,
        target: CString,
        attrs: u64,
    },
    /// A fresh proc for the new PID namespace.
    Proc(CString),
    /// A private devpts instance.
    Devpts(CString),
    /// Bind `path` (of the new view) read-only over itself, if it exists.
    ReadOnlySelf(CString),
    /// A read-only overlay at `target` over the host's directory there,
    /// under a layer of `layer` entries (absolute paths beneath [`LAYER`])
    /// whose root is `root`.
    ///
    /// Where the kernel refuses that overlay (a directory on a filesystem
    /// overlayfs cannot take as a lower layer, such as a virtual machine's
    /// shared folder), the directory stays as the host's: its hidden
    /// entries that exist are still covered by their own mounts (the old
    /// way, which a host's replacement detaches), and `submounts` (the
    /// host's mounts beneath it, cloned sources attached again on the
    /// overlay) are not needed.
    Overlay {
        at: CString,
        target: CString,
        root: Owner,
        layer: Vec<(CString, LayerEntry)>,
        options: CString,
        submounts: Vec<(usize, CString)>,
    },
    /// Set attributes of one mount.
    SetAttr {
        path: CString,
        set: u64,
    },
}

/// What a confined shell sees.
#[derive(Debug)]
pub(crate) struct View {
    sources: Vec<Source>,
    steps: Vec<Step>,
    cwd: CString,
}

/// One root to attach: its (canonical) path and whether it is writable.
#[derive(Debug, Clone)]
pub(crate) struct Attachment {
    pub(crate) path: PathBuf,
    pub(crate) writable: bool,
}

fn c(path: &Path) -> Result<CString, Error> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::setup(format!("path with a NUL byte: {}", path.display())))
}

fn cs(text: &str) -> CString {
    // Only called with literals and paths built from literals: no NUL.
    CString::new(text).unwrap_or_default()
}

fn is_real_dir(path: &str) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// What a view shows, as [`View::plan`] takes it.
#[derive(Debug)]
pub(crate) struct ViewSpec<'a> {
    /// The workspace and writable roots, in any order.
    pub(crate) roots: &'a [Attachment],
    /// Read-only over the roots; each must exist.
    pub(crate) protected: &'a [PathBuf],
    /// Hidden paths ([`crate::Policy::hidden`]).
    pub(crate) hidden: &'a [PathBuf],
    /// Hide by name, through overlays (Linux 5.11), not only by mounts
    /// over the entries that exist.
    pub(crate) by_name: bool,
    /// The Unix sockets the shell may reach: attached again beneath an
    /// overlay.
    pub(crate) sockets: &'a [PathBuf],
    /// Whether the private `/tmp` is writable.
    pub(crate) tmp_writable: bool,
    /// Whether the private `/dev/shm` is writable.
    pub(crate) shm_writable: bool,
    /// Both tmpfs' options.
    pub(crate) tmp_options: &'a str,
    /// A fresh `/proc` (else an empty one).
    pub(crate) proc: bool,
    /// Where the shell starts.
    pub(crate) cwd: &'a Path,
}

/// A view's plan as it is made.
#[derive(Debug, Default)]
struct Planner {
    sources: Vec<Source>,
    steps: Vec<Step>,
}

impl Planner {
    /// A tree to clone from the host: its index.
    fn source(&mut self, path: &Path, follow: bool) -> Result<usize, Error> {
        self.sources.push(Source {
            path: c(path)?,
            follow,
        });
        Ok(self.sources.len() - 1)
    }

    fn tmpfs(&mut self, target: CString, options: CString, read_only: bool) {
        self.steps.push(Step::Tmpfs {
            target,
            options,
            read_only,
        });
    }

    /// Overlays over the host's directories that hold hidden names, while
    /// the host's tree is still there beneath them (outermost first, each
    /// followed by the host's mounts beneath it).
    fn overlays(&mut self, overlays: &[hiding::Overlay]) -> Result<(), Error> {
        for overlay in overlays {
            let mut options = b"lowerdir=".to_vec();
            options.extend(hiding::escape_layer(Path::new(LAYER)));
            options.push(b':');
            options.extend(hiding::escape_layer(&overlay.base));
            let options = CString::new(options).map_err(|_| {
                Error::setup(format!("path with a NUL byte: {}", overlay.base.display()))
            })?;
            let layer = overlay
                .layer
                .iter()
                .map(|(rel, entry)| Ok((c(&Path::new(LAYER).join(rel))?, *entry)))
                .collect::<Result<_, Error>>()?;
            let submounts = overlay
                .submounts
                .iter()
                .map(|mount| Ok((self.source(mount, true)?, c(mount)?)))
                .collect::<Result<_, Error>>()?;
            self.steps.push(Step::Overlay {
                at: cs(LAYER),
                target: c(&overlay.base)?,
                root: overlay.root,
                layer,
                options,
                submounts,
            });
        }
        Ok(())
    }

    /// A minimal `/dev`: device nodes bound from the host, a private
    /// devpts, `/dev/shm` (a tmpfs with `tmp_options`), the standard
    /// links; read-only.
    fn dev(&mut self, tmp_options: &str, shm_writable: bool) -> Result<(), Error> {
        self.tmpfs(cs("/dev"), cs("mode=755"), false);
        for dev in DEVICES {
            let host = format!("/dev/{dev}");
            if Path::new(&host).exists() {
                let index = self.source(Path::new(&host), true)?;
                self.steps.push(Step::Touch(cs(&host)));
                self.steps.push(Step::Attach {
                    source: index,
                    target: cs(&host),
                    attrs: ATTR_NOSUID | ATTR_NOEXEC,
                });
            }
        }
        self.steps.push(Step::Mkdir(cs("/dev/pts")));
        self.steps.push(Step::Devpts(cs("/dev/pts")));
        self.steps.push(Step::Symlink {
            target: cs("pts/ptmx"),
            link: cs("/dev/ptmx"),
        });
        self.steps.push(Step::Mkdir(cs("/dev/shm")));
        self.tmpfs(cs("/dev/shm"), c(Path::new(tmp_options))?, !shm_writable);
        for (target, link) in [
            ("/proc/self/fd", "/dev/fd"),
            ("/proc/self/fd/0", "/dev/stdin"),
            ("/proc/self/fd/1", "/dev/stdout"),
            ("/proc/self/fd/2", "/dev/stderr"),
        ] {
            self.steps.push(Step::Symlink {
                target: cs(target),
                link: cs(link),
            });
        }
        self.steps.push(Step::SetAttr {
            path: cs("/dev"),
            set: ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV | ATTR_NOEXEC,
        });
        Ok(())
    }

    /// A fresh `/proc` for the PID namespace, or (without `proc`) an
    /// empty read-only one.
    fn proc(&mut self, proc: bool) {
        if proc {
            self.steps.push(Step::Proc(cs("/proc")));
            for part in PROC_READ_ONLY {
                self.steps
                    .push(Step::ReadOnlySelf(cs(&format!("/proc/{part}"))));
            }
        } else {
            self.tmpfs(cs("/proc"), cs("mode=555"), true);
        }
    }

    /// The workspace and writable roots, shortest first so that nested
    /// roots land on top of their parents; then the protected paths over
    /// them.
    fn roots(&mut self, roots: &[Attachment], protected: &[PathBuf]) -> Result<(), Error> {
        let mut roots = roots.to_vec();
        roots.sort_by_key(|r| r.path.as_os_str().len());
        for root in &roots {
            let index = self.source(&root.path, true)?;
            // Directories leading to a root under a private tmpfs must be
            // made there; elsewhere they already exist.
            let mut prefixes: Vec<&Path> = root.path.ancestors().collect();
            prefixes.reverse();
            for prefix in prefixes.iter().skip(1) {
                self.steps.push(Step::Mkdir(c(prefix)?));
            }
            let mut attrs = ATTR_NOSUID | ATTR_NODEV;
            if !root.writable {
                attrs |= ATTR_RDONLY;
            }
            self.steps.push(Step::Attach {
                source: index,
                target: c(&root.path)?,
                attrs,
            });
        }
        for path in protected {
            let index = self.source(path, false)?;
            self.steps.push(Step::Attach {
                source: index,
                target: c(path)?,
                attrs: ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV,
            });
        }
        Ok(())
    }

    /// Hidden entries that go over everything: an empty read-only tmpfs
    /// over a directory, the host's `/dev/null` over a file.
    fn hide_late(&mut self, late: &[&PathBuf]) -> Result<(), Error> {
        for path in late {
            if path.is_dir() {
                self.tmpfs(c(path)?, cs("mode=755"), true);
            } else {
                if !Path::new("/dev/null").exists() {
                    return Err(Error::setup(format!(
                        "{} cannot be hidden: there is no /dev/null to show in its place",
                        path.display()
                    )));
                }
                // A clone of its own: attaching a clone moves it.
                let null = self.source(Path::new("/dev/null"), true)?;
                self.steps.push(Step::Attach {
                    source: null,
                    target: c(path)?,
                    attrs: ATTR_RDONLY | ATTR_NOSUID | ATTR_NOEXEC,
                });
            }
        }
        Ok(())
    }
}

/// The host's mount points, and the unix sockets the shell may reach,
/// which count as mounts here: one beneath an overlaid directory is
/// attached again from the host (a socket seen through an overlay is not
/// the one its server listens on, and connecting to it is refused). None
/// without overlays.
fn mounts_for_overlays(by_name: bool, sockets: &[PathBuf]) -> Vec<PathBuf> {
    if !by_name {
        return Vec::new();
    }
    let mut mounts = hiding::mount_points();
    mounts.extend(
        sockets
            .iter()
            .filter(|s| std::fs::symlink_metadata(s).is_ok_and(|m| m.file_type().is_socket()))
            .cloned(),
    );
    mounts
}

impl View {
    /// The plan for `spec`: a private `/tmp`, the hidden paths' overlays,
    /// empty `/run` and `/var/run`, a minimal `/dev`, `/proc`, the roots
    /// and protected paths, the hidden entries, and the working directory.
    pub(crate) fn plan(spec: &ViewSpec<'_>) -> Result<View, Error> {
        let mut plan = Planner::default();
        // Private /tmp (the roots may live beneath it: they are attached
        // after, on directories made in the tmpfs).
        plan.tmpfs(cs("/tmp"), c(Path::new(spec.tmp_options))?, false);
        let attached: Vec<PathBuf> = spec.roots.iter().map(|r| r.path.clone()).collect();
        let private: Vec<&Path> = PRIVATE.iter().map(Path::new).collect();
        let mounts = mounts_for_overlays(spec.by_name, spec.sockets);
        let hiding = hiding::plan(spec.hidden, &attached, spec.by_name, &mounts, &private);
        plan.overlays(&hiding.overlays)?;
        // Socket directories: empty and read-only.
        for dir in ["/run", "/var/run"] {
            if is_real_dir(dir) {
                plan.tmpfs(cs(dir), cs("mode=755"), true);
            }
        }
        plan.dev(spec.tmp_options, spec.shm_writable)?;
        plan.proc(spec.proc);
        // Hidden directories that hold a root get their empty tmpfs first
        // (the roots are attached on directories made in it) and are made
        // read-only last; the others, and hidden files, go over everything.
        let holds_root = |h: &PathBuf| spec.roots.iter().any(|r| r.path.starts_with(h));
        let (early, late): (Vec<&PathBuf>, Vec<&PathBuf>) = hiding
            .pinned
            .iter()
            .partition(|h| h.is_dir() && holds_root(h));
        for dir in &early {
            plan.tmpfs(c(dir)?, cs("mode=755"), false);
        }
        plan.roots(spec.roots, spec.protected)?;
        plan.hide_late(&late)?;
        for dir in &early {
            plan.steps.push(Step::SetAttr {
                path: c(dir)?,
                set: ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV,
            });
        }
        if !spec.tmp_writable {
            plan.steps.push(Step::SetAttr {
                path: cs("/tmp"),
                set: ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV,
            });
        }
        if plan.sources.len() > MAX_CLONES {
            return Err(Error::setup(format!(
                "the sandbox can attach at most {MAX_CLONES} writable roots, protected paths and devices; this policy needs {}",
                plan.sources.len()
            )));
        }
        Ok(View {
            sources: plan.sources,
            steps: plan.steps,
            cwd: c(spec.cwd)?,
        })
    }

    /// Builds the view. Runs in the child, in new user, mount and PID
    /// namespaces, before `exec`; async-signal-safe.
    pub(crate) fn apply(&self) -> io::Result<()> {
        sys::make_private()?;
        let mut trees: [Option<OwnedFd>; MAX_CLONES] = [const { None }; MAX_CLONES];
        for (tree, src) in trees.iter_mut().zip(&self.sources) {
            *tree = Some(sys::clone_tree(&src.path, src.follow)?);
        }
        sys::set_attr(c"/", ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV, 0, true)?;
        for step in &self.steps {
            step.apply(&trees)?;
        }
        drop(trees);
        sys::chdir(&self.cwd)
    }
}

/// The cloned tree `index` (planned, so present).
fn tree(trees: &[Option<OwnedFd>], index: usize) -> io::Result<BorrowedFd<'_>> {
    trees
        .get(index)
        .and_then(Option::as_ref)
        .map(AsFd::as_fd)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
}

impl Step {
    /// Makes this step, with the trees cloned from the host.
    fn apply(&self, trees: &[Option<OwnedFd>]) -> io::Result<()> {
        match self {
            Step::Tmpfs {
                target,
                options,
                read_only,
            } => {
                let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
                if *read_only {
                    flags |= libc::MS_RDONLY;
                }
                sys::mount_fs(c"tmpfs", target, flags, Some(options))?;
            }
            Step::Mkdir(path) => sys::mkdir(path, 0o755)?,
            Step::Touch(path) => sys::touch(path)?,
            Step::Symlink { target, link } => sys::symlink(target, link)?,
            Step::Attach {
                source,
                target,
                attrs,
            } => {
                sys::attach(tree(trees, *source)?, target)?;
                sys::set_attr(target, *attrs, 0, true)?;
            }
            Step::Proc(target) => sys::mount_fs(
                c"proc",
                target,
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                None,
            )?,
            Step::Devpts(target) => sys::mount_fs(
                c"devpts",
                target,
                libc::MS_NOSUID | libc::MS_NOEXEC,
                Some(c"newinstance,ptmxmode=0666,mode=0620"),
            )?,
            Step::ReadOnlySelf(path) => {
                if sys::exists(path) {
                    let fd = sys::clone_tree(path, false)?;
                    sys::attach(fd.as_fd(), path)?;
                    drop(fd);
                    sys::set_attr(path, ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV, 0, true)?;
                }
            }
            Step::Overlay {
                at,
                target,
                root,
                layer,
                options,
                submounts,
            } => {
                let mounted = overlay(at, target, *root, layer, options)?;
                if mounted {
                    for (source, mount) in submounts {
                        sys::attach(tree(trees, *source)?, mount)?;
                        sys::set_attr(mount, ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV, 0, true)?;
                    }
                }
            }
            Step::SetAttr { path, set } => sys::set_attr(path, *set, 0, false)?,
        }
        Ok(())
    }
}

/// [`Step::Overlay`]'s layer built at `at` and the overlay mounted at
/// `target`: whether the kernel took it (see [`Step::Overlay`]).
fn overlay(
    at: &CString,
    target: &CString,
    root: Owner,
    layer: &[(CString, LayerEntry)],
    options: &CString,
) -> io::Result<bool> {
    sys::mkdir(at, 0o700)?;
    sys::mount_fs(
        c"tmpfs",
        at,
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(c"mode=700"),
    )?;
    sys::mkdir_owned(at, root.mode, root.uid, root.gid)?;
    for (path, entry) in layer {
        match entry {
            LayerEntry::Dir(o) => sys::mkdir_owned(path, o.mode, o.uid, o.gid)?,
            LayerEntry::Whiteout => sys::whiteout(path)?,
        }
    }
    let mounted = sys::mount_fs(
        c"overlay",
        target,
        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        Some(options),
    );
    sys::detach_and_remove(at)?;
    Ok(mounted.is_ok())
}
