//! How the view hides the policy's hidden paths, by name, for the life of
//! the sandbox.
//!
//! A mount over a hidden entry alone does not last: when the host renames
//! over that entry, unlinks it or removes its directory (how `passwd`,
//! `git credential-store`, `npm login` or `cargo login` rewrite a store),
//! the kernel (Linux 3.18 and later) detaches the mounts on it in every
//! other namespace, and the new file shows. So the directory holding hidden
//! entries (the *base*: the nearest directory that exists, and the
//! outermost such directory of one filesystem) is shown through a read-only
//! overlay of the host's directory under a small tmpfs layer:
//!
//! * a hidden name that does not exist at start is a whiteout in the layer:
//!   absent whatever the host later puts there;
//! * a hidden entry that exists at start keeps today's look (an empty
//!   directory, an empty file) by a mount over the *overlay's* entry, which
//!   the host's changes of its own entry never reach;
//! * directories of the layer that stand for host directories take their
//!   mode and, where the user namespace maps them, owner;
//! * the host's mounts beneath the base (an overlay layer holds one
//!   filesystem) are attached again on top, the roots after them.
//!
//! Overlayfs in a user namespace needs Linux 5.11; on older kernels every
//! hidden path is a mount over its entry, as before. Hidden paths inside a
//! root (the workspace or a writable root) stay mounts over their entries:
//! an overlay there would make the root read-only. Hidden paths under the
//! view's private `/tmp`, `/dev`, `/proc` or `/run` are not in the view.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Mode and owner of a directory of the layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// One entry of an overlay's layer, relative to the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LayerEntry {
    /// A directory on the way to a hidden name.
    Dir(Owner),
    /// A hidden name: absent in the overlay.
    Whiteout,
}

/// One overlay over a base directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Overlay {
    /// The host directory shown through the overlay.
    pub(crate) base: PathBuf,
    /// The layer's root (the base's mode and owner).
    pub(crate) root: Owner,
    /// The layer's entries, parents first.
    pub(crate) layer: Vec<(PathBuf, LayerEntry)>,
    /// The host's mounts beneath the base, attached again over the overlay.
    pub(crate) submounts: Vec<PathBuf>,
}

/// The view's plan for the hidden paths.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Hiding {
    /// Overlays, outermost first.
    pub(crate) overlays: Vec<Overlay>,
    /// Hidden entries that exist: each gets a mount over it (an empty
    /// tmpfs over a directory, `/dev/null` over a file).
    pub(crate) pinned: Vec<PathBuf>,
}

fn owner(meta: &std::fs::Metadata) -> Owner {
    Owner {
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
    }
}

fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// The plan for `hidden` (see [`crate::Policy::hidden`]) around `roots`
/// (the paths attached on top), with overlays when `by_name`, with the
/// host's mount points `mounts`; hidden paths under `private` (trees the
/// view replaces with its own) are not in the view.
pub(crate) fn plan(
    hidden: &[PathBuf],
    roots: &[PathBuf],
    by_name: bool,
    mounts: &[PathBuf],
    private: &[&Path],
) -> Hiding {
    let in_root = |h: &Path| roots.iter().any(|r| h.starts_with(r));
    // A hidden path beneath another is hidden with it (unless a root there
    // shows it again).
    let hidden: Vec<&PathBuf> = hidden
        .iter()
        .filter(|h| in_root(h) || !hidden.iter().any(|o| o != *h && h.starts_with(o)))
        .filter(|h| in_root(h) || !private.iter().any(|p| h.starts_with(p)))
        .collect();
    let mut out = Hiding::default();
    let mut named: Vec<(PathBuf, &PathBuf)> = Vec::new();
    for h in hidden {
        let meta = std::fs::symlink_metadata(h).ok();
        if meta.as_ref().is_some_and(|m| !m.is_symlink()) {
            out.pinned.push(h.clone());
        }
        let base = h.ancestors().skip(1).find(|a| is_real_dir(a));
        if let Some(base) = base
            && by_name
            && !in_root(h)
            && base != Path::new("/")
        {
            named.push((base.to_owned(), h));
        }
    }
    // SAFETY: getters without preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    for (base, entries) in group_by_filesystem(&named, mounts) {
        let Ok(base_meta) = std::fs::metadata(&base) else {
            continue;
        };
        let layer = layer(&base, &entries, (euid, egid));
        let submounts = submounts(&base, &entries, mounts, &in_root);
        out.overlays.push(Overlay {
            base,
            root: owner(&base_meta),
            layer,
            submounts,
        });
    }
    out.overlays.sort_by_key(|o| o.base.as_os_str().len());
    out
}

/// The hidden names of `named` (with the directory that holds each),
/// grouped under one base per filesystem: each base merged into an outer
/// one with no host mount point of `mounts` between them.
fn group_by_filesystem<'h>(
    named: &[(PathBuf, &'h PathBuf)],
    mounts: &[PathBuf],
) -> BTreeMap<PathBuf, Vec<&'h PathBuf>> {
    let mut bases: Vec<PathBuf> = named.iter().map(|(b, _)| b.clone()).collect();
    bases.sort_by_key(|b| b.as_os_str().len());
    bases.dedup();
    // `b` lies in `t`'s filesystem: no mount point between them.
    let within = |b: &Path, t: &Path| {
        b.starts_with(t)
            && !mounts
                .iter()
                .any(|m| m.starts_with(t) && m != t && b.starts_with(m))
    };
    let mut tops: Vec<PathBuf> = Vec::new();
    for b in &bases {
        if !tops.iter().any(|t| within(b, t)) {
            tops.push(b.clone());
        }
    }
    let mut groups: BTreeMap<PathBuf, Vec<&PathBuf>> = BTreeMap::new();
    for (base, h) in named {
        let top = tops
            .iter()
            .filter(|t| within(base, t))
            .max_by_key(|t| t.as_os_str().len());
        if let Some(top) = top {
            groups.entry(top.clone()).or_default().push(h);
        }
    }
    groups
}

