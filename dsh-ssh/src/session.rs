//! A shell on an SSH host: a session channel with a terminal.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use dsh_pty::remote::{TREE_SCRIPT, scratch_dir};
use dsh_pty::{
    ExitStatus, Foreground, OutputFeeder, OutputStream, PtyError, PtySession, ScrollbackHandle,
    SessionPlumbing, Signal, TermSize,
};
use russh::ChannelMsg;
use russh::client::Msg;
use russh::{ChannelReadHalf, ChannelWriteHalf};
use tokio::runtime::Handle;

use crate::host::signal_number;
use crate::{SshError, SshHost};

/// What the session is called in errors.
pub(crate) const WHAT: &str = "SSH host";

/// How long a session waits for the exit report after the tree was killed.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// A shell (or any program) running on an SSH host in a terminal of its
/// own. Made by [`crate::SshBackend`].
pub struct SshSession {
    pub(crate) host: SshHost,
    pub(crate) tag: String,
    pub(crate) writer: Arc<ChannelWriteHalf<Msg>>,
    pub(crate) plumbing: Arc<SessionPlumbing>,
    pub(crate) output: Option<OutputStream>,
    pub(crate) probe: dsh_pty::remote::ForegroundProbe,
    pub(crate) ended: AtomicBool,
    pub(crate) runtime: Handle,
}

impl std::fmt::Debug for SshSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshSession")
            .field("host", &self.host.target().host)
            .field("tag", &self.tag)
            .finish_non_exhaustive()
    }
}

/// Moves the channel's output into the plumbing and publishes how the
/// program ended: `exit-status` (a code) or `exit-signal` (a signal), or
/// that the connection broke before either came.
pub(crate) async fn read_output(
    mut reader: ChannelReadHalf,
    feeder: OutputFeeder,
    plumbing: Arc<SessionPlumbing>,
    conn: crate::host::Conn,
) {
    let mut exit = None;
    while let Some(msg) = reader.wait().await {
        match msg {
            ChannelMsg::Data { data } | ChannelMsg::ExtendedData { data, .. } => {
                let delivered = feeder.push(data).await;
                if !delivered {
                    break;
                }
            }
            ChannelMsg::ExitStatus { exit_status } => {
                exit = Some(ExitStatus::from_code(
                    i32::try_from(exit_status).unwrap_or(-1),
                ));
            }
            ChannelMsg::ExitSignal { signal_name, .. } => {
                exit = Some(ExitStatus::from_signal(signal_number(&signal_name)));
            }
            _ => {}
        }
    }
    // Tell how it ended before the output ends: the shell asks at once.
    match exit {
        Some(status) => plumbing.exited(status),
        None => {
            let why = if conn.is_closed() {
                "the SSH connection closed"
            } else {
                "the channel closed without an exit status"
            };
            plumbing.lost(WHAT, why.into());
        }
    }
    drop(feeder);
}

/// Runs the process-tree script of the session tagged `tag` on the host.
async fn run_tree(host: &SshHost, tag: &str, op: &str, arg: &str) -> Result<crate::Ran, SshError> {
    let dir = scratch_dir(tag);
    host.run_sh(TREE_SCRIPT, &[tag, op, arg, &dir], None).await
}

impl SshSession {
    fn tree_later(&self, op: &'static str, arg: String) {
        let host = self.host.clone();
        let tag = self.tag.clone();
        self.runtime.spawn(async move {
            if let Err(e) = run_tree(&host, &tag, op, &arg).await {
                tracing::debug!(error = %e, op, "the process-tree script failed");
            }
        });
    }

    fn end_now(&self) {
        if self.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        self.plumbing.close();
        self.tree_later("tree", "0".to_owned());
        let writer = Arc::clone(&self.writer);
        self.runtime.spawn(async move {
            let _ = writer.close().await;
        });
    }
}

#[async_trait]
impl PtySession for SshSession {
    fn pid(&self) -> Option<u32> {
        None
    }

    async fn write_all(&self, data: &[u8]) -> Result<(), PtyError> {
        if self.plumbing.status().is_some() {
            return Err(PtyError::WriteAfterExit);
        }
        self.writer.data(data).await.map_err(|source| {
            if self.plumbing.status().is_some() {
                PtyError::WriteAfterExit
            } else {
                PtyError::Disconnected {
                    backend: WHAT,
                    source: Box::new(source),
                }
            }
        })
    }

    fn take_output(&mut self) -> Option<OutputStream> {
        self.output.take()
    }

    fn scrollback(&self) -> ScrollbackHandle {
        self.plumbing.scrollback()
    }

    fn resize(&self, size: TermSize) -> Result<(), PtyError> {
        let writer = Arc::clone(&self.writer);
        self.runtime.spawn(async move {
            let _ = writer
                .window_change(u32::from(size.cols), u32::from(size.rows), 0, 0)
                .await;
        });
        Ok(())
    }

    fn signal_foreground(&self, signal: Signal) -> Result<(), PtyError> {
        let name = signal.name().trim_start_matches("SIG").to_owned();
        self.tree_later("fg", name);
        Ok(())
    }

    fn foreground(&self) -> Result<Foreground, PtyError> {
        self.probe.latest().ok_or(PtyError::Unsupported {
            backend: "ssh",
            what: "seeing the remote terminal's foreground (the host did not answer)",
        })
    }

    async fn refresh_foreground(&self) {
        if self.plumbing.status().is_none() {
            let (host, tag) = (self.host.clone(), self.tag.clone());
            self.probe.refresh(|| crate::probe::start(host, tag)).await;
        }
    }

    fn pids_are_local(&self) -> bool {
        false
    }

    async fn kill_tree(&self, grace: Duration) -> Result<ExitStatus, PtyError> {
        let tenths = (grace.as_millis() / 100).max(1).to_string();
        self.ended.store(true, Ordering::SeqCst);
        if let Err(e) = run_tree(&self.host, &self.tag, "tree", &tenths).await {
            tracing::debug!(error = %e, "killing the session's processes failed");
        }
        let status = self.plumbing.settle(EXIT_WAIT).await;
        let _ = self.writer.close().await;
        Ok(status)
    }

    fn kill_now(&self) {
        self.end_now();
    }

    fn status(&self) -> Option<ExitStatus> {
        self.plumbing.status()
    }

    async fn wait(&self) -> ExitStatus {
        self.plumbing.wait().await
    }

    fn connection_lost(&self) -> Option<Arc<PtyError>> {
        self.plumbing.connection_lost()
    }

    async fn put_scratch_file(&self, name: &str, data: &[u8]) -> Result<PathBuf, PtyError> {
        let dir = scratch_dir(&self.tag);
        let ran = self
            .host
            .run_sh(dsh_pty::remote::SCRATCH_SCRIPT, &[&dir, name], Some(data))
            .await
            .map_err(|e| PtyError::Disconnected {
                backend: WHAT,
                source: Box::new(e),
            })?;
        if !ran.status.success() {
            return Err(PtyError::Io {
                what: "writing a scratch file on the SSH host",
                source: std::io::Error::other(ran.stderr_text()),
            });
        }
        Ok(PathBuf::from(dir).join(name))
    }
}

impl Drop for SshSession {
    fn drop(&mut self) {
        self.end_now();
    }
}
