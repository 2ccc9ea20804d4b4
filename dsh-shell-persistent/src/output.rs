//! Bounding a command's output to what the model may see.

use crate::outcome::{Clip, Output};

/// How output beyond `max_output_chars` is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClipMode {
    /// Keep the first `max_output_chars` characters, then [`OUTPUT_CLIP_NOTE`](crate::OUTPUT_CLIP_NOTE).
    #[default]
    Head,
    /// Keep the first and the last halves, with the exact number of
    /// characters left out between them (the end of a failed build matters).
    HeadTail,
}

impl ClipMode {
    /// Every mode, in the order of [`ClipMode::name`]'s documentation.
    pub const ALL: [ClipMode; 2] = [ClipMode::Head, ClipMode::HeadTail];

    /// The kebab-case name: `head`, `head-tail`.
    pub fn name(self) -> &'static str {
        match self {
            ClipMode::Head => "head",
            ClipMode::HeadTail => "head-tail",
        }
    }
}

/// Collects normalized output within a bound: memory stays within about
/// `max_output_chars` (twice that for [`ClipMode::HeadTail`]) however much
/// the command prints.
#[derive(Debug)]
pub(crate) struct Collector {
    max: usize,
    mode: ClipMode,
    head: String,
    head_chars: usize,
    tail: String,
    tail_chars: usize,
    dropped_middle: u64,
    clipped: bool,
}

impl Collector {
    /// A collector keeping at most `max` characters.
    pub(crate) fn new(max: usize, mode: ClipMode) -> Self {
        Collector {
            max: max.max(1),
            mode,
            head: String::new(),
            head_chars: 0,
            tail: String::new(),
            tail_chars: 0,
            dropped_middle: 0,
            clipped: false,
        }
    }

    /// `true` once nothing more will be kept (head mode, bound reached).
    pub(crate) fn is_full(&self) -> bool {
        self.clipped && self.mode == ClipMode::Head
    }

    /// Adds text.
    pub(crate) fn push(&mut self, s: &str) {
        if s.is_empty() || self.is_full() {
            return;
        }
        if !self.clipped {
            let room = self.max - self.head_chars;
            match s.char_indices().nth(room) {
                None => {
                    self.head.push_str(s);
                    self.head_chars += s.chars().count();
                    return;
                }
                Some((cut, _)) => {
                    self.head.push_str(&s[..cut]);
                    self.head_chars = self.max;
                    self.clipped = true;
                    if self.mode == ClipMode::HeadTail {
                        self.push_tail(&s[cut..]);
                    }
                    return;
                }
            }
        }
        self.push_tail(s);
    }

    /// Drops the text after the last newline (a prompt another program
    /// left waiting for input).
    pub(crate) fn drop_unfinished_line(&mut self) {
        let (buf, chars) = if !self.clipped {
            (&mut self.head, &mut self.head_chars)
        } else if self.mode == ClipMode::HeadTail {
            (&mut self.tail, &mut self.tail_chars)
        } else {
            return;
        };
        let keep = buf.rfind('\n').map_or(0, |i| i + 1);
        *chars -= buf[keep..].chars().count();
        buf.truncate(keep);
    }

    /// Removes `suffix` from the end of the kept text, if the text ends
    /// with it (the head while nothing was clipped, else the tail in
    /// head+tail mode; clipped head-only output has no end to remove).
    pub(crate) fn strip_suffix(&mut self, suffix: &str) -> bool {
        let (buf, chars) = if !self.clipped {
            (&mut self.head, &mut self.head_chars)
        } else if self.mode == ClipMode::HeadTail {
            (&mut self.tail, &mut self.tail_chars)
        } else {
            return false;
        };
        if !buf.ends_with(suffix) {
            return false;
        }
        buf.truncate(buf.len() - suffix.len());
        *chars -= suffix.chars().count();
        true
    }

    fn push_tail(&mut self, s: &str) {
        self.tail.push_str(s);
        self.tail_chars += s.chars().count();
        let keep = self.tail_keep();
        if self.tail.len() > 8 * keep + 64 * 1024 {
            let drop_chars = self.tail_chars - keep;
            let cut = self
                .tail
                .char_indices()
                .nth(drop_chars)
                .map_or(self.tail.len(), |(i, _)| i);
            self.tail.drain(..cut);
            self.tail_chars = keep;
            self.dropped_middle += drop_chars as u64;
        }
    }

    fn tail_keep(&self) -> usize {
        self.max - self.max / 2
    }

