//! The text of this crate's errors where a tool shows one to a model
//! (inside its own sentence: the shell tool's `The bash shell could not be
//! started: …`). It is written here, one function per error type, and
//! nowhere else: the errors' `Display` is for developers (terse, without the
//! source, which the error chain carries), and may change without changing
//! what a model reads.

use crate::{LimitsError, PtyError};

/// The exact text a tool shows a model for `err`: what failed and, where
/// there is one, the operating system's error (or the backend's) behind it,
/// on one line.
///
/// ```
/// use dsh_pty::{PtyError, contract};
/// let err = PtyError::Spawn {
///     program: "bash".into(),
///     source: std::io::Error::other("no such file"),
/// };
/// assert_eq!(contract::render_error(&err), "spawning `bash` failed: no such file");
/// ```
pub fn render_error(err: &PtyError) -> String {
    match err {
        PtyError::ProgramNotFound { program } => format!(
            "program not found: `{program}` is not an executable on PATH or an existing path"
        ),
        PtyError::CwdMissing { path } => {
            format!("working directory does not exist: {}", path.display())
        }
        PtyError::CwdNotDirectory { path } => {
            format!("working directory is not a directory: {}", path.display())
        }
        PtyError::OpenPty(source) => format!("could not open a pseudo-terminal: {source}"),
        PtyError::Spawn { program, source } => format!("spawning `{program}` failed: {source}"),
        PtyError::Confine(source) => {
            format!("confining the child before exec failed: {source}")
        }
        PtyError::WriteAfterExit => {
            "cannot write to the terminal: the session's process has exited".to_owned()
        }
        PtyError::Closed => "the session is closed".to_owned(),
        PtyError::Io { what, source } => format!("{what} failed: {source}"),
        PtyError::Disconnected { backend, source } => {
            format!("the connection to the {backend} was lost: {source}")
        }
        PtyError::Limits(limits) => render_limits_error(limits),
        PtyError::NotKept {
            backend,
            field,
            why,
        } => format!("the {backend} backend cannot keep the spawn spec's `{field}`: {why}"),
        PtyError::Unsupported { backend, what } => {
            format!("the {backend} backend does not support {what}")
        }
    }
}

/// The exact text a tool shows a model for `err`: which limits cannot be
/// kept and why, or which step of making the session's cgroup failed and
/// the operating system's error.
pub fn render_limits_error(err: &LimitsError) -> String {
    match err {
        LimitsError::NotHeld { limits, why } => {
            format!("{} cannot be enforced: {why}", crate::limits::list(limits))
        }
        LimitsError::Cgroup { what, path, source } => {
            format!("{what} {} failed: {source}", path.display())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::io;
    use std::path::PathBuf;

    use super::*;
    use crate::Limit;

    /// `err` reads `want` for the model, as it did when `Display` was the
    /// model's text; `Display` never repeats the source.
    fn golden(err: PtyError, want: &str) {
        assert_eq!(render_error(&err), want, "{err:?}");
        assert_display_is_terse(&err);
    }

    fn limits_golden(err: LimitsError, want: &str) {
        assert_eq!(render_limits_error(&err), want, "{err:?}");
        assert_display_is_terse(&err);
        golden(PtyError::Limits(err), want);
    }

    fn assert_display_is_terse(err: &dyn std::error::Error) {
        let display = err.to_string();
        assert!(!display.ends_with('.'), "{display}");
        assert!(
            display.starts_with(|c: char| !c.is_uppercase()),
            "{display}"
        );
        if let Some(source) = err.source() {
            assert!(!display.contains(&source.to_string()), "{display}");
        }
    }

    #[test]
    fn display_is_for_developers() {
        let err = PtyError::Spawn {
            program: "bash".into(),
            source: io::Error::other("no such file"),
        };
        assert_eq!(err.to_string(), "spawning `bash` failed");
        let err = LimitsError::Cgroup {
            what: "making the cgroup",
            path: PathBuf::from("/sys/fs/cgroup/dsh/s1"),
            source: io::Error::other("EACCES"),
        };
        assert_eq!(
            err.to_string(),
            "making the cgroup /sys/fs/cgroup/dsh/s1 failed"
        );
        assert_eq!(
            err.source().map(ToString::to_string).as_deref(),
            Some("EACCES")
        );
    }

    #[test]
    fn every_error_reads_as_it_always_did() {
        golden(
            PtyError::ProgramNotFound {
                program: "nope".into(),
            },
            "program not found: `nope` is not an executable on PATH or an existing path",
        );
        golden(
            PtyError::CwdMissing {
                path: PathBuf::from("/no/dir"),
            },
            "working directory does not exist: /no/dir",
        );
        golden(
            PtyError::CwdNotDirectory {
                path: PathBuf::from("/etc/passwd"),
            },
            "working directory is not a directory: /etc/passwd",
        );
        golden(
            PtyError::OpenPty(io::Error::other("out of ptys")),
            "could not open a pseudo-terminal: out of ptys",
        );
        golden(
            PtyError::Spawn {
                program: "bash".into(),
                source: io::Error::other("no such file"),
            },
            "spawning `bash` failed: no such file",
        );
        golden(
            PtyError::Confine(io::Error::other("EPERM")),
            "confining the child before exec failed: EPERM",
        );
        golden(
            PtyError::WriteAfterExit,
            "cannot write to the terminal: the session's process has exited",
        );
        golden(PtyError::Closed, "the session is closed");
        golden(
            PtyError::Io {
                what: "resizing the terminal",
                source: io::Error::other("bad fd"),
            },
            "resizing the terminal failed: bad fd",
        );
        golden(
            PtyError::Disconnected {
                backend: "Docker container",
                source: "the daemon hung up".into(),
            },
            "the connection to the Docker container was lost: the daemon hung up",
        );
        golden(
            PtyError::Unsupported {
                backend: "portable",
                what: "confinement hooks",
            },
            "the portable backend does not support confinement hooks",
        );
        limits_golden(
            LimitsError::NotHeld {
                limits: vec![Limit::Memory, Limit::Pids],
                why: "no cgroup parent was given".into(),
            },
            "the memory limit and the process limit cannot be enforced: no cgroup parent was given",
        );
        limits_golden(
            LimitsError::Cgroup {
                what: "making the cgroup",
                path: PathBuf::from("/sys/fs/cgroup/dsh/s1"),
                source: io::Error::other("EACCES"),
            },
            "making the cgroup /sys/fs/cgroup/dsh/s1 failed: EACCES",
        );
    }
}
