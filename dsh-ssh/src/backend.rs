//! The [`PtyBackend`] that starts programs on an SSH host.

use async_trait::async_trait;
use dsh_pty::{PtyBackend, PtyError, PtySession, SpawnSpec};
use russh::Pty;

use crate::host::quote;
use crate::link::{ChannelTerminal, SshLink, SshSession};
use crate::{SshError, SshHost};

/// Starts programs on an SSH host, each in a terminal of its own (a session
/// channel with `pty-req` and `exec`), over one shared connection.
///
/// ```no_run
/// use std::sync::Arc;
/// use dsh_ssh::{SshBackend, SshHost, SshTarget};
/// use dsh_shell_persistent::{ShellConfig, ShellPool};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let target = SshTarget::parse("agent@build-7:22").ok_or("bad target")?;
/// let host = SshHost::connect(target).await?;
/// let mut config = ShellConfig::new("/home/agent/task");
/// config.backend = Arc::new(SshBackend::new(host));
/// let shell = ShellPool::new(config)?;
/// println!("{}", shell.run("agent", "uname -a").await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SshBackend {
    host: SshHost,
}

impl SshBackend {
    /// Runs every session on `host`.
    pub fn new(host: SshHost) -> Self {
        SshBackend { host }
    }
}

fn spawn_failed(spec: &SpawnSpec, e: SshError) -> PtyError {
    PtyError::Spawn {
        program: spec.program().to_string_lossy().into_owned(),
        source: std::io::Error::other(e),
    }
}

/// The command line for the user's login shell on the host: change to the
/// working directory, set the environment (with the session's tag), and
/// replace itself with the program.
fn command_line(spec: &SpawnSpec, tag: &str) -> String {
    let mut line = String::new();
    if let Some(dir) = spec.get_cwd() {
        line.push_str(&format!("cd -- {} && ", quote(&dir.to_string_lossy())));
    }
    line.push_str("exec env");
    // `env` takes its options before the assignments.
    for (key, _) in spec.get_env().iter().filter(|(_, v)| v.is_none()) {
        line.push_str(&format!(" -u {}", quote(&key.to_string_lossy())));
    }
    for (key, value) in spec.get_env() {
        if let Some(value) = value {
            let pair = format!("{}={}", key.to_string_lossy(), value.to_string_lossy());
            line.push_str(&format!(" {}", quote(&pair)));
        }
    }
    line.push_str(&format!(" {}={tag}", dsh_pty::remote::TAG_VAR));
    line.push(' ');
    line.push_str(&quote(&spec.program().to_string_lossy()));
    for arg in spec.get_args() {
        line.push(' ');
        line.push_str(&quote(&arg.to_string_lossy()));
    }
    line
}

#[async_trait]
impl PtyBackend for SshBackend {
    fn name(&self) -> &'static str {
        "ssh"
    }

    fn is_local(&self) -> bool {
        false
    }

    async fn spawn(&self, spec: SpawnSpec) -> Result<Box<dyn PtySession>, PtyError> {
        let limits = spec.get_limits();
        if !limits.is_empty() && !limits.best_effort {
            return Err(PtyError::Unsupported {
                backend: "ssh",
                what: "resource limits (a cgroup on the remote host is not made by this backend)",
            });
        }
        if !spec.get_pre_exec().is_empty() {
            return Err(PtyError::Unsupported {
                backend: "ssh",
                what: "pre-exec confinement hooks (they run on this machine)",
            });
        }
        let tag = dsh_pty::remote::new_tag()?;
        let (channel, conn) = self
            .host
            .channel_on()
            .await
            .map_err(|e| spawn_failed(&spec, e))?;
        let size = spec.get_size();
        let term = spec
            .get_env()
            .iter()
            .find(|(k, _)| k == "TERM")
            .and_then(|(_, v)| v.as_ref())
            .map_or_else(|| "xterm".to_owned(), |v| v.to_string_lossy().into_owned());
        let mut modes = vec![(Pty::ECHO, u32::from(spec.get_echo()))];
        if !spec.get_output_processing() {
            modes.push((Pty::OPOST, 0));
        }
        channel
            .request_pty(
                true,
                &term,
                u32::from(size.cols),
                u32::from(size.rows),
                0,
                0,
                &modes,
            )
            .await
            .map_err(|source| {
                spawn_failed(
                    &spec,
                    SshError::Channel {
                        what: "requesting a terminal",
                        source,
                    },
                )
            })?;
        channel
            .exec(true, command_line(&spec, &tag))
            .await
            .map_err(|source| {
                spawn_failed(
                    &spec,
                    SshError::Channel {
                        what: "starting the shell",
                        source,
                    },
                )
            })?;
        let (reader, writer) = channel.split();
        let terminal = ChannelTerminal {
            reader,
            conn,
            exit: None,
        };
        tracing::debug!(host = %self.host.target().host, "shell channel started");
        let link = SshLink {
            host: self.host.clone(),
            writer,
        };
        Ok(Box::new(SshSession::start(link, tag, terminal, &spec)))
    }
}
