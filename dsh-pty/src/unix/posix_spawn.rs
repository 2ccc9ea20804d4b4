//! Starting a session's program with `posix_spawn` (Linux): no copy of this
//! process's memory map, so a spawn costs the same in a server holding a
//! thousand shells as in a fresh one (`fork` copies the page tables: here
//! 0.56 ms with an 8 MB heap, 2.6 ms with 64 MB, against 0.12 ms for
//! `posix_spawn` either way). It serves the common spec only: no
//! [`PreExec`](crate::PreExec) hook, rlimit, cgroup or `SIGXFSZ` change;
//! those need code between `fork` and `exec`, and take the `fork` path.
//!
//! The child becomes a session leader (`POSIX_SPAWN_SETSID`), resets the
//! signals it must not inherit as ignored, unblocks every signal, moves to
//! the spec's directory and opens the terminal by its path as standard
//! input: a session leader without a controlling terminal that opens one
//! acquires it, which is what `TIOCSCTTY` does on the `fork` path. The
//! environment is built as the standard library builds it (the parent's,
//! unless cleared, with the spec's changes, sorted by name) and the program
//! is found as `execvp` would find it, in the child's `PATH`. The child is
//! reaped through a pidfd registered with tokio ([`wait`]).

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::{PtyError, SpawnSpec};

/// Whether this kernel gives pidfds (Linux 5.3 and later), asked once.
pub(super) fn available() -> bool {
    static PIDFD: OnceLock<bool> = OnceLock::new();
    *PIDFD.get_or_init(|| pidfd_open(std::process::id() as i32).is_ok())
}

/// `pidfd_open(2)`: a descriptor that becomes readable when `pid` exits.
fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: the system call takes a pid and flags and returns a new
    // descriptor or -1; nothing is borrowed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| std::io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Children whose waiter was dropped before they exited (their runtime shut
/// down): reaped by the next spawn, as tokio's process driver reaps its
/// own orphans, so that none stays a zombie for the life of this process.
static ORPHANS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// Reaps what of [`ORPHANS`] has exited.
fn reap_orphans() {
    let Ok(mut orphans) = ORPHANS.lock() else {
        return;
    };
    orphans.retain(|&pid| {
        let mut status = 0;
        // SAFETY: `status` is a valid place for the wait status; `pid` is a
        // child of this process that nothing else reaps.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == 0 }
    });
}

/// A child this process started and has not reaped: handed to [`ORPHANS`]
/// if dropped before [`wait`] reaps it. Made at the spawn itself, so that a
/// waiter dropped before it first ran (its runtime shut down at once) hands
/// the child over too.
pub(super) struct Unreaped {
    pid: i32,
    reaped: bool,
}

impl Unreaped {
    /// The child's pid.
    pub(super) fn pid(&self) -> i32 {
        self.pid
    }
}

impl Drop for Unreaped {
    fn drop(&mut self) {
        if let (false, Ok(mut orphans)) = (self.reaped, ORPHANS.lock()) {
            orphans.push(self.pid);
        }
    }
}

/// Waits for the child to exit, and reaps it.
pub(super) async fn wait(mut unreaped: Unreaped) -> std::io::Result<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    let pid = unreaped.pid;
    // SAFETY: the `AsyncFd` owns the pidfd for its whole life and it is
    // never replaced, so it stays valid until tokio deregisters it on drop.
    let fd = unsafe { AsyncFd::register_with_interest(pidfd_open(pid)?, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)?;
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid place for the wait status.
        match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
            0 => {}
            -1 => {
                let err = std::io::Error::last_os_error();
                if err.kind() != std::io::ErrorKind::Interrupted {
                    unreaped.reaped = true;
                    return Err(err);
                }
            }
            _ => {
                unreaped.reaped = true;
                return Ok(std::process::ExitStatus::from_raw(status));
            }
        }
        fd.readable().await?.clear_ready();
    }
}

/// Starts `spec`'s program as the leader of a new session whose controlling
/// terminal is `tty`.
pub(super) fn spawn_leader(
    spec: &SpawnSpec,
    tty: &Path,
    reset: &[libc::c_int],
) -> Result<Unreaped, PtyError> {
    reap_orphans();
    let invalid = |what: &str| PtyError::Spawn {
        program: spec.program_lossy(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what} holds a NUL byte"),
        ),
    };
    let env = environment(spec);
    let Some(path) = find_program(spec, &env) else {
        return Err(PtyError::ProgramNotFound {
            program: spec.program_lossy(),
        });
    };
    let cstr = |s: &OsStr, what: &str| CString::new(s.as_bytes()).map_err(|_| invalid(what));
    let path = cstr(path.as_os_str(), "the program")?;
    let mut argv = vec![cstr(spec.program(), "the program")?];
    for arg in spec.get_args() {
        argv.push(cstr(arg, "an argument")?);
    }
    let mut envp = Vec::with_capacity(env.len());
    for (key, value) in env {
        let mut pair = key.into_vec();
        pair.push(b'=');
        pair.extend_from_slice(value.as_bytes());
        envp.push(CString::new(pair).map_err(|_| invalid("the environment"))?);
    }
    let tty = cstr(tty.as_os_str(), "the terminal's path")?;
    let cwd = spec
        .get_cwd()
        .map(|dir| cstr(dir.as_os_str(), "the directory"))
        .transpose()?;

    let mut argv_ptrs: Vec<*mut libc::c_char> =
        argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv_ptrs.push(std::ptr::null_mut());
    let mut envp_ptrs: Vec<*mut libc::c_char> =
        envp.iter().map(|e| e.as_ptr().cast_mut()).collect();
    envp_ptrs.push(std::ptr::null_mut());

    let os_error = |code: libc::c_int| PtyError::Spawn {
        program: spec.program_lossy(),
        source: std::io::Error::from_raw_os_error(code),
    };
    let attrs = Attrs::new(reset).map_err(os_error)?;
    let actions = Actions::new(cwd.as_deref(), &tty).map_err(os_error)?;
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the call: the path, the attributes
    // and file actions (initialised above, destroyed on drop), and the
    // NULL-terminated argument and environment arrays, whose strings live
    // in `argv` and `envp` until after it returns.
    let code = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions.0,
            &attrs.0,
            argv_ptrs.as_ptr(),
            envp_ptrs.as_ptr(),
        )
    };
    match code {
        0 => Ok(Unreaped { pid, reaped: false }),
        // The directory went away since the spec was checked, or the
        // program did.
        libc::ENOENT | libc::ENOTDIR => {
            spec.check_cwd()?;
            Err(PtyError::ProgramNotFound {
                program: spec.program_lossy(),
            })
        }
        code => Err(os_error(code)),
    }
}

