//! The text operations behind the commands, on `&str`, free of I/O. Lines are
//! the pieces of the text split on `\n`: a text ending in `\n` has an empty
//! last line, and the empty text has one line.

/// `\n` bytes in `bytes`. A plain counting loop: the compiler vectorizes it,
/// which beats stepping from match to match when lines are short.
fn count_newlines(bytes: &[u8]) -> usize {
    // `memchr`'s iterator counts with the CPU's widest vectors (chosen at
    // run time), not one match at a time.
    memchr::memchr_iter(b'\n', bytes).count()
}

/// The number of lines: one more than the number of `\n`.
pub fn line_count(text: &str) -> usize {
    count_newlines(text.as_bytes()) + 1
}

/// The byte offset where line `line` (1-based) starts; the end of the text
/// when there are fewer lines.
fn line_start(text: &str, line: usize) -> usize {
    if line <= 1 {
        return 0;
    }
    // Skip whole blocks by counting, then find the exact break in the block.
    const BLOCK: usize = 16 * 1024;
    let bytes = text.as_bytes();
    let mut wanted = line - 1; // the number of `\n` to pass
    let mut offset = 0;
    for block in bytes.chunks(BLOCK) {
        let n = count_newlines(block);
        if n < wanted {
            wanted -= n;
            offset += block.len();
            continue;
        }
        if let Some(i) = memchr::memchr_iter(b'\n', block).nth(wanted - 1) {
            return offset + i + 1;
        }
        break;
    }
    text.len()
}

/// Where line `line` (1-based) starts, as a byte offset, when the text's
/// line count is known ([`line_count`]): a line in the second half is found
/// by scanning back from the end, so viewing the end of a long file does not
/// walk all of it again.
pub fn line_start_counted(text: &str, lines: usize, line: usize) -> usize {
    if line <= 1 || line > lines || line <= lines / 2 {
        return line_start(text, line);
    }
    // Line `line` starts after the newline that is number
    // `lines - line + 1` counted from the end.
    let from_end = lines - line + 1;
    memchr::memrchr_iter(b'\n', text.as_bytes())
        .nth(from_end - 1)
        .map_or(0, |i| i + 1)
}

/// Lines `first..=last` (1-based, inclusive, within range) of `text`, whose
/// line `first` starts at byte `start` (see [`line_start_counted`]), each
/// formatted as `{:>6}  {line}` and followed by `\n`, appended to `out`.
///
/// Stops early once `out` holds more than `budget` characters, counting
/// `used` characters already in it, since the caller clips there anyway.
pub fn number_lines_from(
    text: &str,
    start: usize,
    first: usize,
    last: usize,
    out: &mut String,
    mut used: usize,
    budget: usize,
) {
    use std::fmt::Write;
    let mut rest = &text[start..];
    for n in first..=last {
        let (line, tail) = match memchr::memchr(b'\n', rest.as_bytes()) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let before = out.len();
        let _ = writeln!(out, "{n:>6}  {line}");
        used += out[before..].chars().count();
        rest = tail;
        if used > budget {
            return;
        }
    }
}

/// The first `keep` non-overlapping matches of `needle` in `text` and how
/// many there are in all: the count costs no memory, however many there are.
pub fn find_some(text: &str, needle: &str, keep: usize) -> (Vec<usize>, usize) {
    let mut first = Vec::with_capacity(keep.min(16));
    let mut total = 0;
    for at in matches(text, needle) {
        if first.len() < keep {
            first.push(at);
        }
        total += 1;
    }
    (first, total)
}

fn matches<'a>(text: &'a str, needle: &'a str) -> impl Iterator<Item = usize> + 'a {
    let finder =
        (!needle.is_empty()).then(|| memchr::memmem::find_iter(text.as_bytes(), needle.as_bytes()));
    finder
        .into_iter()
        .flatten()
        .scan(0usize, move |next_free, at| {
            // memmem reports overlapping matches; keep the non-overlapping ones.
            Some(if at >= *next_free {
                *next_free = at + needle.len();
                Some(at)
            } else {
                None
            })
        })
        .flatten()
}

/// The 1-based line number of each byte offset in `offsets` (ascending).
pub fn line_numbers(text: &str, offsets: &[usize]) -> Vec<usize> {
    let bytes = text.as_bytes();
    let mut line = 1;
    let mut from = 0;
    offsets
        .iter()
        .map(|&at| {
            line += memchr::memchr_iter(b'\n', &bytes[from..at]).count();
            from = at;
            line
        })
        .collect()
}

