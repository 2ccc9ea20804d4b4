//! Landlock: a ruleset created in the parent, rules added and enforced in the
//! child (after the mount view exists, so private mounts can be named).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use landlock::{ABI, Access, AccessFs, AccessNet, BitFlags, Ruleset, RulesetAttr, Scope};

use super::sys;
use crate::Error;

/// What a rule grants beneath its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Every write right but creating device nodes.
    Write,
    /// Writing, truncating and `ioctl` on existing files (device nodes).
    Files,
    /// Connecting to the Unix sockets there (ABI 9+; nothing before).
    Connect,
}

/// A ruleset ready to be filled and enforced in the child.
#[derive(Debug)]
pub(crate) struct Plan {
    ruleset: OwnedFd,
    rules: Vec<(CString, u64)>,
    /// Whether signals and abstract sockets are scoped (ABI 6+).
    pub(crate) scoped: bool,
    /// Whether TCP bind/connect is denied (ABI 4+, only when asked).
    pub(crate) tcp_denied: bool,
    /// Whether connecting to pathname Unix sockets is confined (ABI 9+).
    pub(crate) unix_sockets: bool,
}

/// The Landlock ABI version of the running kernel (0 when unsupported).
///
/// ```
/// assert!(dsh_confine::landlock_abi() >= 0);
/// ```
pub fn landlock_abi() -> i32 {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attribute is the
    // documented way to ask for the ABI version; it touches no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    i32::try_from(v).unwrap_or(0).max(0)
}

fn error(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::setup_from("Landlock", e)
}

/// A ruleset handling every write right of `abi` (and TCP when
/// `deny_tcp`; from ABI 9 connecting to Unix sockets, which `from_write`
/// includes), scoping signals and abstract Unix sockets where the ABI has
/// scopes, with `rules`. `None` below ABI 3 (no way to deny `truncate`).
pub(crate) fn plan(
    abi: i32,
    rules: &[(PathBuf, Grant)],
    deny_tcp: bool,
) -> Result<Option<Plan>, Error> {
    if abi < 3 {
        return Ok(None);
    }
    let version = ABI::from(abi);
    let handled = AccessFs::from_write(version);
    let mut ruleset = Ruleset::default().handle_access(handled).map_err(error)?;
    let scoped = abi >= 6;
    if scoped {
        ruleset = ruleset.scope(Scope::from_all(version)).map_err(error)?;
    }
    let tcp_denied = deny_tcp && abi >= 4;
    if tcp_denied {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(version))
            .map_err(error)?;
    }
    let created = ruleset.create().map_err(error)?;
    let fd: Option<OwnedFd> = created.into();
    let ruleset = fd.ok_or_else(|| error("the kernel did not enforce the ruleset"))?;
    let write: BitFlags<AccessFs> = handled & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    let files: BitFlags<AccessFs> =
        handled & (AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev);
    let connect: BitFlags<AccessFs> = handled & AccessFs::ResolveUnix;
    let rules = rules
        .iter()
        .map(|(path, grant)| {
            let bits = match grant {
                Grant::Write => write.bits(),
                Grant::Files => files.bits(),
                Grant::Connect => connect.bits(),
            };
            Ok((c_path(path)?, bits))
        })
        .filter(|rule| !matches!(rule, Ok((_, 0))))
        .collect::<Result<_, Error>>()?;
    Ok(Some(Plan {
        ruleset,
        rules,
        scoped,
        tcp_denied,
        unix_sockets: !connect.is_empty(),
    }))
}

fn c_path(path: &Path) -> Result<CString, Error> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::setup(format!("path with a NUL byte: {}", path.display())))
}

impl Plan {
    /// Adds the rules (paths of the current view) and restricts this
    /// process. Async-signal-safe; needs `no_new_privs` first.
    pub(crate) fn enforce(&self) -> io::Result<()> {
        let fd = self.ruleset.as_fd();
        for (path, access) in &self.rules {
            sys::landlock_allow(fd, path, *access)?;
        }
        sys::landlock_restrict(fd)
    }
}
