//! What the supervisor lets a confined process reach, prepared in the
//! parent.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::filters;
use crate::Error;
use crate::linux::sys;

/// What the supervisor lets a confined process reach, prepared in the
/// parent.
#[derive(Debug)]
pub(crate) struct Guard {
    program: Vec<libc::sock_filter>,
    /// Paths (no trailing `/`) beneath which pathname sockets are reached.
    allowed: Vec<Vec<u8>>,
    /// Paths beneath those that are not (protected `.git` paths, where a
    /// host's git keeps its fsmonitor socket).
    denied: Vec<Vec<u8>>,
    /// The network namespace is the host's: abstract names are refused.
    pub(super) host_network: bool,
    /// The supervisor's own seccomp filter (see the module docs).
    pub(super) own: Vec<libc::sock_filter>,
}

impl Guard {
    /// The guard for a sandbox whose pathname sockets may be reached beneath
    /// `allowed` (canonical paths), with the host's network namespace or
    /// not.
    pub(crate) fn new(
        allowed: &[PathBuf],
        denied: &[PathBuf],
        host_network: bool,
    ) -> Result<Guard, Error> {
        let bytes = |paths: &[PathBuf]| -> Vec<Vec<u8>> {
            paths
                .iter()
                .map(|p| {
                    let bytes = p.as_os_str().as_bytes();
                    bytes.strip_suffix(b"/").unwrap_or(bytes).to_vec()
                })
                .collect()
        };
        Ok(Guard {
            program: filters::notification(host_network),
            allowed: bytes(allowed),
            denied: bytes(denied),
            host_network,
            own: filters::supervisor()?,
        })
    }

    /// Init: installs the filter and returns its listener.
    pub(crate) fn install(&self) -> io::Result<OwnedFd> {
        sys::seccomp_listener(&self.program)
    }

    pub(super) fn allows(&self, path: &[u8]) -> bool {
        let beneath = |root: &Vec<u8>| {
            path.starts_with(root)
                && (path.len() == root.len() || path[root.len()] == b'/' || root.is_empty())
        };
        self.allowed.iter().any(beneath) && !self.denied.iter().any(beneath)
    }
}
