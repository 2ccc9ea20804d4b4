//! Finding a call's markers in the shell's output stream.
//!
//! A call's output is what the shell prints between its start marker and its
//! end marker; the end marker is followed by the exit status and `#`. The
//! markers are fresh random tokens, written to the terminal only in pieces,
//! so nothing the command prints (or the terminal echoes) can contain them.
//!
//! The search is incremental: each chunk is scanned once with `memchr`'s
//! `memmem`, and only the at most `marker.len() - 1` bytes that straddle a
//! chunk boundary are compared a second time.

use memchr::memmem::Finder;

/// An incremental search for one marker in a stream of chunks.
#[derive(Debug)]
pub(crate) struct Search {
    finder: Finder<'static>,
    len: usize,
    /// The tail of the stream that could still be the start of the marker.
    held: Vec<u8>,
    /// Scratch space for `held` + the start of the next chunk (reused, so a
    /// chunk costs no allocation).
    window: Vec<u8>,
}

impl Search {
    pub(crate) fn new(marker: &str) -> Self {
        Search {
            finder: Finder::new(marker.as_bytes()).into_owned(),
            len: marker.len(),
            held: Vec::with_capacity(marker.len()),
            window: Vec::with_capacity(2 * marker.len()),
        }
    }

    /// Whether this is a search for `marker`.
    pub(crate) fn is_for(&self, marker: &str) -> bool {
        self.finder.needle() == marker.as_bytes()
    }

    /// Back to the start of a stream (the finder and the buffers are kept).
    pub(crate) fn reset(&mut self) {
        self.held.clear();
        self.window.clear();
    }

    /// Feeds one chunk. Bytes that are certainly before the marker go to
    /// `sink`, in order. Returns the offset in `chunk` just past the marker
    /// once it is found; bytes after it are not consumed.
    pub(crate) fn feed(&mut self, chunk: &[u8], sink: &mut dyn FnMut(&[u8])) -> Option<usize> {
        let keep = self.len - 1;
        if !self.held.is_empty() {
            let take = keep.min(chunk.len());
            let held_len = self.held.len();
            let window = &mut self.window;
            window.clear();
            window.extend_from_slice(&self.held);
            window.extend_from_slice(&chunk[..take]);
            self.held.clear();
            if let Some(i) = self.finder.find(window) {
                sink(&window[..i]);
                return Some(i + self.len - held_len);
            }
            if take < keep {
                // The whole chunk fit in the window: keep its tail held.
                let emit = window.len().saturating_sub(keep);
                sink(&window[..emit]);
                self.held.extend_from_slice(&window[emit..]);
                return None;
            }
            sink(&window[..held_len]);
        }
        if let Some(i) = self.finder.find(chunk) {
            sink(&chunk[..i]);
            return Some(i + self.len);
        }
        let emit = chunk.len().saturating_sub(keep);
        sink(&chunk[..emit]);
        self.held.extend_from_slice(&chunk[emit..]);
        None
    }

    /// The stream ended: whatever was held back was not a marker.
    pub(crate) fn flush(&mut self, sink: &mut dyn FnMut(&[u8])) {
        sink(&self.held);
        self.held.clear();
    }
}

/// How many hex digits a marker's per-call part has.
pub(crate) const ID_LEN: usize = 16;
/// How long a prompt's tail (tag, status, `#`) may be before it is not one.
const MAX_TAIL: usize = 80;

/// The markers of one call. Every marker is the shell's prefix followed by an
/// id: the prefix is searched for, the id then says which marker it is.
#[derive(Debug, Clone, Default)]
pub struct Markers {
    /// The shell's prefix (fixed for the shell's life).
    pub prefix: String,
    /// The id printed before the command's output (`PS0` for bash).
    pub start: String,
    /// The id of this call's end prompt.
    pub end: String,
    /// The id of the prompt bash shows when it abandons a command line.
    pub abandon: Option<String>,
    /// The id of the previous call's end prompt: seen again, it means the
    /// wrapper of this call did not run.
    pub stale: Option<String>,
}

/// Which marker ended the scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prompt {
    /// This call's end prompt.
    End,
    /// The abandoned-line prompt.
    Abandon,
    /// The previous call's end prompt.
    Stale,
}

/// Where a call stands after a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// No prompt has been seen yet.
    Pending,
    /// A prompt was seen: `<prefix><id><tag>:<status>#` (`<status>#` alone
    /// has an empty tag).
    Prompt {
        /// Which prompt.
        which: Prompt,
        /// The text before the last `:` of the tail.
        tag: String,
        /// The status digits, if they were digits.
        status: Option<i32>,
    },
}

