//! The foreground of a remote terminal, learned by asking a small script
//! that runs next to the shell ([`dsh_pty::remote::FOREGROUND_SCRIPT`]).

use std::time::Duration;

use dsh_pty::Foreground;
use dsh_pty::remote::FOREGROUND_SCRIPT;
use russh::client::Msg;
use russh::{ChannelMsg, ChannelReadHalf, ChannelWriteHalf};

use crate::SshHost;
use crate::host::quote;

/// How long one answer may take (the first one also finds the shell).
const FIRST_ANSWER: Duration = Duration::from_secs(5);
const ANSWER: Duration = Duration::from_secs(1);

/// The script's channel.
struct Asker {
    writer: ChannelWriteHalf<Msg>,
    reader: ChannelReadHalf,
    pending: Vec<u8>,
}

/// Asks on demand; keeps the latest answer for the synchronous
/// [`dsh_pty::PtySession::foreground`].
pub(crate) struct Probe {
    host: SshHost,
    tag: String,
    asker: tokio::sync::Mutex<Option<Asker>>,
    latest: std::sync::Mutex<Option<Foreground>>,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("tag", &self.tag)
            .finish_non_exhaustive()
    }
}

impl Probe {
    pub(crate) fn new(host: SshHost, tag: String) -> Probe {
        Probe {
            host,
            tag,
            asker: tokio::sync::Mutex::new(None),
            latest: std::sync::Mutex::new(None),
        }
    }

    /// The latest answer.
    pub(crate) fn latest(&self) -> Option<Foreground> {
        self.latest.lock().ok().and_then(|l| l.clone())
    }

    /// Asks once; on any failure forgets the answer (and the channel, to
    /// start it again next time).
    pub(crate) async fn refresh(&self) {
        let mut asker = self.asker.lock().await;
        let first = asker.is_none();
        if first {
            *asker = self.start().await;
        }
        let answer = match asker.as_mut() {
            Some(a) => {
                let bound = if first { FIRST_ANSWER } else { ANSWER };
                tokio::time::timeout(bound, a.ask()).await.ok().flatten()
            }
            None => None,
        };
        if answer.is_none() {
            *asker = None;
        }
        if let Ok(mut latest) = self.latest.lock() {
            *latest = answer.flatten();
        }
    }

    async fn start(&self) -> Option<Asker> {
        let channel = self.host.channel().await.ok()?;
        let line = format!(
            "exec sh -c {} sh {}",
            quote(FOREGROUND_SCRIPT),
            quote(&self.tag)
        );
        channel.exec(true, line).await.ok()?;
        let (reader, writer) = channel.split();
        Some(Asker {
            writer,
            reader,
            pending: Vec::new(),
        })
    }
}

impl Asker {
    /// One question, one answer line: `None` when the channel failed,
    /// `Some(None)` when the script found no terminal.
    async fn ask(&mut self) -> Option<Option<Foreground>> {
        self.writer.data(&b"?\n"[..]).await.ok()?;
        loop {
            if let Some(at) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=at).collect();
                return Some(parse(&line));
            }
            match self.reader.wait().await? {
                ChannelMsg::Data { data } => self.pending.extend_from_slice(&data),
                ChannelMsg::Eof | ChannelMsg::Close | ChannelMsg::ExitStatus { .. } => return None,
                _ => {}
            }
        }
    }
}

fn parse(line: &[u8]) -> Option<Foreground> {
    let text = std::str::from_utf8(line).ok()?;
    let mut fields = text.split_whitespace();
    let pgid: i32 = fields.next()?.parse().ok()?;
    let leader: i32 = fields.next()?.parse().ok()?;
    let waiting = fields.next()? == "1";
    Some(Foreground {
        pgid,
        is_leader: pgid == leader,
        waiting_for_input: waiting,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse() {
        assert_eq!(
            parse(b"42 40 1\n"),
            Some(Foreground {
                pgid: 42,
                is_leader: false,
                waiting_for_input: true
            })
        );
        assert_eq!(parse(b"- - 0\n"), None);
    }
}
