//! The two-level directory listing of `view` on a directory.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;

use crate::fs::{DirEntry, FileKind, Fs};

/// Names the listing skips (besides names starting with `.`).
const SKIPPED: [&str; 2] = ["node_modules", "__pycache__"];

fn visible(name: &str) -> bool {
    !name.starts_with('.') && !SKIPPED.contains(&name)
}

fn row_kind(kind: FileKind) -> char {
    match kind {
        FileKind::Directory => 'd',
        FileKind::File => 'f',
        FileKind::Other => '?',
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Entries waiting to be listed, smallest path first: (path, kind, is_symlink, depth).
type Heap = BinaryHeap<Reverse<(String, FileKind, bool, u8)>>;

fn push_children(heap: &mut Heap, dir: &str, entries: Vec<DirEntry>, depth: u8) {
    for e in entries {
        let name = e.name.to_string_lossy();
        if visible(&name) {
            heap.push(Reverse((join(dir, &name), e.kind, e.is_symlink, depth)));
        }
    }
}

/// Appends one row per entry up to two levels below `root` (the root
/// included), sorted by the whole path string, each ending in `\n`.
///
/// Rows are produced in sorted order from a heap, and a second-level
/// directory is read only when the listing reaches it, so a huge tree costs
/// one read of the root plus what fits in `budget` characters of output
/// (`out` already holds `used` of them).
/// Directories reached through a symbolic link are listed as `d` but not
/// descended into.
pub(crate) async fn list<F: Fs + ?Sized>(
    fs: &F,
    root: &str,
    out: &mut String,
    mut used: usize,
    budget: usize,
) {
    let mut row = |out: &mut String, kind: char, path: &str| {
        out.push(kind);
        out.push('\t');
        out.push_str(path);
        out.push('\n');
        used += path.chars().count() + 3;
        used > budget
    };
    row(out, 'd', root);
    let mut heap = Heap::new();
    if let Ok(entries) = fs.read_dir(Path::new(root)).await {
        push_children(&mut heap, root, entries, 1);
    }
    while let Some(Reverse((path, kind, is_symlink, depth))) = heap.pop() {
        if row(out, row_kind(kind), &path) {
            return;
        }
        if depth == 1
            && kind == FileKind::Directory
            && !is_symlink
            && let Ok(entries) = fs.read_dir(Path::new(&path)).await
        {
            push_children(&mut heap, &path, entries, 2);
        }
    }
}
