//! Lossless decoding of a file into text, and back.
//!
//! A [`Document`] remembers everything needed to write the file back
//! byte-for-byte: its encoding (UTF-8 with or without BOM, UTF-16 with BOM, a
//! legacy encoding the file declares or looks like, or windows-1252 for any
//! other bytes), and whether it uses CRLF line breaks throughout.
//!
//! The encoding of a file without a byte-order mark is, in this order: the
//! one its first two lines declare (PEP 263 / Emacs `coding:`, Vim
//! `fileencoding=`, an XML declaration), if the bytes are valid in it;
//! UTF-8, if they are valid UTF-8; the one Mozilla's `chardetng` detector
//! guesses; windows-1252. A legacy encoding is used only if it gives the
//! file's bytes back exactly (see the `charset` module); otherwise the next
//! rule applies. Without the `detect-encodings` feature only the UTF-8 and
//! windows-1252 rules apply. The text of a CRLF document is held with `\n` breaks; encoding
//! turns every `\n` back into `\r\n`, which is the exact inverse.

use std::borrow::Cow;
use std::fmt;

/// How a file's bytes map to text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Encoding {
    /// UTF-8 without a byte-order mark.
    Utf8,
    /// UTF-8 starting with the byte-order mark `EF BB BF`.
    Utf8Bom,
    /// UTF-16, little-endian, starting with `FF FE`.
    Utf16Le,
    /// UTF-16, big-endian, starting with `FE FF`.
    Utf16Be,
    /// windows-1252 (declared, guessed, or the last resort for bytes
    /// without NUL that nothing else reads: the WHATWG mapping, in which
    /// every byte is a character, so any byte sequence round-trips exactly).
    Windows1252,
    /// Another legacy encoding, declared by the file or guessed from it,
    /// that gives the file's bytes back exactly.
    #[cfg(feature = "detect-encodings")]
    Legacy(crate::charset::Legacy),
}

impl Encoding {
    /// Whether this is UTF-8, with or without a byte-order mark.
    pub fn is_utf8(self) -> bool {
        matches!(self, Encoding::Utf8 | Encoding::Utf8Bom)
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Encoding::Utf8 => "UTF-8",
            Encoding::Utf8Bom => "UTF-8 with BOM",
            Encoding::Utf16Le => "UTF-16LE",
            Encoding::Utf16Be => "UTF-16BE",
            Encoding::Windows1252 => "windows-1252",
            #[cfg(feature = "detect-encodings")]
            Encoding::Legacy(legacy) => legacy.name(),
        })
    }
}

/// Why bytes could not be read as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes contain NUL and are not UTF-16 with a byte-order mark.
    Binary,
}

/// A character that the document's encoding cannot represent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unrepresentable {
    /// The character.
    pub ch: char,
    /// The document's encoding.
    pub encoding: Encoding,
}

/// A decoded file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    encoding: Encoding,
    crlf: bool,
    text: String,
}

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

impl Document {
    /// Decodes `bytes`, taking ownership to avoid a copy for UTF-8.
    pub fn decode(bytes: Vec<u8>) -> Result<Document, DecodeError> {
        let (encoding, text) = if let Some(rest) = bytes.strip_prefix(UTF8_BOM) {
            match std::str::from_utf8(rest) {
                Ok(s) if !s.contains('\0') => (Encoding::Utf8Bom, s.to_owned()),
                _ => decode_legacy(&bytes, false)?,
            }
        } else if let Some(text) = decode_utf16(&bytes) {
            text
        } else if memchr::memchr(0, &bytes).is_some() {
            return Err(DecodeError::Binary);
        } else if let Some(declared) = decode_declared(&bytes) {
            declared
        } else {
            match String::from_utf8(bytes) {
                Ok(s) => (Encoding::Utf8, s),
                Err(e) => decode_legacy(e.as_bytes(), true)?,
            }
        };
        Ok(Document::from_text(encoding, text))
    }

    /// A document holding `text` as read, in `encoding` (CRLF detected from the text).
    fn from_text(encoding: Encoding, text: String) -> Document {
        let crlf = uses_crlf(&text);
        let text = if crlf {
            text.replace("\r\n", "\n")
        } else {
            text
        };
        Document {
            encoding,
            crlf,
            text,
        }
    }

    /// A new document with the same encoding and line breaks as `self`.
    pub fn with_text(&self, text: String) -> Document {
        Document {
            encoding: self.encoding,
            crlf: self.crlf,
            text,
        }
    }

    /// Replaces `range` of the text (byte offsets on char boundaries, as
    /// [`String::replace_range`]) with `with`, in place.
    pub fn replace_range(&mut self, range: std::ops::Range<usize>, with: &str) {
        self.text.replace_range(range, with);
    }

    /// The text, with `\n` line breaks if the file uses CRLF throughout.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text, as [`Document::text`], taken out of the document.
    pub fn into_text(self) -> String {
        self.text
    }