    /// The output as data: the whole text minus one final newline, or the
    /// kept parts of clipped output.
    pub(crate) fn finish(mut self) -> Output {
        if !self.clipped {
            if self.head.ends_with('\n') {
                self.head.pop();
            }
            return Output {
                text: self.head,
                clip: None,
            };
        }
        match self.mode {
            ClipMode::Head => Output {
                text: self.head,
                clip: Some(Clip::Head),
            },
            ClipMode::HeadTail => {
                let head_keep = self.max / 2;
                let tail_keep = self.tail_keep();
                // The last `tail_keep` characters of head[head_keep..] + tail.
                let head_cut = self
                    .head
                    .char_indices()
                    .nth(head_keep)
                    .map_or(self.head.len(), |(i, _)| i);
                let mut rest = self.head.split_off(head_cut);
                let rest_chars = self.head_chars - head_keep;
                rest.push_str(&self.tail);
                let rest_total = rest_chars + self.tail_chars;
                let skip = rest_total.saturating_sub(tail_keep);
                let cut = rest.char_indices().nth(skip).map_or(rest.len(), |(i, _)| i);
                let mut tail = rest.split_off(cut);
                if tail.ends_with('\n') {
                    tail.pop();
                }
                Output {
                    text: self.head,
                    clip: Some(Clip::HeadTail {
                        omitted_chars: self.dropped_middle + skip as u64,
                        tail,
                    }),
                }
            }
        }
    }

    /// The text for the model ([`crate::contract::render_output`] of
    /// [`Collector::finish`]).
    #[cfg(test)]
    fn render(self) -> String {
        crate::contract::render_output(&self.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suffix_goes_only_from_the_kept_end() {
        let mut c = Collector::new(100, ClipMode::Head);
        c.push("exit\nexit\n");
        assert!(c.strip_suffix("exit\n"));
        assert_eq!(c.render(), "exit");
        let mut c = Collector::new(100, ClipMode::Head);
        c.push("x\n");
        assert!(!c.strip_suffix("exit\n"));
        assert_eq!(c.render(), "x");
        // Clipped head-only output has no end; head+tail strips the tail.
        let mut c = Collector::new(4, ClipMode::Head);
        c.push("abcdefexit\n");
        assert!(!c.strip_suffix("exit\n"));
        let mut c = Collector::new(4, ClipMode::HeadTail);
        c.push("abcdefgh\nexit\n");
        assert!(c.strip_suffix("exit\n"));
        assert!(c.render().ends_with("\nh"));
    }

    #[test]
    fn short_output_loses_one_final_newline() {
        for (input, want) in [
            ("hi\n", "hi"),
            ("\n", ""),
            ("\nx", "\nx"),
            ("a\n\n", "a\n"),
            ("  x", "  x"),
        ] {
            let mut c = Collector::new(100, ClipMode::Head);
            c.push(input);
            assert_eq!(c.render(), want);
        }
    }

    #[test]
    fn an_unfinished_line_can_be_dropped() {
        let mut c = Collector::new(100, ClipMode::Head);
        c.push("banner\n>>> ");
        c.drop_unfinished_line();
        assert_eq!(c.render(), "banner");
        let mut c = Collector::new(100, ClipMode::Head);
        c.push("$ ");
        c.drop_unfinished_line();
        assert_eq!(c.render(), "");
    }

    #[test]
    fn head_mode_keeps_exactly_max_chars() {
        let mut c = Collector::new(5, ClipMode::Head);
        c.push("中文");
        c.push("abcdef\n");
        assert!(c.is_full());
        assert_eq!(c.render(), format!("中文abc{}", crate::OUTPUT_CLIP_NOTE));
        let mut exact = Collector::new(3, ClipMode::Head);
        exact.push("abc");
        assert_eq!(exact.render(), "abc");
    }

    #[test]
    fn head_tail_counts_what_it_leaves_out() {
        let mut c = Collector::new(10, ClipMode::HeadTail);
        let text: String = (0..100)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        for piece in text.as_bytes().chunks(7) {
            c.push(std::str::from_utf8(piece).unwrap());
        }
        assert_eq!(
            c.render(),
            "abcde\n<response clipped><NOTE>90 characters were left out here to save on context.</NOTE>\nrstuv"
        );
    }

    #[test]
    fn head_tail_stays_bounded() {
        let mut c = Collector::new(100, ClipMode::HeadTail);
        let line = "0123456789".repeat(100);
        for _ in 0..10_000 {
            c.push(&line);
        }
        assert!(c.tail.len() <= 8 * 50 + 64 * 1024 + line.len());
        let out = c.render();
        assert!(
            out.contains("<NOTE>9999900 characters were left out"),
            "{out}"
        );
    }
}
