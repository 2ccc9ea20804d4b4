//! The foreground of a remote terminal, asked of
//! [`FOREGROUND_SCRIPT`](super::FOREGROUND_SCRIPT) running as a helper next
//! to the program.

use std::path::PathBuf;
use std::time::Duration;

use super::Helper;
use crate::{Foreground, Leader};

/// Parses one answer line of the foreground script; `None` when the script
/// found no terminal (`- - 0`) or the line is not an answer.
fn parse_foreground(line: &[u8]) -> Option<Foreground> {
    let text = std::str::from_utf8(line).ok()?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    let mut fields = text.splitn(5, ' ');
    let pgid: i32 = fields.next()?.parse().ok()?;
    let leader: i32 = fields.next()?.parse().ok()?;
    let waiting = fields.next()? == "1";
    let state = fields.next();
    let program = fields.next().filter(|p| !p.is_empty()).map(PathBuf::from);
    let mut fg = Foreground::new(pgid, pgid == leader);
    fg.waiting_for_input = Some(waiting);
    fg.leader = state.map(|state| Leader::new(program, state == "T"));
    Some(fg)
}

/// How long one answer of the probe may take (the first also finds the
/// shell, which may still be starting).
const FIRST_ANSWER: Duration = Duration::from_secs(5);
const ANSWER: Duration = Duration::from_secs(1);

/// The foreground of a remote terminal, asked of the script on demand
/// ([`ForegroundProbe::ask`], for [`crate::PtySession::foreground`]).
#[derive(Default)]
pub(crate) struct ForegroundProbe {
    helper: tokio::sync::Mutex<Option<Asking>>,
}

impl std::fmt::Debug for ForegroundProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForegroundProbe").finish_non_exhaustive()
    }
}

impl ForegroundProbe {
    /// Asks once, starting the script with `start` when it does not run;
    /// any failure forgets the helper (started again next time) and
    /// answers `None`.
    pub(crate) async fn ask<F, Fut>(&self, start: F) -> Option<Foreground>
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
                    .unwrap_or(Answer::Failed)
            }
            None => Answer::Failed,
        };
        match answer {
            Answer::Line(fg) => fg,
            Answer::Failed => {
                *helper = None;
                None
            }
        }
    }
}

/// A running script and what it printed past its last answer.
type Asking = (Box<dyn Helper>, Vec<u8>);

/// What one question to the script got.
enum Answer {
    /// An answer line: a foreground, or `None` when the script found none.
    Line(Option<Foreground>),
    /// The helper failed (it is started again next time).
    Failed,
}

/// One question, one answer line.
async fn ask(helper: &mut dyn Helper, pending: &mut Vec<u8>) -> Answer {
    if !helper.send(b"?\n").await {
        return Answer::Failed;
    }
    loop {
        if let Some(at) = memchr::memchr(b'\n', pending) {
            let line: Vec<u8> = pending.drain(..=at).collect();
            return Answer::Line(parse_foreground(&line));
        }
        match helper.recv().await {
            Some(chunk) => pending.extend_from_slice(&chunk),
            None => return Answer::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse() {
        let fg = parse_foreground(b"42 40 1 S /usr/bin/bash\n");
        assert_eq!(
            fg.as_ref()
                .map(|f| (f.pgid, f.is_leader, f.waiting_for_input)),
            Some((42, false, Some(true)))
        );
        assert_eq!(
            fg.and_then(|f| f.leader),
            Some(Leader::new(Some("/usr/bin/bash".into()), false))
        );
        let fg = parse_foreground(b"40 40 0 T /opt/my shell/bin\n");
        assert_eq!(fg.as_ref().map(|f| f.is_leader), Some(true));
        assert_eq!(
            fg.and_then(|f| f.leader),
            Some(Leader::new(Some("/opt/my shell/bin".into()), true))
        );
        // An exe that cannot be read: the state alone.
        let fg = parse_foreground(b"40 40 0 S \n").and_then(|f| f.leader);
        assert_eq!(fg, Some(Leader::new(None, false)));
        assert!(parse_foreground(b"- - 0\n").is_none());
        assert!(parse_foreground(b"garbage\n").is_none());
    }
}
