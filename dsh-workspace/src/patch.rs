//! Rendering one path's change as `git diff` does.

use std::fmt::Write as _;

use similar::{Algorithm, DiffTag};

/// One side of a path, as the diff sees it.
#[derive(Debug)]
pub(crate) enum Side {
    /// Not there (or a directory, FIFO, device: not in a git diff).
    Absent,
    /// A regular file with its permission bits and (bounded) content.
    File { perm: u32, content: Content },
    /// A symbolic link with its target text.
    Link { target: Vec<u8> },
}

/// A file's content as read for the diff.
#[derive(Debug)]
pub(crate) enum Content {
    /// All of it (at most [`crate::DIFF_MAX_FILE`] bytes).
    Bytes(Vec<u8>),
    /// Larger than the limit: diffed as binary.
    TooLarge,
}

impl Side {
    fn git_mode(&self) -> &'static str {
        match self {
            Side::File { perm, .. } if perm & 0o100 != 0 => "100755",
            Side::File { .. } => "100644",
            Side::Link { .. } => "120000",
            Side::Absent => "",
        }
    }

    /// The bytes git diffs, or `None` when the content counts as binary.
    fn text(&self) -> Option<&str> {
        let bytes = match self {
            Side::File {
                content: Content::Bytes(b),
                ..
            } => b.as_slice(),
            Side::File {
                content: Content::TooLarge,
                ..
            } => return None,
            Side::Link { target } => target.as_slice(),
            Side::Absent => &[],
        };
        if bytes[..bytes.len().min(8000)].contains(&0) {
            return None;
        }
        std::str::from_utf8(bytes).ok()
    }

    fn is_empty(&self) -> bool {
        match self {
            Side::File {
                content: Content::Bytes(b),
                ..
            } => b.is_empty(),
            Side::Link { target } => target.is_empty(),
            Side::File {
                content: Content::TooLarge,
                ..
            } => false,
            Side::Absent => true,
        }
    }

    fn same_content(&self, other: &Side) -> bool {
        match (self, other) {
            (
                Side::File {
                    content: Content::Bytes(a),
                    ..
                },
                Side::File {
                    content: Content::Bytes(b),
                    ..
                },
            ) => a == b,
            (Side::Link { target: a }, Side::Link { target: b }) => a == b,
            _ => false,
        }
    }

    fn is_link(&self) -> bool {
        matches!(self, Side::Link { .. })
    }
}

/// Appends the `git diff` text of one path to `out` (nothing when git would
/// show nothing). `path` is relative to the base, as bytes.
pub(crate) fn write_change(out: &mut String, path: &[u8], before: &Side, after: &Side) {
    let a = quote(b"a/", path);
    let b = quote(b"b/", path);
    match (before, after) {
        (Side::Absent, Side::Absent) => {}
        (Side::Absent, _) => added(out, &a, &b, after),
        (_, Side::Absent) => deleted(out, &a, &b, before),
        _ if before.is_link() != after.is_link() => {
            deleted(out, &a, &b, before);
            added(out, &a, &b, after);
        }
        _ => {
            let mode_changed = before.git_mode() != after.git_mode();
            let content_changed = !before.same_content(after);
            if !mode_changed && !content_changed {
                return;
            }
            let _ = writeln!(out, "diff --git {a} {b}");
            if mode_changed {
                let _ = writeln!(out, "old mode {}", before.git_mode());
                let _ = writeln!(out, "new mode {}", after.git_mode());
            }
            if content_changed {
                match (before.text(), after.text()) {
                    (Some(old), Some(new)) => {
                        let _ = writeln!(out, "--- {a}\n+++ {b}");
                        hunks(out, old, new);
                    }
                    _ => {
                        let _ = writeln!(out, "Binary files {a} and {b} differ");
                    }
                }
            }
        }
    }
}

fn added(out: &mut String, a: &str, b: &str, side: &Side) {
    let _ = writeln!(out, "diff --git {a} {b}\nnew file mode {}", side.git_mode());
    if side.is_empty() {
        return;
    }
    match side.text() {
        Some(new) => {
            let _ = writeln!(out, "--- /dev/null\n+++ {b}");
            hunks(out, "", new);
        }
        None => {
            let _ = writeln!(out, "Binary files /dev/null and {b} differ");
        }
    }
}

fn deleted(out: &mut String, a: &str, b: &str, side: &Side) {
    let _ = writeln!(
        out,
        "diff --git {a} {b}\ndeleted file mode {}",
        side.git_mode()
    );
    if side.is_empty() {
        return;
    }
    match side.text() {
        Some(old) => {
            let _ = writeln!(out, "--- {a}\n+++ /dev/null");
            hunks(out, old, "");
        }
        None => {
            let _ = writeln!(out, "Binary files {a} and /dev/null differ");
        }
    }
}

/// The unified hunks (three lines of context) between two texts.
fn hunks(out: &mut String, old: &str, new: &str) {
    let old: Vec<&str> = old.split_inclusive('\n').collect();
    let new: Vec<&str> = new.split_inclusive('\n').collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let ops = similar::capture_diff_slices_deadline(Algorithm::Myers, &old, &new, Some(deadline));
    for group in similar::group_diff_ops(ops, 3) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let (o0, o1) = (first.old_range().start, last.old_range().end);
        let (n0, n1) = (first.new_range().start, last.new_range().end);
        let _ = writeln!(out, "@@ -{} +{} @@", range(o0, o1), range(n0, n1));
        for op in &group {
            let (tag, o, n) = op.as_tag_tuple();
            match tag {
                DiffTag::Equal => lines(out, ' ', &old[o]),
                DiffTag::Delete => lines(out, '-', &old[o]),
                DiffTag::Insert => lines(out, '+', &new[n]),
                DiffTag::Replace => {
                    lines(out, '-', &old[o]);
                    lines(out, '+', &new[n]);
                }
            }
        }
    }
}

