//! The [`PtyBackend`] that starts programs on an SSH host.

use async_trait::async_trait;
use dsh_pty::{PtyBackend, PtyError, PtySession, SpawnSpec, SpecField, SpecSupport};
use russh::Pty;

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

#[async_trait]
impl PtyBackend for SshBackend {
    fn name(&self) -> &'static str {
        "ssh"
    }

    fn is_local(&self) -> bool {
        false
    }

    /// All but hooks and limits; the environment through the shared
    /// prologue ([`dsh_pty::remote::command_line`]), the terminal's modes
    /// in its request.
    fn keeps(&self) -> SpecSupport {
        SpecSupport::ALL
            .without(SpecField::PreExec, "confinement hooks run on this machine")
            .without(
                SpecField::Limits,
                "a cgroup on the remote host is not made by this backend",
            )
    }

    async fn spawn(&self, spec: SpawnSpec) -> Result<Box<dyn PtySession>, PtyError> {
        self.keeps().check(self.name(), &spec)?;
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
            .exec(true, dsh_pty::remote::command_line(&spec, &tag))
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