#[derive(Debug)]
enum Phase {
    /// Looking for the start marker; everything is discarded.
    Start,
    /// Passing output on, looking for a prompt.
    Output,
    /// The prefix was seen; collecting the id that follows it.
    Id { start_phase: bool, id: Vec<u8> },
    /// A prompt's id was recognised; collecting its tail up to `#`.
    Tail { which: Prompt, tail: Vec<u8> },
    /// A prompt was reported.
    Done,
}

/// Splits one call's output out of the shell's stream: discards everything
/// up to the start marker, passes the command's output on, and reads the
/// prompt that ends it.
///
/// ```
/// use dsh_shell_persistent::__private::{CallScanner, Markers, Progress, Prompt};
/// let markers = Markers {
///     prefix: "P".repeat(16),
///     start: "1".repeat(16),
///     end: "2".repeat(16),
///     ..Markers::default()
/// };
/// let mut scanner = CallScanner::new(markers);
/// let mut out = Vec::new();
/// let mut sink = |b: &[u8]| out.extend_from_slice(b);
/// let stream = format!("noise {}{}hello\n{}{}7#", "P".repeat(16), "1".repeat(16), "P".repeat(16), "2".repeat(16));
/// let (a, b) = stream.as_bytes().split_at(40);
/// assert_eq!(scanner.feed(a, &mut sink), Progress::Pending);
/// let done = scanner.feed(b, &mut sink);
/// assert_eq!(done, Progress::Prompt { which: Prompt::End, tag: String::new(), status: Some(7) });
/// assert_eq!(out, b"hello\n");
/// ```
#[derive(Debug)]
pub struct CallScanner {
    markers: Markers,
    phase: Phase,
    search: Search,
    started: bool,
}

impl CallScanner {
    /// A scanner for one call.
    pub fn new(markers: Markers) -> Self {
        CallScanner::with_search(markers, None)
    }

    /// A scanner for one call that searches with `search` (made for the
    /// same prefix by an earlier call: building a search is most of the
    /// cost of a new scanner); a new one when it was made for another.
    pub(crate) fn with_search(markers: Markers, search: Option<Search>) -> Self {
        let search = match search {
            Some(mut search) if search.is_for(&markers.prefix) => {
                search.reset();
                search
            }
            _ => Search::new(&markers.prefix),
        };
        CallScanner {
            search,
            markers,
            phase: Phase::Start,
            started: false,
        }
    }

    /// The scanner's search, for the next call's [`CallScanner::with_search`].
    pub(crate) fn into_search(self) -> Search {
        self.search
    }

    /// `true` once the start marker was seen (the shell began the command).
    pub fn started(&self) -> bool {
        self.started
    }

    /// After a reported abandoned-line prompt that was not the shell's:
    /// keep scanning (the prompt's text is dropped).
    pub fn resume(&mut self) {
        self.phase = Phase::Output;
    }

