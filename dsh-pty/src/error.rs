//! The error type of this crate.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while spawning or driving a PTY session.
///
/// `Display` is for developers: what failed, without the operating-system
/// error behind it, which is the [`source`](std::error::Error::source) (an
/// error reporter prints the chain). A tool that shows the error to a model
/// uses [`contract::render_error`](crate::contract::render_error), which
/// writes both on one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PtyError {
    /// The program to run could not be found (not on `PATH`, or the path does not exist).
    #[error("program not found: `{program}` is not an executable on PATH or an existing path")]
    ProgramNotFound {
        /// The program as given in the spawn spec.
        program: String,
    },
    /// The working directory given in the spawn spec does not exist.
    #[error("working directory does not exist: {}", path.display())]
    CwdMissing {
        /// The directory as given in the spawn spec.
        path: PathBuf,
    },
    /// The working directory given in the spawn spec exists but is not a directory.
    #[error("working directory is not a directory: {}", path.display())]
    CwdNotDirectory {
        /// The path as given in the spawn spec.
        path: PathBuf,
    },
    /// Allocating the pseudo-terminal pair failed.
    #[error("could not open a pseudo-terminal")]
    OpenPty(#[source] io::Error),
    /// The operating system refused to start the program.
    #[error("spawning `{program}` failed")]
    Spawn {
        /// The program as given in the spawn spec.
        program: String,
        /// The operating-system error.
        #[source]
        source: io::Error,
    },
    /// A pre-exec confinement hook reported failure in the child; the program was not started.
    #[error("confining the child before exec failed")]
    Confine(#[source] io::Error),
    /// Writing to the terminal failed because the session's program has exited.
    #[error("cannot write to the terminal: the session's process has exited")]
    WriteAfterExit,
    /// The session was closed (killed or dropped) and can no longer be used.
    #[error("the session is closed")]
    Closed,
    /// An I/O error on the terminal or while signalling processes.
    #[error("{what} failed")]
    Io {
        /// The operation that failed, e.g. "resizing the terminal".
        what: &'static str,
        /// The operating-system error.
        #[source]
        source: io::Error,
    },
    /// The connection to a program running elsewhere broke.
    #[error("the connection to the {backend} was lost")]
    Disconnected {
        /// What the program ran in (`"Docker container"`, `"SSH host"`).
        backend: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The session's resource limits cannot be kept or set up.
    #[error(transparent)]
    Limits(#[from] crate::LimitsError),
    /// The spawn spec asks for a part the backend does not keep (see
    /// [`PtyBackend::keeps`](crate::PtyBackend::keeps)); nothing was started.
    #[error("the {backend} backend cannot keep the spawn spec's `{field}`: {why}")]
    NotKept {
        /// The backend's name.
        backend: &'static str,
        /// The part of the spec.
        field: crate::SpecField,
        /// Why the backend does not keep it.
        why: &'static str,
    },
    /// The backend cannot do what was asked on this platform.
    #[error("the {backend} backend does not support {what}")]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// What was asked.
        what: &'static str,
    },
}

impl PtyError {
    #[cfg(feature = "native")]
    pub(crate) fn io(what: &'static str, source: impl Into<io::Error>) -> Self {
        PtyError::Io {
            what,
            source: source.into(),
        }
    }
}
