//! The model-visible text of a successful call, from an [`EditorOutcome`]:
//! every result string of the tool is written here (errors are
//! [`EditorError`](crate::EditorError)'s `Display`).

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
