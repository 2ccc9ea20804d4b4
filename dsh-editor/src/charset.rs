//! Legacy encodings: which one a file declares or looks like, and exact
//! conversion to and from it (the `detect-encodings` feature).
//!
//! A file is read in a legacy encoding only when that encoding gives its
//! bytes back exactly: the bytes decode without a malformed sequence and the
//! text encodes to the same bytes. The encodings allowed are stateless (each
//! character encodes on its own), so the characters an edit leaves alone
//! keep their bytes. UTF-16 without a byte-order mark, ISO-2022-JP (whose
//! escapes make a character's bytes depend on the ones before it),
//! `replacement` and `x-user-defined` are never used.

use encoding_rs::{EncoderResult, GBK, UTF_8, WINDOWS_1252};

use crate::text::DECLARATION_SPAN;

/// A legacy encoding a file is read and written in: any of the WHATWG
/// Encoding Standard's single- or multi-byte encodings that is stateless,
/// except windows-1252 (which is [`Encoding::Windows1252`]).
///
/// [`Encoding::Windows1252`]: crate::Encoding::Windows1252
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Legacy(&'static encoding_rs::Encoding);

impl Legacy {
    /// The encoding's name in the WHATWG Encoding Standard, e.g.
    /// `windows-1251`, `GBK`, `Shift_JIS`, `EUC-KR`, `ISO-8859-15`.
    pub fn name(self) -> &'static str {
        self.0.name()
    }
}

/// How a file's bytes were matched to an encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// UTF-8 (the bytes must still be valid UTF-8).
    Utf8,
    /// windows-1252 (any bytes).
    Windows1252,
    /// Another encoding, with the text it gave.
    Legacy(Legacy),
}

/// The encoding the first two lines of a file declare, if any and known: a
/// PEP 263 or Emacs `coding: NAME` / `coding=NAME`, a Vim
/// `fileencoding=NAME` / `fenc=NAME`, or an XML declaration's
/// `encoding="NAME"`. `head` is the file's start (no byte-order mark);
/// only its first [`DECLARATION_SPAN`] bytes are read (the first two lines
/// are where Python's PEP 263 looks, and where Emacs and Vim users put
/// theirs).
pub(crate) fn declared(head: &[u8]) -> Option<Found> {
    let head = &head[..head.len().min(DECLARATION_SPAN)];
    let end = memchr::memchr_iter(b'\n', head)
        .nth(1)
        .map_or(head.len(), |i| i + 1);
    let head = &head[..end];
    let label = if head.starts_with(b"<?xml") {
        xml_label(head)
    } else {
        head.split(|&b| b == b'\n').find_map(|line| {
            label_after(line, b"coding:")
                .or_else(|| label_after(line, b"coding="))
                .or_else(|| label_after(line, b"fenc="))
        })
    }?;
    found(lookup(label)?)
}

/// The encoding a detector guesses for `bytes` (which are not UTF-8 and
/// hold no NUL): Mozilla's `chardetng`, as Firefox uses it for unlabeled
/// pages, without a top-level domain hint.
pub(crate) fn detected(bytes: &[u8]) -> Option<Found> {
    let mut detector = chardetng::EncodingDetector::new(chardetng::Iso2022JpDetection::Deny);
    detector.feed(bytes, true);
    found(detector.guess(None, chardetng::Utf8Detection::Deny))
}

fn found(encoding: &'static encoding_rs::Encoding) -> Option<Found> {
    if encoding == UTF_8 {
        Some(Found::Utf8)
    } else if encoding == WINDOWS_1252 {
        Some(Found::Windows1252)
    } else if encoding.is_single_byte() && encoding.name() != "x-user-defined"
        || [
            encoding_rs::SHIFT_JIS,
            encoding_rs::EUC_JP,
            encoding_rs::EUC_KR,
            GBK,
            encoding_rs::GB18030,
            encoding_rs::BIG5,
        ]
        .contains(&encoding)
    {
        Some(Found::Legacy(Legacy(encoding)))
    } else {
        None
    }
}

/// `bytes` as text in `encoding`, if they decode without a malformed
/// sequence and the text encodes back to exactly `bytes`.
pub(crate) fn decode_exact(encoding: Legacy, bytes: &[u8]) -> Option<String> {
    let text = encoding
        .0
        .decode_without_bom_handling_and_without_replacement(bytes)?
        .into_owned();
    (encode(encoding, &text).ok()? == bytes).then_some(text)
}

/// `text` in `encoding`, or the first character it cannot hold.
pub(crate) fn encode(encoding: Legacy, text: &str) -> Result<Vec<u8>, char> {
    let mut encoder = encoding.0.new_encoder();
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    loop {
        let needed = encoder
            .max_buffer_length_from_utf8_without_replacement(rest.len())
            .unwrap_or(rest.len().saturating_mul(4));
        out.reserve(needed);
        let (result, read) =
            encoder.encode_from_utf8_to_vec_without_replacement(rest, &mut out, true);
        rest = &rest[read..];
        match result {
            EncoderResult::InputEmpty => return Ok(out),
            EncoderResult::OutputFull => continue,
            EncoderResult::Unmappable(ch) => return Err(ch),
        }
    }
}

