//! A shell running in a container: an exec with a terminal.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::LogOutput;
use dsh_pty::{
    ExitStatus, Foreground, OutputFeeder, OutputStream, PtyError, PtySession, ScrollbackHandle,
    SessionPlumbing, Signal, TermSize,
};
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::runtime::Handle;

use crate::exec::{self, run_sh};
use crate::{Container, DockerError};
use dsh_pty::remote::{TREE_SCRIPT, scratch_dir};

/// What the session is called in errors.
pub(crate) const WHAT: &str = "Docker container";

/// How long a session waits for its exec to report an exit after the tree
/// was killed.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// The exec's terminal output, as bollard yields it.
pub(crate) type ExecOutput =
    Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// This host's view of the session's processes, when the daemon runs on
/// this machine and its `/proc` shows them.
#[derive(Debug, Clone)]
pub(crate) struct HostView {
    pub(crate) pid: i32,
    // Read only where the platform can inspect a foreground (Unix).
    #[cfg_attr(not(unix), allow(dead_code))]
    pub(crate) tty: PathBuf,
}

/// A shell (or any program) running in a Docker container through an exec
/// with a terminal. Made by [`crate::DockerBackend`].
pub struct DockerSession {
    pub(crate) container: Container,
    pub(crate) exec_id: String,
    pub(crate) tag: String,
    pub(crate) user: Option<String>,
    pub(crate) owned: bool,
    pub(crate) input: tokio::sync::Mutex<Pin<Box<dyn AsyncWrite + Send>>>,
    pub(crate) plumbing: Arc<SessionPlumbing>,
    pub(crate) output: Option<OutputStream>,
    /// This host's view, settled at the first foreground refresh (when the
    /// shell is known to run) and never changed after.
    pub(crate) host: OnceLock<HostView>,
    pub(crate) host_proc: bool,
    pub(crate) settled: AtomicBool,
    /// Asks the container for the foreground when this host cannot see it.
    pub(crate) probe: dsh_pty::remote::ForegroundProbe,
    pub(crate) ended: AtomicBool,
    pub(crate) runtime: Handle,
}

impl std::fmt::Debug for DockerSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSession")
            .field("container", &self.container.name())
            .field("exec", &self.exec_id)
            .field("owned", &self.owned)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

/// Moves the exec's output into the plumbing; when it ends, publishes the
/// exit code, or records that the container or the daemon went away.
pub(crate) async fn read_output(
    mut output: ExecOutput,
    feeder: OutputFeeder,
    plumbing: Arc<SessionPlumbing>,
    container: Container,
    exec_id: String,
) {
    let mut broke = None;
    while let Some(item) = output.next().await {
        match item {
            Ok(
                LogOutput::Console { message }
                | LogOutput::StdOut { message }
                | LogOutput::StdErr { message },
            ) => {
                if !feeder.push(message).await {
                    break;
                }
            }
            Ok(LogOutput::StdIn { .. }) => {}
            Err(e) => {
                broke = Some(DockerError::Api {
                    what: "reading the shell's terminal",
                    source: e,
                });
                break;
            }
        }
    }
    // The program ended, or the transport did: tell which before the output
    // ends (the shell asks as soon as it sees the end).
    let exit = match gone(&container, false).await {
        None => exec::exit_code(&container, &exec_id).await,
        Some(e) => Err(e),
    };
    // A kill by signal may be the container's own end (`docker rm -f`,
    // `docker stop`), which the daemon reports a moment after the exec's.
    let exit = match exit {
        Ok(code) if code > 128 => match gone(&container, true).await {
            Some(e) => Err(e),
            None => Ok(code),
        },
        other => other,
    };
    match exit {
        Ok(code) => plumbing.exited(ExitStatus::from_code(i32::try_from(code).unwrap_or(-1))),
        Err(e) => {
            let cause = match broke {
                Some(b) if !e.is_gone() => b,
                _ => e,
            };
            plumbing.lost(WHAT, Box::new(cause));
        }
    }
    drop(feeder);
}

/// Why the container can no longer run the session, if it cannot: gone,
/// stopped, or the daemon unreachable. With `linger`, keeps asking for a
/// moment while it still runs.
async fn gone(container: &Container, linger: bool) -> Option<DockerError> {
    let tries = if linger { 8 } else { 1 };
    for i in 0..tries {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if let Err(e) = Container::existing(container.docker().clone(), container.id()).await {
            return Some(e);
        }
    }
    None
}

/// Runs the process-tree script of the session tagged `tag`, as the
/// session's user: the container's root usually lacks `CAP_SYS_PTRACE`, so
/// only the same user may read the tag in the processes' environment.
async fn run_tree(
    container: &Container,
    user: Option<&str>,
    tag: &str,
    op: &str,
    arg: &str,
) -> Result<exec::Ran, DockerError> {
    let dir = scratch_dir(tag);
    run_sh(container, user, TREE_SCRIPT, &[tag, op, arg, &dir], None).await
}

