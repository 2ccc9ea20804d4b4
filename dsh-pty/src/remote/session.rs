//! [`RemoteSession`]: a program in a terminal elsewhere, reached through a
//! [`RemoteLink`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use tokio::runtime::Handle;

use super::probe::ForegroundProbe;
use super::{
    FOREGROUND_SCRIPT, LocalView, RemoteLink, SCRATCH_SCRIPT, TREE_SCRIPT, TerminalOutput,
    scratch_dir,
};
use crate::{
    ExitStatus, Foreground, OutputFeeder, OutputStream, PtyError, PtySession, ScrollbackHandle,
    SessionPlumbing, Signal, SpawnSpec, TermSize,
};

/// How long a session waits for the exit report after the tree was killed.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// How long a session waits for a reading of its link's limit counters.
const LIMITS_WAIT: Duration = Duration::from_secs(10);

/// A program running in a terminal elsewhere (a container, another host),
/// reached through the link `L` of its engine.
///
/// Every process of the session carries [`TAG_VAR`](super::TAG_VAR)`=<tag>`:
/// [`PtySession::end`] (and dropping the session, in the background) and
/// [`PtySession::signal_foreground`] run [`TREE_SCRIPT`] next to them; [`PtySession::put_scratch_file`] runs [`SCRATCH_SCRIPT`]; the
/// foreground comes from this host's `/proc` when the link gives a
/// [`LocalView`] (and the feature `native` is on), else from
/// [`FOREGROUND_SCRIPT`] kept running as a helper.
pub struct RemoteSession<L: RemoteLink> {
    link: Arc<L>,
    tag: String,
    plumbing: Arc<SessionPlumbing>,
    output: Option<OutputStream>,
    /// This host's view, settled at the first foreground refresh (when the
    /// program is known to run) and never changed after, so process ids
    /// keep one meaning for the session's lifetime.
    local: OnceLock<LocalView>,
    looked: AtomicBool,
    probe: ForegroundProbe,
    ended: AtomicBool,
    runtime: Handle,
    /// The last reading of the link's limit counters.
    limits: std::sync::Mutex<Option<crate::LimitEvents>>,
}

impl<L: RemoteLink> std::fmt::Debug for RemoteSession<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSession")
            .field("link", &self.link)
            .field("tag", &self.tag)
            .field("local", &self.local.get())
            .finish_non_exhaustive()
    }
}

impl<L: RemoteLink> RemoteSession<L> {
    /// The session of a program just started through `link` in a terminal
    /// whose environment carries [`TAG_VAR`](super::TAG_VAR)`=tag`, with
    /// `output` its terminal's output and `spec` what it was started with
    /// (the scrollback and drain grace). Call it inside a tokio runtime: it
    /// starts the reader task.
    pub fn start(link: L, tag: String, output: impl TerminalOutput, spec: &SpawnSpec) -> Self {
        let (plumbing, feeder, stream) = SessionPlumbing::start(spec);
        let plumbing = Arc::new(plumbing);
        tokio::spawn(read_output(output, feeder, Arc::clone(&plumbing), L::WHAT));
        RemoteSession {
            link: Arc::new(link),
            tag,
            plumbing,
            output: Some(stream),
            local: OnceLock::new(),
            looked: AtomicBool::new(false),
            probe: ForegroundProbe::default(),
            ended: AtomicBool::new(false),
            runtime: Handle::current(),
            limits: std::sync::Mutex::new(None),
        }
    }

    /// Runs `op arg` of the process-tree script in the background.
    fn tree_later(&self, op: &'static str, arg: String) {
        let link = Arc::clone(&self.link);
        let tag = self.tag.clone();
        self.runtime.spawn(async move {
            if let Err(e) = run_tree(link.as_ref(), &tag, op, &arg).await {
                tracing::debug!(error = %e, op, "the process-tree script failed");
            }
        });
    }

    /// Kills everything without grace, in the background (for `Drop`).
    fn end_in_background(&self) {
        if self.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        self.plumbing.close();
        let link = Arc::clone(&self.link);
        let tag = self.tag.clone();
        self.runtime.spawn(async move {
            let tree = async {
                if !link.close_ends_all()
                    && let Err(e) = run_tree(link.as_ref(), &tag, "tree", "0").await
                {
                    tracing::debug!(error = %e, "killing the session's processes failed");
                }
            };
            let (_, closed) = tokio::join!(tree, link.close());
            if let Err(e) = closed {
                tracing::debug!(error = %e, "closing the session failed");
            }
        });
    }

    fn disconnected(e: L::Error) -> PtyError {
        PtyError::Disconnected {
            backend: L::WHAT,
            source: Box::new(e),
        }
    }
}

/// Runs the process-tree script of the session tagged `tag`.
async fn run_tree<L: RemoteLink>(
    link: &L,
    tag: &str,
    op: &str,
    arg: &str,
) -> Result<super::Ran, L::Error> {
    let dir = scratch_dir(tag);
    link.run_sh(TREE_SCRIPT, &[tag, op, arg, &dir], None).await
}

