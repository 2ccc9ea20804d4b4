//! The link to [`dsh_pty::remote::FOREGROUND_SCRIPT`] on the host: an exec
//! channel of its own.

use bytes::Bytes;
use dsh_pty::remote::{FOREGROUND_SCRIPT, ProbeLink};
use russh::client::Msg;
use russh::{ChannelMsg, ChannelReadHalf, ChannelWriteHalf};

use crate::SshHost;
use crate::host::quote;

/// The script's channel.
struct Link {
    writer: ChannelWriteHalf<Msg>,
    reader: ChannelReadHalf,
}

#[async_trait::async_trait]
impl ProbeLink for Link {
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

/// Starts the script for the session tagged `tag`.
pub(crate) async fn start(host: SshHost, tag: String) -> Option<Box<dyn ProbeLink>> {
    let channel = host.channel().await.ok()?;
    let line = format!("exec sh -c {} sh {}", quote(FOREGROUND_SCRIPT), quote(&tag));
    channel.exec(true, line).await.ok()?;
    let (reader, writer) = channel.split();
    Some(Box::new(Link { writer, reader }))
}