    /// The encoding found.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// Whether every line break of the file is `\r\n`.
    pub fn is_crlf(&self) -> bool {
        self.crlf
    }

    /// Brings model input into the document's form: in a CRLF document,
    /// `\r\n` in the input becomes `\n` (and is written back as `\r\n`).
    pub fn normalize_input<'a>(&self, input: &'a str) -> Cow<'a, str> {
        if self.crlf && input.contains("\r\n") {
            Cow::Owned(input.replace("\r\n", "\n"))
        } else {
            Cow::Borrowed(input)
        }
    }

    /// The file's bytes: the text in its encoding, with its line breaks and
    /// BOM. Consumes the document so that plain UTF-8 needs no copy.
    pub fn encode(self) -> Result<Vec<u8>, Unrepresentable> {
        let text = if self.crlf {
            self.text.replace('\n', "\r\n")
        } else {
            self.text
        };
        match self.encoding {
            Encoding::Utf8 => Ok(text.into_bytes()),
            Encoding::Utf8Bom => {
                let mut out = Vec::with_capacity(UTF8_BOM.len() + text.len());
                out.extend_from_slice(UTF8_BOM);
                out.extend_from_slice(text.as_bytes());
                Ok(out)
            }
            Encoding::Utf16Le | Encoding::Utf16Be => {
                let le = self.encoding == Encoding::Utf16Le;
                let mut out = Vec::with_capacity(2 + text.len() * 2);
                out.extend_from_slice(if le { &[0xFF, 0xFE] } else { &[0xFE, 0xFF] });
                for unit in text.encode_utf16() {
                    out.extend_from_slice(&if le {
                        unit.to_le_bytes()
                    } else {
                        unit.to_be_bytes()
                    });
                }
                Ok(out)
            }
            #[cfg(feature = "detect-encodings")]
            Encoding::Legacy(legacy) => {
                crate::charset::encode(legacy, &text).map_err(|ch| Unrepresentable {
                    ch,
                    encoding: self.encoding,
                })
            }
            Encoding::Windows1252 => text
                .chars()
                .map(|ch| {
                    cp1252_byte(ch).ok_or(Unrepresentable {
                        ch,
                        encoding: Encoding::Windows1252,
                    })
                })
                .collect(),
        }
    }
}

/// CRLF throughout: at least one `\n`, and every `\n` preceded by `\r`.
fn uses_crlf(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut any = false;
    for i in memchr::memchr_iter(b'\n', bytes) {
        if i == 0 || bytes[i - 1] != b'\r' {
            return false;
        }
        any = true;
    }
    any
}

fn decode_utf16(bytes: &[u8]) -> Option<(Encoding, String)> {
    let (le, body) = match bytes {
        [0xFF, 0xFE, rest @ ..] => (true, rest),
        [0xFE, 0xFF, rest @ ..] => (false, rest),
        _ => return None,
    };
    if body.len() % 2 != 0 {
        return None;
    }
    let units = body.chunks_exact(2).map(|p| {
        if le {
            u16::from_le_bytes([p[0], p[1]])
        } else {
            u16::from_be_bytes([p[0], p[1]])
        }
    });
    let text: String = char::decode_utf16(units).collect::<Result<_, _>>().ok()?;
    if text.contains('\0') {
        return None;
    }
    Some((
        if le {
            Encoding::Utf16Le
        } else {
            Encoding::Utf16Be
        },
        text,
    ))
}

/// How far into a file a declared encoding is looked for.
pub(crate) const DECLARATION_SPAN: usize = 4096;

/// Whether the file starting with `head` (no byte-order mark) declares an
/// encoding other than UTF-8 that [`Document::decode`] may read it in.
pub(crate) fn declares_other_than_utf8(head: &[u8]) -> bool {
    #[cfg(feature = "detect-encodings")]
    {
        !matches!(
            crate::charset::declared(head),
            None | Some(crate::charset::Found::Utf8)
        )
    }
    #[cfg(not(feature = "detect-encodings"))]
    {
        let _ = head;
        false
    }
}

/// What a file's first two lines declare, if that encoding reads it
/// exactly (`None` without the `detect-encodings` feature).
fn decode_declared(bytes: &[u8]) -> Option<(Encoding, String)> {
    #[cfg(feature = "detect-encodings")]
    {
        use crate::charset::{self, Found};
        match charset::declared(bytes)? {
            Found::Utf8 => None,
            Found::Windows1252 => Some((Encoding::Windows1252, decode_cp1252(bytes))),
            Found::Legacy(legacy) => {
                charset::decode_exact(legacy, bytes).map(|text| (Encoding::Legacy(legacy), text))
            }
        }
    }
    #[cfg(not(feature = "detect-encodings"))]
    {
        let _ = bytes;
        None
    }
}

