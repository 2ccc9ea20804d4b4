//! Turning raw terminal output into the text a model should read.
//!
//! Streaming, chunk by chunk: invalid UTF-8 becomes U+FFFD (a sequence torn
//! across chunks is completed first), `\r\n` becomes `\n`, escape sequences
//! (CSI, OSC, DCS and the like, and two-byte escapes) are removed, and
//! carriage returns and backspaces move the cursor on the current line, so a
//! progress bar collapses to the text a terminal would show last.

/// What normalization keeps raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NormalizeOptions {
    /// Keep escape sequences as they are.
    pub keep_escapes: bool,
    /// Keep carriage returns and backspaces as characters instead of
    /// applying them (`\r\n` still becomes `\n`).
    pub keep_carriage_returns: bool,
}

/// A line longer than this (in bytes) is passed on before its end, so one
/// endless line cannot grow memory; a carriage return after that point only
/// rewrites the part not yet passed on.
const LINE_FLUSH: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Esc {
    None,
    /// Just saw ESC.
    Start,
    /// Inside `ESC [ ...` until a final byte.
    Csi,
    /// Inside `ESC ] ...`, `ESC P ...` etc. until BEL or `ESC \`.
    Str,
    /// Saw ESC inside a string: `\` ends it.
    StrEscape,
    /// `ESC` + intermediates until a final byte.
    Intermediate,
}

#[derive(Debug)]
enum Line {
    /// Text appended at the end (the common case).
    Append(String),
    /// A carriage return or backspace moved the cursor back.
    Overwrite { chars: Vec<char>, cursor: usize },
}

/// A streaming normalizer; completed text goes to the sink given to each call.
#[derive(Debug)]
pub(crate) struct Normalizer {
    options: NormalizeOptions,
    pending_utf8: Vec<u8>,
    esc: Esc,
    pending_cr: bool,
    line: Line,
}

impl Normalizer {
    /// A normalizer with `options`.
    pub(crate) fn new(options: NormalizeOptions) -> Self {
        Normalizer {
            options,
            pending_utf8: Vec::new(),
            esc: Esc::None,
            pending_cr: false,
            line: Line::Append(String::new()),
        }
    }