impl DockerSession {
    /// Runs `op arg` of the process-tree script in the background.
    fn tree_later(&self, op: &'static str, arg: String) {
        let container = self.container.clone();
        let user = self.user.clone();
        let tag = self.tag.clone();
        self.runtime.spawn(async move {
            if let Err(e) = run_tree(&container, user.as_deref(), &tag, op, &arg).await {
                tracing::debug!(error = %e, op, "the process-tree script failed");
            }
        });
    }

    /// Kills everything without grace, in the background.
    fn end_now(&self) {
        if self.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        self.plumbing.close();
        if self.owned {
            let container = self.container.clone();
            self.runtime.spawn(async move {
                let _ = container.remove().await;
            });
        } else {
            self.tree_later("tree", "0".to_owned());
        }
    }
}

#[async_trait]
impl PtySession for DockerSession {
    fn pid(&self) -> Option<u32> {
        self.host.get().and_then(|h| u32::try_from(h.pid).ok())
    }

    async fn write_all(&self, data: &[u8]) -> Result<(), PtyError> {
        if self.plumbing.status().is_some() {
            return Err(PtyError::WriteAfterExit);
        }
        let mut input = self.input.lock().await;
        let written = async {
            input.write_all(data).await?;
            input.flush().await
        };
        written.await.map_err(|source| {
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
        let docker = self.container.docker().clone();
        let id = self.exec_id.clone();
        self.runtime.spawn(async move {
            let options = bollard::query_parameters::ResizeExecOptions {
                h: i32::from(size.rows),
                w: i32::from(size.cols),
            };
            if let Err(e) = docker.resize_exec(&id, options).await {
                tracing::debug!(error = %e, "resizing the exec's terminal failed");
            }
        });
        Ok(())
    }

    fn signal_foreground(&self, signal: Signal) -> Result<(), PtyError> {
        let name = signal.name().trim_start_matches("SIG").to_owned();
        self.tree_later("fg", name);
        Ok(())
    }

    fn foreground(&self) -> Result<Foreground, PtyError> {
        #[cfg(unix)]
        if let Some(host) = self.host.get() {
            return dsh_pty::foreground_of_leader(host.pid, &host.tty);
        }
        self.probe.latest().ok_or(PtyError::Unsupported {
            backend: "docker",
            what: "seeing the terminal's foreground (the container did not answer)",
        })
    }

    async fn refresh_foreground(&self) {
        if !self.settled.swap(true, Ordering::SeqCst) && self.host_proc {
            // The first refresh comes once the shell runs: look for it in
            // this host's /proc now, once. The view never changes after, so
            // process ids keep one meaning for the session's lifetime.
            // `/proc` is read on the blocking pool.
            let tag = self.tag.clone();
            if let Ok(info) = self.container.docker().inspect_exec(&self.exec_id).await
                && let Some(pid) = info.pid
                && let Ok(Some(view)) =
                    tokio::task::spawn_blocking(move || crate::backend::host_view(pid, &tag)).await
            {
                let _ = self.host.set(view);
            }
        }
        if self.host.get().is_none() && self.plumbing.status().is_none() {
            let (container, user, tag) =
                (self.container.clone(), self.user.clone(), self.tag.clone());
            self.probe
                .refresh(|| crate::exec::start_probe(container, user, tag))
                .await;
        }
    }

    fn pids_are_local(&self) -> bool {
        self.host.get().is_some()
    }

    async fn kill_tree(&self, grace: Duration) -> Result<ExitStatus, PtyError> {
        let tenths = (grace.as_millis() / 100).max(1).to_string();
        let killed = run_tree(
            &self.container,
            self.user.as_deref(),
            &self.tag,
            "tree",
            &tenths,
        )
        .await;
        self.ended.store(true, Ordering::SeqCst);
        if let Err(e) = &killed {
            tracing::debug!(error = %e, "killing the session's processes failed");
        }
        let status = self.plumbing.settle(EXIT_WAIT).await;
        if self.owned {
            self.container
                .remove()
                .await
                .map_err(|e| PtyError::Disconnected {
                    backend: WHAT,
                    source: Box::new(e),
                })?;
        }
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
        let ran = run_sh(
            &self.container,
            self.user.as_deref(),
            dsh_pty::remote::SCRATCH_SCRIPT,
            &[&dir, name],
            Some(data),
        )
        .await
        .map_err(|e| PtyError::Disconnected {
            backend: WHAT,
            source: Box::new(e),
        })?;
        if ran.code != 0 {
            return Err(PtyError::Io {
                what: "writing a scratch file in the container",
                source: std::io::Error::other(ran.stderr_text()),
            });
        }
        Ok(PathBuf::from(dir).join(name))
    }
}

impl Drop for DockerSession {
    fn drop(&mut self) {
        self.end_now();
    }
}
