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
//!    workspace-write, read-only otherwise), then every protected path,
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

use libc::c_int;

use super::hiding::{self, LayerEntry, Owner};
use super::sys::{self, ATTR_NODEV, ATTR_NOEXEC, ATTR_NOSUID, ATTR_RDONLY};
use crate::SandboxError;

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

fn c(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| SandboxError::setup(format!("path with a NUL byte: {}", path.display())))
}

fn cs(text: &str) -> CString {
    // Only called with literals and paths built from literals: no NUL.
    CString::new(text).unwrap_or_default()
}

fn is_real_dir(path: &str) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

impl View {
    /// The plan for `roots` (the workspace and writable roots, in any
    /// order), `protected` paths (read-only over the roots; each must exist),
    /// `hidden` paths ([`crate::WriteRules::hidden`]; by name through
    /// overlays when `by_name`, the unix `sockets` the shell may reach
    /// attached again beneath an overlay), a private `/tmp` (writable or not), a private
    /// `/dev/shm` (whether each is writable; both tmpfs with `tmp_options`),
    /// a fresh `/proc` (or, without `proc`, an empty one), and
    /// `cwd`.
    pub(crate) fn plan(
        roots: &[Attachment],
        protected: &[PathBuf],
        (hidden, by_name, sockets): (&[PathBuf], bool, &[PathBuf]),
        (tmp_writable, shm_writable): (bool, bool),
        tmp_options: &str,
        proc: bool,
        cwd: &Path,
    ) -> Result<View, SandboxError> {
        let mut sources = Vec::new();
        let mut steps = Vec::new();
        let mut source = |path: &Path, follow: bool| -> Result<usize, SandboxError> {
            sources.push(Source {
                path: c(path)?,
                follow,
            });
            Ok(sources.len() - 1)
        };

        // Private /tmp (the roots may live beneath it: they are attached
        // after, on directories made in the tmpfs).
        steps.push(Step::Tmpfs {
            target: cs("/tmp"),
            options: c(Path::new(tmp_options))?,
            read_only: false,
        });
        let attached: Vec<PathBuf> = roots.iter().map(|r| r.path.clone()).collect();
        let private: Vec<&Path> = PRIVATE.iter().map(Path::new).collect();
        // The unix sockets the shell may reach count as the host's mounts
        // here: one beneath an overlaid directory is attached again from
        // the host (a socket seen through an overlay is not the one its
        // server listens on, and connecting to it is refused).
        let mounts = if by_name {
            let mut mounts = hiding::mount_points();
            mounts.extend(
                sockets
                    .iter()
                    .filter(|s| {
                        std::fs::symlink_metadata(s).is_ok_and(|m| m.file_type().is_socket())
                    })
                    .cloned(),
            );
            mounts
        } else {
            Vec::new()
        };
        let hiding = hiding::plan(hidden, &attached, by_name, &mounts, &private);
        // Overlays over the host's directories that hold hidden names, while
        // the host's tree is still there beneath them (outermost first, each
        // followed by the host's mounts beneath it).
        for overlay in &hiding.overlays {
            let mut options = b"lowerdir=".to_vec();
            options.extend(hiding::escape_layer(Path::new(LAYER)));
            options.push(b':');
            options.extend(hiding::escape_layer(&overlay.base));
            let options = CString::new(options).map_err(|_| {
                SandboxError::setup(format!("path with a NUL byte: {}", overlay.base.display()))
            })?;
            let layer = overlay
                .layer
                .iter()
                .map(|(rel, entry)| Ok((c(&Path::new(LAYER).join(rel))?, *entry)))
                .collect::<Result<_, SandboxError>>()?;
            let submounts = overlay
                .submounts
                .iter()
                .map(|mount| Ok((source(mount, true)?, c(mount)?)))
                .collect::<Result<_, SandboxError>>()?;
            steps.push(Step::Overlay {
                at: cs(LAYER),
                target: c(&overlay.base)?,
                root: overlay.root,
                layer,
                options,
                submounts,
            });
        }
        // Socket directories: empty and read-only.
        for dir in ["/run", "/var/run"] {
            if is_real_dir(dir) {
                steps.push(Step::Tmpfs {
                    target: cs(dir),
                    options: cs("mode=755"),
                    read_only: true,
                });
            }
        }
        // A minimal /dev.
        steps.push(Step::Tmpfs {
            target: cs("/dev"),
            options: cs("mode=755"),
            read_only: false,
        });
        for dev in DEVICES {
            let host = format!("/dev/{dev}");
            if Path::new(&host).exists() {
                let index = source(Path::new(&host), true)?;
                steps.push(Step::Touch(cs(&host)));
                steps.push(Step::Attach {
                    source: index,
                    target: cs(&host),
                    attrs: ATTR_NOSUID | ATTR_NOEXEC,
                });
            }
        }
        steps.push(Step::Mkdir(cs("/dev/pts")));
        steps.push(Step::Devpts(cs("/dev/pts")));
        steps.push(Step::Symlink {
            target: cs("pts/ptmx"),
            link: cs("/dev/ptmx"),
        });
        steps.push(Step::Mkdir(cs("/dev/shm")));
        steps.push(Step::Tmpfs {
            target: cs("/dev/shm"),
            options: c(Path::new(tmp_options))?,
            read_only: !shm_writable,
        });
        for (target, link) in [
            ("/proc/self/fd", "/dev/fd"),
            ("/proc/self/fd/0", "/dev/stdin"),
            ("/proc/self/fd/1", "/dev/stdout"),
            ("/proc/self/fd/2", "/dev/stderr"),
        ] {
            steps.push(Step::Symlink {
                target: cs(target),
                link: cs(link),
            });
        }
        steps.push(Step::SetAttr {
            path: cs("/dev"),
            set: ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV | ATTR_NOEXEC,
        });
        if proc {
            // A fresh /proc for the PID namespace.
            steps.push(Step::Proc(cs("/proc")));
            for part in PROC_READ_ONLY {
                steps.push(Step::ReadOnlySelf(cs(&format!("/proc/{part}"))));
            }
        } else {
            steps.push(Step::Tmpfs {
                target: cs("/proc"),
                options: cs("mode=555"),
                read_only: true,
            });
        }

        // Hidden directories that hold a root get their empty tmpfs first
        // (the roots are attached on directories made in it) and are made
        // read-only last; the others, and hidden files, go over everything.
        let holds_root = |h: &PathBuf| roots.iter().any(|r| r.path.starts_with(h));
        let (early, late): (Vec<&PathBuf>, Vec<&PathBuf>) = hiding
            .pinned
            .iter()
            .partition(|h| h.is_dir() && holds_root(h));
        for dir in &early {
            steps.push(Step::Tmpfs {
                target: c(dir)?,
                options: cs("mode=755"),
                read_only: false,
            });
        }

        // The workspace and writable roots, shortest first so that nested
        // roots land on top of their parents.
        let mut roots = roots.to_vec();
        roots.sort_by_key(|r| r.path.as_os_str().len());
        for root in &roots {
            let index = source(&root.path, true)?;
            // Directories leading to a root under a private tmpfs must be
            // made there; elsewhere they already exist.
            let mut prefixes: Vec<&Path> = root.path.ancestors().collect();
            prefixes.reverse();
            for prefix in prefixes.iter().skip(1) {
                steps.push(Step::Mkdir(c(prefix)?));
            }
            let mut attrs = ATTR_NOSUID | ATTR_NODEV;
            if !root.writable {
                attrs |= ATTR_RDONLY;
            }
            steps.push(Step::Attach {
                source: index,
                target: c(&root.path)?,
                attrs,
            });
        }
        for path in protected {
            let index = source(path, false)?;
            steps.push(Step::Attach {
                source: index,
                target: c(path)?,
                attrs: ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV,
            });
        }
        for path in late {
            if path.is_dir() {
                steps.push(Step::Tmpfs {
                    target: c(path)?,
                    options: cs("mode=755"),
                    read_only: true,
                });
            } else {
                if !Path::new("/dev/null").exists() {
                    return Err(SandboxError::setup(format!(
                        "{} cannot be hidden: there is no /dev/null to show in its place",
                        path.display()
                    )));
                }
                // A clone of its own: attaching a clone moves it.
                let null = source(Path::new("/dev/null"), true)?;
                steps.push(Step::Attach {
                    source: null,
                    target: c(path)?,
                    attrs: ATTR_RDONLY | ATTR_NOSUID | ATTR_NOEXEC,
                });
            }
        }
        for dir in &early {
            steps.push(Step::SetAttr {
                path: c(dir)?,
                set: ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV,
            });
        }
        if !tmp_writable {
            steps.push(Step::SetAttr {
                path: cs("/tmp"),
                set: ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV,
            });
        }
        if sources.len() > MAX_CLONES {
            return Err(SandboxError::setup(format!(
                "the sandbox can attach at most {MAX_CLONES} writable roots, protected paths and devices; this policy needs {}",
                sources.len()
            )));
        }
        Ok(View {
            sources,
            steps,
            cwd: c(cwd)?,
        })
    }

    /// Builds the view. Runs in the child, in new user, mount and PID
    /// namespaces, before `exec`; async-signal-safe.
    pub(crate) fn apply(&self) -> io::Result<()> {
        sys::make_private()?;
        let mut fds: [c_int; MAX_CLONES] = [-1; MAX_CLONES];
        for (fd, src) in fds.iter_mut().zip(&self.sources) {
            *fd = sys::clone_tree(&src.path, src.follow)?;
        }
        sys::set_attr(c"/", ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV, 0, true)?;
        for step in &self.steps {
            match step {
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
                    sys::attach(fds[*source], target)?;
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
                        sys::attach(fd, path)?;
                        // SAFETY: closing our own descriptor.
                        unsafe { libc::close(fd) };
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
                    if mounted.is_ok() {
                        for (source, mount) in submounts {
                            sys::attach(fds[*source], mount)?;
                            sys::set_attr(mount, ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV, 0, true)?;
                        }
                    }
                }
                Step::SetAttr { path, set } => sys::set_attr(path, *set, 0, false)?,
            }
        }
        for fd in fds.iter().take(self.sources.len()) {
            // SAFETY: closing descriptors we opened.
            unsafe { libc::close(*fd) };
        }
        sys::chdir(&self.cwd)
    }
}
