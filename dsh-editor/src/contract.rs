//! The model-visible text: every result string of the tool is written here,
//! from an [`EditorOutcome`] ([`render`]), and every error text, from an
//! [`EditorError`] ([`render_error`]; the error's `Display` is for
//! developers). The errors marked *contract* on [`EditorError`] reproduce an
//! existing agent's wording character for character.

use crate::EditorError;
use crate::outcome::{DirectoryView, EditorOutcome, FileView};

/// Appended, without a separator, to output cut at `max_output_chars`.
/// It is [`dsh_tool::CLIP_NOTE`], the note both tools use.
pub const VIEW_CLIP_NOTE: &str = dsh_tool::CLIP_NOTE;

/// The exact text the model sees for `outcome`.
pub fn render(outcome: &EditorOutcome) -> String {
    match outcome {
        EditorOutcome::FileView(view) => render_view(file_header(view), &view.numbered, view.cut),
        EditorOutcome::DirectoryView(view) => {
            render_view(directory_header(view), &view.listing, view.cut)
        }
        EditorOutcome::Created { path } => format!("New file created successfully at: {path}"),
        EditorOutcome::Edited { path } => format!("The file {path} has been edited successfully."),
    }
}

/// The exact text the model sees for a call that failed with `err`.
///
/// ```
/// use dsh_editor::{EditorError, contract};
/// let err = EditorError::Missing("/repo/nope.py".into());
/// assert_eq!(
///     contract::render_error(&err),
///     "The path /repo/nope.py does not exist. Please provide a valid path."
/// );
/// ```
pub fn render_error(err: &EditorError) -> String {
    match err {
        EditorError::RelativePath { path, suggestion } => format!(
            "The path {path} is not an absolute path, it should start with `/`. Maybe you meant {suggestion}?"
        ),
        EditorError::Missing(path) => {
            format!("The path {path} does not exist. Please provide a valid path.")
        }
        EditorError::DirectoryNotView(path) => format!(
            "The path {path} is a directory and only the `view` command can be used on directories"
        ),
        EditorError::RangeShape => {
            "Invalid `view_range`. It should be a list of two integers.".to_owned()
        }
        EditorError::RangeFirst {
            first,
            second,
            lines,
        } => format!(
            "Invalid `view_range`: [{first}, {second}]. Its first element `{first}` should be within the range of lines of the file: [1, {lines}]"
        ),
        EditorError::RangeSecondTooLarge {
            first,
            second,
            lines,
        } => format!(
            "Invalid `view_range`: [{first}, {second}]. Its second element `{second}` should be smaller than the number of lines in the file: `{lines}`"
        ),
        EditorError::RangeSecondBeforeFirst { first, second } => format!(
            "Invalid `view_range`: [{first}, {second}]. Its second element `{second}` should be larger or equal than its first `{first}`"
        ),
        EditorError::RangeOnDirectory => {
            "The `view_range` parameter is not allowed when `path` points to a directory."
                .to_owned()
        }
        EditorError::CreateNoText => {
            "Parameter `file_text` is required for command: create".to_owned()
        }
        EditorError::CreateExists(path) => format!(
            "File already exists at: {path}. Cannot overwrite files using command `create`."
        ),
        EditorError::ReplaceNoOld => {
            "Parameter `old_str` is required for command: str_replace".to_owned()
        }
        EditorError::ReplaceEmptyOld => {
            "Parameter `old_str` is empty for command: str_replace".to_owned()
        }
        EditorError::ReplaceNotFound { old, path } => format!(
            "No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
        ),
        EditorError::ReplaceUnchanged { path } => format!(
            "No replacement was performed: `new_str` is the same as `old_str`, so {path} would not change. Put the changed text in `new_str`."
        ),
        EditorError::ReplaceAmbiguous { old, lines, more } => format!(
            "No replacement was performed. Multiple occurrences of old_str `{old}` in lines {}. Please ensure it is unique",
            listed(lines, *more)
        ),
        EditorError::InsertNoLine => {
            "Parameter `insert_line` is required for command: insert".to_owned()
        }
        EditorError::InsertNoText => {
            "Parameter `new_str` is required for command: insert".to_owned()
        }
        EditorError::InsertRange { line, lines } => format!(
            "Invalid `insert_line` parameter: {line}. It should be within the range of lines of the file: [0, {lines}]"
        ),
        EditorError::NotAnObject => {
            "The tool arguments must be a JSON object with at least `command` and `path`."
                .to_owned()
        }
        EditorError::MissingParameter(name) => format!("Parameter `{name}` is required."),
        EditorError::UnknownCommand(command) => format!(
            "Unrecognized command `{command}`. The allowed commands for the str_replace_editor tool are: `view`, `create`, `str_replace`, `insert`."
        ),
        EditorError::WrongType {
            name,
            expected,
            got,
        } => format!("Parameter `{name}` must be {expected}, but got {got}."),
        EditorError::Binary(path) => format!(
            "The file {path} appears to be binary (it contains NUL bytes); this tool only views and edits text files. Use the shell to inspect it, e.g. `xxd {path} | head`."
        ),
        EditorError::TooLarge { path, len, max } => format!(
            "The file {path} is {len} bytes, more than this tool's limit of {max} bytes. Use the shell to work with it, e.g. `grep -n` to find lines and `sed -n 'A,Bp'` to print them."
        ),
        EditorError::Unrepresentable { path, encoding, ch } => format!(
            "No edit was made: the file {path} is encoded as {encoding}, which cannot hold the character `{ch}` (U+{:04X}). Use only characters of that encoding, or convert the file first.",
            u32::from(*ch)
        ),
        EditorError::Changed(path) => format!(
            "No edit was made: the file {path} was changed by someone else after it was read. View it again and retry the edit."
        ),
        EditorError::NotRegular(path) => format!(
            "The path {path} is not a regular file or directory; this tool cannot work with it."
        ),
        EditorError::PermissionDenied(path) => {
            format!("Permission denied: {path} cannot be accessed by this tool.")
        }
        EditorError::FileTooLarge { path, len, limit } => format!(
            "Nothing was written: {path}: File too large (the file would be {len} bytes; no process here may write a file larger than {limit} bytes)."
        ),
        EditorError::Refused(message) => message.clone(),
        EditorError::Io { path, source } => format!("The operation on {path} failed: {source}"),
    }
}