    /// Feeds one chunk of raw terminal output; the command's own output goes to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut dyn FnMut(&[u8])) -> Progress {
        let mut rest = chunk;
        // Bytes to scan again before `rest` (an id that was not a marker).
        let mut again: Vec<u8> = Vec::new();
        loop {
            if !again.is_empty() {
                let buf = std::mem::take(&mut again);
                let (used, progress) = self.step(&buf, out, &mut again);
                again.extend_from_slice(&buf[used..]);
                if let Some(p) = progress {
                    return p;
                }
                continue;
            }
            if rest.is_empty() {
                return Progress::Pending;
            }
            let (used, progress) = self.step(rest, out, &mut again);
            rest = &rest[used..];
            if let Some(p) = progress {
                return p;
            }
        }
    }

    /// Consumes a prefix of `input`; returns how much, and a result once
    /// a prompt is complete. An id that is no marker is pushed to `again`.
    fn step(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]),
        again: &mut Vec<u8>,
    ) -> (usize, Option<Progress>) {
        match &mut self.phase {
            Phase::Done => (input.len(), None),
            Phase::Start | Phase::Output => {
                let start_phase = matches!(self.phase, Phase::Start);
                let found = if start_phase {
                    self.search.feed(input, &mut |_| {})
                } else {
                    self.search.feed(input, out)
                };
                match found {
                    Some(past) => {
                        self.phase = Phase::Id {
                            start_phase,
                            id: Vec::with_capacity(ID_LEN),
                        };
                        (past, None)
                    }
                    None => (input.len(), None),
                }
            }
            Phase::Id { start_phase, id } => {
                let take = (ID_LEN - id.len()).min(input.len());
                id.extend_from_slice(&input[..take]);
                if id.len() < ID_LEN {
                    return (take, None);
                }
                let id = std::mem::take(id);
                let start_phase = *start_phase;
                let m = &self.markers;
                if start_phase {
                    if id == m.start.as_bytes() {
                        self.started = true;
                        self.phase = Phase::Output;
                    } else {
                        self.phase = Phase::Start;
                        again.splice(0..0, id);
                    }
                    return (take, None);
                }
                let which = if id == m.end.as_bytes() {
                    Some(Prompt::End)
                } else if m.abandon.as_deref().is_some_and(|a| id == a.as_bytes()) {
                    Some(Prompt::Abandon)
                } else if m.stale.as_deref().is_some_and(|s| id == s.as_bytes()) {
                    Some(Prompt::Stale)
                } else {
                    None
                };
                match which {
                    Some(which) => {
                        self.phase = Phase::Tail {
                            which,
                            tail: Vec::new(),
                        }
                    }
                    None => {
                        // Marker-like text that is not ours: it is output.
                        out(self.markers.prefix.as_bytes());
                        self.phase = Phase::Output;
                        again.splice(0..0, id);
                    }
                }
                (take, None)
            }
            Phase::Tail { which, tail } => {
                let which = *which;
                match memchr::memchr(b'#', input) {
                    Some(i) if tail.len() + i <= MAX_TAIL => {
                        tail.extend_from_slice(&input[..i]);
                        let tail = std::mem::take(tail);
                        self.phase = Phase::Done;
                        (i + 1, Some(parse_tail(which, &tail)))
                    }
                    None if tail.len() + input.len() <= MAX_TAIL => {
                        tail.extend_from_slice(input);
                        (input.len(), None)
                    }
                    _ => {
                        // Too long for a prompt: report what there is.
                        let tail = std::mem::take(tail);
                        self.phase = Phase::Done;
                        (0, Some(parse_tail(which, &tail)))
                    }
                }
            }
        }
    }

    /// The stream ended before a prompt: passes on output held back while
    /// it might have been the start of a marker.
    pub fn finish(&mut self, out: &mut dyn FnMut(&[u8])) {
        match &self.phase {
            Phase::Output => self.search.flush(out),
            Phase::Id {
                start_phase: false,
                id,
            } => {
                out(self.markers.prefix.as_bytes());
                out(id);
            }
            _ => {}
        }
    }
}

