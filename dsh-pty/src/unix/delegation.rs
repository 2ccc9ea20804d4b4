//! [`CgroupParent::Auto`](crate::CgroupParent::Auto): the cgroup v2
//! directory this process runs in, when it was delegated to it, taken as the
//! parent of the sessions' cgroups.
//!
//! "Delegated" is read from the kernel's model of delegation
//! (Documentation/admin-guide/cgroup-v2.rst, "Delegation") and systemd's
//! (`Delegate=yes`): a process other than root may use its cgroup when its
//! uid owns the directory, its `cgroup.procs` and its
//! `cgroup.subtree_control` on a writable cgroup2 mount (what systemd does
//! for a unit of a user's manager, or for a system unit with `User=`). Root
//! owns every cgroup, so for root ownership says nothing: its cgroup counts
//! only when systemd marked it delegated (the `trusted.delegate` or
//! `user.delegate` attribute, systemd 251 and later) or when it is the root
//! of a cgroup namespace of the process's own (a container's).
//!
//! Taking it: v2 lets a cgroup hand controllers to its children only while
//! no process lives in it, so the process moves itself (every thread) into
//! a leaf `dsh-PID-self`, turns the controllers on in the delegated
//! cgroup's `cgroup.subtree_control`, and the sessions' cgroups are made
//! beside the leaf. That happens once per process; the leaf stays (empty
//! once the process exits) and goes with the delegated cgroup.

use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::cgroup::{Controller, MOUNTINFO, parse_mountinfo};

/// The inode number of the initial cgroup namespace (the kernel's
/// `PROC_CGROUP_INIT_INO`): a process whose `/proc/self/ns/cgroup` has
/// another runs in a cgroup namespace of its own.
const INITIAL_CGROUP_NS: u64 = 0xEFFF_FFFB;

/// What is read to decide: this process's view, or a fake one in tests.
#[derive(Debug, Clone)]
pub(crate) struct View {
    /// `/proc/self/mountinfo`.
    pub(crate) mountinfo: String,
    /// `/proc/self/cgroup`.
    pub(crate) self_cgroup: String,
    /// What the mount points are relative to (`/`; a temp dir in tests).
    pub(crate) fs_root: PathBuf,
    /// The effective uid.
    pub(crate) uid: u32,
    /// In the initial cgroup namespace (the host's).
    pub(crate) initial_cgroupns: bool,
}

impl View {
    /// This process's.
    fn this() -> Result<View, NotDelegated> {
        let read = |path: &str| {
            fs::read_to_string(path).map_err(|source| NotDelegated::Read {
                path: PathBuf::from(path),
                source,
            })
        };
        let ns = "/proc/self/ns/cgroup";
        let initial_cgroupns = fs::metadata(ns)
            .map_err(|source| NotDelegated::Read {
                path: PathBuf::from(ns),
                source,
            })?
            .ino()
            == INITIAL_CGROUP_NS;
        Ok(View {
            mountinfo: read(MOUNTINFO)?,
            self_cgroup: read("/proc/self/cgroup")?,
            fs_root: PathBuf::from("/"),
            // SAFETY: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
            initial_cgroupns,
        })
    }
}

/// A cgroup delegated to this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delegated {
    /// The cgroup2 mount point.
    pub(crate) mount: PathBuf,
    /// The delegated cgroup's directory, beneath `mount`.
    pub(crate) dir: PathBuf,
}

/// Why this process's cgroup cannot be used as the sessions' parent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotDelegated {
    #[error("no cgroup v2 hierarchy is mounted")]
    NoV2,
    #[error("/proc/self/cgroup names no cgroup v2 directory for this process")]
    NotInV2,
    #[error("this process's cgroup {cgroup} is outside the cgroup2 mount at {}", mount.display())]
    Outside { cgroup: String, mount: PathBuf },
    #[error("the cgroup2 hierarchy at {} is mounted read-only", mount.display())]
    ReadOnly { mount: PathBuf },
    #[error(
        "{} belongs to uid {owner}, not to this process's uid {uid}",
        path.display()
    )]
    NotOwned { path: PathBuf, owner: u32, uid: u32 },
    #[error(
        "this process runs as root in the cgroup {cgroup}, which systemd did not mark delegated (no `trusted.delegate` attribute) and which is not the root of a cgroup namespace of its own"
    )]
    RootUnmarked { cgroup: String },
    #[error(
        "the cgroup {cgroup} does not offer the {} controller{} (its cgroup.controllers: {offered:?})",
        missing.join(", "),
        if missing.len() == 1 { "" } else { "s" }
    )]
    Controllers {
        cgroup: String,
        missing: Vec<&'static str>,
        offered: String,
    },
    #[error("{} could not be read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{what} {} failed: {source}", path.display())]
    Take {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the delegated cgroup {} still holds other processes (pids {}), and cgroup v2 gives no controllers to the children of a cgroup with processes: start dsh alone in it (`exec` it, or move those processes out)",
        dir.display(),
        pids.join(", ")
    )]
    Crowded { dir: PathBuf, pids: Vec<String> },
}

