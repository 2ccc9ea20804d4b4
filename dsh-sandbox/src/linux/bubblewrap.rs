//! The same confinement with bubblewrap building the namespaces and the
//! filesystem view: flags equivalent to [`View`](super::view::View), the
//! same seccomp programs (handed over as `--add-seccomp-fd`), the same core
//! limit. Landlock is not applied: bubblewrap's mounts would be refused
//! under it.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::{Spec, seccomp, sys};
use crate::{Enforcement, SandboxError, SandboxMode};

/// The seccomp programs, one memory file each, passed to bubblewrap.
#[derive(Debug)]
pub(crate) struct Handoff {
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

/// The command line that runs `argv` confined by `bwrap`, and what it
/// enforces.
pub(crate) fn command(
    bwrap: &Path,
    spec: &Spec<'_>,
    argv: &[String],
) -> Result<(Vec<String>, Handoff, Enforcement), SandboxError> {
    let rules = spec.rules;
    let writable = rules.mode == SandboxMode::WorkspaceWrite;
    let programs = seccomp::filters(true, spec.network)?;
    let fds = programs
        .programs
        .iter()
        .map(|p| memfd(p))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| SandboxError::setup_from("seccomp for bubblewrap", e))?;
    let path = |p: &Path| p.display().to_string();
    let mut args: Vec<String> = vec![bwrap.display().to_string()];
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| (*s).to_owned()));
    push(&[
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
    let tmp_size = spec.tmp.size.map(|n| n.to_string());
    if let Some(size) = &tmp_size {
        push(&["--size", size]);
    }
    push(&["--tmpfs", "/tmp"]);
    if !spec.network {
        push(&["--unshare-net"]);
    }
    for dir in ["/run", "/var/run"] {
        if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            push(&["--tmpfs", dir, "--remount-ro", dir]);
        }
    }
    // `--proc` covers `/proc/sys` only when `access(W_OK)` on the directory
    // succeeds, which it does not for root (mode 0555), leaving sysctls
    // such as `kernel/core_pattern` writable by a caller whose uid 0 is
    // mapped to the host's. Cover it in every case.
    push(&[
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
    ]);
    let mut roots: Vec<(PathBuf, bool)> = rules.roots.iter().map(|r| (r.clone(), true)).collect();
    if !rules.roots.iter().any(|r| r == spec.workspace) {
        roots.push((spec.workspace.to_owned(), false));
    }
    roots.sort_by_key(|(r, _)| r.as_os_str().len());
    // Bubblewrap hides what exists at start, by mounts over those entries
    // (see docs/sandbox.md: a host's replacement of one shows through).
    let attached: Vec<PathBuf> = roots.iter().map(|(r, _)| r.clone()).collect();
    let hidden = super::hiding::plan(&rules.hidden, &attached, false, &[], &[]).pinned;
    for hidden in &hidden {
        if hidden.is_dir() && roots.iter().any(|(r, _)| r.starts_with(hidden)) {
            push(&["--tmpfs", &path(hidden)]);
        }
    }
    for (root, rw) in &roots {
        let flag = if *rw { "--bind" } else { "--ro-bind" };
        push(&[flag, &path(root), &path(root)]);
    }
    let protected: Vec<&PathBuf> = rules
        .protected
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .filter(|p| rules.roots.iter().any(|r| p.starts_with(r)))
        .collect();
    for p in &protected {
        push(&["--ro-bind", &path(p), &path(p)]);
    }
    // Hidden paths, as in the built-in view (bubblewrap applies its flags
    // in order): a directory holding a root got its tmpfs before the roots
    // were bound, the others get theirs now, and all are made read-only; a
    // hidden file shows /dev/null.
    for hidden in &hidden {
        if hidden.is_dir() {
            if !roots.iter().any(|(r, _)| r.starts_with(hidden)) {
                push(&["--tmpfs", &path(hidden)]);
            }
            push(&["--remount-ro", &path(hidden)]);
        } else {
            push(&["--ro-bind", "/dev/null", &path(hidden)]);
        }
    }
    if !rules.tmp {
        push(&["--remount-ro", "/tmp"]);
    }
    push(&["--cap-drop", "ALL"]);
    for fd in &fds {
        push(&["--add-seccomp-fd", &fd.as_raw_fd().to_string()]);
    }
    push(&["--chdir", &path(spec.cwd), "--"]);
    args.extend(argv.iter().cloned());
    let enforcement = Enforcement {
        namespaces: true,
        filesystem: true,
        capabilities_dropped: true,
        seccomp: true,
        network_isolated: !spec.network,
        git_read_only: writable && !protected.is_empty(),
        landlock_abi: super::landlock_abi(),
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
    use crate::{SandboxPolicy, WriteRules};

    #[test]
    fn the_flags_match_the_built_in_view() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(ws.join(".git")).unwrap();
        let rules = WriteRules::new(
            &SandboxPolicy::default().tmp_writable(false),
            SandboxMode::WorkspaceWrite,
            &ws,
        );
        let spec = Spec {
            rules: &rules,
            workspace: &ws,
            cwd: &ws,
            network: false,
            namespaces: true,
            unix_sockets: &[],
            files: false,
            tmp: crate::linux::TmpLimits::default(),
        };
        let (argv, handoff, enforcement) =
            command(Path::new("bwrap"), &spec, &["bash".to_owned()]).unwrap();
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
        assert_eq!(line.matches("--add-seccomp-fd").count(), handoff.fds.len());
        assert!(enforcement.namespaces && enforcement.git_read_only && !enforcement.landlock);
    }
}
