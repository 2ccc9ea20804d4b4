//! Every model-visible error of the tool. `Display` is the exact text the
//! model sees; the variants marked *contract* reproduce an existing agent's
//! wording character for character.

use crate::text::Encoding;

/// A failed tool call. `to_string()` is the message for the model.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EditorError {
    /// *Contract.* The path is not absolute.
    #[error(
        "The path {path} is not an absolute path, it should start with `/`. Maybe you meant {suggestion}?"
    )]
    RelativePath {
        /// The path as given.
        path: String,
        /// The absolute path the model probably meant.
        suggestion: String,
    },
    /// *Contract.* Nothing exists at the path.
    #[error("The path {0} does not exist. Please provide a valid path.")]
    Missing(String),
    /// *Contract.* A command other than `view` on a directory.
    #[error("The path {0} is a directory and only the `view` command can be used on directories")]
    DirectoryNotView(String),
    /// *Contract.* `view_range` is not a list of two integers.
    #[error("Invalid `view_range`. It should be a list of two integers.")]
    RangeShape,
    /// *Contract.* The first element of `view_range` is outside the file.
    #[error(
        "Invalid `view_range`: [{first}, {second}]. Its first element `{first}` should be within the range of lines of the file: [1, {lines}]"
    )]
    RangeFirst {
        /// First element as given.
        first: i64,
        /// Second element as given.
        second: i64,
        /// Lines in the file.
        lines: usize,
    },
    /// *Contract.* The second element of `view_range` is past the end.
    #[error(
        "Invalid `view_range`: [{first}, {second}]. Its second element `{second}` should be smaller than the number of lines in the file: `{lines}`"
    )]
    RangeSecondTooLarge {
        /// First element as given.
        first: i64,
        /// Second element as given.
        second: i64,
        /// Lines in the file.
        lines: usize,
    },
    /// *Contract.* The second element of `view_range` is before the first.
    #[error(
        "Invalid `view_range`: [{first}, {second}]. Its second element `{second}` should be larger or equal than its first `{first}`"
    )]
    RangeSecondBeforeFirst {
        /// First element as given.
        first: i64,
        /// Second element as given.
        second: i64,
    },
    /// *Contract.* `view_range` given for a directory.
    #[error("The `view_range` parameter is not allowed when `path` points to a directory.")]
    RangeOnDirectory,
    /// *Contract.* `create` without `file_text`.
    #[error("Parameter `file_text` is required for command: create")]
    CreateNoText,
    /// *Contract.* `create` where something exists.
    #[error("File already exists at: {0}. Cannot overwrite files using command `create`.")]
    CreateExists(String),
    /// *Contract.* `str_replace` without `old_str`.
    #[error("Parameter `old_str` is required for command: str_replace")]
    ReplaceNoOld,
    /// *Contract.* `str_replace` with an empty `old_str`.
    #[error("Parameter `old_str` is empty for command: str_replace")]
    ReplaceEmptyOld,
    /// *Contract.* `old_str` was not found.
    #[error("No replacement was performed, old_str `{old}` did not appear verbatim in {path}.")]
    ReplaceNotFound {
        /// `old_str` as given.
        old: String,
        /// The path.
        path: String,
    },
    /// *Contract.* `old_str` was found once and `new_str` is the same text:
    /// the file is neither written nor touched.
    #[error(
        "No replacement was performed: `new_str` is the same as `old_str`, so {path} would not change. Put the changed text in `new_str`."
    )]
    ReplaceUnchanged {
        /// The path.
        path: String,
    },
    /// *Contract.* `old_str` was found more than once.
    /// Beyond [`MAX_LISTED_MATCHES`](crate::MAX_LISTED_MATCHES) matches, the
    /// list ends with "and N more".
    #[error("No replacement was performed. Multiple occurrences of old_str `{old}` in lines {}. Please ensure it is unique", listed(.lines, *.more))]
    ReplaceAmbiguous {
        /// `old_str` as given.
        old: String,
        /// The starting line of the first non-overlapping matches (at most
        /// [`MAX_LISTED_MATCHES`](crate::MAX_LISTED_MATCHES)).
        lines: Vec<usize>,
        /// How many more matches there are beyond those listed.
        more: usize,
    },
    /// *Contract.* `insert` without `insert_line`.
    #[error("Parameter `insert_line` is required for command: insert")]
    InsertNoLine,
    /// *Contract.* `insert` without `new_str`.
    #[error("Parameter `new_str` is required for command: insert")]
    InsertNoText,
    /// *Contract.* `insert_line` outside `[0, N]`.
    #[error(
        "Invalid `insert_line` parameter: {line}. It should be within the range of lines of the file: [0, {lines}]"
    )]
    InsertRange {
        /// `insert_line` as given.
        line: i64,
        /// Lines in the file.
        lines: usize,
    },
    /// The arguments are not a JSON object.
    #[error("The tool arguments must be a JSON object with at least `command` and `path`.")]
    NotAnObject,
    /// A required parameter is absent.
    #[error("Parameter `{0}` is required.")]
    MissingParameter(&'static str),
    /// The command is not one of the four.
    #[error(
        "Unrecognized command `{0}`. The allowed commands for the str_replace_editor tool are: `view`, `create`, `str_replace`, `insert`."
    )]
    UnknownCommand(String),
    /// A parameter has the wrong JSON type.
    #[error("Parameter `{name}` must be {expected}, but got {got}.")]
    WrongType {
        /// The parameter.
        name: &'static str,
        /// What it must be, e.g. "a string".
        expected: &'static str,
        /// What was sent, e.g. "a number".
        got: &'static str,
    },
    /// The file holds NUL bytes and is not UTF-16 with a BOM.
    #[error(
        "The file {0} appears to be binary (it contains NUL bytes); this tool only views and edits text files. Use the shell to inspect it, e.g. `xxd {0} | head`."
    )]
    Binary(String),
    /// The file is larger than the configured bound.
    #[error(
        "The file {path} is {len} bytes, more than this tool's limit of {max} bytes. Use the shell to work with it, e.g. `grep -n` to find lines and `sed -n 'A,Bp'` to print them."
    )]
    TooLarge {
        /// The path.
        path: String,
        /// Its size.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// The edit would need a character the file's encoding cannot hold.
    #[error("No edit was made: the file {path} is encoded as {encoding}, which cannot hold the character `{ch}` (U+{:04X}). Use only characters of that encoding, or convert the file first.", u32::from(*.ch))]
    Unrepresentable {
        /// The path.
        path: String,
        /// The file's encoding.
        encoding: Encoding,
        /// The character.
        ch: char,
    },
    /// The file changed between reading and writing; nothing was written.
    #[error(
        "No edit was made: the file {0} was changed by someone else after it was read. View it again and retry the edit."
    )]
    Changed(String),
    /// The path is neither a file nor a directory.
    #[error("The path {0} is not a regular file or directory; this tool cannot work with it.")]
    NotRegular(String),
    /// The operating system refused access.
    #[error("Permission denied: {0} cannot be accessed by this tool.")]
    PermissionDenied(String),
    /// The write would make a file larger than the host lets any process
    /// write (the shell's `RLIMIT_FSIZE`); nothing was written. The reason
    /// is the system's own text for it, as a program in the shell reports
    /// the same write (`File too large`).
    #[error(
        "Nothing was written: {path}: File too large (the file would be {len} bytes; no process here may write a file larger than {limit} bytes)."
    )]
    FileTooLarge {
        /// The path.
        path: String,
        /// The size the file would have had.
        len: u64,
        /// The largest file a process may write, in bytes.
        limit: u64,
    },
    /// A policy layer refused the operation; the message is its own.
    #[error("{0}")]
    Refused(String),
    /// Any other filesystem failure, with the system's reason.
    #[error("The operation on {path} failed: {source}")]
    Io {
        /// The path.
        path: String,
        /// The system's error (shared, so the error stays `Clone`).
        #[source]
        source: std::sync::Arc<std::io::Error>,
    },
}

fn list(items: &[usize]) -> String {
    let inner: Vec<String> = items.iter().map(usize::to_string).collect();
    format!("[{}]", inner.join(", "))
}

fn listed(items: &[usize], more: usize) -> String {
    match more {
        0 => list(items),
        n => format!("{} and {n} more", list(items)),
    }
}