    /// Normalizes one chunk of raw bytes.
    pub(crate) fn push(&mut self, bytes: &[u8], sink: &mut dyn FnMut(&str)) {
        let joined;
        let input: &[u8] = if self.pending_utf8.is_empty() {
            bytes
        } else {
            let mut v = std::mem::take(&mut self.pending_utf8);
            v.extend_from_slice(bytes);
            joined = v;
            &joined
        };
        let mut chunks = input.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            self.push_str(chunk.valid(), sink);
            let invalid = chunk.invalid();
            if invalid.is_empty() {
                continue;
            }
            if chunks.peek().is_none() && is_incomplete_utf8(invalid) {
                self.pending_utf8 = invalid.to_vec();
            } else {
                self.push_str("\u{FFFD}", sink);
            }
        }
    }

    /// The end of the output: flushes the current line.
    pub(crate) fn finish(&mut self, sink: &mut dyn FnMut(&str)) {
        if !self.pending_utf8.is_empty() {
            self.pending_utf8.clear();
            self.push_str("\u{FFFD}", sink);
        }
        if self.pending_cr {
            self.pending_cr = false;
            self.lone_carriage_return(sink);
        }
        self.flush_line(sink, false);
    }

    fn push_str(&mut self, mut s: &str, sink: &mut dyn FnMut(&str)) {
        while !s.is_empty() {
            if self.pending_cr {
                self.pending_cr = false;
                if let Some(rest) = s.strip_prefix('\n') {
                    self.newline(sink);
                    s = rest;
                    continue;
                }
                self.lone_carriage_return(sink);
            }
            if self.esc != Esc::None {
                s = self.in_escape(s);
                continue;
            }
            // Plain text up to the next special byte goes straight through.
            let special = memchr::memchr3(b'\x1b', b'\r', b'\n', s.as_bytes());
            let plain_end = special.unwrap_or(s.len());
            let plain_end = match memchr::memchr2(b'\x08', b'\x07', &s.as_bytes()[..plain_end]) {
                Some(i) => i,
                None => plain_end,
            };
            if plain_end > 0 {
                self.write(&s[..plain_end], sink);
                s = &s[plain_end..];
                continue;
            }
            let c = s.as_bytes()[0];
            s = &s[1..];
            match c {
                b'\n' => self.newline(sink),
                b'\r' => self.pending_cr = true,
                b'\x1b' if self.options.keep_escapes => self.write("\x1b", sink),
                b'\x1b' => self.esc = Esc::Start,
                b'\x08' if self.options.keep_carriage_returns => self.write("\x08", sink),
                b'\x08' => self.backspace(),
                b'\x07' if self.options.keep_escapes => self.write("\x07", sink),
                _ => {} // BEL
            }
        }
    }

    /// A `\r` not followed by `\n`: kept, or moves the cursor home.
    fn lone_carriage_return(&mut self, sink: &mut dyn FnMut(&str)) {
        if self.options.keep_carriage_returns {
            self.write("\r", sink);
        } else {
            self.carriage_return();
        }
    }

    /// Consumes escape-sequence characters; returns the rest.
    fn in_escape<'a>(&mut self, s: &'a str) -> &'a str {
        let mut chars = s.char_indices();
        for (i, c) in chars.by_ref() {
            let code = u32::from(c);
            self.esc = match self.esc {
                Esc::Start => match c {
                    '[' => Esc::Csi,
                    ']' | 'P' | 'X' | '^' | '_' => Esc::Str,
                    '\x20'..='\x2f' => Esc::Intermediate,
                    _ => Esc::None,
                },
                Esc::Csi if (0x40..=0x7e).contains(&code) => Esc::None,
                Esc::Csi => Esc::Csi,
                Esc::Intermediate if (0x30..=0x7e).contains(&code) => Esc::None,
                Esc::Intermediate => Esc::Intermediate,
                Esc::Str if c == '\x07' => Esc::None,
                Esc::Str if c == '\x1b' => Esc::StrEscape,
                Esc::Str => Esc::Str,
                Esc::StrEscape if c == '\\' => Esc::None,
                Esc::StrEscape => Esc::Str,
                Esc::None => Esc::None,
            };
            if self.esc == Esc::None {
                return &s[i + c.len_utf8()..];
            }
        }
        ""
    }

    fn write(&mut self, text: &str, sink: &mut dyn FnMut(&str)) {
        match &mut self.line {
            Line::Append(line) => {
                line.push_str(text);
                if line.len() > LINE_FLUSH {
                    sink(line);
                    line.clear();
                }
            }
            Line::Overwrite { chars, cursor } => {
                for c in text.chars() {
                    if *cursor < chars.len() {
                        chars[*cursor] = c;
                    } else if chars.len() < LINE_FLUSH {
                        chars.push(c);
                    }
                    *cursor += 1;
                }
            }
        }
    }

    fn carriage_return(&mut self) {
        match &mut self.line {
            Line::Append(line) => {
                self.line = Line::Overwrite {
                    chars: line.chars().collect(),
                    cursor: 0,
                };
            }
            Line::Overwrite { cursor, .. } => *cursor = 0,
        }
    }

    fn backspace(&mut self) {
        match &mut self.line {
            Line::Append(line) => {
                let chars: Vec<char> = line.chars().collect();
                let cursor = chars.len().saturating_sub(1);
                self.line = Line::Overwrite { chars, cursor };
            }
            Line::Overwrite { cursor, .. } => *cursor = cursor.saturating_sub(1),
        }
    }

    fn newline(&mut self, sink: &mut dyn FnMut(&str)) {
        self.flush_line(sink, true);
    }

    fn flush_line(&mut self, sink: &mut dyn FnMut(&str), newline: bool) {
        match std::mem::replace(&mut self.line, Line::Append(String::new())) {
            Line::Append(mut line) => {
                if newline {
                    line.push('\n');
                }
                if !line.is_empty() {
                    sink(&line);
                }
                if let Line::Append(buf) = &mut self.line {
                    // Reuse the allocation.
                    line.clear();
                    *buf = line;
                }
            }
            Line::Overwrite { chars, .. } => {
                let mut line: String = chars.into_iter().collect();
                if newline {
                    line.push('\n');
                }
                if !line.is_empty() {
                    sink(&line);
                }
            }
        }
    }
}

