//! A file's lines from one pass over its blocks: what [`Document::decode`]
//! would make of it (its line count, its text from one line on), keeping
//! only the lines asked for. A view of the end of a long log then reads the
//! file once, checks each block while it is in the CPU's cache, and holds
//! only what it shows.
//!
//! It answers for the files most views are of — UTF-8, with or without a
//! byte-order mark, and no NUL byte — exactly as [`Document::decode`] reads
//! them (a file with `\r\n` throughout gets `\n` line breaks), unless its
//! first two lines declare another encoding. For any other file
//! [`LineScan::finish`] says `None`, and the caller decodes it whole.
//!
//! [`Document::decode`]: crate::text::Document::decode

use crate::text::Encoding;

const UTF8_BOM: [u8; 3] = *b"\xEF\xBB\xBF";

/// How much of the file's start a scan keeps aside: as much as a declared
/// encoding is looked for in.
const HEAD_BYTES: usize = crate::text::DECLARATION_SPAN;

/// The state of a scan; [`LineScan::push`] each block in order, then
/// [`LineScan::finish`].
#[derive(Debug)]
pub struct LineScan {
    /// The first line kept (1-based).
    keep_from: usize,
    /// At most this many bytes are kept.
    keep_bytes: usize,
    /// Bytes past `keep_bytes` were left out.
    cut: bool,
    keeping: bool,
    kept: Vec<u8>,
    /// `\n` bytes seen.
    newlines: usize,
    /// Bytes seen, and the first [`HEAD_BYTES`] of them (for the byte-order
    /// mark and a declared encoding).
    seen: u64,
    head: Vec<u8>,
    /// A `\n` without a `\r` before it was seen (so not CRLF throughout).
    bare_newline: bool,
    /// The last byte seen was `\r`.
    after_cr: bool,
    nul: bool,
    /// No invalid UTF-8 so far.
    utf8: bool,
    /// An incomplete UTF-8 sequence at the end of the last block.
    pending: [u8; 4],
    pending_len: usize,
}

/// What a scan kept: the file's text from line `first_line` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// The file's line count, as [`crate::ops::line_count`] counts it.
    pub lines: usize,
    /// The line `text` starts with (1-based).
    pub first_line: usize,
    /// The text from that line to the end of the file.
    pub text: String,
    /// The encoding the text was read in.
    pub encoding: Encoding,
}

impl LineScan {
    /// A scan that keeps the text from line `keep_from` (1-based; 0 counts
    /// as 1) on, up to about `keep_bytes` bytes of it (it ends on a whole
    /// character, so at least `keep_bytes / 4` characters).
    pub fn new(keep_from: usize, keep_bytes: usize) -> Self {
        let keep_from = keep_from.max(1);
        LineScan {
            keep_from,
            cut: false,
            // From the start: room for a byte-order mark too.
            keep_bytes: if keep_from == 1 {
                keep_bytes.saturating_add(UTF8_BOM.len())
            } else {
                keep_bytes
            },
            keeping: false,
            kept: Vec::new(),
            newlines: 0,
            seen: 0,
            head: Vec::new(),
            bare_newline: false,
            after_cr: false,
            nul: false,
            utf8: true,
            pending: [0; 4],
            pending_len: 0,
        }
    }

