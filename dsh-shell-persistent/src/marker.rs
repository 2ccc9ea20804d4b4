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

/// 128 random bits from the operating system, as 32 lowercase hex digits.
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Start,
    Output,
    Status,
    Done,
}

/// Where a call stands after a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The end marker has not been seen yet.
    Pending,
    /// The end marker and the status were seen.
    Done {
        /// The command's exit status.
        status: i32,
    },
}

/// Splits one call's output out of the shell's stream: discards everything
/// up to the start marker, passes the command's output on, and reads the
/// status after the end marker.
///
/// ```
/// use dsh_shell_persistent::marker::{CallScanner, Progress};
/// let mut scanner = CallScanner::new("START", "END");
/// let mut out = Vec::new();
/// let mut sink = |b: &[u8]| out.extend_from_slice(b);
/// assert_eq!(scanner.feed(b"noise STAR", &mut sink), Progress::Pending);
/// assert_eq!(scanner.feed(b"Thello\nEN", &mut sink), Progress::Pending);
/// assert_eq!(scanner.feed(b"D7#", &mut sink), Progress::Done { status: 7 });
/// assert_eq!(out, b"hello\n");
/// ```
#[derive(Debug)]
pub struct CallScanner {
    phase: Phase,
    start: Search,
    end: Search,
    status: Option<i32>,
    digits: i64,
    any_digit: bool,
}

impl CallScanner {
    /// A scanner for a call whose markers are `start` and `end`.
    pub fn new(start: &str, end: &str) -> Self {
        CallScanner {
            phase: Phase::Start,
            start: Search::new(start),
            end: Search::new(end),
            status: None,
            digits: 0,
            any_digit: false,
        }
    }

    /// `true` once the start marker was seen (the shell began the command).
    pub fn started(&self) -> bool {
        self.phase != Phase::Start
    }

    /// Feeds one chunk of raw terminal output; the command's own output goes to `out`.
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut dyn FnMut(&[u8])) -> Progress {
        loop {
            match self.phase {
                Phase::Start => match self.start.feed(chunk, &mut |_| {}) {
                    Some(past) => {
                        self.phase = Phase::Output;
                        chunk = &chunk[past..];
                    }
                    None => return Progress::Pending,
                },
                Phase::Output => match self.end.feed(chunk, out) {
                    Some(past) => {
                        self.phase = Phase::Status;
                        chunk = &chunk[past..];
                    }
                    None => return Progress::Pending,
                },
                Phase::Status => {
                    for &b in chunk {
                        if b.is_ascii_digit() && self.digits < 1 << 20 {
                            self.digits = self.digits * 10 + i64::from(b - b'0');
                            self.any_digit = true;
                        } else {
                            self.phase = Phase::Done;
                            self.status = Some(if self.any_digit {
                                self.digits as i32
                            } else {
                                -1
                            });
                            break;
                        }
                    }
                    if self.phase == Phase::Status {
                        return Progress::Pending;
                    }
                }
                Phase::Done => {
                    return Progress::Done {
                        status: self.status.unwrap_or(-1),
                    };
                }
            }
        }
    }

    /// The stream ended before the end marker: passes on output held back
    /// while it might have been the start of the marker.
    pub fn finish(&mut self, out: &mut dyn FnMut(&[u8])) {
        if self.phase == Phase::Output {
            self.end.flush(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: &str = "0123456789abcdef0123456789abcdef";
    const E: &str = "fedcba9876543210fedcba9876543210";

    fn run(chunks: &[Vec<u8>]) -> (Vec<u8>, Progress) {
        let mut scanner = CallScanner::new(S, E);
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

    #[test]
    fn tokens_are_fresh_hex() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn markers_split_at_every_position() {
        let stream = format!("echo junk{S}out\nput{E}42#tail");
        for cut in 0..stream.len() {
            let chunks = vec![
                stream.as_bytes()[..cut].to_vec(),
                stream.as_bytes()[cut..].to_vec(),
            ];
            assert_eq!(
                run(&chunks),
                (b"out\nput".to_vec(), Progress::Done { status: 42 }),
                "cut {cut}"
            );
        }
        let bytes: Vec<Vec<u8>> = stream.bytes().map(|b| vec![b]).collect();
        assert_eq!(
            run(&bytes),
            (b"out\nput".to_vec(), Progress::Done { status: 42 })
        );
    }

    #[test]
    fn near_misses_are_output() {
        let almost = &E[..31];
        let stream = format!("{S}{almost}x{almost}{E}0#");
        assert_eq!(
            run(&[stream.into_bytes()]),
            (
                format!("{almost}x{almost}").into_bytes(),
                Progress::Done { status: 0 }
            )
        );
    }

    #[test]
    fn unfinished_output_is_flushed() {
        let stream = format!("{S}partial{}", &E[..10]);
        assert_eq!(
            run(&[stream.into_bytes()]),
            (
                format!("partial{}", &E[..10]).into_bytes(),
                Progress::Pending
            )
        );
    }

    proptest! {
        /// Random output, with marker fragments mixed in, cut into random
        /// chunks, comes out exactly, and the status is read.
        #[test]
        fn output_is_recovered_exactly(
            pieces in proptest::collection::vec(prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..20),
                (0usize..32).prop_map(|n| E.as_bytes()[..n].to_vec()),
                (1usize..32).prop_map(|n| E.as_bytes()[n..].to_vec()),
                (0usize..32).prop_map(|n| S.as_bytes()[..n].to_vec()),
            ], 0..30),
            status in 0i32..256,
            cuts in proptest::collection::vec(1usize..40, 0..40),
        ) {
            let output: Vec<u8> = pieces.concat();
            // Only a full end marker can end the call: skip inputs that form
            // one, alone or together with the real marker after them.
            let mut with_end = output.clone();
            with_end.extend_from_slice(E.as_bytes());
            prop_assume!(memchr::memmem::find(&with_end, E.as_bytes()) == Some(output.len()));
            let mut stream = b"prompt junk ".to_vec();
            stream.extend_from_slice(S.as_bytes());
            stream.extend_from_slice(&output);
            stream.extend_from_slice(E.as_bytes());
            stream.extend_from_slice(format!("{status}#").as_bytes());
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
            prop_assert_eq!(progress, Progress::Done { status });
        }
    }
}
