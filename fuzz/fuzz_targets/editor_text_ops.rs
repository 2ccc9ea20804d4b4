//! The editor's text layer on arbitrary files, and the editor itself over
//! them: decoding round-trips byte for byte; the block-by-block view scan
//! agrees with decoding the whole file, however the file is cut; a
//! `str_replace` or `insert` that fails leaves the file as it was, and one
//! that succeeds writes exactly the edited text in the file's encoding and
//! line breaks (the decoded document with the edit, encoded); a view never
//! panics and changes nothing.
#![no_main]

use std::future::Future;
use std::path::Path;

use dsh_editor::__private::{
    DecodeError, Document, Kept, LineScan, find_some, line_count, line_start_counted,
};
use dsh_editor::fs::{Fs, MemFs};
use dsh_editor::{Editor, EditorRequest};
use libfuzzer_sys::fuzz_target;

const PATH: &str = "/f";

/// Polls `fut` to completion on this thread: every future over `MemFs` is
/// ready when first polled.
fn run<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// What a view scan from line `first` must keep: the decoded text from
/// that line on (UTF-8 files only; others are decoded whole).
fn expected_scan(doc: &Document, first: usize) -> Option<Kept> {
    if !doc.encoding().is_utf8() {
        return None;
    }
    let text = doc.text();
    let lines = line_count(text);
    let first = first.max(1);
    let start = if first > lines {
        text.len()
    } else {
        line_start_counted(text, lines, first)
    };
    Some(Kept {
        lines,
        first_line: first,
        text: text[start..].to_owned(),
        encoding: doc.encoding(),
    })
}

fn scan(file: &[u8], step: usize, first: usize, keep_bytes: usize) -> Option<Kept> {
    let mut scan = LineScan::new(first, keep_bytes);
    for block in file.chunks(step) {
        scan.push(block);
    }
    scan.finish()
}

/// The editor over a fresh in-memory file holding `file`.
fn editor_over(file: &[u8]) -> Editor<MemFs> {
    let fs = MemFs::new();
    run(fs.create_new(Path::new(PATH), file.to_vec())).expect("a new file");
    Editor::new(fs)
}

fn content(editor: &Editor<MemFs>) -> Vec<u8> {
    editor.fs().get(Path::new(PATH)).expect("the file")
}

/// Lines of `text` with `insert`'s lines after line `after`, as the
/// contract describes an insert.
fn inserted(text: &str, after: usize, insert: &str) -> String {
    let mut lines: Vec<&str> = text.split('\n').collect();
    lines.splice(after..after, insert.split('\n'));
    lines.join("\n")
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (params, file) = data.split_at(4);
    let doc = match Document::decode(file.to_vec()) {
        Ok(doc) => doc,
        Err(DecodeError::Binary) => {
            assert!(file.contains(&0), "only files with NUL are binary");
            return;
        }
    };
    assert_eq!(
        doc.clone().encode().as_deref(),
        Ok(file),
        "decode/encode round trip"
    );
    let text = doc.text();
    let lines = line_count(text);

    // The view scan, cut into blocks of any size, from any line.
    let step = usize::from(params[0] % 64) + 1;
    let first = usize::from(params[1]) % (lines + 2);
    let want = expected_scan(&doc, first);
    assert_eq!(scan(file, step, first, usize::MAX), want, "scan vs decode");
    // Bounded: the start of the same text, at least a quarter of the bound.
    let bound = usize::from(params[2]);
    match (scan(file, step, first, bound), want) {
        (Some(kept), Some(want)) => {
            assert_eq!((kept.lines, kept.first_line), (want.lines, want.first_line));
            assert!(want.text.starts_with(&kept.text));
            let (got, all) = (kept.text.chars().count(), want.text.chars().count());
            assert!(got >= all.min(bound / 4), "{got} of {all}");
        }
        (bounded, want) => assert_eq!(bounded.is_none(), want.is_none()),
    }

    // str_replace of a piece of the text (unique or not, or absent once
    // the piece is changed), by something made of the parameters.
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let new_str = String::from_utf8_lossy(&params[2..4]).into_owned();
    if !chars.is_empty() {
        let i = usize::from(params[0]) % chars.len();
        let j = (i + 1 + usize::from(params[1]) % 8).min(chars.len());
        let end = chars.get(j).map_or(text.len(), |c| c.0);
        let mut old_str = text[chars[i].0..end].to_owned();
        if params[3] & 1 == 1 {
            old_str.push('\u{1F980}');
        }
        let editor = editor_over(file);
        let done = run(editor.call(EditorRequest::StrReplace {
            path: PATH.into(),
            old_str: Some(old_str.clone()),
            new_str: Some(new_str.clone()),
        }));
        let needle = doc.normalize_input(&old_str).into_owned();
        let (hits, total) = find_some(text, &needle, usize::MAX);
        assert_eq!(hits.len(), total);
        match done {
            Err(_) => assert_eq!(content(&editor), file, "a failed edit changes nothing"),
            Ok(_) => {
                assert_eq!(total, 1, "replaced only when unique");
                let mut want = text.to_owned();
                want.replace_range(hits[0]..hits[0] + needle.len(), &doc.normalize_input(&new_str));
                assert_eq!(content(&editor), doc.with_text(want).encode().expect("encodable"));
            }
        }
    }

    // insert after any line, one past the end included (refused).
    let after = i64::from(params[0]) % (lines as i64 + 2);
    let editor = editor_over(file);
    let done = run(editor.call(EditorRequest::Insert {
        path: PATH.into(),
        insert_line: Some(after),
        new_str: Some(new_str.clone()),
    }));
    match done {
        Err(_) => assert_eq!(content(&editor), file, "a failed insert changes nothing"),
        Ok(_) => {
            let want = inserted(text, after as usize, &doc.normalize_input(&new_str));
            assert_eq!(content(&editor), doc.with_text(want).encode().expect("encodable"));
        }
    }

    // A view of any range never panics and changes nothing.
    let a = i64::from(params[1]) - 2;
    let b = i64::from(params[2]) - 2;
    let editor = editor_over(file);
    let _ = run(editor.call(EditorRequest::View {
        path: PATH.into(),
        view_range: Some((a, b)),
    }));
    assert_eq!(content(&editor), file);
});
