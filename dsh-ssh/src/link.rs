//! The SSH side of a [`RemoteSession`]: a session channel with a terminal,
//! and channels of their own for the commands run next to it.

use async_trait::async_trait;
use bytes::Bytes;
use dsh_pty::remote::{Ended, Helper, Ran, RemoteLink, RemoteSession, TerminalOutput};
use dsh_pty::{ExitStatus, TermSize};
use russh::client::Msg;
use russh::{ChannelMsg, ChannelReadHalf, ChannelWriteHalf};

use crate::host::{Conn, sh_line, signal_number};
use crate::{SshError, SshHost};

/// A shell (or any program) running on an SSH host in a terminal of its
/// own. Made by [`crate::SshBackend`].
pub type SshSession = RemoteSession<SshLink>;

/// How an [`SshSession`] reaches its program: the writing half of its
/// terminal's channel, and the host for commands on channels of their own.
/// Made by [`crate::SshBackend`].
pub struct SshLink {
    pub(crate) host: SshHost,
    pub(crate) writer: ChannelWriteHalf<Msg>,
}

impl std::fmt::Debug for SshLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshLink")
            .field("host", &self.host.target().host)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl RemoteLink for SshLink {
    const NAME: &'static str = "ssh";
    const WHAT: &'static str = "SSH host";
    const SCRATCH_WHAT: &'static str = "writing a scratch file on the SSH host";
    type Error = SshError;

    async fn run_sh(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<Ran, SshError> {
        self.host.run_sh(script, args, stdin).await
    }

    async fn start_helper(&self, script: &str, args: &[&str]) -> Result<Box<dyn Helper>, SshError> {
        let channel = self.host.channel().await?;
        channel
            .exec(true, sh_line(script, args))
            .await
            .map_err(|source| SshError::Channel {
                what: "starting a helper",
                source,
            })?;
        let (reader, writer) = channel.split();
        Ok(Box::new(ChannelHelper { writer, reader }))
    }

    async fn write(&self, data: &[u8]) -> std::io::Result<()> {
        self.writer.data(data).await.map_err(std::io::Error::other)
    }

    async fn resize(&self, size: TermSize) -> Result<(), SshError> {
        self.writer
            .window_change(u32::from(size.cols), u32::from(size.rows), 0, 0)
            .await
            .map_err(|source| SshError::Channel {
                what: "resizing the terminal",
                source,
            })
    }

    /// Closes the terminal's channel; one the host closed already is no
    /// error.
    async fn close(&self) -> Result<(), SshError> {
        let _ = self.writer.close().await;
        Ok(())
    }
}

/// The terminal channel's output, then `exit-status` (a code) or
/// `exit-signal` (a signal), or that the connection broke before either
/// came.
pub(crate) struct ChannelTerminal {
    pub(crate) reader: ChannelReadHalf,
    pub(crate) conn: Conn,
    pub(crate) exit: Option<ExitStatus>,
}

#[async_trait]
impl TerminalOutput for ChannelTerminal {
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            match self.reader.wait().await? {
                ChannelMsg::Data { data } | ChannelMsg::ExtendedData { data, .. } => {
                    return Some(data);
                }
                ChannelMsg::ExitStatus { exit_status } => {
                    self.exit = Some(ExitStatus::from_code(
                        i32::try_from(exit_status).unwrap_or(-1),
                    ));
                }
                ChannelMsg::ExitSignal { signal_name, .. } => {
                    self.exit = Some(ExitStatus::from_signal(signal_number(&signal_name)));
                }
                _ => {}
            }
        }
    }

    async fn ended(&mut self) -> Ended {
        match self.exit {
            Some(status) => Ok(status),
            None if self.conn.is_closed() => Err("the SSH connection closed".into()),
            None => Err("the channel closed without an exit status".into()),
        }
    }
}

/// A helper's channel.
struct ChannelHelper {
    writer: ChannelWriteHalf<Msg>,
    reader: ChannelReadHalf,
}

#[async_trait]
impl Helper for ChannelHelper {
    async fn send(&mut self, bytes: &[u8]) -> bool {
        self.writer.data(bytes).await.is_ok()
    }

    async fn recv(&mut self) -> Option<Bytes> {
        loop {
            match self.reader.wait().await? {
                ChannelMsg::Data { data } => return Some(data),
                ChannelMsg::Eof | ChannelMsg::Close | ChannelMsg::ExitStatus { .. } => return None,
                _ => {}
            }
        }
    }
}