/// The child's environment, as `std::process::Command` makes it: this
/// process's unless cleared, with the spec's changes in order, sorted by
/// name.
fn environment(spec: &SpawnSpec) -> std::collections::BTreeMap<OsString, OsString> {
    let mut env = std::collections::BTreeMap::new();
    if !spec.is_env_cleared() {
        env.extend(std::env::vars_os());
    }
    for (key, value) in spec.get_env() {
        match value {
            Some(value) => env.insert(key.clone(), value.clone()),
            None => env.remove(key),
        };
    }
    env
}

/// The file `execvp` would run for the spec's program, the child's `PATH`
/// in `env` searched when the name has no `/` (a relative result is
/// relative to the child's directory, as the `exec` after its `chdir` takes
/// it).
fn find_program(
    spec: &SpawnSpec,
    env: &std::collections::BTreeMap<OsString, OsString>,
) -> Option<PathBuf> {
    let program = Path::new(spec.program());
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Some(program.to_path_buf());
    }
    let in_cwd = |p: &Path| match spec.get_cwd() {
        Some(dir) => dir.join(p),
        None => p.to_path_buf(),
    };
    let search = env
        .get(OsStr::new("PATH"))
        .cloned()
        .unwrap_or_else(|| OsString::from("/bin:/usr/bin"));
    std::env::split_paths(&search)
        .map(|dir| dir.join(program))
        .find(|candidate| executable(&in_cwd(candidate)))
}

/// Whether `path` is a file this process may execute.
fn executable(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path for the call.
    let runnable = unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0;
    runnable && std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// `posix_spawnattr_t`, destroyed on drop.
struct Attrs(libc::posix_spawnattr_t);

impl Attrs {
    fn new(reset: &[libc::c_int]) -> Result<Attrs, libc::c_int> {
        // SAFETY: the attribute object is initialised before any other use
        // and destroyed once, by `Drop`; the signal sets are initialised by
        // `sigemptyset` before they are filled or read.
        unsafe {
            let mut raw = std::mem::zeroed();
            check(libc::posix_spawnattr_init(&mut raw))?;
            let mut attrs = Attrs(raw);
            let mut defaults: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut defaults);
            for &sig in reset {
                libc::sigaddset(&mut defaults, sig);
            }
            check(libc::posix_spawnattr_setsigdefault(&mut attrs.0, &defaults))?;
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            check(libc::posix_spawnattr_setsigmask(&mut attrs.0, &none))?;
            let flags = libc::POSIX_SPAWN_SETSID
                | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short
                | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short;
            check(libc::posix_spawnattr_setflags(&mut attrs.0, flags))?;
            Ok(attrs)
        }
    }
}

impl Drop for Attrs {
    fn drop(&mut self) {
        // SAFETY: initialised in `Attrs::new`, destroyed only here.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

/// `posix_spawn_file_actions_t`, destroyed on drop: into `cwd`, then the
/// terminal opened as standard input and copied to output and error.
struct Actions(libc::posix_spawn_file_actions_t);

impl Actions {
    fn new(cwd: Option<&std::ffi::CStr>, tty: &std::ffi::CStr) -> Result<Actions, libc::c_int> {
        // SAFETY: the actions object is initialised before any other use and
        // destroyed once, by `Drop`; the paths are valid NUL-terminated
        // strings (glibc and musl copy them).
        unsafe {
            let mut raw = std::mem::zeroed();
            check(libc::posix_spawn_file_actions_init(&mut raw))?;
            let mut actions = Actions(raw);
            if let Some(dir) = cwd {
                check(libc::posix_spawn_file_actions_addchdir_np(
                    &mut actions.0,
                    dir.as_ptr(),
                ))?;
            }
            check(libc::posix_spawn_file_actions_addopen(
                &mut actions.0,
                0,
                tty.as_ptr(),
                libc::O_RDWR,
                0,
            ))?;
            for fd in [1, 2] {
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions.0,
                    0,
                    fd,
                ))?;
            }
            Ok(actions)
        }
    }
}

impl Drop for Actions {
    fn drop(&mut self) {
        // SAFETY: initialised in `Actions::new`, destroyed only here.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

/// A `posix_spawn*` function's answer: 0, or the error number.
fn check(code: libc::c_int) -> Result<(), libc::c_int> {
    if code == 0 { Ok(()) } else { Err(code) }
}