    /// Takes the next block of the file.
    pub fn push(&mut self, block: &[u8]) {
        let Some(&last) = block.last() else { return };
        let room = HEAD_BYTES.saturating_sub(self.head.len());
        self.head.extend_from_slice(&block[..block.len().min(room)]);
        self.seen += block.len() as u64;
        if self.nul || memchr::memchr(0, block).is_some() {
            // Not a file this scan answers for: nothing more to learn.
            self.nul = true;
            return;
        }
        if self.utf8 {
            self.check_utf8(block);
        }
        if !self.bare_newline {
            self.bare_newline = memchr::memchr_iter(b'\n', block).any(|i| {
                let before = if i == 0 {
                    self.after_cr
                } else {
                    block[i - 1] == b'\r'
                };
                !before
            });
        }
        self.after_cr = last == b'\r';
        let newlines = memchr::memchr_iter(b'\n', block).count();
        if self.keeping {
            self.keep(block);
        } else {
            // `\n` still to pass before the first kept line starts.
            let to_pass = self.keep_from - 1 - self.newlines;
            if to_pass == 0 {
                self.keeping = true;
                self.keep(block);
            } else if newlines >= to_pass
                && let Some(i) = memchr::memchr_iter(b'\n', block).nth(to_pass - 1)
            {
                self.keeping = true;
                self.keep(&block[i + 1..]);
            }
        }
        self.newlines += newlines;
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = self.keep_bytes.saturating_sub(self.kept.len());
        self.cut |= bytes.len() > room;
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// Validates `block` as UTF-8, carrying a sequence cut at its end over
    /// to the next block.
    fn check_utf8(&mut self, block: &[u8]) {
        let mut rest = block;
        if self.pending_len > 0 {
            let width = match self.pending[0] {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            let take = (width - self.pending_len).min(rest.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&rest[..take]);
            self.pending_len += take;
            rest = &rest[take..];
            if self.pending_len < width {
                return;
            }
            self.utf8 = std::str::from_utf8(&self.pending[..width]).is_ok();
            self.pending_len = 0;
            if !self.utf8 {
                return;
            }
        }
        match std::str::from_utf8(rest) {
            Ok(_) => {}
            Err(e) if e.error_len().is_none() => {
                let cut = &rest[e.valid_up_to()..];
                self.pending[..cut.len()].copy_from_slice(cut);
                self.pending_len = cut.len();
            }
            Err(_) => self.utf8 = false,
        }
    }

    /// What was kept, as [`Document::decode`](crate::text::Document::decode)
    /// would have read it; `None` for a file that is not UTF-8 without NUL.
    pub fn finish(self) -> Option<Kept> {
        if self.nul || !self.utf8 || self.pending_len > 0 {
            return None;
        }
        let bom = self.head.starts_with(&UTF8_BOM);
        if !bom && crate::text::declares_other_than_utf8(&self.head) {
            return None;
        }
        let mut kept = self.kept;
        if self.keep_from == 1 && bom {
            kept.drain(..kept.len().min(UTF8_BOM.len()));
        }
        let text = match String::from_utf8(kept) {
            Ok(text) => text,
            // Cut at `keep_bytes` inside a character: up to that character.
            Err(e) if self.cut && e.utf8_error().error_len().is_none() => {
                let whole = e.utf8_error().valid_up_to();
                let mut bytes = e.into_bytes();
                bytes.truncate(whole);
                String::from_utf8(bytes).ok()?
            }
            Err(_) => return None,
        };
        let crlf = self.newlines > 0 && !self.bare_newline;
        let text = if crlf {
            let mut text = text.replace("\r\n", "\n");
            // Cut between `\r` and `\n`: that line break is not kept.
            if self.cut && text.ends_with('\r') {
                text.pop();
            }
            text
        } else {
            text
        };
        Some(Kept {
            lines: self.newlines + 1,
            first_line: self.keep_from,
            text,
            encoding: if bom {
                Encoding::Utf8Bom
            } else {
                Encoding::Utf8
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops;
    use crate::text::Document;
    use proptest::prelude::*;

    fn scan(bytes: &[u8], cuts: &[usize], keep_from: usize) -> Option<Kept> {
        scan_kept(bytes, cuts, keep_from, usize::MAX)
    }

    fn scan_kept(
        bytes: &[u8],
        cuts: &[usize],
        keep_from: usize,
        keep_bytes: usize,
    ) -> Option<Kept> {
        let mut scan = LineScan::new(keep_from, keep_bytes);
        let mut at = 0;
        for &cut in cuts {
            let cut = cut.min(bytes.len()).max(at);
            scan.push(&bytes[at..cut]);
            at = cut;
        }
        scan.push(&bytes[at..]);
        scan.finish()
    }

    /// What the scan must say: the decoded document's text from the line on.
    fn expected(bytes: &[u8], keep_from: usize) -> Option<Kept> {
        let doc = Document::decode(bytes.to_vec()).ok()?;
        if !doc.encoding().is_utf8() {
            return None;
        }
        let text = doc.text();
        let lines = ops::line_count(text);
        let keep_from = keep_from.max(1);
        let start = if keep_from > lines {
            text.len()
        } else {
            ops::line_start_counted(text, lines, keep_from)
        };
        Some(Kept {
            lines,
            first_line: keep_from,
            text: text[start..].to_owned(),
            encoding: doc.encoding(),
        })
    }

    #[test]
    fn keeps_the_end_of_a_file_read_in_small_blocks() {
        let text: String = (1..=100).map(|i| format!("line {i} é\n")).collect();
        let cuts: Vec<usize> = (1..text.len()).step_by(7).collect();
        let kept = scan(text.as_bytes(), &cuts, 98).unwrap();
        assert_eq!(kept.lines, 101);
        assert_eq!(kept.text, "line 98 é\nline 99 é\nline 100 é\n");
    }

    #[test]
    fn answers_only_for_utf8_without_nul() {
        assert_eq!(scan(b"a\0b\n", &[], 1), None);
        assert_eq!(scan(b"caf\xE9\n", &[], 1), None);
        assert_eq!(scan(b"\xFF\xFEa\0", &[], 1), None);
        // A sequence cut by the end of the file.
        assert_eq!(scan(b"ab\xC3", &[2], 1), None);
        let bom = scan(b"\xEF\xBB\xBFa\r\nb\r\n", &[1, 2], 1).unwrap();
        assert_eq!(bom.text, "a\nb\n");
        // A `\n` that starts a block, after a `\r` or not.
        assert_eq!(scan(b"a\r\nb\r\n", &[4], 1).unwrap().text, "a\nb\n");
        assert_eq!(scan(b"a\r\nb\n", &[4], 1).unwrap().text, "a\r\nb\n");
        // A `\r` that ends the file stays (only a cut drops it).
        assert_eq!(scan(b"\r\n\r", &[], 1).unwrap().text, "\n\r");
        // Kept up to 0 bytes, and 3 for a byte-order mark: a cut `\r\n` goes.
        assert_eq!(scan_kept(b"ab\r\nc\r\n", &[], 1, 0).unwrap().text, "ab");
    }

    proptest! {
        /// Text with multi-byte characters, a byte-order mark or not, `\r\n`
        /// throughout or not, a stray byte or not, cut anywhere and kept from
        /// any line: the same answer as decoding the whole file.
        #[test]
        fn agrees_with_decoding_the_whole_file(
            pieces in proptest::collection::vec(
                prop_oneof![
                    Just("a"), Just("é"), Just("€"), Just("😀"), Just("\n"), Just("\r"),
                ],
                0..40,
            ),
            bom in any::<bool>(),
            crlf in any::<bool>(),
            stray in proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
            cuts in proptest::collection::vec(0usize..200, 0..8),
            keep_from in 0usize..12,
            keep_bytes in 0usize..24,
        ) {
            let mut text: String = pieces.concat();
            if crlf {
                text = text.replace('\r', "").replace('\n', "\r\n");
            }
            let mut bytes = text.into_bytes();
            if bom {
                bytes.splice(0..0, UTF8_BOM);
            }
            if let Some((at, byte)) = stray {
                bytes.insert(at.index(bytes.len() + 1), byte);
            }
            let mut cuts = cuts;
            cuts.sort_unstable();
            let want = expected(&bytes, keep_from);
            prop_assert_eq!(scan(&bytes, &cuts, keep_from), want.clone());
            // One byte at a time: every boundary at once.
            let every: Vec<usize> = (1..bytes.len()).collect();
            prop_assert_eq!(scan(&bytes, &every, keep_from), want.clone());
            // Kept up to a bound: the start of the same text, at least a
            // quarter of the bound in characters.
            match (scan_kept(&bytes, &cuts, keep_from, keep_bytes), want) {
                (Some(kept), Some(want)) => {
                    prop_assert_eq!((kept.lines, kept.first_line), (want.lines, want.first_line));
                    prop_assert!(want.text.starts_with(&kept.text), "{:?} {:?}", kept.text, want.text);
                    let (got, all) = (kept.text.chars().count(), want.text.chars().count());
                    prop_assert!(got >= all.min(keep_bytes / 4), "{} of {}", got, all);
                }
                (bounded, want) => prop_assert_eq!(bounded.is_none(), want.is_none()),
            }
        }
    }
}