/// The name right after `key` in `line` (spaces and tabs skipped), made of
/// letters, digits, `-`, `_` and `.`.
fn label_after<'a>(line: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let at = memchr::memmem::find(line, key)? + key.len();
    let rest = &line[at..];
    let start = rest.iter().position(|&b| b != b' ' && b != b'\t')?;
    let rest = &rest[start..];
    let len = rest
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b"-_.".contains(&b)))
        .unwrap_or(rest.len());
    (len > 0).then(|| &rest[..len])
}

/// The `encoding` pseudo-attribute of an XML declaration.
fn xml_label(head: &[u8]) -> Option<&[u8]> {
    let decl = &head[..memchr::memmem::find(head, b"?>")?];
    let at = memchr::memmem::find(decl, b"encoding")? + b"encoding".len();
    let rest = decl[at..]
        .trim_ascii_start()
        .strip_prefix(b"=")?
        .trim_ascii_start();
    let (&quote, rest) = rest.split_first()?;
    if quote != b'"' && quote != b'\'' {
        return None;
    }
    Some(&rest[..memchr::memchr(quote, rest)?])
}

/// The encoding a label names: the WHATWG labels, plus the spellings
/// Python and editors use that WHATWG lacks (`latin-1`, `utf-8-sig`,
/// `cp932`, `cp936`, `cp949`, `cp950`, underscores for hyphens).
fn lookup(label: &[u8]) -> Option<&'static encoding_rs::Encoding> {
    let lower = label.to_ascii_lowercase();
    let aliases: [(&[u8], &[u8]); 7] = [
        (b"latin-1", b"latin1"),
        (b"utf-8-sig", b"utf-8"),
        (b"utf8-sig", b"utf-8"),
        (b"cp932", b"shift_jis"),
        (b"cp936", b"gbk"),
        (b"cp949", b"euc-kr"),
        (b"cp950", b"big5"),
    ];
    let lower = aliases
        .iter()
        .find(|(alias, _)| *alias == lower.as_slice())
        .map_or(lower.clone(), |(_, name)| name.to_vec());
    encoding_rs::Encoding::for_label_no_replacement(&lower).or_else(|| {
        let hyphens: Vec<u8> = lower
            .iter()
            .map(|&b| if b == b'_' { b'-' } else { b })
            .collect();
        encoding_rs::Encoding::for_label_no_replacement(&hyphens)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(found: Option<Found>) -> Option<&'static str> {
        match found? {
            Found::Utf8 => Some("UTF-8"),
            Found::Windows1252 => Some("windows-1252"),
            Found::Legacy(l) => Some(l.name()),
        }
    }

    #[test]
    fn finds_each_kind_of_declaration() {
        let cases: [(&[u8], Option<&str>); 12] = [
            (b"# -*- coding: cp1251 -*-\nx = 1\n", Some("windows-1251")),
            (
                b"#!/usr/bin/env python\n# coding=latin-1\n",
                Some("windows-1252"),
            ),
            (b"#!/bin/sh\n\n# coding: cp1251\n", None),
            (b"/* -*- mode: c; coding: euc-jp -*- */\n", Some("EUC-JP")),
            (b"# vim: set fileencoding=gbk :\n", Some("GBK")),
            (b"// vim: fenc=shift_jis\n", Some("Shift_JIS")),
            (
                b"<?xml version=\"1.0\" encoding='ISO-8859-15'?>\n<a/>",
                Some("ISO-8859-15"),
            ),
            (b"# coding: utf-8\n", Some("UTF-8")),
            (b"# coding: utf_8\n", Some("UTF-8")),
            (b"# coding: klingon\n", None),
            (b"open(f, encoding=\"cp1251\")\n", None),
            (b"# coding: iso-2022-jp\n", None),
        ];
        for (head, want) in cases {
            assert_eq!(
                name(declared(head)),
                want,
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn decodes_only_what_round_trips() {
        let Some(Found::Legacy(cp1251)) = found(encoding_rs::WINDOWS_1251) else {
            panic!("windows-1251 is a legacy encoding");
        };
        assert_eq!(
            decode_exact(cp1251, b"\xcf\xf0\xe8\xe2\xe5\xf2").as_deref(),
            Some("Привет")
        );
        assert_eq!(
            encode(cp1251, "Привет"),
            Ok(b"\xcf\xf0\xe8\xe2\xe5\xf2".to_vec())
        );
        assert_eq!(encode(cp1251, "中"), Err('中'));
        let Some(Found::Legacy(sjis)) = found(encoding_rs::SHIFT_JIS) else {
            panic!("Shift_JIS is a legacy encoding");
        };
        // A lead byte without its trail byte is malformed.
        assert_eq!(decode_exact(sjis, b"abc\x82"), None);
        // No UTF-16 without a byte-order mark, no ISO-2022-JP.
        assert_eq!(found(encoding_rs::UTF_16LE), None);
        assert_eq!(found(encoding_rs::ISO_2022_JP), None);
    }
}