fn parse_tail(which: Prompt, tail: &[u8]) -> Progress {
    let text = String::from_utf8_lossy(tail);
    let (tag, digits) = match text.rfind(':') {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => ("", &text[..]),
    };
    let status =
        if !digits.is_empty() && digits.len() <= 9 && digits.bytes().all(|b| b.is_ascii_digit()) {
            digits.parse().ok()
        } else {
            None
        };
    Progress::Prompt {
        which,
        tag: tag.to_owned(),
        status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: &str = "0123456789abcdef";
    const S: &str = "1111222233334444";
    const E: &str = "fedcba9876543210";
    const A: &str = "aaaabbbbccccdddd";
    const OLD: &str = "5555666677778888";

    fn markers() -> Markers {
        Markers {
            prefix: P.into(),
            start: S.into(),
            end: E.into(),
            abandon: Some(A.into()),
            stale: Some(OLD.into()),
        }
    }

    fn run(chunks: &[Vec<u8>]) -> (Vec<u8>, Progress) {
        let mut scanner = CallScanner::new(markers());
        let mut out = Vec::new();
        let mut progress = Progress::Pending;
        for c in chunks {
            progress = scanner.feed(c, &mut |b| out.extend_from_slice(b));
            if progress != Progress::Pending {
                break;
            }
        }
        if progress == Progress::Pending {
            scanner.finish(&mut |b| out.extend_from_slice(b));
        }
        (out, progress)
    }

    fn end(tag: &str, status: Option<i32>) -> Progress {
        Progress::Prompt {
            which: Prompt::End,
            tag: tag.into(),
            status,
        }
    }

    #[test]
    fn markers_split_at_every_position() {
        let stream = format!("echo junk{P}{S}out\nput{P}{E}eo:42#tail");
        for cut in 0..stream.len() {
            let chunks = vec![
                stream.as_bytes()[..cut].to_vec(),
                stream.as_bytes()[cut..].to_vec(),
            ];
            assert_eq!(
                run(&chunks),
                (b"out\nput".to_vec(), end("eo", Some(42))),
                "cut {cut}"
            );
        }
        let bytes: Vec<Vec<u8>> = stream.bytes().map(|b| vec![b]).collect();
        assert_eq!(run(&bytes), (b"out\nput".to_vec(), end("eo", Some(42))));
    }

    #[test]
    fn other_ids_and_near_misses_are_output() {
        let almost = &P[..15];
        let stream = format!("{P}{OLD}{P}{S}{almost}x{P}{S}{P}{P}{E}0#");
        assert_eq!(
            run(&[stream.into_bytes()]),
            (format!("{almost}x{P}{S}{P}").into_bytes(), end("", Some(0)))
        );
    }

    #[test]
    fn abandoned_and_stale_prompts_are_told_apart() {
        let stream = format!("{P}{S}bash: x: unbound variable\n{P}{A}k12:130#");
        assert_eq!(
            run(&[stream.into_bytes()]),
            (
                b"bash: x: unbound variable\n".to_vec(),
                Progress::Prompt {
                    which: Prompt::Abandon,
                    tag: "k12".into(),
                    status: Some(130)
                }
            )
        );
        let stream = format!("{P}{S}{P}{OLD}0#");
        assert_eq!(
            run(&[stream.into_bytes()]).1,
            Progress::Prompt {
                which: Prompt::Stale,
                tag: String::new(),
                status: Some(0)
            }
        );
        // A prompt whose `$?` was not expanded has no status.
        let stream = format!("{P}{S}{P}{A}k:$?#");
        assert_eq!(
            run(&[stream.into_bytes()]).1,
            Progress::Prompt {
                which: Prompt::Abandon,
                tag: "k".into(),
                status: None
            }
        );
    }

    #[test]
    fn resuming_after_a_false_abandon_keeps_scanning() {
        let mut scanner = CallScanner::new(markers());
        let mut out = Vec::new();
        let first = format!("{P}{S}a{P}{A}:0#");
        let p = scanner.feed(first.as_bytes(), &mut |b| out.extend_from_slice(b));
        assert!(matches!(
            p,
            Progress::Prompt {
                which: Prompt::Abandon,
                ..
            }
        ));
        scanner.resume();
        let second = format!("b{P}{E}:3#");
        let p = scanner.feed(second.as_bytes(), &mut |b| out.extend_from_slice(b));
        assert_eq!(p, end("", Some(3)));
        assert_eq!(out, b"ab");
    }

    #[test]
    fn unfinished_output_is_flushed() {
        let stream = format!("{S}{P}{S}partial{}", &P[..10]);
        assert_eq!(
            run(&[stream.into_bytes()]),
            (
                format!("partial{}", &P[..10]).into_bytes(),
                Progress::Pending
            )
        );
        let stream = format!("{P}{S}partial{P}{}", &E[..3]);
        assert_eq!(
            run(&[stream.into_bytes()]),
            (
                format!("partial{P}{}", &E[..3]).into_bytes(),
                Progress::Pending
            )
        );
    }

    proptest! {
        /// Random output, with marker fragments and foreign ids mixed in,
        /// cut into random chunks, comes out exactly, and the status is read.
        #[test]
        fn output_is_recovered_exactly(
            pieces in proptest::collection::vec(prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..20),
                (0usize..16).prop_map(|n| P.as_bytes()[..n].to_vec()),
                Just(format!("{P}{S}").into_bytes()),
                (0usize..16).prop_map(|n| format!("{P}{}", &E[..n]).into_bytes()),
                (1usize..16).prop_map(|n| E.as_bytes()[n..].to_vec()),
            ], 0..30),
            status in 0i32..256,
            cuts in proptest::collection::vec(1usize..40, 0..40),
        ) {
            let output: Vec<u8> = pieces.concat();
            // Only a full prompt can end the call: skip inputs that form one,
            // alone or together with the real prompt after them.
            let mut with_end = output.clone();
            with_end.extend_from_slice(P.as_bytes());
            with_end.extend_from_slice(E.as_bytes());
            let first_prompt = [E, A, OLD].iter().filter_map(|id| {
                memchr::memmem::find(&with_end, format!("{P}{id}").as_bytes())
            }).min();
            prop_assume!(first_prompt == Some(output.len()));
            let mut stream = format!("prompt junk {P}{S}").into_bytes();
            stream.extend_from_slice(&output);
            stream.extend_from_slice(format!("{P}{E}:{status}#").as_bytes());
            let mut chunks = Vec::new();
            let mut rest = &stream[..];
            for c in cuts {
                if rest.is_empty() { break; }
                let n = c.min(rest.len());
                chunks.push(rest[..n].to_vec());
                rest = &rest[n..];
            }
            if !rest.is_empty() { chunks.push(rest.to_vec()); }
            let (out, progress) = run(&chunks);
            prop_assert_eq!(out, output);
            prop_assert_eq!(progress, end("", Some(status)));
        }
    }
}
