//! What a command run to completion on the program's side left behind.

use crate::ExitStatus;

/// What a command run to completion next to a remote program printed, and
/// how it ended ([`RemoteLink::run_sh`](super::RemoteLink::run_sh), and the
/// engines' own `run`).
///
/// ```
/// use dsh_pty::ExitStatus;
/// use dsh_pty::remote::Ran;
///
/// let ran = Ran::new(b"out".to_vec(), b"  no such file\n".to_vec(), ExitStatus::from_code(2));
/// assert_eq!(ran.status.code(), Some(2));
/// assert_eq!(ran.stderr_text(), "no such file");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ran {
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: Vec<u8>,
    /// How it ended: a code, or the signal that killed it (Docker's
    /// backend reads the daemon's code `128 + n` as signal `n`).
    pub status: ExitStatus,
}

impl Ran {
    /// A command's output and end.
    pub fn new(stdout: Vec<u8>, stderr: Vec<u8>, status: ExitStatus) -> Self {
        Ran {
            stdout,
            stderr,
            status,
        }
    }

    /// The end of standard error (at most 500 bytes), trimmed, as text.
    pub fn stderr_text(&self) -> String {
        tail_text(&self.stderr)
    }
}

/// The end of `bytes` (at most 500 bytes), trimmed, as text.
fn tail_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let mut start = text.len().saturating_sub(500);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_is_short_and_whole() {
        let long = format!("{}é{}\n", "a".repeat(600), "b".repeat(498));
        let tail = tail_text(long.as_bytes());
        assert!(tail.len() <= 500);
        assert!(tail.ends_with('b') && !tail.contains('a'));
    }
}
