//! The output and exit plumbing of a session, for backends written outside
//! this crate (a container engine, a remote host): the same scrollback,
//! output stream and drain rules as the built-in backends.

use bytes::Bytes;
use tokio::sync::{mpsc, watch};

use crate::pump::{self, ChannelSource};
use crate::{ExitStatus, OutputStream, ScrollbackHandle, SpawnSpec};

/// The session side of a backend's output and exit: the backend's reader
/// hands the terminal's bytes to an [`OutputFeeder`], and the plumbing keeps
/// the [`ScrollbackHandle`] and the [`OutputStream`] exactly as the built-in
/// backends do (backpressure, the drain grace after exit, end of stream when
/// the feeder is dropped or the session is closed).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use dsh_pty::{ExitStatus, SessionPlumbing, SpawnSpec};
///
/// let (plumbing, feeder, mut output) = SessionPlumbing::start(&SpawnSpec::new("remote-shell"));
/// assert!(feeder.push("hello\n".into()).await);
/// drop(feeder); // end-of-file
/// plumbing.exited(ExitStatus::from_code(0));
/// assert_eq!(output.recv().await.as_deref(), Some(&b"hello\n"[..]));
/// assert_eq!(output.recv().await, None);
/// assert_eq!(plumbing.wait().await.code(), Some(0));
/// assert_eq!(plumbing.scrollback().end_offset(), 6);
/// # }
/// ```
#[derive(Debug)]
pub struct SessionPlumbing {
    lost: std::sync::OnceLock<std::sync::Arc<crate::PtyError>>,
    status_tx: watch::Sender<Option<ExitStatus>>,
    status: watch::Receiver<Option<ExitStatus>>,
    closed: watch::Sender<bool>,
    scrollback: ScrollbackHandle,
}

impl SessionPlumbing {
    /// Starts the output pump (a tokio task: call it inside a runtime) with
    /// the scrollback limits and drain grace of `spec`.
    pub fn start(spec: &SpawnSpec) -> (SessionPlumbing, OutputFeeder, OutputStream) {
        let (raw, raw_rx) = mpsc::channel(pump::OUTPUT_CHANNEL_CHUNKS);
        let pump = pump::start(ChannelSource(raw_rx), spec);
        let plumbing = SessionPlumbing {
            lost: std::sync::OnceLock::new(),
            status_tx: pump.status_tx,
            status: pump.status,
            closed: pump.closed,
            scrollback: pump.scrollback,
        };
        (plumbing, OutputFeeder(raw), pump.output)
    }

    /// Publishes the program's exit record (the first one counts).
    pub fn exited(&self, status: ExitStatus) {
        self.status_tx.send_if_modified(|slot| {
            if slot.is_none() {
                *slot = Some(status);
                true
            } else {
                false
            }
        });
    }

    /// Records that the transport to the program broke (`backend` names what
    /// the program runs in, `"Docker container"`, `"SSH host"`), and
    /// publishes an unknown exit. Call it before the output ends: a shell
    /// asks [`crate::PtySession::connection_lost`] as soon as it does.
    pub fn lost(&self, backend: &'static str, source: Box<dyn std::error::Error + Send + Sync>) {
        let _ = self
            .lost
            .set(std::sync::Arc::new(crate::PtyError::Disconnected {
                backend,
                source,
            }));
        self.exited(ExitStatus::unknown());
    }

    /// Why the transport broke, once [`SessionPlumbing::lost`] said so.
    pub fn connection_lost(&self) -> Option<std::sync::Arc<crate::PtyError>> {
        self.lost.get().cloned()
    }

    /// After the session's processes were signalled: waits up to `within`
    /// for the exit report (else [`ExitStatus::unknown`]), then ends the
    /// output stream.
    pub async fn settle(&self, within: std::time::Duration) -> ExitStatus {
        let status = tokio::time::timeout(within, self.wait())
            .await
            .unwrap_or_else(|_| ExitStatus::unknown());
        self.close();
        status
    }

    /// Ends the output stream now (the session is being closed).
    pub fn close(&self) {
        let _ = self.closed.send(true);
    }

    /// The exit record, once published.
    pub fn status(&self) -> Option<ExitStatus> {
        *self.status.borrow()
    }

    /// Waits for the exit record ([`ExitStatus::unknown`] if the plumbing
    /// went away without one).
    pub async fn wait(&self) -> ExitStatus {
        pump::wait_exit(&self.status).await
    }

    /// The session's scrollback.
    pub fn scrollback(&self) -> ScrollbackHandle {
        self.scrollback.clone()
    }
}

/// Where a backend's reader hands over terminal output. Dropping every
/// clone is end-of-file.
#[derive(Debug, Clone)]
pub struct OutputFeeder(mpsc::Sender<Bytes>);

impl OutputFeeder {
    /// Hands over a chunk, waiting while the consumer is behind; `false` once
    /// the output has ended (the session was closed).
    pub async fn push(&self, chunk: Bytes) -> bool {
        self.0.send(chunk).await.is_ok()
    }
}
