//! The editor's channel into a container: one long-lived `sh` running
//! [`SCRIPT`], started as a helper exec on first use, asked one request at
//! a time, and started again after it ended.

use std::path::Path;

use dsh_pty::remote::Helper;
use futures_util::FutureExt;

use crate::exec::start_helper;
use crate::{Container, DockerError};

/// The helper's script (see its head for the protocol).
pub(crate) const SCRIPT: &str = include_str!("helper.sh");

/// How much of what a helper printed before it ended an error shows.
const SHOWN: usize = 300;

/// What one request got: the operation's output and its exit code.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) out: Vec<u8>,
    pub(crate) code: i32,
}

/// One helper per filesystem (shared by its clones), one request at a time.
pub(crate) struct Channel {
    container: Container,
    user: Option<String>,
    /// The running helper, if any; taken out for the length of a request,
    /// so that a request abandoned halfway (its future dropped) drops the
    /// helper with it instead of leaving its answer to the next one.
    helper: tokio::sync::Mutex<Option<Box<dyn Helper>>>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("container", &self.container.name())
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Channel {
    pub(crate) fn new(container: Container, user: Option<String>) -> Self {
        Channel {
            container,
            user,
            helper: tokio::sync::Mutex::new(None),
        }
    }

    pub(crate) fn container(&self) -> &Container {
        &self.container
    }

    /// Sends one request (`op` on `path`, with `extra` and `data`) and
    /// waits for its answer. A helper found ended before the request is
    /// replaced silently (nothing was sent to it); one that ends during the
    /// request fails it with [`DockerError::HelperEnded`] and is started
    /// again on the next call (the request is not repeated: a write may or
    /// may not have happened).
    pub(crate) async fn call(
        &self,
        op: &str,
        path: &Path,
        extra: &str,
        data: &[u8],
    ) -> Result<Answer, DockerError> {
        let mut slot = self.helper.lock().await;
        let idle = match slot.as_mut() {
            Some(h) => is_idle(h.as_mut()),
            None => false,
        };
        let mut helper = match slot.take().filter(|_| idle) {
            Some(h) => h,
            None => start_helper(&self.container, self.user.as_deref(), SCRIPT, &[]).await?,
        };
        let token = dsh_pty::random_hex(16).map_err(|source| DockerError::Input {
            what: "a random request token",
            source,
        })?;
        if !helper.send(&request(op, &token, path, extra, data)).await {
            return Err(DockerError::HelperEnded {
                said: String::new(),
            });
        }
        let mut out = Vec::new();
        loop {
            let Some(chunk) = helper.recv().await else {
                if let Some(programs) = missing_programs(&out) {
                    return Err(DockerError::MissingPrograms {
                        container: self.container.name().to_owned(),
                        programs,
                        needed_by: "the editor",
                    });
                }
                return Err(DockerError::HelperEnded { said: shown(&out) });
            };
            out.extend_from_slice(&chunk);
            if let Some((at, code, exits)) = end_of_answer(&out, &token) {
                out.truncate(at);
                if !exits {
                    *slot = Some(helper);
                }
                return Ok(Answer { out, code });
            }
        }
    }
}

/// `true` when the helper neither ended nor printed anything while idle
/// (which would put it out of step).
fn is_idle(helper: &mut dyn Helper) -> bool {
    helper.recv().now_or_never().is_none()
}

/// The request's bytes: its three lines, then the data.
fn request(op: &str, token: &str, path: &Path, extra: &str, data: &[u8]) -> Vec<u8> {
    let path = path_line(path);
    let mut bytes = Vec::with_capacity(op.len() + path.len() + extra.len() + data.len() + 48);
    bytes.extend_from_slice(format!("{op} {token} {}\n", data.len()).as_bytes());
    bytes.extend_from_slice(&path);
    bytes.push(b'\n');
    bytes.extend_from_slice(extra.as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(data);
    bytes
}

/// The path as one line: `-` and the path, or, when it holds a newline,
/// `e` and the path with `\` and newlines as `printf %b` octal escapes.
fn path_line(path: &Path) -> Vec<u8> {
    let bytes = path_bytes(path);
    if !bytes.contains(&b'\n') {
        return [b"-".as_slice(), &bytes].concat();
    }
    let mut line = vec![b'e'];
    for &b in bytes.iter() {
        match b {
            b'\\' => line.extend_from_slice(b"\\0134"),
            b'\n' => line.extend_from_slice(b"\\0012"),
            _ => line.push(b),
        }
    }
    line
}

#[cfg(unix)]
fn path_bytes(path: &Path) -> std::borrow::Cow<'_, [u8]> {
    use std::os::unix::ffi::OsStrExt;
    std::borrow::Cow::Borrowed(path.as_os_str().as_bytes())
}

#[cfg(not(unix))]
fn path_bytes(path: &Path) -> std::borrow::Cow<'_, [u8]> {
    std::borrow::Cow::Owned(path.to_string_lossy().into_owned().into_bytes())
}

/// Where the answer's output ends, its exit code, and whether the helper
/// exits after it, once `out` ends with `\n<token> <code>[ x]\n`.
fn end_of_answer(out: &[u8], token: &str) -> Option<(usize, i32, bool)> {
    let line = out.strip_suffix(b"\n")?;
    // The code line is short: look for it in the tail only.
    let from = line.len().saturating_sub(token.len() + 16);
    let needle = format!("\n{token} ");
    let at = from + memchr::memmem::rfind(&line[from..], needle.as_bytes())?;
    let rest = std::str::from_utf8(&line[at + needle.len()..]).ok()?;
    let (code, exits) = match rest.strip_suffix(" x") {
        Some(code) => (code, true),
        None => (rest, false),
    };
    Some((at, code.parse().ok()?, exits))
}

/// The programs the helper's first line says the container lacks, if it
/// says so (`dsh-missing stat head`).
fn missing_programs(out: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(out).ok()?;
    let names = text.strip_prefix("dsh-missing ")?.lines().next()?;
    Some(names.split_whitespace().collect::<Vec<_>>().join(", "))
}

/// The start of what a helper printed, as text, for an error.
fn shown(out: &[u8]) -> String {
    let text = String::from_utf8_lossy(&out[..out.len().min(SHOWN)]);
    text.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_end_with_their_token_line() {
        let t = "0123456789abcdef";
        assert_eq!(
            end_of_answer(b"\n0123456789abcdef 0\n", t),
            Some((0, 0, false))
        );
        assert_eq!(
            end_of_answer(b"ab\n0123456789abcdef 13 x\n", t),
            Some((2, 13, true))
        );
        // Not yet complete, or another token.
        assert_eq!(end_of_answer(b"ab\n0123456789abcdef 1", t), None);
        assert_eq!(end_of_answer(b"ab\n0123456789abcdee 0\n", t), None);
        // A line that only looks like one, inside the data.
        let fake = b"\n0123456789abcdef 0\nmore\n";
        assert_eq!(end_of_answer(fake, t), None);
        let mut full = fake.to_vec();
        full.extend_from_slice(b"\n0123456789abcdef 0\n");
        assert_eq!(end_of_answer(&full, t), Some((fake.len(), 0, false)));
    }

    #[test]
    fn requests_are_three_lines_then_the_data() {
        let r = request("replace", "tok", Path::new("/a b"), "1 2 x", b"\0data\n");
        assert_eq!(r, b"replace tok 6\n-/a b\n1 2 x\n\0data\n");
        let r = request("stat", "tok", Path::new("/a\nb\\c"), "", b"");
        assert_eq!(r, b"stat tok 0\ne/a\\0012b\\0134c\n\n");
    }
}
