//! Every error of the tool. `Display` is for developers (terse, without the
//! source, which the error chain carries); the exact text the model sees is
//! [`contract::render_error`](crate::contract::render_error)'s, where the
//! variants marked *contract* reproduce an existing agent's wording
//! character for character.

use crate::text::Encoding;

/// A failed tool call. `Display` says what failed, for a log or an error
/// reporter; the message for the model is
/// [`contract::render_error`](crate::contract::render_error).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EditorError {
    /// *Contract.* The path is not absolute.
    #[error("path {path} is not absolute")]
    RelativePath {
        /// The path as given.
        path: String,
        /// The absolute path the model probably meant.
        suggestion: String,
    },
    /// *Contract.* Nothing exists at the path.
    #[error("path {0} does not exist")]
    Missing(String),
    /// *Contract.* A command other than `view` on a directory.
    #[error("path {0} is a directory, which only `view` takes")]
    DirectoryNotView(String),
    /// *Contract.* `view_range` is not a list of two integers.
    #[error("`view_range` is not a list of two integers")]
    RangeShape,
    /// *Contract.* The first element of `view_range` is outside the file.
    #[error("`view_range` [{first}, {second}] starts outside lines 1 to {lines}")]
    RangeFirst {
        /// First element as given.
        first: i64,
        /// Second element as given.
        second: i64,
        /// Lines in the file.
        lines: usize,
    },
    /// *Contract.* The second element of `view_range` is past the end.
    #[error("`view_range` [{first}, {second}] ends past line {lines}")]
    RangeSecondTooLarge {
        /// First element as given.
        first: i64,
        /// Second element as given.
        second: i64,
        /// Lines in the file.
        lines: usize,
    },
    /// *Contract.* The second element of `view_range` is before the first.
    #[error("`view_range` [{first}, {second}] ends before it starts")]
    RangeSecondBeforeFirst {
        /// First element as given.
        first: i64,
        /// Second element as given.
        second: i64,
    },
    /// *Contract.* `view_range` given for a directory.
    #[error("`view_range` given for a directory")]
    RangeOnDirectory,
    /// *Contract.* `create` without `file_text`.
    #[error("`create` without `file_text`")]
    CreateNoText,
    /// *Contract.* `create` where something exists.
    #[error("`create` of {0}, which exists")]
    CreateExists(String),
    /// *Contract.* `str_replace` without `old_str`.
    #[error("`str_replace` without `old_str`")]
    ReplaceNoOld,
    /// *Contract.* `str_replace` with an empty `old_str`.
    #[error("`str_replace` with an empty `old_str`")]
    ReplaceEmptyOld,
    /// *Contract.* `old_str` was not found.
    #[error("`old_str` does not occur in {path}")]
    ReplaceNotFound {
        /// `old_str` as given.
        old: String,
        /// The path.
        path: String,
    },
    /// *Contract.* `old_str` was found once and `new_str` is the same text:
    /// the file is neither written nor touched.
    #[error("`new_str` is `old_str`: {path} would not change")]
    ReplaceUnchanged {
        /// The path.
        path: String,
    },
    /// *Contract.* `old_str` was found more than once.
    /// Beyond [`MAX_LISTED_MATCHES`](crate::MAX_LISTED_MATCHES) matches, the
    /// list ends with "and N more".
    #[error("`old_str` occurs {} times", .lines.len() + *.more)]
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
    #[error("`insert` without `insert_line`")]
    InsertNoLine,
    /// *Contract.* `insert` without `new_str`.
    #[error("`insert` without `new_str`")]
    InsertNoText,
    /// *Contract.* `insert_line` outside `[0, N]`.
    #[error("`insert_line` {line} is outside 0 to {lines}")]
    InsertRange {
        /// `insert_line` as given.
        line: i64,
        /// Lines in the file.
        lines: usize,
    },
    /// The arguments are not a JSON object.
    #[error("the tool arguments are not a JSON object")]
    NotAnObject,
    /// A required parameter is absent.
    #[error("parameter `{0}` is missing")]
    MissingParameter(&'static str),
    /// The command is not one of the four.
    #[error("unknown command `{0}`")]
    UnknownCommand(String),
    /// A parameter has the wrong JSON type.
    #[error("parameter `{name}` must be {expected}, not {got}")]
    WrongType {
        /// The parameter.
        name: &'static str,
        /// What it must be, e.g. "a string".
        expected: &'static str,
        /// What was sent, e.g. "a number".
        got: &'static str,
    },
    /// The file holds NUL bytes and is not UTF-16 with a BOM.
    #[error("{0} is binary (it contains NUL bytes)")]
    Binary(String),
    /// The file is larger than the configured bound.
    #[error("{path} is {len} bytes, more than the limit of {max}")]
    TooLarge {
        /// The path.
        path: String,
        /// Its size.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// The edit would need a character the file's encoding cannot hold.
    #[error("{encoding} cannot encode U+{:04X} in {path}", u32::from(*.ch))]
    Unrepresentable {
        /// The path.
        path: String,
        /// The file's encoding.
        encoding: Encoding,
        /// The character.
        ch: char,
    },
    /// The file changed between reading and writing; nothing was written.
    #[error("{0} changed after it was read")]
    Changed(String),
    /// The path is neither a file nor a directory.
    #[error("{0} is not a regular file or directory")]
    NotRegular(String),
    /// The operating system refused access.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The write would make a file larger than the host lets any process
    /// write (the shell's `RLIMIT_FSIZE`); nothing was written. The reason
    /// is the system's own text for it, as a program in the shell reports
    /// the same write (`File too large`).
    #[error("{path} would be {len} bytes, more than the file-size limit of {limit}")]
    FileTooLarge {
        /// The path.
        path: String,
        /// The size the file would have had.
        len: u64,
        /// The largest file a process may write, in bytes.
        limit: u64,
    },
    /// A policy layer refused the operation; the message is its own.
    #[error("refused: {0}")]
    Refused(String),
    /// Any other filesystem failure, with the system's reason.
    #[error("the operation on {path} failed")]
    Io {
        /// The path.
        path: String,
        /// The system's error (shared, so the error stays `Clone`).
        #[source]
        source: std::sync::Arc<std::io::Error>,
    },
}