/// The layer of the overlay at `base` for the hidden `entries` beneath
/// it: a whiteout for each name absent now, and the directories on the way
/// (with their host directory's mode and owner, else `ids`'), parents
/// first.
fn layer(base: &Path, entries: &[&PathBuf], ids: (u32, u32)) -> Vec<(PathBuf, LayerEntry)> {
    let mut layer: BTreeMap<PathBuf, LayerEntry> = BTreeMap::new();
    'entry: for h in entries {
        let Ok(rel) = h.strip_prefix(base) else {
            continue;
        };
        let parts: Vec<_> = rel.components().collect();
        let mut at = PathBuf::new();
        let mut dirs = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            at.push(part);
            let host = base.join(&at);
            if i + 1 == parts.len() {
                // What exists is pinned over the overlay's entry.
                let pinned = std::fs::symlink_metadata(&host).is_ok_and(|m| !m.is_symlink());
                if !pinned {
                    layer.extend(dirs.drain(..));
                    layer.insert(at.clone(), LayerEntry::Whiteout);
                }
                break;
            }
            let dir = match std::fs::symlink_metadata(&host) {
                Ok(m) if m.is_dir() => owner(&m),
                // Nothing can be beneath a file or a link's own name.
                Ok(_) => continue 'entry,
                Err(_) => Owner {
                    mode: 0o755,
                    uid: ids.0,
                    gid: ids.1,
                },
            };
            dirs.push((at.clone(), LayerEntry::Dir(dir)));
        }
    }
    layer.into_iter().collect()
}

/// The host's mounts beneath `base` to attach again over its overlay: the
/// outermost ones, but those in a hidden entry or a root.
fn submounts(
    base: &Path,
    entries: &[&PathBuf],
    mounts: &[PathBuf],
    in_root: &dyn Fn(&Path) -> bool,
) -> Vec<PathBuf> {
    let mut submounts: Vec<PathBuf> = mounts
        .iter()
        .filter(|m| m.starts_with(base) && **m != base)
        .filter(|m| !entries.iter().any(|h| m.starts_with(h)))
        .filter(|m| !in_root(m))
        .cloned()
        .collect();
    submounts.sort_by_key(|m| m.as_os_str().len());
    let mut outermost: Vec<PathBuf> = Vec::new();
    for m in submounts {
        if !outermost.iter().any(|o| m.starts_with(o)) {
            outermost.push(m);
        }
    }
    outermost
}

/// The mount points of this process's mount namespace
/// (`/proc/self/mountinfo`, octal escapes decoded).
pub(crate) fn mount_points() -> Vec<PathBuf> {
    let Ok(text) = std::fs::read("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.split(|b| *b == b'\n')
        .filter_map(|line| line.split(|b| *b == b' ').nth(4))
        .map(|field| PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(field))))
        .collect()
}

fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

/// Whether this kernel mounts overlayfs in a user namespace (Linux 5.11).
pub(crate) fn overlay_in_user_namespaces() -> bool {
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= (5, 11)
}

/// `lowerdir` text for overlayfs: `\`, `:` and `,` escaped.
pub(crate) fn escape_layer(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for b in path.as_os_str().as_bytes() {
        if matches!(b, b'\\' | b':' | b',') {
            out.push(b'\\');
        }
        out.push(*b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_decode_escapes_and_kernels_parse() {
        assert_eq!(unescape(br"/a\040b\134c"), b"/a b\\c");
        assert_eq!(unescape(br"/a\04"), br"/a\04");
        assert_eq!(escape_layer(Path::new("/a:b,c\\d")), br"/a\:b\,c\\d");
        assert!(mount_points().contains(&PathBuf::from("/")));
    }

    #[test]
    fn names_group_under_one_base_per_filesystem() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(base.join("home/.config/gh")).unwrap();
        std::fs::write(base.join("home/.netrc"), "x").unwrap();
        std::fs::create_dir_all(base.join("home/ws")).unwrap();
        std::fs::create_dir_all(base.join("mnt/inner")).unwrap();
        let home = base.join("home");
        let hidden = vec![
            home.join(".netrc"),
            home.join(".config/gh"),
            home.join(".cargo/credentials"),
            home.join("ws/secret"),
            base.join("mnt/inner/key"),
        ];
        let mounts = vec![PathBuf::from("/"), base.join("mnt")];
        let private = [Path::new("/proc")];
        let plan = plan(&hidden, &[home.join("ws")], true, &mounts, &private);
        assert_eq!(plan.pinned, [home.join(".netrc"), home.join(".config/gh")]);
        let bases: Vec<&Path> = plan.overlays.iter().map(|o| o.base.as_path()).collect();
        assert_eq!(bases, [home.as_path(), base.join("mnt/inner").as_path()]);
        let layer: Vec<(&Path, bool)> = plan.overlays[0]
            .layer
            .iter()
            .map(|(p, e)| (p.as_path(), *e == LayerEntry::Whiteout))
            .collect();
        assert_eq!(
            layer,
            [
                (Path::new(".cargo"), false),
                (Path::new(".cargo/credentials"), true),
            ]
        );
        // Without overlays, only what exists is pinned.
        let entry_only = super::plan(&hidden, &[home.join("ws")], false, &mounts, &private);
        assert!(entry_only.overlays.is_empty());
        assert_eq!(entry_only.pinned.len(), 2);
    }
}
