#![doc = include_str!("../README.md")]
//!
//! # The tool
//!
//! The tool has four commands — `view`, `create`, `str_replace`, `insert` —
//! and answers every call with the exact text the model sees: the result on
//! success, and on failure an [`EditorError`] whose `Display` is a sentence
//! the model can act on. It works over the [`fs::Fs`] trait, so the same
//! tool runs on the real filesystem ([`fs::LocalFs`]), in memory
//! ([`fs::MemFs`]), or behind a policy layer such as the sandbox crate's.
//!
//! A host hands over the model's JSON ([`Editor::execute`]: text out), or
//! calls with an [`EditorRequest`] ([`Editor::call`]) and gets an
//! [`EditorOutcome`] — what was viewed or changed, as data — which
//! [`contract::render`] turns into the same text. The tool definition is
//! [`Editor::spec`], a [`ToolSpec`] rendered in the OpenAI, Anthropic or
//! MCP shape.
//!
//! # What is never damaged
//!
//! * **Bytes outside the edit.** Tabs, trailing whitespace, a missing final
//!   newline, a UTF-8 byte-order mark are kept as they are.
//! * **Line endings.** A file that uses `\r\n` throughout stays so: the
//!   model's `\n` line breaks in `old_str`, `new_str` and `insert` text are
//!   read and written as `\r\n` there. Files with mixed endings are matched
//!   literally.
//! * **Encodings.** UTF-8 (with or without BOM) and UTF-16 with a BOM are
//!   decoded and written back in the same encoding. A file in a legacy
//!   encoding (windows-1251, GBK, Shift_JIS, EUC-KR, ISO-8859-15, ...) is
//!   viewed and edited in its own encoding: the one its first two lines
//!   declare (`# -*- coding: cp1251 -*-`, `vim: fileencoding=gbk`, an XML
//!   declaration) wins, otherwise Mozilla's `chardetng` guesses (the
//!   default `detect-encodings` feature), and bytes nothing else reads
//!   exactly are read as windows-1252, in which every byte is one
//!   character. Every edit is lossless (the bytes an edit leaves alone stay
//!   as they were, and nothing writes U+FFFD); a character the file's
//!   encoding cannot hold is refused; a view of a file that is not UTF-8
//!   says which encoding it was read in. Files with NUL bytes are binary: `view` does not dump them and
//!   edits are refused.
//! * **The file itself.** [`fs::LocalFs`] writes atomically (temporary file,
//!   `fsync`, rename), keeps the permission bits, writes through symbolic
//!   links, and refuses to overwrite a change made since the file was read.
//! * **Edits the next command sees.** A `str_replace` or `insert` that keeps
//!   the file's size leaves its modification time in a later whole second
//!   than before — waiting, at most a second, for the clock to get there
//!   rather than setting a time in the future — so a cache keyed on the time
//!   in seconds and the size, as Python's bytecode is, never runs the old
//!   code after a quick fix (`a - b` → `a + b`), and `make` or cargo never
//!   see a source ahead of the clock ([`fs::LocalFs::later_second`] has the
//!   rule and its limits). `create` replaces nothing, so it has no old time
//!   to follow.
//!
//! # Messages
//!
//! The contract messages (see [`EditorError`] for every variant):
//!
//! | case | text |
//! |---|---|
//! | relative path | ``The path X is not an absolute path, it should start with `/`. Maybe you meant /X?`` |
//! | missing path | `The path X does not exist. Please provide a valid path.` |
//! | directory, not view | ``The path X is a directory and only the `view` command can be used on directories`` |
//! | view header | `Here's the content of X with line numbers (which has a total of N lines):` |
//! | view line | `format!("{:>6}  {}", n, line)` |
//! | clip note | [`VIEW_CLIP_NOTE`], appended directly after `max_output_chars` characters |
//! | create ok | `New file created successfully at: X` |
//! | edit ok | `The file X has been edited successfully.` |
//!
//! Beyond the contract, invalid arguments get one-line errors:
//! ``Parameter `path` is required.``,
//! ``Parameter `insert_line` must be an integer, but got a string.``,
//! ``Unrecognized command `delete`. The allowed commands for the str_replace_editor tool are: `view`, `create`, `str_replace`, `insert`.``,
//! ``The tool arguments must be a JSON object with at least `command` and `path`.``;
//! and file conditions get theirs: binary files, files above
//! [`EditorConfig::max_file_bytes`], characters the file's encoding cannot
//! hold, a file changed by someone else between read and write, permission
//! denied, and a policy layer's own message passed through verbatim.
#![forbid(unsafe_code)]

mod args;
#[cfg(feature = "detect-encodings")]
mod charset;
pub mod contract;
mod editor;
mod error;
pub mod fs;
mod listing;
mod ops;
pub mod outcome;
mod request;
mod scan;
mod text;

#[cfg(feature = "detect-encodings")]
pub use charset::Legacy;
pub use contract::VIEW_CLIP_NOTE;
pub use editor::{
    DEFAULT_DESCRIPTION, Editor, EditorConfig, EditorConfigError, MAX_LISTED_MATCHES, TOOL_NAME,
};
pub use error::EditorError;
pub use outcome::{DirectoryView, EditorOutcome, FileView};
pub use request::EditorRequest;
pub use text::Encoding;

/// The tool definition type of [`Editor::spec`].
pub use dsh_tool::{self, ToolSpec};
/// The JSON crate of [`Editor::execute`]'s arguments and the schemas,
/// re-exported so a host needs no matching version of its own.
pub use serde_json;

/// What the crate's fuzz target drives directly: the decoding of files, the
/// text operations the commands make, and the block-by-block view scan.
/// **Not part of the API**: no stability promise, and it may change or go
/// in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::ops::{
        find_some, insert_after, line_count, line_numbers, line_start_counted, number_lines_from,
    };
    pub use crate::scan::{Kept, LineScan};
    pub use crate::text::{DecodeError, Document, Unrepresentable};
}
