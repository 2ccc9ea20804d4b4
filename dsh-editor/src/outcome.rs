//! What a successful call did, as data. [`crate::contract::render`] turns it
//! into the model-visible text; a failed call is an
//! [`EditorError`](crate::EditorError).

use crate::Encoding;

/// The result of one successful call.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use dsh_editor::{Editor, EditorOutcome, EditorRequest, contract, fs::MemFs};
///
/// let editor = Editor::new(MemFs::new());
/// editor.call(EditorRequest::create("/a.txt", "one\ntwo\n")).await.unwrap();
/// let outcome = editor.call(EditorRequest::view("/a.txt")).await.unwrap();
/// let EditorOutcome::FileView(view) = &outcome else { panic!("a file view") };
/// assert_eq!((view.total_lines, view.first_line, view.last_line), (3, 1, 3));
/// assert!(!view.is_clipped());
/// assert!(contract::render(&outcome).ends_with("     1  one\n     2  two\n     3  \n"));
/// # });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EditorOutcome {
    /// `view` of a file.
    FileView(FileView),
    /// `view` of a directory.
    DirectoryView(DirectoryView),
    /// `create` wrote a new file.
    Created {
        /// The path as given.
        path: String,
    },
    /// `str_replace` or `insert` changed the file.
    Edited {
        /// The path as given.
        path: String,
    },
}

/// The lines of a file shown by `view`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileView {
    /// The path as given.
    pub path: String,
    /// How many lines the file has.
    pub total_lines: usize,
    /// The `view_range` asked for, if any.
    pub view_range: Option<(i64, i64)>,
    /// The first line shown (1-based).
    pub first_line: usize,
    /// The last line asked for (the output may be clipped before it).
    pub last_line: usize,
    /// The encoding the file was read in (the header names it unless it is
    /// UTF-8).
    pub encoding: Encoding,
    /// The numbered lines shown (`format!("{:>6}  {}\n", n, line)` each), up
    /// to the clip point.
    pub numbered: String,
    /// Where the text was cut, in characters from its start (header
    /// included), when it was longer than `max_output_chars`.
    pub(crate) cut: Option<usize>,
}

impl FileView {
    /// `true` when the output was longer than `max_output_chars` and cut.
    pub fn is_clipped(&self) -> bool {
        self.cut.is_some()
    }
}

/// The listing shown by `view` of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DirectoryView {
    /// The path as given.
    pub path: String,
    /// The listing shown: one absolute path per line (each line ends with a
    /// newline, and the listing with an empty line), up to two levels deep,
    /// without hidden entries, `node_modules` and `__pycache__`; up to the
    /// clip point.
    pub listing: String,
    /// Where the text was cut, as for [`FileView`].
    pub(crate) cut: Option<usize>,
}

impl DirectoryView {
    /// `true` when the output was longer than `max_output_chars` and cut.
    pub fn is_clipped(&self) -> bool {
        self.cut.is_some()
    }
}