/// Whether `view`'s cgroup is delegated to it and offers `needed`; reads,
/// never writes.
pub(crate) fn inspect(view: &View, needed: &[Controller]) -> Result<Delegated, NotDelegated> {
    let mounts = parse_mountinfo(&view.mountinfo);
    let mount = mounts.iter().find(|m| m.v2).ok_or(NotDelegated::NoV2)?;
    let cgroup = view
        .self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or(NotDelegated::NotInV2)?
        .trim_end();
    let rel = Path::new(cgroup)
        .strip_prefix(&mount.root)
        .map_err(|_| NotDelegated::Outside {
            cgroup: cgroup.to_owned(),
            mount: mount.point.clone(),
        })?;
    let point = view
        .fs_root
        .join(mount.point.strip_prefix("/").unwrap_or(&mount.point));
    let dir = point.join(rel);
    if mount.read_only {
        return Err(NotDelegated::ReadOnly {
            mount: mount.point.clone(),
        });
    }
    if view.uid == 0 {
        let own_namespace_root = !view.initial_cgroupns && cgroup == "/";
        if !own_namespace_root && !marked(&dir) {
            return Err(NotDelegated::RootUnmarked {
                cgroup: cgroup.to_owned(),
            });
        }
    } else {
        for path in [
            dir.clone(),
            dir.join("cgroup.procs"),
            dir.join("cgroup.subtree_control"),
        ] {
            let owner = fs::metadata(&path)
                .map_err(|source| NotDelegated::Read {
                    path: path.clone(),
                    source,
                })?
                .uid();
            if owner != view.uid {
                return Err(NotDelegated::NotOwned {
                    path,
                    owner,
                    uid: view.uid,
                });
            }
        }
    }
    offers(&dir, cgroup, needed)?;
    Ok(Delegated { mount: point, dir })
}

/// Fails unless `dir`'s `cgroup.controllers` lists every one of `needed`.
fn offers(dir: &Path, cgroup: &str, needed: &[Controller]) -> Result<(), NotDelegated> {
    let path = dir.join("cgroup.controllers");
    let offered = fs::read_to_string(&path).map_err(|source| NotDelegated::Read {
        path: path.clone(),
        source,
    })?;
    let listed: Vec<&str> = offered.split_whitespace().collect();
    let missing: Vec<&'static str> = needed
        .iter()
        .map(|c| c.name())
        .filter(|name| !listed.contains(name))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(NotDelegated::Controllers {
            cgroup: cgroup.to_owned(),
            missing,
            offered: offered.trim().to_owned(),
        })
    }
}

/// systemd's mark on a cgroup it delegated: `trusted.delegate` (readable by
/// root only) or `user.delegate` set to `1`.
fn marked(dir: &Path) -> bool {
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    [c"trusted.delegate", c"user.delegate"].iter().any(|name| {
        let mut value = [0u8; 8];
        // SAFETY: a NUL-terminated path and name, and a buffer of the
        // length given.
        let n = unsafe {
            libc::getxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        n == 1 && value[0] == b'1'
    })
}

/// Moves this process into a leaf of `found` and turns `needed` on for the
/// delegated cgroup's children.
fn take(found: &Delegated, needed: &[Controller]) -> Result<(), NotDelegated> {
    let leaf = found.dir.join(format!("dsh-{}-self", std::process::id()));
    match fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(NotDelegated::Take {
                what: "making the leaf cgroup",
                path: leaf,
                source,
            });
        }
    }
    let procs = leaf.join("cgroup.procs");
    write(&procs, "0").map_err(|source| NotDelegated::Take {
        what: "moving this process into",
        path: procs.clone(),
        source,
    })?;
    tracing::info!(leaf = %leaf.display(), "moved into a leaf of the delegated cgroup");
    enable(&found.dir, needed)
}

