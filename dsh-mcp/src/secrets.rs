//! The binary's own secrets, kept out of what its shells can read of it
//! (Linux).
//!
//! Linux shows a process's initial environment (`/proc/PID/environ`) to
//! every process that may `ptrace`-read it: by default, every process of
//! its user. A shell of `danger-full-access` is a child of the server, of
//! its user, so removing a variable from the server's environment later
//! (`unsetenv`) hides nothing: the kernel shows the block the process was
//! started with. So at start, before anything else, the server
//!
//! 1. becomes not dumpable (`PR_SET_DUMPABLE` 0): a process of its user
//!    without `CAP_SYS_PTRACE` can no longer read its `mem`, `maps`, `fd/`,
//!    `auxv` and the other `/proc` files behind a `ptrace` check, nor trace
//!    it; a non-root one not its `environ` either (root without the
//!    capability still does, as tested); `cmdline`, `status` and `stat`
//!    stay every process's to read;
//! 2. when its environment holds variables whose names look like
//!    credentials ([`looks_like_secret`]), re-executes itself
//!    (`/proc/self/exe`, the same arguments) with an environment without
//!    them, handing their values to the new image in an inherited memfd
//!    that it reads and closes first thing, so that the block the kernel
//!    shows for it holds none; the values stay in its memory for [`var`]
//!    (the token in `DSH_TOKEN`, a `--env NAME`), for the flags read from
//!    the environment (`DSH_TOKEN_FILE`, `DSH_TLS_KEY`, `DSH_PASS_SECRETS`)
//!    and, with `--pass-secrets`, for the shells;
//! 3. marks every descriptor it inherited close-on-exec, so that its shells
//!    do not inherit a file (a token on `/dev/fd/3`) from whoever started
//!    it.
//!
//! A process with `CAP_SYS_PTRACE` over the server (a root shell of a root
//! server on the host) still reads its memory: `docs/http.md` ("What a
//! shell can read of its server") tells hosts what to do about it.

use std::ffi::{OsStr, OsString};
use std::sync::OnceLock;

use dsh_shell_persistent::looks_like_secret;

/// The variable that names, in the re-executed image, the descriptor
/// holding the variables left out of its environment.
const HELD_FD: &str = "DSH_MCP_HELD_ENV_FD";

/// The memfd's name (`/proc/self/fd/N` reads `/memfd:NAME (deleted)`).
#[cfg(target_os = "linux")]
const MEMFD_NAME: &std::ffi::CStr = c"dsh-mcp-held-env";

/// The variables left out of this process's environment, with their
/// values.
static HELD: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();

/// Why the server cannot keep its secrets out of its environment.
#[derive(Debug)]
pub(crate) struct HoldError(String);

impl std::fmt::Display for HoldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Step 1 and 2 of the module's docs; returns in the image that serves
/// (the first one too, when its environment holds no credential). Call it
/// first in `main`, while the process has one thread.
pub(crate) fn hold() -> Result<(), HoldError> {
    imp::not_dumpable()?;
    let held = match std::env::var_os(HELD_FD) {
        Some(fd) => imp::take(&fd)?,
        None => {
            let secret: Vec<(OsString, OsString)> = std::env::vars_os()
                .filter(|(name, _)| looks_like_secret(&name.to_string_lossy()))
                .collect();
            if !secret.is_empty() && cfg!(target_os = "linux") {
                // Returns only on failure.
                return Err(imp::reexec(&secret));
            }
            Vec::new()
        }
    };
    let _ = HELD.set(held);
    imp::not_inherited();
    Ok(())
}

/// Runs `parse` (the flags' parser, which reads some flags from the
/// environment) with the held variables back in this process's
/// environment; afterwards they stay there only when `keep` says so for
/// their name (`--pass-secrets`: the shells then inherit them, as they did
/// before the server left them out). Setting a variable changes the
/// process's environment list, not the block the kernel shows. Call it
/// while the process has one thread.
pub(crate) fn parse_with<T>(parse: impl FnOnce() -> T, keep: impl Fn(&T, &OsStr) -> bool) -> T {
    let held = HELD.get().map_or(&[][..], Vec::as_slice);
    for (name, value) in held {
        // SAFETY: one thread (the caller's contract): nothing reads the
        // environment concurrently.
        unsafe { std::env::set_var(name, value) };
    }
    let parsed = parse();
    for (name, _) in held {
        if !keep(&parsed, name) {
            // SAFETY: as above.
            unsafe { std::env::remove_var(name) };
        }
    }
    parsed
}

