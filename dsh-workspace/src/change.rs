//! What an owner changed: [`Change`], [`ChangeKind`], [`Entry`].

use std::ffi::OsString;
use std::path::PathBuf;

/// How a path differs between the base and the owner's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChangeKind {
    /// In the view, not in the base.
    Added,
    /// In both, with other content, mode or link target — or of another
    /// type (a file that became a directory or a link: then
    /// [`Change::before`] and [`Change::after`] differ in kind).
    Modified,
    /// In the base, not in the view.
    Deleted,
}

/// What kind of entry a path is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link, with its target as text (never followed).
    Symlink(OsString),
    /// A FIFO, socket or device.
    Other,
}

/// One side of a change: the entry's kind and permission bits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    /// What it is.
    pub kind: EntryKind,
    /// Its permission bits (`0o7777`; `0o777` for a link).
    pub mode: u32,
}

/// One path the owner's view has differently from the base.
///
/// A directory in the layer only because something beneath it changed is
/// not a change; a directory added or deleted is one (and so is each entry
/// beneath it); a directory whose mode changed is
/// [`Modified`](ChangeKind::Modified).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Change {
    /// The path, relative to the base.
    pub path: PathBuf,
    /// Added, modified or deleted.
    pub kind: ChangeKind,
    /// The entry in the base (`None` when added).
    pub before: Option<Entry>,
    /// The entry in the view (`None` when deleted).
    pub after: Option<Entry>,
}

impl Change {
    /// The entry as it is in the view, or as it was in the base when it was
    /// deleted.
    pub fn entry(&self) -> Option<&Entry> {
        self.after.as_ref().or(self.before.as_ref())
    }
}
