//! The foreground of a remote terminal, asked of
//! [`FOREGROUND_SCRIPT`](super::FOREGROUND_SCRIPT) running as a helper next
//! to the program.

use std::time::Duration;

use super::Helper;
use crate::Foreground;

/// Parses one answer line of the foreground script; `None` when the script
/// found no terminal (`- - 0`) or the line is not an answer.
fn parse_foreground(line: &[u8]) -> Option<Foreground> {
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

/// How long one answer of the probe may take (the first also finds the
/// shell, which may still be starting).
const FIRST_ANSWER: Duration = Duration::from_secs(5);
const ANSWER: Duration = Duration::from_secs(1);

/// The foreground of a remote terminal, asked of the script on demand
/// ([`ForegroundProbe::refresh`], for
/// [`crate::PtySession::refresh_foreground`]) and kept for the synchronous
/// [`crate::PtySession::foreground`].
#[derive(Default)]
pub(crate) struct ForegroundProbe {
    helper: tokio::sync::Mutex<Option<Asking>>,
    latest: std::sync::Mutex<Option<Foreground>>,
}

impl std::fmt::Debug for ForegroundProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForegroundProbe")
            .field("latest", &self.latest())
            .finish_non_exhaustive()
    }
}

impl ForegroundProbe {
    /// The latest answer.
    pub(crate) fn latest(&self) -> Option<Foreground> {
        self.latest.lock().ok().and_then(|l| l.clone())
    }

    /// Asks once, starting the script with `start` when it does not run;
    /// any failure forgets the answer and the helper (started again next
    /// time).
    pub(crate) async fn refresh<F, Fut>(&self, start: F)
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Option<Box<dyn Helper>>>,
    {
        let mut helper = self.helper.lock().await;
        let first = helper.is_none();
        if first {
            *helper = start().await.map(|h| (h, Vec::new()));
        }
        let answer = match helper.as_mut() {
            Some((h, pending)) => {
                let bound = if first { FIRST_ANSWER } else { ANSWER };
                tokio::time::timeout(bound, ask(h.as_mut(), pending))
                    .await
                    .ok()
                    .flatten()
            }
            None => None,
        };
        if answer.is_none() {
            *helper = None;
        }
        if let Ok(mut latest) = self.latest.lock() {
            *latest = answer.flatten();
        }
    }
}

/// A running script and what it printed past its last answer.
type Asking = (Box<dyn Helper>, Vec<u8>);

/// One question, one answer line: `None` when the helper failed.
async fn ask(helper: &mut dyn Helper, pending: &mut Vec<u8>) -> Option<Option<Foreground>> {
    if !helper.send(b"?\n").await {
        return None;
    }
    loop {
        if let Some(at) = memchr::memchr(b'\n', pending) {
            let line: Vec<u8> = pending.drain(..=at).collect();
            return Some(parse_foreground(&line));
        }
        pending.extend_from_slice(&helper.recv().await?);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse() {
        let fg = parse_foreground(b"42 40 1\n");
        assert_eq!(
            fg.map(|f| (f.pgid, f.is_leader, f.waiting_for_input)),
            Some((42, false, true))
        );
        let fg = parse_foreground(b"40 40 0\n");
        assert_eq!(fg.map(|f| f.is_leader), Some(true));
        assert!(parse_foreground(b"- - 0\n").is_none());
        assert!(parse_foreground(b"garbage\n").is_none());
    }
}
