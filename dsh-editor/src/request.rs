//! The tool call's arguments as a type.

use serde::{Deserialize, Serialize};

/// One call: the command and its parameters. It deserializes from (and
/// serializes to) the model's JSON arguments; [`Editor::execute`](crate::Editor::execute)
/// parses JSON itself to give each wrong shape its own error.
///
/// ```
/// use dsh_editor::EditorRequest;
/// let request: EditorRequest = serde_json::from_str(
///     r#"{"command": "view", "path": "/repo/main.py", "view_range": [10, 20]}"#,
/// ).unwrap();
/// assert_eq!(request, EditorRequest::view_range("/repo/main.py", 10, 20));
/// assert_eq!(request.command(), "view");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EditorRequest {
    /// Show a file's lines (all, or `view_range`) or a directory's entries.
    View {
        /// An absolute path.
        path: String,
        /// `[first, last]`, 1-based and inclusive; `last = -1` is the end.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        view_range: Option<(i64, i64)>,
    },
    /// Write a new file (required: `file_text`).
    Create {
        /// An absolute path where nothing exists.
        path: String,
        /// The content.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file_text: Option<String>,
    },
    /// Replace the one occurrence of `old_str` (required) by `new_str`
    /// (absent: delete it).
    StrReplace {
        /// An absolute path to a file.
        path: String,
        /// The exact text to replace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        old_str: Option<String>,
        /// The replacement.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        new_str: Option<String>,
    },
    /// Insert `new_str` (required) after line `insert_line` (required; 0 is
    /// the top).
    Insert {
        /// An absolute path to a file.
        path: String,
        /// The line after which the text goes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        insert_line: Option<i64>,
        /// The text to insert.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        new_str: Option<String>,
    },
}

impl EditorRequest {
    /// `view` of a whole file or a directory.
    pub fn view(path: impl Into<String>) -> Self {
        EditorRequest::View {
            path: path.into(),
            view_range: None,
        }
    }

    /// `view` of lines `first..=last` of a file (`last = -1`: to the end).
    pub fn view_range(path: impl Into<String>, first: i64, last: i64) -> Self {
        EditorRequest::View {
            path: path.into(),
            view_range: Some((first, last)),
        }
    }

    /// `create` of a new file holding `file_text`.
    pub fn create(path: impl Into<String>, file_text: impl Into<String>) -> Self {
        EditorRequest::Create {
            path: path.into(),
            file_text: Some(file_text.into()),
        }
    }

    /// `str_replace` of `old_str` by `new_str`.
    pub fn str_replace(
        path: impl Into<String>,
        old_str: impl Into<String>,
        new_str: impl Into<String>,
    ) -> Self {
        EditorRequest::StrReplace {
            path: path.into(),
            old_str: Some(old_str.into()),
            new_str: Some(new_str.into()),
        }
    }

    /// `insert` of `new_str` after line `insert_line`.
    pub fn insert(path: impl Into<String>, insert_line: i64, new_str: impl Into<String>) -> Self {
        EditorRequest::Insert {
            path: path.into(),
            insert_line: Some(insert_line),
            new_str: Some(new_str.into()),
        }
    }

    /// The path as given.
    pub fn path(&self) -> &str {
        match self {
            EditorRequest::View { path, .. }
            | EditorRequest::Create { path, .. }
            | EditorRequest::StrReplace { path, .. }
            | EditorRequest::Insert { path, .. } => path,
        }
    }

    /// The command's name.
    pub fn command(&self) -> &'static str {
        match self {
            EditorRequest::View { .. } => "view",
            EditorRequest::Create { .. } => "create",
            EditorRequest::StrReplace { .. } => "str_replace",
            EditorRequest::Insert { .. } => "insert",
        }
    }
}
