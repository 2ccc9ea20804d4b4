//! The editor's text layer on arbitrary input: decoding round-trips, and
//! find / splice / insert / view-range never panic and keep their invariants.
#![no_main]

use dsh_editor::ops;
use dsh_editor::text::{DecodeError, Document};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (params, file) = data.split_at(4);
    let Ok(doc) = Document::decode(file.to_vec()) else {
        assert!(file.contains(&0), "only files with NUL are binary");
        let _: DecodeError = DecodeError::Binary;
        return;
    };
    assert_eq!(doc.clone().encode().ok().as_deref(), Some(file), "decode/encode round trip");

    let text = doc.text();
    let lines = ops::line_count(text);
    let a = usize::from(params[0]) % (lines + 1);
    let b = usize::from(params[1]) % (lines + 1);

    // view range
    if a >= 1 && b >= a {
        let mut out = String::new();
        ops::number_lines(text, a, b, &mut out, 0, usize::from(params[2]) * 64);
    }

    // insert, then remove the inserted lines
    let insert = String::from_utf8_lossy(&params[2..4]).into_owned();
    let edited = ops::insert_after(text, a, &insert).expect("in range");
    let mut split: Vec<&str> = edited.split('\n').collect();
    let added = insert.split('\n').count();
    split.drain(a..a + added);
    assert_eq!(split.join("\n"), text);

    // replace a substring of the text that is unique, then replace back
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    if chars.len() >= 2 {
        let i = usize::from(params[0]) % chars.len();
        let j = (i + 1 + usize::from(params[1]) % 8).min(chars.len());
        let start = chars[i].0;
        let end = chars.get(j).map_or(text.len(), |c| c.0);
        let needle = &text[start..end];
        let hits = ops::find_all(text, needle);
        assert!(!hits.is_empty());
        let lines_of = ops::line_numbers(text, &hits);
        assert!(lines_of.windows(2).all(|w| w[0] <= w[1]));
        if hits.len() == 1 {
            let marker = "\u{1F980}\u{1F980}";
            if ops::find_all(text, marker).is_empty() {
                let replaced = ops::splice(text, hits[0], needle.len(), marker);
                let back = ops::find_all(&replaced, marker);
                assert_eq!(back.len(), 1);
                assert_eq!(ops::splice(&replaced, back[0], marker.len(), needle), text);
            }
        }
    }
});
