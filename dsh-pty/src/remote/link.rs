//! What differs per engine under a [`RemoteSession`](super::RemoteSession):
//! the link to the program's side, the terminal's output, and the pipes of
//! a helper started next to the program.

use std::path::PathBuf;

use async_trait::async_trait;
use bytes::Bytes;

use super::Ran;
use crate::{ExitStatus, TermSize};

/// How a remote program ended: its exit record, or why the transport to it
/// broke before one came.
pub type Ended = Result<ExitStatus, Box<dyn std::error::Error + Send + Sync>>;

/// One engine's way to reach a program running elsewhere (a container, a
/// host over SSH, a pod): the terminal it started the program in, and
/// commands run next to it as the program's user.
///
/// A backend starts the program in a terminal whose environment carries
/// [`TAG_VAR`](super::TAG_VAR)`=<tag>`, then hands the link, the tag and
/// the terminal's [`TerminalOutput`] to [`RemoteSession::start`];
/// everything else (the process tree, signals, scratch files, the
/// foreground, the exit) the session does through these methods.
///
/// [`RemoteSession::start`]: super::RemoteSession::start
#[async_trait]
pub trait RemoteLink: Send + Sync + std::fmt::Debug + 'static {
    /// The backend's short name, as its [`crate::PtyBackend::name`] says it
    /// (`"docker"`, `"ssh"`), for [`crate::PtyError::Unsupported`].
    const NAME: &'static str;
    /// What the program runs in, for [`crate::PtyError::Disconnected`]
    /// (`"Docker container"`, `"SSH host"`).
    const WHAT: &'static str;
    /// What a failed scratch file write is called in its
    /// [`crate::PtyError::Io`] (`"writing a scratch file in the container"`).
    const SCRATCH_WHAT: &'static str = "writing a scratch file on the program's side";
    /// Why a request over the link failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Runs `sh -c script sh args...` next to the program, as its user,
    /// without a terminal, feeding it `stdin` (then end-of-file) when given,
    /// and waits for it to end.
    async fn run_sh(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<Ran, Self::Error>;

    /// Starts `sh -c script sh args...` next to the program, as its user,
    /// without a terminal, with its standard input and output piped here;
    /// it runs until its input ends or the returned [`Helper`] is dropped.
    async fn start_helper(
        &self,
        script: &str,
        args: &[&str],
    ) -> Result<Box<dyn Helper>, Self::Error>;

    /// Writes `data` to the program's terminal, as if typed.
    async fn write(&self, data: &[u8]) -> std::io::Result<()>;

    /// Changes the size of the program's terminal.
    async fn resize(&self, size: TermSize) -> Result<(), Self::Error>;

    /// Called once when the session ends, after its processes were signalled
    /// (or, where [`RemoteLink::close_ends_all`], instead): lets go of the
    /// terminal and whatever the link holds for it. An error here is the
    /// error of [`crate::PtySession::end`].
    async fn close(&self) -> Result<(), Self::Error>;

    /// `true` when [`RemoteLink::close`] itself ends every process of the
    /// session (a container of its own, removed), so that ending it at once
    /// needs no process-tree script. `false` by default.
    fn close_ends_all(&self) -> bool {
        false
    }

    /// The counters of the limits the program's side keeps (a container's
    /// memory and process limits, from its cgroup), read now, with the
    /// limits they count against; `None` where the side keeps none or they
    /// cannot be read (the default). [`RemoteSession`](super::RemoteSession)
    /// asks in [`crate::PtySession::refresh_limit_events`].
    async fn limit_events(&self) -> Option<crate::LimitEvents> {
        None
    }

    /// This host's view of the program, when this host's `/proc` shows it
    /// (a container engine running here): asked once, at the first
    /// foreground refresh (the program runs by then). With a view, the
    /// session reads the foreground here (on Unix, with the feature
    /// `native`, whose `/proc` readings these are) and reports its process
    /// ids as local. `None` by default: the other side is asked instead.
    async fn local_view(&self, tag: &str) -> Option<LocalView> {
        let _ = tag;
        None
    }
}

/// The output half of the program's terminal, read by the session's reader
/// task.
#[async_trait]
pub trait TerminalOutput: Send + 'static {
    /// The next chunk the terminal printed; `None` once the output ended
    /// (the program ended, or the transport broke).
    async fn next(&mut self) -> Option<Bytes>;

    /// How the program ended, or why the transport broke: asked once, after
    /// the output ended or nobody reads it any more, and before the
    /// session's output stream ends (a shell asks as soon as it sees the
    /// end).
    async fn ended(&mut self) -> Ended;
}

/// The pipes of a helper started by [`RemoteLink::start_helper`].
#[async_trait]
pub trait Helper: Send {
    /// Writes to the helper's standard input; `false` when that failed.
    async fn send(&mut self, bytes: &[u8]) -> bool;
    /// The next chunk of its standard output; `None` once it ended.
    async fn recv(&mut self) -> Option<Bytes>;
}

/// The program as this host's process table shows it (see
/// [`RemoteLink::local_view`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LocalView {
    /// The program's process id here.
    pub pid: i32,
    /// Its terminal here (the target of `/proc/<pid>/fd/0`).
    pub tty: PathBuf,
}

impl LocalView {
    /// The program is process `pid` here, on terminal `tty`.
    pub fn new(pid: i32, tty: PathBuf) -> Self {
        LocalView { pid, tty }
    }
}
