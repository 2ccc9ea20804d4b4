//! The Docker side of a [`RemoteSession`]: an exec with a terminal, helper
//! execs next to it, and this host's view of it when the daemon runs here.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::LogOutput;
use bytes::Bytes;
use dsh_pty::TermSize;
use dsh_pty::remote::{Ended, Helper, LocalView, Ran, RemoteLink, RemoteSession, TerminalOutput};
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::container::Watched;
use crate::exec;
use crate::{Container, DockerError};

/// The exec's terminal output, as bollard yields it.
pub(crate) type ExecOutput =
    Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// A shell (or any program) running in a Docker container through an exec
/// with a terminal. Made by [`crate::DockerBackend`].
pub type DockerSession = RemoteSession<DockerLink>;

/// How a [`DockerSession`] reaches its program: the exec's terminal, and
/// helper execs in the same container as the session's user. Made by
/// [`crate::DockerBackend`].
pub struct DockerLink {
    pub(crate) container: Container,
    pub(crate) exec_id: String,
    pub(crate) user: Option<String>,
    /// The container is the session's own: closing the session removes it.
    pub(crate) owned: bool,
    pub(crate) host_proc: bool,
    /// The container's memory and process limits, whose events its
    /// cgroup counts (a container this crate made with them).
    pub(crate) watched: Option<Watched>,
    pub(crate) input: tokio::sync::Mutex<Pin<Box<dyn AsyncWrite + Send>>>,
}

impl std::fmt::Debug for DockerLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerLink")
            .field("container", &self.container.name())
            .field("exec", &self.exec_id)
            .field("owned", &self.owned)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl RemoteLink for DockerLink {
    const NAME: &'static str = "docker";
    const WHAT: &'static str = "Docker container";
    const SCRATCH_WHAT: &'static str = "writing a scratch file in the container";
    type Error = DockerError;

    /// Runs as the session's user: the container's root usually lacks
    /// `CAP_SYS_PTRACE`, so only the same user may read the session's tag
    /// in its processes' environment.
    async fn run_sh(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<Ran, DockerError> {
        exec::run_sh(&self.container, self.user.as_deref(), script, args, stdin).await
    }

    async fn start_helper(
        &self,
        script: &str,
        args: &[&str],
    ) -> Result<Box<dyn Helper>, DockerError> {
        exec::start_helper(&self.container, self.user.as_deref(), script, args).await
    }

    async fn write(&self, data: &[u8]) -> std::io::Result<()> {
        let mut input = self.input.lock().await;
        input.write_all(data).await?;
        input.flush().await
    }

    async fn resize(&self, size: TermSize) -> Result<(), DockerError> {
        let options = bollard::query_parameters::ResizeExecOptions {
            h: i32::from(size.rows),
            w: i32::from(size.cols),
        };
        self.container
            .docker()
            .resize_exec(&self.exec_id, options)
            .await
            .map_err(|source| DockerError::Api {
                what: "resizing the exec's terminal",
                source,
            })
    }

    /// Removes the session's own container; a shared one stays.
    async fn close(&self) -> Result<(), DockerError> {
        if self.owned {
            self.container.remove().await?;
        }
        Ok(())
    }

    fn close_ends_all(&self) -> bool {
        self.owned
    }

    /// The counters of the container's cgroup, read inside it (where
    /// `/sys/fs/cgroup` is the container's own), when it was made with a
    /// memory or process limit. In a container several sessions share,
    /// the counters are the whole container's.
    async fn limit_events(&self) -> Option<dsh_pty::LimitEvents> {
        let watched = self.watched?;
        let ran = match self.run_sh(CGROUP_EVENTS_SCRIPT, &[], None).await {
            Ok(ran) => ran,
            Err(e) => {
                tracing::debug!(error = %e, "reading the container's cgroup events failed");
                return None;
            }
        };
        let (oom_kills, forks_refused) = cgroup_counters(&String::from_utf8_lossy(&ran.stdout))?;
        Some(
            dsh_pty::LimitEvents::new(oom_kills.unwrap_or(0), forks_refused.unwrap_or(0))
                .against(watched.memory, watched.pids),
        )
    }

    async fn local_view(&self, tag: &str) -> Option<LocalView> {
        if !self.host_proc {
            return None;
        }
        let pid = self
            .container
            .docker()
            .inspect_exec(&self.exec_id)
            .await
            .ok()?
            .pid?;
        // `/proc` is read on the blocking pool.
        let tag = tag.to_owned();
        tokio::task::spawn_blocking(move || host_view(pid, &tag))
            .await
            .ok()
            .flatten()
    }
}

/// Prints the event files of the container's cgroup as seen inside it, each
/// after a `file NAME` line: cgroup v2's `memory.events` and `pids.events`,
/// v1's `memory/memory.oom_control` and `pids/pids.events`.
const CGROUP_EVENTS_SCRIPT: &str = r#"cd /sys/fs/cgroup 2>/dev/null || exit 0
for f in memory.events memory/memory.oom_control pids.events pids/pids.events; do
  [ -r "$f" ] && { echo "file $f"; cat "$f"; }
done
exit 0"#;

/// The memory kills (`oom_kill`) and refused forks (`max`) in what
/// [`CGROUP_EVENTS_SCRIPT`] printed, each where its file was there; `None`
/// when neither was.
fn cgroup_counters(text: &str) -> Option<(Option<u64>, Option<u64>)> {
    let (mut oom_kills, mut forks_refused) = (None, None);
    let mut file = "";
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("file ") {
            file = name;
            continue;
        }
        let Some((key, value)) = line.split_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            continue;
        };
        let memory = file.starts_with("memory");
        match key {
            "oom_kill" if memory && oom_kills.is_none() => oom_kills = Some(value),
            "max" if file.starts_with("pids") && forks_refused.is_none() => {
                forks_refused = Some(value);
            }
            _ => {}
        }
    }
    (oom_kills.is_some() || forks_refused.is_some()).then_some((oom_kills, forks_refused))
}