/// `[3, 9]`, or `[3, 9] and 2 more`.
fn listed(items: &[usize], more: usize) -> String {
    let inner: Vec<String> = items.iter().map(usize::to_string).collect();
    let list = format!("[{}]", inner.join(", "));
    match more {
        0 => list,
        n => format!("{list} and {n} more"),
    }
}

/// The first line of a file view. A file read in another encoding than
/// UTF-8 says which, after its line count.
pub(crate) fn file_header(view: &FileView) -> String {
    let (display, lines) = (&view.path, view.total_lines);
    let read_as = if view.encoding.is_utf8() {
        String::new()
    } else {
        format!(", read as {}", view.encoding)
    };
    match view.view_range {
        None => format!(
            "Here's the content of {display} with line numbers (which has a total of {lines} lines{read_as}):\n"
        ),
        Some((a, b)) => format!(
            "Here's the content of {display} with line numbers (which has a total of {lines} lines{read_as}) with view_range=[{a}, {b}]:\n"
        ),
    }
}

/// The first line of a directory view.
pub(crate) fn directory_header(view: &DirectoryView) -> String {
    format!(
        "Here're the files and directories up to 2 levels deep in {}, excluding hidden items, node_modules, and Python cache directories:\n",
        view.path
    )
}

fn render_view(mut out: String, body: &str, cut: Option<usize>) -> String {
    out.push_str(body);
    if let Some(cut) = cut {
        if let Some((at, _)) = out.char_indices().nth(cut) {
            out.truncate(at);
        }
        out.push_str(VIEW_CLIP_NOTE);
    }
    out
}