/// `lines` of `insert` placed after line `after` of `text` (0 = at the top),
/// the whole joined with `\n`. `None` if `after > line_count(text)`.
pub fn insert_after(text: &str, after: usize, insert: &str) -> Option<String> {
    let count = line_count(text);
    if after > count {
        return None;
    }
    let mut out = String::with_capacity(text.len() + insert.len() + 1);
    if after == 0 {
        out.push_str(insert);
        out.push('\n');
        out.push_str(text);
    } else if after == count {
        out.push_str(text);
        out.push('\n');
        out.push_str(insert);
    } else {
        // Line `after + 1` starts right after the `after`-th `\n`.
        let at = line_start(text, after + 1);
        out.push_str(&text[..at]);
        out.push_str(insert);
        out.push('\n');
        out.push_str(&text[at..]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every non-overlapping match.
    fn find_all(text: &str, needle: &str) -> Vec<usize> {
        find_some(text, needle, usize::MAX).0
    }

    /// `text` with the `len` bytes at `at` replaced by `with`, as the
    /// editor replaces (`String::replace_range`).
    fn splice(text: &str, at: usize, len: usize, with: &str) -> String {
        let mut out = text.to_owned();
        out.replace_range(at..at + len, with);
        out
    }

    #[test]
    fn finds_line_starts_across_blocks() {
        let text: String = (0..50_000).map(|i| format!("{i}\n")).collect();
        for line in [1, 2, 9_999, 10_000, 35_001, 50_000, 50_001] {
            let want = text
                .split_inclusive('\n')
                .take(line - 1)
                .map(str::len)
                .sum::<usize>();
            assert_eq!(line_start(&text, line), want, "line {line}");
        }
        assert_eq!(line_start("a\nb", 5), 3);
        for text in ["", "a", "a\n", "a\nb", "\n\n\n", "one\ntwo\nthree\n"] {
            let lines = line_count(text);
            for line in 0..=lines + 1 {
                assert_eq!(
                    line_start_counted(text, lines, line),
                    line_start(text, line),
                    "{text:?} line {line}"
                );
            }
        }
    }

    #[test]
    fn counts_lines_like_split() {
        assert_eq!(line_count(""), 1);
        assert_eq!(line_count("a"), 1);
        assert_eq!(line_count("a\n"), 2);
        assert_eq!(line_count("a\nb\nc\n"), 4);
    }

    #[test]
    fn inserts_as_the_contract_says() {
        assert_eq!(insert_after("a\nb\nc\n", 3, "X").unwrap(), "a\nb\nc\nX\n");
        assert_eq!(insert_after("a\nb\nc\n", 4, "X").unwrap(), "a\nb\nc\n\nX");
        assert_eq!(insert_after("a\nb\nc\n", 0, "X").unwrap(), "X\na\nb\nc\n");
        assert_eq!(insert_after("a\nb", 1, "X\nY").unwrap(), "a\nX\nY\nb");
        assert_eq!(insert_after("", 0, "X").unwrap(), "X\n");
        assert_eq!(insert_after("", 1, "X").unwrap(), "\nX");
        assert_eq!(insert_after("a", 2, "X"), None);
    }

    #[test]
    fn finds_non_overlapping_matches_and_their_lines() {
        let text = "aaaa\nx\naa";
        let at = find_all(text, "aa");
        assert_eq!(at, vec![0, 2, 7]);
        assert_eq!(line_numbers(text, &at), vec![1, 1, 3]);
    }

    #[test]
    fn numbers_lines() {
        let mut out = String::new();
        let text = "a\n\tb\n";
        let start = line_start_counted(text, line_count(text), 2);
        number_lines_from(text, start, 2, 3, &mut out, 0, usize::MAX);
        assert_eq!(out, "     2  \tb\n     3  \n");
    }

    fn reference_insert(text: &str, after: usize, insert: &str) -> String {
        let mut lines: Vec<&str> = text.split('\n').collect();
        let new: Vec<&str> = insert.split('\n').collect();
        lines.splice(after..after, new);
        lines.join("\n")
    }

    proptest! {
        #[test]
        fn insert_matches_split_splice_join(
            text in "[ab\n]{0,20}", insert in "[xy\n]{0,6}", after in 0usize..25
        ) {
            let got = insert_after(&text, after, &insert);
            if after <= text.split('\n').count() {
                prop_assert_eq!(got.unwrap(), reference_insert(&text, after, &insert));
            } else {
                prop_assert_eq!(got, None);
            }
        }

        /// Inserting at any valid line, then removing those lines, restores the text.
        #[test]
        fn insert_then_remove_restores(text in "[ab\t\r\n]{0,30}", insert in "[xyé\n]{0,8}", after in 0usize..1000) {
            let after = after % (line_count(&text) + 1);
            let edited = insert_after(&text, after, &insert).unwrap();
            let mut lines: Vec<&str> = edited.split('\n').collect();
            let added = insert.split('\n').count();
            lines.drain(after..after + added);
            prop_assert_eq!(lines.join("\n"), text);
        }

        /// Replacing a unique match and replacing back restores the text.
        #[test]
        fn replace_then_replace_back_restores(
            prefix in "[ab\n]{0,20}", old in "[ab]{1,3}Q[ab]{0,3}", new in "[xyz\n\t]{0,6}Z", suffix in "[ab\n]{0,20}"
        ) {
            let text = format!("{prefix}{old}{suffix}");
            let hits = find_all(&text, &old);
            prop_assume!(hits.len() == 1);
            let edited = splice(&text, hits[0], old.len(), &new);
            let back = find_all(&edited, &new);
            prop_assume!(back.len() == 1);
            prop_assert_eq!(splice(&edited, back[0], new.len(), &old), text);
        }

        #[test]
        fn find_all_agrees_with_match_indices(text in "[ab]{0,30}", needle in "[ab]{1,3}") {
            let want: Vec<usize> = text.match_indices(&needle).map(|(i, _)| i).collect();
            prop_assert_eq!(find_all(&text, &needle), want);
        }
    }
}
