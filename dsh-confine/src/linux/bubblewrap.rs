//! The same confinement with bubblewrap building the namespaces and the
//! filesystem view: flags equivalent to [`View`](super::view::View), the
//! same seccomp programs (handed over as `--add-seccomp-fd`), the same core
//! limit. Landlock is not applied: bubblewrap's mounts would be refused
//! under it.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::{seccomp, sys};
use crate::{Enforcement, Error, Policy};

/// The [`dsh_pty::PreExec`] hook of a bubblewrap command line: the seccomp
/// programs, one memory file each, whose descriptors the command line
/// names (`--add-seccomp-fd`), made inheritable in the child; and the core
/// limit.
#[derive(Debug)]
pub struct Handoff {
    fds: Vec<OwnedFd>,
}

fn memfd(program: &[libc::sock_filter]) -> io::Result<OwnedFd> {
    // SAFETY: a constant name; the descriptor is owned right away.
    let fd = unsafe { libc::memfd_create(c"dsh-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let bytes: Vec<u8> = program
        .iter()
        .flat_map(|f| {
            let mut b = Vec::with_capacity(8);
            b.extend_from_slice(&f.code.to_ne_bytes());
            b.push(f.jt);
            b.push(f.jf);
            b.extend_from_slice(&f.k.to_ne_bytes());
            b
        })
        .collect();
    let mut file = std::fs::File::from(fd);
    file.write_all(&bytes)?;
    Ok(OwnedFd::from(file))
}

/// A bubblewrap command line as it is made.
struct Args(Vec<String>);

impl Args {
    fn push(&mut self, items: &[&str]) {
        self.0.extend(items.iter().map(|s| (*s).to_owned()));
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// The namespaces, the read-only root, the private `/tmp`, the network,
/// the empty socket directories, `/dev` and `/proc`.
fn namespaces_and_mounts(args: &mut Args, policy: &Policy) {
    args.push(&[
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup",
        // Its `PR_SET_PDEATHSIG` fires when the thread that forked
        // bubblewrap exits: dsh-pty forks on threads that never end (see
        // its `blocking` module), so this means "when the host dies".
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
    ]);
    if let Some(size) = policy.tmp_limits.size {
        args.push(&["--size", &size.to_string()]);
    }
    args.push(&["--tmpfs", "/tmp"]);
    if !policy.network {
        args.push(&["--unshare-net"]);
    }
    for dir in ["/run", "/var/run"] {
        if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            args.push(&["--tmpfs", dir, "--remount-ro", dir]);
        }
    }
    // `--proc` covers `/proc/sys` only when `access(W_OK)` on the directory
    // succeeds, which it does not for root (mode 0555), leaving sysctls
    // such as `kernel/core_pattern` writable by a caller whose uid 0 is
    // mapped to the host's. Cover it in every case.
    args.push(&[
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
    ]);
}

/// The roots, the protected paths and the hidden paths (bubblewrap applies
/// its flags in order); whether a protected path was bound.
fn roots_and_hidden(args: &mut Args, policy: &Policy) -> bool {
    let mut roots: Vec<(PathBuf, bool)> = policy.roots.iter().map(|r| (r.clone(), true)).collect();
    if !policy.roots.contains(&policy.workspace) {
        roots.push((policy.workspace.clone(), false));
    }
    roots.extend(policy.readable.iter().map(|r| (r.clone(), false)));
    roots.sort_by_key(|(r, _)| r.as_os_str().len());
    // Bubblewrap hides what exists at start, by mounts over those entries
    // (see docs/sandbox.md: a host's replacement of one shows through).
    let attached: Vec<PathBuf> = roots.iter().map(|(r, _)| r.clone()).collect();
    let hidden = super::hiding::plan(&policy.hidden, &attached, false, &[], &[]).pinned;
    let holds_root = |hidden: &Path| roots.iter().any(|(r, _)| r.starts_with(hidden));
    for hidden in &hidden {
        if hidden.is_dir() && holds_root(hidden) {
            args.push(&["--tmpfs", &path(hidden)]);
        }
    }
    for (root, rw) in &roots {
        let flag = if *rw { "--bind" } else { "--ro-bind" };
        args.push(&[flag, &path(root), &path(root)]);
    }
    let protected: Vec<&PathBuf> = policy
        .protected
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .filter(|p| policy.roots.iter().any(|r| p.starts_with(r)))
        .collect();
    for p in &protected {
        args.push(&["--ro-bind", &path(p), &path(p)]);
    }
    // Hidden paths, as in the built-in view: a directory holding a root
    // got its tmpfs before the roots were bound, the others get theirs
    // now, and all are made read-only; a hidden file shows /dev/null.
    for hidden in &hidden {
        if hidden.is_dir() {
            if !holds_root(hidden) {
                args.push(&["--tmpfs", &path(hidden)]);
            }
            args.push(&["--remount-ro", &path(hidden)]);
        } else {
            args.push(&["--ro-bind", "/dev/null", &path(hidden)]);
        }
    }
    !protected.is_empty()
}

/// The command line that runs `argv` confined by the bubblewrap program
/// `bwrap` as `policy` says (with namespaces: a policy without them is
/// not bubblewrap's), the hook the spawn runs before `exec`ing it, and
/// what it enforces: flags equivalent to the built-in view, the same
/// seccomp programs, the same core limit; no Landlock, no socket
/// supervisor.
pub fn bubblewrap_command(
    bwrap: &Path,
    policy: &Policy,
    argv: &[String],
) -> Result<(Vec<String>, Handoff, Enforcement), Error> {
    if policy.egress_port.is_some() {
        return Err(Error::setup(
            "bubblewrap cannot hand an egress proxy's listener to the host (use the built-in \
             namespaces)",
        ));
    }
    let programs = seccomp::filters(true, policy.network)?;
    let fds = programs
        .programs
        .iter()
        .map(|p| memfd(p))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| Error::setup_from("seccomp for bubblewrap", e))?;
    let mut args = Args(vec![path(bwrap)]);
    namespaces_and_mounts(&mut args, policy);
    let protected = roots_and_hidden(&mut args, policy);
    if !policy.tmp_writable {
        args.push(&["--remount-ro", "/tmp"]);
    }
    args.push(&["--cap-drop", "ALL"]);
    for fd in &fds {
        args.push(&["--add-seccomp-fd", &fd.as_raw_fd().to_string()]);
    }
    args.push(&["--chdir", &path(&policy.cwd), "--"]);
    let mut args = args.0;
    args.extend(argv.iter().cloned());
    let enforcement = Enforcement {
        namespaces: true,
        filesystem: true,
        capabilities_dropped: true,
        seccomp: true,
        network_isolated: !policy.network,
        git_read_only: policy.workspace_write && protected,
        landlock_abi: super::landlock::landlock_abi(),
        ..Enforcement::default()
    };
    Ok((args, Handoff { fds }, enforcement))
}

// SAFETY: `pre_exec` only calls `setrlimit`, `lseek` and `fcntl` on
// descriptors opened before the fork.
unsafe impl dsh_pty::PreExec for Handoff {
    fn pre_exec(&self) -> io::Result<()> {
        sys::no_core_dumps()?;
        for fd in &self.fds {
            // SAFETY: plain syscalls on descriptors this value owns.
            unsafe {
                if libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_SET) < 0
                    || libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) < 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_match_the_built_in_view() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(ws.join(".git")).unwrap();
        let policy = Policy::new(ws.clone())
            .workspace_write(true)
            .writable_roots(vec![ws.clone()])
            .protected(vec![ws.join(".git"), ws.join("HEAD")]);
        let (argv, handoff, enforcement) =
            bubblewrap_command(Path::new("bwrap"), &policy, &["bash".to_owned()]).unwrap();
        let line = argv.join(" ");
        let ws = ws.display();
        for expected in [
            "--unshare-user --unshare-pid --unshare-ipc --unshare-uts --unshare-cgroup",
            "--unshare-net",
            "--ro-bind / / --tmpfs /tmp",
            "--proc /proc --ro-bind /proc/sys /proc/sys",
            &format!("--bind {ws} {ws}"),
            &format!("--ro-bind {ws}/.git {ws}/.git"),
            "--remount-ro /tmp --cap-drop ALL",
            &format!("--chdir {ws} -- bash"),
        ] {
            assert!(line.contains(expected), "{expected:?} not in {line}");
        }
        assert!(
            !line.contains("HEAD"),
            "a missing protected path is not bound"
        );
        assert_eq!(line.matches("--add-seccomp-fd").count(), handoff.fds.len());
        assert!(enforcement.namespaces && enforcement.git_read_only && !enforcement.landlock);
    }
}