/// `true` if `bytes` is the beginning of a UTF-8 sequence cut short.
fn is_incomplete_utf8(bytes: &[u8]) -> bool {
    let Some(&lead) = bytes.first() else {
        return false;
    };
    let need = match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return false,
    };
    bytes.len() < need && bytes[1..].iter().all(|b| b & 0xC0 == 0x80)
}

/// Normalizes a whole buffer at once.
#[cfg(test)]
fn normalize(raw: &[u8], options: NormalizeOptions) -> String {
    let mut out = String::new();
    let mut n = Normalizer::new(options);
    n.push(raw, &mut |s| out.push_str(s));
    n.finish(&mut |s| out.push_str(s));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn normalizes_escapes_overwrites_and_bad_bytes() {
        let raw = b"\x1b[32mok\x1b[0m\r\n 10%\r100%\r\nbad \xff byte";
        assert_eq!(
            normalize(raw, NormalizeOptions::default()),
            "ok\n100%\nbad \u{FFFD} byte"
        );
    }

    fn norm(raw: &[u8]) -> String {
        normalize(raw, NormalizeOptions::default())
    }

    #[test]
    fn line_endings_and_overwrites() {
        assert_eq!(norm(b"a\r\nb\r\n"), "a\nb\n");
        assert_eq!(norm(b"progress 10%\rprogress 100%\n"), "progress 100%\n");
        assert_eq!(norm(b"abcdef\rXY\n"), "XYcdef\n");
        assert_eq!(norm(b"abc\x08\x08X\n"), "aXc\n");
        assert_eq!(norm(b"\r\r\n"), "\n");
        assert_eq!(norm(b"x\r"), "x");
    }

    #[test]
    fn escapes_are_removed() {
        assert_eq!(norm(b"\x1b[1;31mred\x1b[0m"), "red");
        assert_eq!(norm(b"\x1b]0;title\x07text"), "text");
        assert_eq!(norm(b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"), "link");
        assert_eq!(norm(b"\x1b(Bplain\x1b=\x07"), "plain");
        assert_eq!(norm(b"\x1b[?25l\x1b[2K\rdone\n"), "done\n");
    }

    #[test]
    fn raw_options_keep_what_they_say() {
        let keep = NormalizeOptions {
            keep_escapes: true,
            keep_carriage_returns: true,
        };
        assert_eq!(normalize(b"\x1b[1mx\r\ny\rz", keep), "\x1b[1mx\ny\rz");
    }

    #[test]
    fn invalid_utf8_becomes_replacement() {
        assert_eq!(norm(b"\xff\xfe\x00ok"), "\u{FFFD}\u{FFFD}\u{0}ok");
        assert_eq!(norm(b"cut \xe4\xb8"), "cut \u{FFFD}");
    }

    proptest! {
        /// Chunk boundaries never change the result.
        #[test]
        fn chunking_is_invisible(
            raw in proptest::collection::vec(prop_oneof![
                any::<u8>(), Just(b'\r'), Just(b'\n'), Just(0x1b), Just(b'['), Just(0xe4), Just(0xb8), Just(0xad)
            ], 0..200),
            cuts in proptest::collection::vec(1usize..20, 0..30),
            keep_escapes: bool,
            keep_carriage_returns: bool,
        ) {
            let options = NormalizeOptions { keep_escapes, keep_carriage_returns };
            let whole = normalize(&raw, options);
            let mut out = String::new();
            let mut n = Normalizer::new(options);
            let mut rest = &raw[..];
            for c in cuts {
                let k = c.min(rest.len());
                n.push(&rest[..k], &mut |s| out.push_str(s));
                rest = &rest[k..];
            }
            n.push(rest, &mut |s| out.push_str(s));
            n.finish(&mut |s| out.push_str(s));
            prop_assert_eq!(out, whole);
        }

        #[test]
        fn plain_text_is_unchanged(text in "[a-zA-Z0-9 \t\n中文🎉]{0,100}") {
            prop_assert_eq!(norm(text.as_bytes()), text);
        }
    }
}