/// Turns `needed` on in `dir`'s `cgroup.subtree_control`.
fn enable(dir: &Path, needed: &[Controller]) -> Result<(), NotDelegated> {
    let control = dir.join("cgroup.subtree_control");
    let on = fs::read_to_string(&control).map_err(|source| NotDelegated::Read {
        path: control.clone(),
        source,
    })?;
    let missing = super::cgroup::to_enable(&on, needed);
    if missing.is_empty() {
        return Ok(());
    }
    match write(&control, &missing.join(" ")) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(NotDelegated::Crowded {
            dir: dir.to_owned(),
            pids: fs::read_to_string(dir.join("cgroup.procs"))
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
        }),
        Err(source) => Err(NotDelegated::Take {
            what: "turning controllers on in",
            path: control,
            source,
        }),
    }
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
}

/// The delegated cgroup this process took, once it has.
static TAKEN: Mutex<Option<Delegated>> = Mutex::new(None);

/// This process's delegated cgroup offering `needed`: only inspected, or
/// (`take`) taken, the process moving into its leaf the first time.
pub(crate) fn resolve(needed: &[Controller], take_it: bool) -> Result<Delegated, NotDelegated> {
    let mut taken = TAKEN.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = taken.as_ref() {
        let cgroup = found.dir.display().to_string();
        offers(&found.dir, &cgroup, needed)?;
        if take_it {
            enable(&found.dir, needed)?;
        }
        return Ok(found.clone());
    }
    let found = inspect(&View::this()?, needed)?;
    if take_it {
        take(&found, needed)?;
        *taken = Some(found.clone());
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake host: a cgroup2 mount at /sys/fs/cgroup (its root `/`) and
    /// this process in `cgroup`, whose directory exists under a temp dir
    /// with its control files; the files belong to the test's user (made
    /// 65534's when the test runs as root) and the view's uid is theirs.
    struct Fake {
        dir: tempfile::TempDir,
        view: View,
    }

    const MOUNTINFO_V2: &str = "25 30 0:22 / /proc rw,nosuid - proc proc rw\n\
        31 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";

    fn fake(cgroup: &str, controllers: &str) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let cg = dir
            .path()
            .join("sys/fs/cgroup")
            .join(cgroup.trim_start_matches('/'));
        fs::create_dir_all(&cg).unwrap();
        for (file, text) in [
            ("cgroup.procs", "4242\n"),
            ("cgroup.subtree_control", ""),
            ("cgroup.controllers", controllers),
        ] {
            fs::write(cg.join(file), text).unwrap();
        }
        // SAFETY: geteuid cannot fail.
        let mut uid = unsafe { libc::geteuid() };
        if uid == 0 {
            uid = 65534;
            for path in [
                cg.clone(),
                cg.join("cgroup.procs"),
                cg.join("cgroup.subtree_control"),
            ] {
                std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
            }
        }
        let view = View {
            mountinfo: MOUNTINFO_V2.to_owned(),
            self_cgroup: format!("0::{cgroup}\n"),
            fs_root: dir.path().to_owned(),
            uid,
            initial_cgroupns: true,
        };
        Fake { dir, view }
    }

    const SCOPE: &str = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope";

    #[test]
    fn a_users_own_cgroup_with_the_controllers_is_delegated() {
        let f = fake(SCOPE, "cpu memory pids\n");
        let found = inspect(&f.view, &[Controller::Memory, Controller::Pids]).unwrap();
        assert_eq!(found.mount, f.dir.path().join("sys/fs/cgroup"));
        assert_eq!(
            found.dir,
            f.dir.path().join("sys/fs/cgroup").join(&SCOPE[1..])
        );
    }

    #[test]
    fn a_cgroup_another_uid_owns_is_not() {
        let mut f = fake(SCOPE, "cpu memory pids\n");
        let owner = f.view.uid;
        f.view.uid = owner + 1;
        let err = inspect(&f.view, &[Controller::Memory]).unwrap_err();
        let dir = f.dir.path().join("sys/fs/cgroup").join(&SCOPE[1..]);
        assert_eq!(
            err.to_string(),
            format!(
                "{} belongs to uid {owner}, not to this process's uid {}",
                dir.display(),
                owner + 1
            )
        );
    }

    #[test]
    fn an_owned_cgroup_whose_control_files_are_not_is_not() {
        // The kernel's rule: the directory, cgroup.procs and
        // cgroup.subtree_control must all be the delegatee's.
        let f = fake(SCOPE, "memory\n");
        let procs = f
            .dir
            .path()
            .join("sys/fs/cgroup")
            .join(&SCOPE[1..])
            .join("cgroup.procs");
        fs::remove_file(&procs).unwrap();
        let err = inspect(&f.view, &[Controller::Memory]).unwrap_err();
        assert!(
            matches!(&err, NotDelegated::Read { path, .. } if *path == procs),
            "{err}"
        );
    }

    #[test]
    fn a_controller_the_cgroup_does_not_offer_is_named() {
        let f = fake(SCOPE, "cpu memory\n");
        let err = inspect(
            &f.view,
            &[Controller::Pids, Controller::Memory, Controller::Cpu],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the cgroup {SCOPE} does not offer the pids controller (its cgroup.controllers: \"cpu memory\")"
            )
        );
        // Nothing asked, nothing missing.
        assert!(inspect(&f.view, &[]).is_ok());
    }

    #[test]
    fn a_read_only_mount_or_no_cgroup2_is_refused() {
        let mut f = fake(SCOPE, "memory\n");
        f.view.mountinfo =
            MOUNTINFO_V2.replace("/sys/fs/cgroup rw,nosuid", "/sys/fs/cgroup ro,nosuid");
        assert_eq!(
            inspect(&f.view, &[Controller::Memory])
                .unwrap_err()
                .to_string(),
            "the cgroup2 hierarchy at /sys/fs/cgroup is mounted read-only"
        );
        // cgroup v1 only (the v1 lines of /proc/self/cgroup, no `0::`).
        f.view.mountinfo =
            "32 31 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n".to_owned();
        f.view.self_cgroup = "4:memory:/\n".to_owned();
        assert!(matches!(
            inspect(&f.view, &[Controller::Memory]),
            Err(NotDelegated::NoV2)
        ));
    }

    #[test]
    fn a_cgroup_outside_a_bind_mounted_subtree_is_refused() {
        let mut f = fake(SCOPE, "memory\n");
        f.view.mountinfo = MOUNTINFO_V2.replace("0:26 / /sys", "0:26 /system.slice /sys");
        let err = inspect(&f.view, &[Controller::Memory]).unwrap_err();
        assert!(matches!(err, NotDelegated::Outside { .. }), "{err}");
    }

    #[test]
    fn root_needs_systemds_mark_or_a_cgroup_namespace_of_its_own() {
        let mut f = fake(SCOPE, "memory pids\n");
        f.view.uid = 0;
        // Root owns every cgroup: owning says nothing.
        assert_eq!(
            inspect(&f.view, &[Controller::Memory])
                .unwrap_err()
                .to_string(),
            format!(
                "this process runs as root in the cgroup {SCOPE}, which systemd did not mark delegated (no `trusted.delegate` attribute) and which is not the root of a cgroup namespace of its own"
            )
        );
        // The host's root cgroup is not a container's.
        let mut host = fake("/", "memory pids\n");
        host.view.uid = 0;
        assert!(matches!(
            inspect(&host.view, &[Controller::Memory]),
            Err(NotDelegated::RootUnmarked { .. })
        ));
        // A container's: the root of a cgroup namespace of its own.
        host.view.initial_cgroupns = false;
        let found = inspect(&host.view, &[Controller::Memory, Controller::Pids]).unwrap();
        assert_eq!(found.dir, host.dir.path().join("sys/fs/cgroup"));
        // systemd's mark (the unprivileged one a test can set on its own
        // file) on a scope with Delegate=yes.
        let dir = f.dir.path().join("sys/fs/cgroup").join(&SCOPE[1..]);
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: NUL-terminated path and name, a one-byte value.
        let rc = unsafe {
            libc::setxattr(
                path.as_ptr(),
                c"user.delegate".as_ptr(),
                b"1".as_ptr().cast(),
                1,
                0,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        assert_eq!(inspect(&f.view, &[Controller::Memory]).unwrap().dir, dir);
    }
}
