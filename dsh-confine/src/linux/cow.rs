//! A copy-on-write view of one directory for an unconfined shell: the
//! directory (the *base*) shown at its own path through an overlay whose
//! upper layer is the owner's, in a mount and PID namespace of the shell's
//! own.
//!
//! The chain, after the PTY backend's fork (raw system calls only):
//!
//! 1. the *keeper* (the backend's child, the terminal's session leader)
//!    unshares a mount and a PID namespace — and, unless it is root, a user
//!    namespace mapping its uid and gid to themselves —, makes every mount
//!    private, mounts the overlay over the base (`userxattr` in a user
//!    namespace), and an empty read-only tmpfs over each hidden directory
//!    (the layers' directory: no view reaches a layer), then forks;
//! 2. *init* (pid 1 of the new PID namespace) mounts a `/proc` of that
//!    namespace, forks the shell, and reaps until the shell ends, ending
//!    with its status, as the keeper then does;
//! 3. the *shell* (pid 2) returns from the hook, so the backend `exec`s it.
//!    As root it first drops the capabilities that would undo the view
//!    (`CAP_SYS_ADMIN`: unmount; `CAP_DAC_READ_SEARCH`: open by handle;
//!    `CAP_SYS_PTRACE`, `CAP_SYS_MODULE`, `CAP_SYS_RAWIO`, `CAP_MKNOD`,
//!    `CAP_BPF`) from its bounding set; as another user it has no
//!    capability once it `exec`s. Either way the mounts it inherits came
//!    from a namespace it does not own: a nested `unshare -Urm` finds them
//!    locked together, so nothing can unmount the overlay or the tmpfs
//!    over the layers.
//!
//! The host reaches the view's files through `/proc/<init>/root`
//! ([`CopyOnWriteView`]'s docs).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::sys;
use crate::Error;

/// The capabilities a root shell in a view gives up (see the module docs).
const ROOT_DROPS: [u32; 7] = [
    21, // CAP_SYS_ADMIN
    2,  // CAP_DAC_READ_SEARCH
    19, // CAP_SYS_PTRACE
    16, // CAP_SYS_MODULE
    17, // CAP_SYS_RAWIO
    27, // CAP_MKNOD
    39, // CAP_BPF
];

/// The copy-on-write view of one owner: a [`dsh_pty::PreExec`] hook that
/// runs the shell in a mount and PID namespace of its own, where `base`
/// is an overlay of `base` (read) and the owner's `upper` layer (every
/// write, and a whiteout for every deletion). Nothing the shell does
/// reaches `base`, another owner's layer, or processes outside its PID
/// namespace.
///
/// Add it before any other confinement hook: a sandbox's namespaces are
/// then made inside the view's, and see the overlay as the workspace.
///
/// The overlay lives as long as the shell's init. A host reads and writes
/// the view's files through [`CopyOnWriteView::root_of`], which opens the
/// base's path in the namespace of the session's process.
#[derive(Debug)]
pub struct CopyOnWriteView {
    flags: libc::c_int,
    /// `Some` when a user namespace is made (not root).
    maps: Option<(CString, CString)>,
    base: CString,
    options: CString,
    hide: Vec<CString>,
    /// Entered again in the shell: a directory opened before the mount
    /// is the base's own, beneath the overlay.
    cwd: CString,
    root: bool,
}