/// Bytes that are not UTF-8 (or UTF-8 after a byte-order mark that does not
/// fit): what the detector guesses, if `detect` and that encoding reads
/// them exactly, else windows-1252. Binary if they hold NUL.
fn decode_legacy(bytes: &[u8], detect: bool) -> Result<(Encoding, String), DecodeError> {
    if memchr::memchr(0, bytes).is_some() {
        return Err(DecodeError::Binary);
    }
    #[cfg(feature = "detect-encodings")]
    if detect {
        use crate::charset::{self, Found};
        if let Some(Found::Legacy(legacy)) = charset::detected(bytes)
            && let Some(text) = charset::decode_exact(legacy, bytes)
        {
            return Ok((Encoding::Legacy(legacy), text));
        }
    }
    #[cfg(not(feature = "detect-encodings"))]
    let _ = detect;
    Ok((Encoding::Windows1252, decode_cp1252(bytes)))
}

fn decode_cp1252(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| cp1252_char(b)).collect()
}

/// windows-1252 bytes 0x80..=0x9F (WHATWG: the five unassigned ones map to
/// the C1 control of the same number).
const CP1252_HIGH: [char; 32] = [
    '\u{20AC}', '\u{0081}', '\u{201A}', '\u{0192}', '\u{201E}', '\u{2026}', '\u{2020}', '\u{2021}',
    '\u{02C6}', '\u{2030}', '\u{0160}', '\u{2039}', '\u{0152}', '\u{008D}', '\u{017D}', '\u{008F}',
    '\u{0090}', '\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}', '\u{2022}', '\u{2013}', '\u{2014}',
    '\u{02DC}', '\u{2122}', '\u{0161}', '\u{203A}', '\u{0153}', '\u{009D}', '\u{017E}', '\u{0178}',
];

fn cp1252_char(b: u8) -> char {
    match b {
        0x80..=0x9F => CP1252_HIGH[usize::from(b - 0x80)],
        _ => char::from(b),
    }
}

fn cp1252_byte(c: char) -> Option<u8> {
    let cp = u32::from(c);
    match cp {
        0..=0x7F | 0xA0..=0xFF => u8::try_from(cp).ok(),
        _ => CP1252_HIGH
            .iter()
            .position(|&h| h == c)
            .and_then(|i| u8::try_from(0x80 + i).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn detects_each_encoding() {
        let cases: [(&[u8], Encoding, &str); 5] = [
            (b"plain\n", Encoding::Utf8, "plain\n"),
            (b"\xEF\xBB\xBFbom\n", Encoding::Utf8Bom, "bom\n"),
            (b"\xFF\xFEh\x00i\x00", Encoding::Utf16Le, "hi"),
            (b"\xFE\xFF\x00h\x00i", Encoding::Utf16Be, "hi"),
            (
                b"\x93quoted\x94 \xe9",
                Encoding::Windows1252,
                "\u{201C}quoted\u{201D} é",
            ),
        ];
        for (bytes, enc, text) in cases {
            let doc = Document::decode(bytes.to_vec()).unwrap();
            assert_eq!(doc.encoding(), enc);
            assert_eq!(doc.text(), text);
            assert_eq!(doc.encode().unwrap(), bytes);
        }
    }

    #[test]
    fn nul_bytes_mean_binary() {
        assert_eq!(
            Document::decode(b"ELF\0\x01\x02".to_vec()),
            Err(DecodeError::Binary)
        );
    }

    #[test]
    fn mixed_line_breaks_are_left_alone() {
        let doc = Document::decode(b"a\r\nb\nc\r\n".to_vec()).unwrap();
        assert!(!doc.is_crlf());
        assert_eq!(doc.text(), "a\r\nb\nc\r\n");
        assert_eq!(doc.normalize_input("x\r\ny"), "x\r\ny");
    }

    #[test]
    fn cp1252_refuses_what_it_cannot_hold() {
        let doc = Document::decode(vec![0xE9]).unwrap();
        assert_eq!(doc.with_text("é€".into()).encode(), Ok(vec![0xE9, 0x80]));
        assert_eq!(
            doc.with_text("a中".into()).encode(),
            Err(Unrepresentable {
                ch: '中',
                encoding: Encoding::Windows1252
            })
        );
        let crlf = Document::decode(b"a\r\nb\r\n".to_vec()).unwrap();
        assert!(crlf.is_crlf());
        assert_eq!(crlf.text(), "a\nb\n");
    }

    proptest! {
        /// Decoding never fails except for binary, and encoding gives back the bytes.
        #[test]
        fn every_text_file_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            match Document::decode(bytes.clone()) {
                Ok(doc) => prop_assert_eq!(doc.encode().unwrap(), bytes),
                Err(DecodeError::Binary) => prop_assert!(bytes.contains(&0)),
            }
        }

        #[test]
        fn crlf_text_round_trips(lines in proptest::collection::vec("[a-z\r\t é]{0,8}", 1..8)) {
            let joined = lines.join("\r\n") + "\r\n";
            let doc = Document::decode(joined.clone().into_bytes()).unwrap();
            prop_assert!(doc.is_crlf());
            prop_assert_eq!(doc.encode().unwrap(), joined.into_bytes());
        }
    }
}