/// The server's variable `name`: from its environment, else one that
/// [`hold`] left out of it.
pub(crate) fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().or_else(|| {
        HELD.get()?
            .iter()
            .find(|(held, _)| held == name)
            .and_then(|(_, value)| value.to_str())
            .map(str::to_owned)
    })
}

/// `--token-file`'s check where the shells run on this machine as this
/// server's user, unconfined (`danger-full-access`): they could read a
/// regular file by its path, and with the token open sessions of their
/// own. A pipe (`/dev/stdin`, `<(...)`) is read once and then empty.
#[cfg(feature = "http")]
pub(crate) fn token_file_unreachable(path: &std::path::Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Err(format!(
            "--token-file {}: the shells of --sandbox danger-full-access run as this server's user and could read that file by its path, and with the token open sessions of their own; give the token in DSH_TOKEN instead (the server keeps it out of what its shells can read) or on a pipe (--token-file /dev/stdin), or confine the shells (--sandbox workspace-write or read-only hides the file)",
            path.display()
        )),
        // Not there or not a file: reading it says what is wrong.
        _ => Ok(()),
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::{OsStr, OsString};
    use std::fs::File;
    use std::io::{Read, Seek, Write};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;

    use super::{HELD_FD, HoldError, MEMFD_NAME};

    /// The held variables as the memfd carries them: `NAME=VALUE\0` each.
    pub(super) fn encode(vars: &[(OsString, OsString)]) -> Vec<u8> {
        use std::os::unix::ffi::OsStrExt;
        let mut bytes = Vec::new();
        for (name, value) in vars {
            bytes.extend_from_slice(name.as_bytes());
            bytes.push(b'=');
            bytes.extend_from_slice(value.as_bytes());
            bytes.push(0);
        }
        bytes
    }

    /// [`encode`]'s inverse (a name ends at the first `=` after its first
    /// byte, as in an environment block).
    pub(super) fn decode(bytes: &[u8]) -> Vec<(OsString, OsString)> {
        use std::os::unix::ffi::OsStrExt;
        bytes
            .split(|b| *b == 0)
            .filter(|entry| !entry.is_empty())
            .filter_map(|entry| {
                let eq = entry.iter().skip(1).position(|b| *b == b'=')? + 1;
                Some((
                    OsStr::from_bytes(&entry[..eq]).to_owned(),
                    OsStr::from_bytes(&entry[eq + 1..]).to_owned(),
                ))
            })
            .collect()
    }

    /// `PR_SET_DUMPABLE` 0.
    pub(super) fn not_dumpable() -> Result<(), HoldError> {
        // SAFETY: a plain prctl, no pointers.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(HoldError(format!(
                "cannot make this process not dumpable (prctl PR_SET_DUMPABLE): {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    /// Marks every descriptor this process inherited (above standard error)
    /// close-on-exec: the server still reads them (`--token-file
    /// /dev/fd/3`), its shells do not inherit them.
    pub(super) fn not_inherited() {
        // SAFETY: a system call on numbers only.
        let marked = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        } == 0;
        if marked {
            return;
        }
        // Before Linux 5.11: one by one.
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
            return;
        };
        let fds: Vec<i32> = dir
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
            .filter(|fd| *fd > 2)
            .collect();
        for fd in fds {
            // SAFETY: fcntl on a number; one that is not open (the
            // directory's own, closed by now) fails harmlessly.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
    }

    /// Re-executes this program with `secret` out of its environment and
    /// in a memfd the new image reads; returns only why it could not.
    pub(super) fn reexec(secret: &[(OsString, OsString)]) -> HoldError {
        let fail = |what: &str, err: std::io::Error| {
            HoldError(format!(
                "cannot re-execute this server to leave the credentials in its environment out of what its shells can read ({what}): {err}"
            ))
        };
        // Without close-on-exec: the new image inherits it (this process
        // has one thread, so no other child does).
        // SAFETY: a valid NUL-terminated name; no pointers kept.
        let fd = unsafe { libc::memfd_create(MEMFD_NAME.as_ptr(), 0) };
        if fd < 0 {
            return fail("memfd_create", std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor memfd_create just returned, owned by nothing
        // else.
        let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let mut bytes = comm();
        bytes.push(0);
        bytes.extend(encode(secret));
        if let Err(err) = file.write_all(&bytes).and_then(|()| file.rewind()) {
            return fail("writing the memfd", err);
        }
        let mut args = std::env::args_os();
        let arg0 = args.next().unwrap_or_else(|| OsString::from("dsh-mcp"));
        let err = std::process::Command::new("/proc/self/exe")
            .arg0(arg0)
            .args(args)
            .env_clear()
            .envs(std::env::vars_os().filter(|(name, _)| !secret.iter().any(|(s, _)| s == name)))
            .env(HELD_FD, file.as_raw_fd().to_string())
            .exec();
        fail("execve /proc/self/exe", err)
    }

    /// This process's name as `ps` shows it (the re-executed image would
    /// be `exe`).
    fn comm() -> Vec<u8> {
        let mut comm = std::fs::read("/proc/self/comm").unwrap_or_default();
        if comm.last() == Some(&b'\n') {
            comm.pop();
        }
        comm
    }

    /// In the re-executed image: reads and closes the memfd named by
    /// `fd`, takes [`HELD_FD`] out of the environment and gives the
    /// process its first image's name back.
    pub(super) fn take(fd: &OsStr) -> Result<Vec<(OsString, OsString)>, HoldError> {
        let refuse = || {
            HoldError(format!(
                "{HELD_FD} is set, but only a dsh-mcp re-executing itself sets it: unset it"
            ))
        };
        let fd: i32 = fd
            .to_str()
            .and_then(|fd| fd.parse().ok())
            .filter(|fd| *fd > 2)
            .ok_or_else(refuse)?;
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).map_err(|_| refuse())?;
        let expected = format!("/memfd:{}", MEMFD_NAME.to_string_lossy());
        if !link.to_string_lossy().starts_with(&expected) {
            return Err(refuse());
        }
        // SAFETY: an open memfd (checked above) this process inherited for
        // this and that nothing else in it uses.
        let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|err| {
            HoldError(format!(
                "cannot read the variables this server left out of its environment: {err}"
            ))
        })?;
        drop(file);
        // SAFETY: one thread (`hold`'s contract).
        unsafe { std::env::remove_var(HELD_FD) };
        // The first image's name, then the variables.
        let (comm, vars) = match bytes.iter().position(|b| *b == 0) {
            Some(end) => (&bytes[..end], &bytes[end + 1..]),
            None => (&bytes[..], &[][..]),
        };
        if let Ok(name) = std::ffi::CString::new(comm) {
            // SAFETY: a NUL-terminated string the kernel copies (at most
            // 16 bytes of it).
            unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
        }
        Ok(decode(vars))
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    //! Elsewhere the server's environment is not shown to other processes
    //! as Linux shows it; nothing is held.
    use std::ffi::{OsStr, OsString};

    use super::HoldError;

    pub(super) fn not_dumpable() -> Result<(), HoldError> {
        Ok(())
    }

    pub(super) fn not_inherited() {}

    pub(super) fn reexec(_secret: &[(OsString, OsString)]) -> HoldError {
        HoldError("re-executing is done on Linux only".to_owned())
    }

    pub(super) fn take(_fd: &OsStr) -> Result<Vec<(OsString, OsString)>, HoldError> {
        Ok(Vec::new())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::imp::{decode, encode};
    use std::ffi::OsString;

    #[test]
    fn the_memfd_format_round_trips() {
        let vars = vec![
            (OsString::from("A_TOKEN"), OsString::from("x=y\nz")),
            (OsString::from("EMPTY_KEY"), OsString::new()),
        ];
        assert_eq!(decode(&encode(&vars)), vars);
    }
}