/// Cuts a header of `header_chars` characters followed by `body` at `max`
/// characters: the part of `body` shown and where the cut fell, if it did.
pub(crate) fn clip(header_chars: usize, mut body: String, max: usize) -> (String, Option<usize>) {
    let Some(room) = max.checked_sub(header_chars) else {
        body.clear();
        return (body, Some(max));
    };
    match body.char_indices().nth(room) {
        Some((at, _)) => {
            body.truncate(at);
            (body, Some(max))
        }
        None => (body, None),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::render_error;
    use crate::{EditorError, Encoding};

    /// `err` reads `want` for the model, as it did when `Display` was the
    /// model's text; `Display` never repeats the source.
    fn golden(err: EditorError, want: &str) {
        assert_eq!(render_error(&err), want, "{err:?}");
        let display = err.to_string();
        assert_ne!(display, want);
        assert!(!display.ends_with('.'), "{display}");
        assert!(
            display.starts_with(|c: char| !c.is_uppercase()),
            "{display}"
        );
        if let Some(source) = std::error::Error::source(&err) {
            assert!(!display.contains(&source.to_string()), "{display}");
        }
    }

    #[test]
    fn display_is_for_developers() {
        let err = EditorError::ReplaceAmbiguous {
            old: "x".into(),
            lines: vec![1, 4, 9],
            more: 2,
        };
        assert_eq!(err.to_string(), "`old_str` occurs 5 times");
        let err = EditorError::Io {
            path: "/repo/a".into(),
            source: Arc::new(std::io::Error::other("EIO")),
        };
        assert_eq!(err.to_string(), "the operation on /repo/a failed");
        assert_eq!(
            std::error::Error::source(&err).map(ToString::to_string),
            Some("EIO".to_owned())
        );
    }

    #[test]
    fn every_error_reads_as_it_always_did() {
        golden(
            EditorError::RelativePath {
                path: "src/a.py".into(),
                suggestion: "/repo/src/a.py".into(),
            },
            "The path src/a.py is not an absolute path, it should start with `/`. Maybe you meant /repo/src/a.py?",
        );
        golden(
            EditorError::Missing("/repo/x".into()),
            "The path /repo/x does not exist. Please provide a valid path.",
        );
        golden(
            EditorError::DirectoryNotView("/repo".into()),
            "The path /repo is a directory and only the `view` command can be used on directories",
        );
        golden(
            EditorError::RangeShape,
            "Invalid `view_range`. It should be a list of two integers.",
        );
        golden(
            EditorError::RangeFirst {
                first: 0,
                second: 3,
                lines: 10,
            },
            "Invalid `view_range`: [0, 3]. Its first element `0` should be within the range of lines of the file: [1, 10]",
        );
        golden(
            EditorError::RangeSecondTooLarge {
                first: 2,
                second: 11,
                lines: 10,
            },
            "Invalid `view_range`: [2, 11]. Its second element `11` should be smaller than the number of lines in the file: `10`",
        );
        golden(
            EditorError::RangeSecondBeforeFirst {
                first: 5,
                second: 3,
            },
            "Invalid `view_range`: [5, 3]. Its second element `3` should be larger or equal than its first `5`",
        );
        golden(
            EditorError::RangeOnDirectory,
            "The `view_range` parameter is not allowed when `path` points to a directory.",
        );
        golden(
            EditorError::CreateNoText,
            "Parameter `file_text` is required for command: create",
        );
        golden(
            EditorError::CreateExists("/repo/a".into()),
            "File already exists at: /repo/a. Cannot overwrite files using command `create`.",
        );
        golden(
            EditorError::ReplaceNoOld,
            "Parameter `old_str` is required for command: str_replace",
        );
        golden(
            EditorError::ReplaceEmptyOld,
            "Parameter `old_str` is empty for command: str_replace",
        );
        golden(
            EditorError::ReplaceNotFound {
                old: "foo".into(),
                path: "/repo/a".into(),
            },
            "No replacement was performed, old_str `foo` did not appear verbatim in /repo/a.",
        );
        golden(
            EditorError::ReplaceUnchanged {
                path: "/repo/a".into(),
            },
            "No replacement was performed: `new_str` is the same as `old_str`, so /repo/a would not change. Put the changed text in `new_str`.",
        );
        golden(
            EditorError::ReplaceAmbiguous {
                old: "x".into(),
                lines: vec![1, 4],
                more: 0,
            },
            "No replacement was performed. Multiple occurrences of old_str `x` in lines [1, 4]. Please ensure it is unique",
        );
        golden(
            EditorError::ReplaceAmbiguous {
                old: "x".into(),
                lines: vec![1, 4, 9],
                more: 2,
            },
            "No replacement was performed. Multiple occurrences of old_str `x` in lines [1, 4, 9] and 2 more. Please ensure it is unique",
        );
        golden(
            EditorError::InsertNoLine,
            "Parameter `insert_line` is required for command: insert",
        );
        golden(
            EditorError::InsertNoText,
            "Parameter `new_str` is required for command: insert",
        );
        golden(
            EditorError::InsertRange { line: -1, lines: 3 },
            "Invalid `insert_line` parameter: -1. It should be within the range of lines of the file: [0, 3]",
        );
        golden(
            EditorError::NotAnObject,
            "The tool arguments must be a JSON object with at least `command` and `path`.",
        );
        golden(
            EditorError::MissingParameter("path"),
            "Parameter `path` is required.",
        );
        golden(
            EditorError::UnknownCommand("delete".into()),
            "Unrecognized command `delete`. The allowed commands for the str_replace_editor tool are: `view`, `create`, `str_replace`, `insert`.",
        );
        golden(
            EditorError::WrongType {
                name: "path",
                expected: "a string",
                got: "a number",
            },
            "Parameter `path` must be a string, but got a number.",
        );
        golden(
            EditorError::Binary("/repo/a.bin".into()),
            "The file /repo/a.bin appears to be binary (it contains NUL bytes); this tool only views and edits text files. Use the shell to inspect it, e.g. `xxd /repo/a.bin | head`.",
        );
        golden(
            EditorError::TooLarge {
                path: "/repo/big".into(),
                len: 20,
                max: 10,
            },
            "The file /repo/big is 20 bytes, more than this tool's limit of 10 bytes. Use the shell to work with it, e.g. `grep -n` to find lines and `sed -n 'A,Bp'` to print them.",
        );
        golden(
            EditorError::Unrepresentable {
                path: "/repo/a.txt".into(),
                encoding: Encoding::Windows1252,
                ch: '中',
            },
            "No edit was made: the file /repo/a.txt is encoded as windows-1252, which cannot hold the character `中` (U+4E2D). Use only characters of that encoding, or convert the file first.",
        );
        golden(
            EditorError::Changed("/repo/a".into()),
            "No edit was made: the file /repo/a was changed by someone else after it was read. View it again and retry the edit.",
        );
        golden(
            EditorError::NotRegular("/dev/null".into()),
            "The path /dev/null is not a regular file or directory; this tool cannot work with it.",
        );
        golden(
            EditorError::PermissionDenied("/root/a".into()),
            "Permission denied: /root/a cannot be accessed by this tool.",
        );
        golden(
            EditorError::FileTooLarge {
                path: "/repo/a".into(),
                len: 2048,
                limit: 1024,
            },
            "Nothing was written: /repo/a: File too large (the file would be 2048 bytes; no process here may write a file larger than 1024 bytes).",
        );
        golden(
            EditorError::Refused("[sandbox: file access denied under read-only mode]".into()),
            "[sandbox: file access denied under read-only mode]",
        );
        golden(
            EditorError::Io {
                path: "/repo/a".into(),
                source: Arc::new(std::io::Error::other("EIO")),
            },
            "The operation on /repo/a failed: EIO",
        );
    }
}