/// This host's view of the exec's process: its `/proc` entry carries the
/// session's tag when the daemon runs here (and we may read it). Asked once
/// the program runs (right after the exec starts, the process may still be
/// `runc init`).
#[cfg(target_os = "linux")]
fn host_view(pid: i64, tag: &str) -> Option<LocalView> {
    let pid = i32::try_from(pid).ok().filter(|&p| p > 0)?;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let wanted = format!("{}={tag}", dsh_pty::remote::TAG_VAR);
    if !environ.split(|&b| b == 0).any(|v| v == wanted.as_bytes()) {
        return None;
    }
    let tty = std::fs::read_link(format!("/proc/{pid}/fd/0")).ok()?;
    Some(LocalView::new(pid, tty))
}

#[cfg(not(target_os = "linux"))]
fn host_view(_pid: i64, _tag: &str) -> Option<LocalView> {
    None
}

/// The exec's terminal output, then its exit code or what went away.
pub(crate) struct ExecTerminal {
    pub(crate) output: ExecOutput,
    pub(crate) container: Container,
    pub(crate) exec_id: String,
    /// Why reading the output failed, if it did.
    pub(crate) broke: Option<DockerError>,
}

#[async_trait]
impl TerminalOutput for ExecTerminal {
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            match self.output.next().await? {
                Ok(
                    LogOutput::Console { message }
                    | LogOutput::StdOut { message }
                    | LogOutput::StdErr { message },
                ) => return Some(message),
                Ok(LogOutput::StdIn { .. }) => {}
                Err(e) => {
                    self.broke = Some(DockerError::Api {
                        what: "reading the shell's terminal",
                        source: e,
                    });
                    return None;
                }
            }
        }
    }

    /// The exit code, unless the container or the daemon went away.
    async fn ended(&mut self) -> Ended {
        let container = &self.container;
        let exit = match gone(container, false).await {
            None => exec::exit_code(container, &self.exec_id).await,
            Some(e) => Err(e),
        };
        // A kill by signal may be the container's own end (`docker rm -f`,
        // `docker stop`), which the daemon reports a moment after the exec's.
        let exit = match exit {
            Ok(code) if code > 128 => match gone(container, true).await {
                Some(e) => Err(e),
                None => Ok(code),
            },
            other => other,
        };
        match exit {
            Ok(code) => Ok(exec::exec_status(code)),
            Err(e) => {
                let cause = match self.broke.take() {
                    Some(b) if !e.is_gone() => b,
                    _ => e,
                };
                Err(Box::new(cause))
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::cgroup_counters;

    #[test]
    fn counters_come_from_either_cgroup_version() {
        let v2 = "file memory.events\nlow 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\nfile pids.events\nmax 7\n";
        assert_eq!(cgroup_counters(v2), Some((Some(2), Some(7))));
        let v1 = "file memory/memory.oom_control\noom_kill_disable 0\nunder_oom 0\noom_kill 1\nfile pids/pids.events\nmax 0\n";
        assert_eq!(cgroup_counters(v1), Some((Some(1), Some(0))));
        assert_eq!(
            cgroup_counters("file pids.events\nmax 3\n"),
            Some((None, Some(3)))
        );
        assert_eq!(cgroup_counters(""), None);
    }
}