fn range(start: usize, end: usize) -> String {
    match end - start {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        len => format!("{},{len}", start + 1),
    }
}

fn lines(out: &mut String, prefix: char, lines: &[&str]) {
    for line in lines {
        out.push(prefix);
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    }
}

/// A path as git writes it: `a/x`, or C-quoted (`"a/f\303\251"`) when it
/// holds a control character, `"`, `\` or a byte above 0x7f.
fn quote(prefix: &[u8], path: &[u8]) -> String {
    let full: Vec<u8> = prefix.iter().chain(path).copied().collect();
    let plain = full
        .iter()
        .all(|&c| (0x20..0x7f).contains(&c) && c != b'"' && c != b'\\');
    if plain {
        return String::from_utf8_lossy(&full).into_owned();
    }
    let mut s = String::from("\"");
    for &c in &full {
        match c {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\t' => s.push_str("\\t"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            0x07 => s.push_str("\\a"),
            0x08 => s.push_str("\\b"),
            0x0b => s.push_str("\\v"),
            0x0c => s.push_str("\\f"),
            0x20..=0x7e => s.push(char::from(c)),
            _ => {
                let _ = write!(s, "\\{c:03o}");
            }
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(perm: u32, text: &str) -> Side {
        Side::File {
            perm,
            content: Content::Bytes(text.as_bytes().to_vec()),
        }
    }

    #[test]
    fn a_modified_line_is_one_hunk_with_context() {
        let mut out = String::new();
        write_change(
            &mut out,
            b"src/x.txt",
            &file(0o644, "1\n2\n3\n4\n5\n6\n7\n8\n"),
            &file(0o644, "1\n2\n3\n4\nfive\n6\n7\n8\n"),
        );
        assert_eq!(
            out,
            "diff --git a/src/x.txt b/src/x.txt\n--- a/src/x.txt\n+++ b/src/x.txt\n\
             @@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
        );
    }

    #[test]
    fn missing_final_newline_and_links_are_marked() {
        let mut out = String::new();
        write_change(
            &mut out,
            b"l",
            &Side::Absent,
            &Side::Link {
                target: b"/etc/shadow".to_vec(),
            },
        );
        assert_eq!(
            out,
            "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n\
             @@ -0,0 +1 @@\n+/etc/shadow\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn binary_mode_and_empty_files() {
        let mut out = String::new();
        write_change(&mut out, b"bin", &file(0o644, "a\0b"), &file(0o755, "a\0c"));
        assert_eq!(
            out,
            "diff --git a/bin b/bin\nold mode 100644\nnew mode 100755\n\
             Binary files a/bin and b/bin differ\n"
        );
        let mut out = String::new();
        write_change(&mut out, b"e", &file(0o600, ""), &Side::Absent);
        assert_eq!(out, "diff --git a/e b/e\ndeleted file mode 100644\n");
        let mut out = String::new();
        write_change(&mut out, b"same", &file(0o644, "x"), &file(0o664, "x"));
        assert_eq!(out, "", "a change git does not see is not in the diff");
    }

    #[test]
    fn odd_names_are_quoted_as_git_does() {
        assert_eq!(
            quote(b"a/", "fé\t\"x".as_bytes()),
            "\"a/f\\303\\251\\t\\\"x\""
        );
        assert_eq!(quote(b"b/", b"plain name"), "b/plain name");
    }

    fn text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        (
            proptest::collection::vec(prop_oneof!["a", "b", "c", "", "a b", "\tx"], 0..30),
            any::<bool>(),
        )
            .prop_map(|(lines, final_newline)| {
                let mut s = lines.join("\n");
                if final_newline && !s.is_empty() {
                    s.push('\n');
                }
                s
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// `git apply` of the rendered diff turns the old text into the new.
        #[test]
        fn git_applies_the_hunks(old in text(), new in text(), exec in proptest::prelude::any::<bool>()) {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("f"), &old).unwrap();
            let mut out = String::new();
            let perm = if exec { 0o755 } else { 0o644 };
            write_change(&mut out, b"f", &file(0o644, &old), &file(perm, &new));
            if out.is_empty() {
                proptest::prop_assert!(old == new && !exec, "no diff for a change");
                return Ok(());
            }
            std::fs::write(dir.path().join("p"), &out).unwrap();
            let st = std::process::Command::new("git")
                .args(["apply", "--whitespace=nowarn", "p"])
                .current_dir(dir.path())
                .output()
                .unwrap();
            proptest::prop_assert!(st.status.success(), "{}\n{out}", String::from_utf8_lossy(&st.stderr));
            proptest::prop_assert_eq!(std::fs::read_to_string(dir.path().join("f")).unwrap(), new);
            let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.path().join("f")).unwrap().permissions());
            proptest::prop_assert_eq!(mode & 0o100 != 0, exec);
        }
    }
}