impl CopyOnWriteView {
    /// The view of `base` with the owner's `upper` and `work` layers
    /// (directories on one filesystem, outside `base`), hiding each of
    /// `hide` (the directory of every owner's layers) behind an empty
    /// read-only tmpfs; the shell starts in `cwd`, entered again in the
    /// view. Paths are used as given: make them canonical.
    pub fn new(
        base: &Path,
        upper: &Path,
        work: &Path,
        hide: &[PathBuf],
        cwd: &Path,
    ) -> Result<Self, Error> {
        // SAFETY: getters without preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        // Root of the host: uid 0 in the initial user namespace (whose
        // map is the whole identity). Root of a user namespace (a rootless
        // container) makes one of its own, as any other user.
        let root = uid == 0
            && std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|map| {
                map.split_ascii_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]
            });
        let c = |p: &Path, what: &str| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| Error::setup(format!("the {what} path holds a NUL byte")))
        };
        for (p, what) in [(base, "base"), (upper, "upper layer"), (work, "work")] {
            // Overlay's options are comma-separated, `:` separates lower
            // layers, and `\` escapes: refuse rather than escape.
            if p.as_os_str().as_bytes().iter().any(|b| b",:\\".contains(b)) {
                return Err(Error::setup(format!(
                    "the {what} path {} holds a comma, colon or backslash, which overlayfs options cannot carry",
                    p.display()
                )));
            }
        }
        // No redirects or metadata-only copies: the host reads the upper
        // layer as plain files, whiteouts and opaque marks.
        let mut options = format!(
            "lowerdir={},upperdir={},workdir={},redirect_dir=nofollow,metacopy=off",
            base.display(),
            upper.display(),
            work.display()
        );
        if !root {
            options.push_str(",userxattr");
        }
        let options = CString::new(options).map_err(|_| Error::setup("overlay options"))?;
        let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWPID;
        let maps = if root {
            None
        } else {
            flags |= libc::CLONE_NEWUSER;
            let map =
                |id: u32| CString::new(format!("{id} {id} 1")).map_err(|_| Error::setup("uid map"));
            Some((map(uid)?, map(gid)?))
        };
        Ok(CopyOnWriteView {
            flags,
            maps,
            base: c(base, "base")?,
            options,
            hide: hide
                .iter()
                .map(|h| c(h, "hidden"))
                .collect::<Result<_, _>>()?,
            cwd: c(cwd, "working directory")?,
            root,
        })
    }

    /// Opens the root directory of the view of the session whose first
    /// process (the keeper) is `session_pid`, as its shell sees it:
    /// `/proc/<shell>/root`, for [`Opener::in_root`](crate::Opener::in_root).
    /// Paths resolved beneath it with `RESOLVE_IN_ROOT` are the view's.
    ///
    /// The shell is init's first child; with `confined` (a
    /// [`Confinement`](crate::Confinement) with namespaces hooked after the
    /// view) it is two processes further (the confinement's supervisor,
    /// then its init), and the root is that of the confined view: the
    /// overlay with the sandbox's walls (read-only mounts, hidden paths,
    /// private `/tmp`) on top.
    pub fn root_of(session_pid: i32, confined: bool) -> io::Result<OwnedFd> {
        use std::os::unix::fs::OpenOptionsExt;
        let first_child = |pid: i32| -> io::Result<i32> {
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))?
                .split_ascii_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
        };
        let depth = if confined { 4 } else { 2 };
        let mut shell = session_pid;
        for _ in 0..depth {
            shell = first_child(shell)?;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(format!("/proc/{shell}/root"))?;
        Ok(OwnedFd::from(file))
    }

    /// The keeper's part: the namespaces and the mounts.
    fn enter(&self) -> io::Result<()> {
        sys::unshare(self.flags)?;
        if let Some((uid_map, gid_map)) = &self.maps {
            // A host that is not dumpable forked this process not
            // dumpable: its `/proc/self` is then root's, and its maps
            // cannot be written. Dumpable for that long only: the keeper
            // is a copy of the host's memory.
            sys::dumpable();
            let written = sys::write_file(c"/proc/self/setgroups", b"deny")
                .and_then(|()| sys::write_file(c"/proc/self/uid_map", uid_map.as_bytes()))
                .and_then(|()| sys::write_file(c"/proc/self/gid_map", gid_map.as_bytes()));
            sys::not_dumpable();
            written?;
        }
        sys::make_private()?;
        mount_data(c"overlay", &self.base, 0, &self.options)?;
        for hidden in &self.hide {
            mount_data(
                c"tmpfs",
                hidden,
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                c"size=0,nr_inodes=1,mode=0",
            )?;
        }
        Ok(())
    }
}

/// `mount(2)` of a filesystem of type `fstype` at `target` with `data`.
fn mount_data(
    fstype: &std::ffi::CStr,
    target: &std::ffi::CStr,
    flags: libc::c_ulong,
    data: &std::ffi::CStr,
) -> io::Result<()> {
    sys::mount_fs(fstype, target, flags, Some(data))
}

// SAFETY: `pre_exec` only makes raw system calls on data prepared in
// `new` (see the module docs); it does not allocate, lock or log.
unsafe impl dsh_pty::PreExec for CopyOnWriteView {
    fn pre_exec(&self) -> io::Result<()> {
        self.enter()?;
        let report = sys::pipe()?;
        let init = sys::fork()?;
        if init > 0 {
            // The keeper: every descriptor closed (the backend's error
            // pipe among them: `spawn` returns when the shell `exec`s),
            // then it ends as init does.
            drop(report.1);
            sys::close_all_except(&[report.0.as_raw_fd()]);
            let status = sys::wait(init).map_or(libc::EXIT_FAILURE << 8, |(_, s)| s);
            let mut signal = [0u8];
            sys::read_once(report.0.as_fd(), &mut signal);
            sys::exit_like(status, signal[0].into());
        }
        // Init: dies with the keeper; a failure here is the hook's error.
        sys::die_with_parent();
        drop(report.0);
        sys::mount_fs(
            c"proc",
            c"/proc",
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        )?;
        let shell = sys::fork()?;
        if shell > 0 {
            super::be_init(shell, report.1);
        }
        drop(report.1);
        sys::chdir(&self.cwd)?;
        if self.root {
            for cap in ROOT_DROPS {
                // SAFETY: a plain prctl.
                sys::check_int(unsafe {
                    libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0)
                })?;
            }
        }
        Ok(())
    }
}