/// Moves the terminal's output into the plumbing; when it ends, publishes
/// how the program ended, or that the transport broke.
async fn read_output(
    mut output: impl TerminalOutput,
    feeder: OutputFeeder,
    plumbing: Arc<SessionPlumbing>,
    what: &'static str,
) {
    while let Some(chunk) = output.next().await {
        if !feeder.push(chunk).await {
            break;
        }
    }
    // Tell how it ended before the output ends: the shell asks at once.
    match output.ended().await {
        Ok(status) => plumbing.exited(status),
        Err(why) => plumbing.lost(what, why),
    }
    drop(feeder);
}

#[async_trait]
impl<L: RemoteLink> PtySession for RemoteSession<L> {
    fn pid(&self) -> Option<u32> {
        self.local.get().and_then(|v| u32::try_from(v.pid).ok())
    }

    async fn write_all(&self, data: &[u8]) -> Result<(), PtyError> {
        if self.plumbing.status().is_some() {
            return Err(PtyError::WriteAfterExit);
        }
        self.link.write(data).await.map_err(|source| {
            if self.plumbing.status().is_some() {
                PtyError::WriteAfterExit
            } else {
                PtyError::Disconnected {
                    backend: L::WHAT,
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
        let link = Arc::clone(&self.link);
        self.runtime.spawn(async move {
            if let Err(e) = link.resize(size).await {
                tracing::debug!(error = %e, "resizing the terminal failed");
            }
        });
        Ok(())
    }

    fn signal_foreground(&self, signal: Signal) -> Result<(), PtyError> {
        let name = signal.name().trim_start_matches("SIG").to_owned();
        self.tree_later("fg", name);
        Ok(())
    }

    async fn foreground(&self) -> Result<Foreground, PtyError> {
        // The first look comes once the program runs: this host's view, if
        // the link has one, is settled then and never changed after.
        if !self.looked.swap(true, Ordering::SeqCst)
            && let Some(view) = self.link.local_view(&self.tag).await
        {
            let _ = self.local.set(view);
        }
        // Reading this host's `/proc` is the native backend's part.
        #[cfg(all(unix, feature = "native"))]
        if let Some(view) = self.local.get() {
            let (pid, tty) = (view.pid, view.tty.clone());
            return tokio::task::spawn_blocking(move || crate::foreground_of_leader(pid, &tty))
                .await
                .unwrap_or(Err(PtyError::Closed));
        }
        let unanswered = PtyError::Unsupported {
            backend: L::NAME,
            what: "seeing the terminal's foreground (the other side did not answer)",
        };
        if self.plumbing.status().is_some() {
            return Err(unanswered);
        }
        let link = Arc::clone(&self.link);
        let tag = self.tag.clone();
        self.probe
            .ask(|| async move {
                match link.start_helper(FOREGROUND_SCRIPT, &[&tag]).await {
                    Ok(helper) => Some(helper),
                    Err(e) => {
                        tracing::debug!(error = %e, "starting the foreground script failed");
                        None
                    }
                }
            })
            .await
            .ok_or(unanswered)
    }

    async fn end(&self, grace: Duration) -> Result<ExitStatus, PtyError> {
        if self.ended.swap(true, Ordering::SeqCst) {
            // Ended already (or ending in the background): its exit comes.
            return Ok(self.plumbing.settle(EXIT_WAIT).await);
        }
        if grace.is_zero() && self.link.close_ends_all() {
            // Closing the link ends everything (a container of its own).
            let closed = self.link.close().await;
            let status = self.plumbing.settle(EXIT_WAIT).await;
            closed.map_err(Self::disconnected)?;
            return Ok(status);
        }
        let tenths = if grace.is_zero() {
            0
        } else {
            (grace.as_millis() / 100).max(1)
        };
        if let Err(e) = run_tree(self.link.as_ref(), &self.tag, "tree", &tenths.to_string()).await {
            tracing::debug!(error = %e, "ending the session's processes failed");
        }
        let status = self.plumbing.settle(EXIT_WAIT).await;
        self.link.close().await.map_err(Self::disconnected)?;
        Ok(status)
    }

    fn status(&self) -> Option<ExitStatus> {
        self.plumbing.status()
    }

    async fn wait(&self) -> ExitStatus {
        self.plumbing.wait().await
    }

    fn limit_events(&self) -> Option<crate::LimitEvents> {
        *self
            .limits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks the link ([`RemoteLink::limit_events`]), for at most
    /// ten seconds; a failed or late reading keeps the last one.
    async fn refresh_limit_events(&self) {
        if let Ok(Some(now)) = tokio::time::timeout(LIMITS_WAIT, self.link.limit_events()).await {
            *self
                .limits
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(now);
        }
    }

    fn connection_lost(&self) -> Option<Arc<PtyError>> {
        self.plumbing.connection_lost()
    }

    async fn put_scratch_file(&self, name: &str, data: &[u8]) -> Result<PathBuf, PtyError> {
        let dir = scratch_dir(&self.tag);
        let ran = self
            .link
            .run_sh(SCRATCH_SCRIPT, &[&dir, name], Some(data))
            .await
            .map_err(Self::disconnected)?;
        if !ran.status.success() {
            return Err(PtyError::Io {
                what: L::SCRATCH_WHAT,
                source: std::io::Error::other(ran.stderr_text()),
            });
        }
        Ok(PathBuf::from(dir).join(name))
    }
}

impl<L: RemoteLink> Drop for RemoteSession<L> {
    fn drop(&mut self) {
        self.end_in_background();
    }
}
