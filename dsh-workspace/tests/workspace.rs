//! The layers against real filesystems: hand-built upper layers (whiteouts
//! made with `mknod`, opaque directories with `setxattr`), and real
//! overlayfs mounts made in a child's own mount namespace (`unshare`), as
//! root (`trusted.*` attributes), in a user namespace (`userxattr`) and as
//! an unprivileged user. Nothing is mounted in the test's own namespace.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use dsh_workspace::{Change, ChangeKind, EntryKind, Workspace, WorkspaceError};

const NOBODY: u32 = 65534;

// ---------------------------------------------------------------- helpers

/// A base tree with files, a script, directories and a link.
fn make_base(base: &Path) {
    std::fs::create_dir_all(base.join("dir1/sub")).unwrap();
    std::fs::create_dir_all(base.join("gone")).unwrap();
    std::fs::create_dir_all(base.join("keep")).unwrap();
    let lines: String = (1..=20).map(|i| format!("line {i}\n")).collect();
    std::fs::write(base.join("a.txt"), lines).unwrap();
    std::fs::write(base.join("del.txt"), "to be deleted\n").unwrap();
    std::fs::write(base.join("same.txt"), "same\n").unwrap();
    std::fs::write(base.join("re.txt"), "recreate me\n").unwrap();
    std::fs::write(base.join("script.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::write(base.join("dir1/x.txt"), "x\n").unwrap();
    std::fs::write(base.join("dir1/sub/y.txt"), "y\n").unwrap();
    std::fs::write(base.join("gone/g.txt"), "g\n").unwrap();
    std::fs::write(base.join("keep/k.txt"), "k\n").unwrap();
    std::fs::write(base.join("blob.bin"), b"\0\x01\x02binary\n").unwrap();
    std::os::unix::fs::symlink("a.txt", base.join("link_base")).unwrap();
}

struct Fixture {
    dir: tempfile::TempDir,
    ws: Workspace,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base");
        make_base(&base);
        let ws = Workspace::new(&base, dir.path().join("cow")).unwrap();
        Fixture { dir, ws }
    }

    fn upper(&self, owner: &str) -> PathBuf {
        self.ws.layer(owner).unwrap().upper
    }
}

fn whiteout(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string.
    let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) };
    assert_eq!(r, 0, "mknod {path:?}: {}", std::io::Error::last_os_error());
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings and value buffer.
    let r = unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "setxattr {name} on {path:?}: {}",
        std::io::Error::last_os_error()
    );
}

fn get_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings and a writable buffer.
    let r = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return None;
    }
    buf.truncate(r as usize);
    Some(buf)
}

fn kinds(changes: &[Change]) -> Vec<(String, ChangeKind)> {
    changes
        .iter()
        .map(|c| (c.path.to_string_lossy().into_owned(), c.kind))
        .collect()
}

fn set(pairs: &[(&str, ChangeKind)]) -> Vec<(String, ChangeKind)> {
    let mut v: Vec<_> = pairs.iter().map(|(p, k)| (p.to_string(), *k)).collect();
    v.sort();
    v
}

fn sorted(mut v: Vec<(String, ChangeKind)>) -> Vec<(String, ChangeKind)> {
    v.sort();
    v
}

/// What a tree holds, as `git apply` can reproduce it: each file's content
/// and executable bit, each link's target, each directory.
#[derive(Debug, PartialEq, Eq)]
enum Node {
    Dir,
    File { exec: bool, content: Vec<u8> },
    Link(OsString),
}

fn tree(root: &Path) -> BTreeMap<PathBuf, Node> {
    fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Node>) {
        for e in std::fs::read_dir(root.join(rel)).unwrap() {
            let e = e.unwrap();
            let rel = rel.join(e.file_name());
            let md = std::fs::symlink_metadata(root.join(&rel)).unwrap();
            if md.file_type().is_symlink() {
                out.insert(
                    rel.clone(),
                    Node::Link(std::fs::read_link(root.join(&rel)).unwrap().into()),
                );
            } else if md.is_dir() {
                out.insert(rel.clone(), Node::Dir);
                walk(root, &rel, out);
            } else {
                let content = std::fs::read(root.join(&rel)).unwrap();
                out.insert(
                    rel,
                    Node::File {
                        exec: md.mode() & 0o100 != 0,
                        content,
                    },
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, Path::new(""), &mut out);
    out
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `cp -a` of `src` to `dst`.
fn copy_tree(src: &Path, dst: &Path) {
    run(Command::new("cp").arg("-a").arg(src).arg(dst));
}

/// Applies `diff` with `git apply` to a fresh copy of `base` (in `at`).
fn git_apply(base: &Path, diff: &str, at: &Path) {
    copy_tree(base, at);
    let patch = at.with_extension("patch");
    std::fs::write(&patch, diff).unwrap();
    run(Command::new("git")
        .arg("apply")
        .arg("--whitespace=nowarn")
        .arg(&patch)
        .current_dir(at));
}

/// How the test mounts a view.
#[derive(Debug, Clone, Copy)]
enum Mount {
    /// As root in a new mount namespace: `trusted.overlay.*`.
    Root,
    /// In a new user and mount namespace (`unshare -Urm`), `userxattr`.
    UserNs,
}

/// Mounts the owner's view of the base at `mnt` in a child's own mount
/// namespace and runs `script` (sh) inside it, with `$V` the view.
fn in_view(ws: &Workspace, owner: &str, mnt: &Path, how: Mount, script: &str) -> String {
    let layer = ws.layer(owner).unwrap();
    std::fs::create_dir_all(mnt).unwrap();
    let opts = match how {
        Mount::Root => "",
        Mount::UserNs => "userxattr,",
    };
    let mount = format!(
        "mount -t overlay overlay -o {opts}lowerdir={},upperdir={},workdir={} {} && export V={} && cd \"$V\" && {script}",
        ws.base().display(),
        layer.upper.display(),
        layer.work.display(),
        mnt.display(),
        mnt.display(),
    );
    let mut cmd = Command::new("unshare");
    match how {
        Mount::Root => cmd.args(["--mount", "--propagation", "private"]),
        Mount::UserNs => cmd.args([
            "--user",
            "--map-root-user",
            "--mount",
            "--propagation",
            "private",
        ]),
    };
    run(cmd.args(["sh", "-euc", &mount]))
}

/// What an agent does in its view: every kind of change the issue names.
const AGENT: &str = r#"
echo 'line 21' >> a.txt
sed -i 's/^line 3$/line three/' a.txt
echo new > new.txt
printf 'no final newline' > 'an é "name".txt'
printf 'x\nwithout newline at the end' > dir1/x.txt
rm del.txt
echo extra >> same.txt && truncate -s 5 same.txt
rm re.txt && echo 'made again' > re.txt
mv dir1 dir2
rm -r gone
mkdir -p fresh/deep && echo deep > fresh/deep/f.txt
ln -s /etc/shadow shadow_link
chmod +x script.sh
rm link_base && ln -s same.txt link_base
rm -r keep && mkdir keep && echo n > keep/n.txt
"#;

fn agent_changes() -> Vec<(String, ChangeKind)> {
    use ChangeKind::*;
    set(&[
        ("a.txt", Modified),
        ("new.txt", Added),
        ("an é \"name\".txt", Added),
        ("del.txt", Deleted),
        ("re.txt", Modified),
        ("dir1", Deleted),
        ("dir1/x.txt", Deleted),
        ("dir1/sub", Deleted),
        ("dir1/sub/y.txt", Deleted),
        ("dir2", Added),
        ("dir2/x.txt", Added),
        ("dir2/sub", Added),
        ("dir2/sub/y.txt", Added),
        ("gone", Deleted),
        ("gone/g.txt", Deleted),
        ("fresh", Added),
        ("fresh/deep", Added),
        ("fresh/deep/f.txt", Added),
        ("shadow_link", Added),
        ("script.sh", Modified),
        ("link_base", Modified),
        ("keep/k.txt", Deleted),
        ("keep/n.txt", Added),
    ])
}

/// Runs [`AGENT`] in a real view, then checks the changes, and that the
/// diff applied to a copy of the base gives what the same commands give
/// run on a plain copy.
fn agent_in_real_view(fx: &Fixture, how: Mount) {
    let mnt = fx.dir.path().join("mnt");
    in_view(&fx.ws, "agent", &mnt, how, AGENT);

    let changes = fx.ws.changes("agent").unwrap();
    assert_eq!(sorted(kinds(&changes)), agent_changes(), "{changes:#?}");
    let link = changes
        .iter()
        .find(|c| c.path == Path::new("shadow_link"))
        .unwrap();
    assert_eq!(
        link.after.as_ref().unwrap().kind,
        EntryKind::Symlink("/etc/shadow".into())
    );

    let diff = fx.ws.diff("agent").unwrap();
    assert!(
        diff.contains("diff --git a/shadow_link b/shadow_link\nnew file mode 120000\n"),
        "{diff}"
    );
    assert!(
        diff.contains("+/etc/shadow\n\\ No newline at end of file\n"),
        "{diff}"
    );
    assert!(
        diff.contains("diff --git a/script.sh b/script.sh\nold mode 100644\nnew mode 100755\n"),
        "{diff}"
    );
    assert!(
        !diff.contains("same.txt b/same.txt"),
        "a file changed back is no change:\n{diff}"
    );
    let shadow = std::fs::read_to_string("/etc/shadow").unwrap_or_default();
    if let Some(first) = shadow.lines().next() {
        assert!(
            !diff.contains(first),
            "the diff holds /etc/shadow's content:\n{diff}"
        );
    }

    let applied = fx.dir.path().join("applied");
    git_apply(fx.ws.base(), &diff, &applied);
    let expected = fx.dir.path().join("expected");
    copy_tree(fx.ws.base(), &expected);
    run(Command::new("sh")
        .args(["-euc", AGENT])
        .current_dir(&expected));
    assert_eq!(
        tree(&applied),
        tree(&expected),
        "git apply of the diff:\n{diff}"
    );
}

// ---------------------------------------------------------------- API

#[test]
fn bad_bases_and_overlapping_layer_dirs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base");
    let err = Workspace::new(&base, dir.path().join("cow")).unwrap_err();
    assert!(
        matches!(err, WorkspaceError::BaseNotDirectory { .. }),
        "{err}"
    );
    std::fs::create_dir(&base).unwrap();
    std::fs::write(dir.path().join("file"), "").unwrap();
    let err = Workspace::new(dir.path().join("file"), dir.path().join("cow")).unwrap_err();
    assert!(
        matches!(err, WorkspaceError::BaseNotDirectory { .. }),
        "{err}"
    );
    for cow in [base.join("cow"), dir.path().to_path_buf()] {
        let err = Workspace::new(&base, &cow).unwrap_err();
        assert!(
            matches!(err, WorkspaceError::Overlap { .. }),
            "{cow:?}: {err}"
        );
        assert!(err.to_string().contains("overlap"), "{err}");
    }
    // Refused before anything was made in the base.
    assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0);
    let ws = Workspace::new(&base, dir.path().join("new/cow")).unwrap();
    let md = std::fs::metadata(ws.cow_dir()).unwrap();
    assert_eq!(md.mode() & 0o777, 0o700);
}

#[test]
fn layers_are_made_once_per_owner_with_safe_names() {
    let fx = Fixture::new();
    let a = fx.ws.layer("../../etc").unwrap();
    assert!(a.upper.starts_with(fx.ws.cow_dir().join("layers")));
    assert!(a.upper.is_dir() && a.work.is_dir());
    assert_eq!(
        a.upper.parent().unwrap().parent().unwrap(),
        fx.ws.cow_dir().join("layers")
    );
    std::fs::write(a.upper.join("f"), "x").unwrap();
    assert_eq!(
        fx.ws.layer("../../etc").unwrap(),
        a,
        "a second call keeps the layer"
    );
    assert!(a.upper.join("f").exists());
    assert_ne!(fx.ws.layer("../../etc/").unwrap(), a);
    assert!(fx.ws.changes("nobody-yet").unwrap().is_empty());
    let err = fx.ws.layer(&"z".repeat(1000)).unwrap_err();
    assert!(matches!(err, WorkspaceError::InvalidOwner { .. }), "{err}");
}

// ---------------------------------------------------------------- hand-built layers

#[test]
fn whiteouts_opaque_dirs_and_copied_up_files_read_as_overlayfs_means_them() {
    let fx = Fixture::new();
    let up = fx.upper("o");
    whiteout(&up.join("del.txt"));
    whiteout(&up.join("gone"));
    whiteout(&up.join("never-there"));
    // dir1 made opaque (trusted form) with one file of its own.
    std::fs::create_dir(up.join("dir1")).unwrap();
    set_xattr(&up.join("dir1"), "trusted.overlay.opaque", b"y");
    std::fs::write(up.join("dir1/x.txt"), "x\n").unwrap();
    // keep: copied up because a file beneath it changed (not itself a change).
    std::fs::create_dir(up.join("keep")).unwrap();
    std::fs::set_permissions(up.join("keep"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(up.join("keep/k.txt"), "k changed\n").unwrap();
    // same.txt copied up, identical; re.txt same content, other mode.
    std::fs::write(up.join("same.txt"), "same\n").unwrap();
    std::fs::write(up.join("re.txt"), "recreate me\n").unwrap();
    std::fs::set_permissions(up.join("re.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    // link_base: same target text, so no change.
    std::os::unix::fs::symlink("a.txt", up.join("link_base")).unwrap();
    // An added directory with the user-namespace form of opaque.
    std::fs::create_dir(up.join("newdir")).unwrap();
    set_xattr(&up.join("newdir"), "user.overlay.opaque", b"y");
    std::fs::write(up.join("newdir/n"), "n\n").unwrap();
    // Linux 6.7's whiteout form: an empty file with overlay.whiteout.
    std::fs::write(up.join("script.sh"), "").unwrap();
    set_xattr(&up.join("script.sh"), "user.overlay.whiteout", b"");
    // A FIFO: reported, never opened for reading.
    run(Command::new("mkfifo").arg(up.join("fifo")));

    let changes = fx.ws.changes("o").unwrap();
    use ChangeKind::*;
    assert_eq!(
        sorted(kinds(&changes)),
        set(&[
            ("del.txt", Deleted),
            ("gone", Deleted),
            ("gone/g.txt", Deleted),
            ("dir1/sub", Deleted),
            ("dir1/sub/y.txt", Deleted),
            ("keep/k.txt", Modified),
            ("re.txt", Modified),
            ("newdir", Added),
            ("newdir/n", Added),
            ("script.sh", Deleted),
            ("fifo", Added),
        ]),
        "{changes:#?}"
    );
    let fifo = changes
        .iter()
        .find(|c| c.path == Path::new("fifo"))
        .unwrap();
    assert_eq!(fifo.after.as_ref().unwrap().kind, EntryKind::Other);
    let re = changes
        .iter()
        .find(|c| c.path == Path::new("re.txt"))
        .unwrap();
    assert_eq!(
        (
            re.before.as_ref().unwrap().mode,
            re.after.as_ref().unwrap().mode
        ),
        (0o644, 0o600)
    );

    // The same layer with user.overlay.opaque on dir1 reads the same.
    let up2 = fx.upper("o2");
    std::fs::create_dir(up2.join("dir1")).unwrap();
    set_xattr(&up2.join("dir1"), "user.overlay.opaque", b"y");
    assert_eq!(
        sorted(kinds(&fx.ws.changes("o2").unwrap())),
        set(&[
            ("dir1/x.txt", Deleted),
            ("dir1/sub", Deleted),
            ("dir1/sub/y.txt", Deleted)
        ])
    );
    // Without the attribute (or with "x", which marks xattr whiteouts, not
    // opacity) the base's entries show through.
    set_xattr(&up2.join("dir1"), "user.overlay.opaque", b"x");
    assert!(fx.ws.changes("o2").unwrap().is_empty());
}

#[test]
fn types_changed_in_place_are_modified_and_what_was_beneath_is_deleted() {
    let fx = Fixture::new();
    let up = fx.upper("t");
    // A file became a directory, a directory became a file.
    std::fs::create_dir(up.join("a.txt")).unwrap();
    set_xattr(&up.join("a.txt"), "trusted.overlay.opaque", b"y");
    std::fs::write(up.join("a.txt/inner"), "i\n").unwrap();
    std::fs::write(up.join("keep"), "now a file\n").unwrap();
    let changes = fx.ws.changes("t").unwrap();
    use ChangeKind::*;
    assert_eq!(
        sorted(kinds(&changes)),
        set(&[
            ("a.txt", Modified),
            ("a.txt/inner", Added),
            ("keep", Modified),
            ("keep/k.txt", Deleted)
        ])
    );
    let a = changes
        .iter()
        .find(|c| c.path == Path::new("a.txt"))
        .unwrap();
    assert_eq!(a.before.as_ref().unwrap().kind, EntryKind::File);
    assert_eq!(a.after.as_ref().unwrap().kind, EntryKind::Dir);
    // The diff deletes the file and the directory's file, adds the others.
    let applied = fx.dir.path().join("applied");
    git_apply(fx.ws.base(), &fx.ws.diff("t").unwrap(), &applied);
    assert_eq!(
        std::fs::read_to_string(applied.join("a.txt/inner")).unwrap(),
        "i\n"
    );
    assert_eq!(
        std::fs::read_to_string(applied.join("keep")).unwrap(),
        "now a file\n"
    );
}

#[test]
fn binary_and_oversized_files_are_named_not_dumped() {
    let fx = Fixture::new();
    let up = fx.upper("b");
    std::fs::write(up.join("blob.bin"), b"\0\x01\x02other\n").unwrap();
    std::fs::write(up.join("new.bin"), b"\0\0\0").unwrap();
    let big = "y\n".repeat((dsh_workspace::DIFF_MAX_FILE as usize) / 2 + 1);
    std::fs::write(up.join("big.txt"), &big).unwrap();
    whiteout(&up.join("a.txt"));
    let diff = fx.ws.diff("b").unwrap();
    assert!(
        diff.contains(
            "diff --git a/blob.bin b/blob.bin\nBinary files a/blob.bin and b/blob.bin differ\n"
        ),
        "{diff}"
    );
    assert!(
        diff.contains("diff --git a/new.bin b/new.bin\nnew file mode 100644\nBinary files /dev/null and b/new.bin differ\n"),
        "{diff}"
    );
    assert!(
        diff.contains("Binary files /dev/null and b/big.txt differ\n"),
        "{diff}"
    );
    assert!(diff.contains("diff --git a/a.txt b/a.txt\ndeleted file mode 100644\n--- a/a.txt\n+++ /dev/null\n@@ -1,20 +0,0 @@\n-line 1\n"), "{diff}");
    assert!(diff.len() < 10_000, "the big file is not in the diff");
}

// ---------------------------------------------------------------- links the owner made

#[test]
fn links_the_owner_planted_are_read_as_links_never_followed() {
    let fx = Fixture::new();
    let secret_dir = fx.dir.path().join("secret");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("x.txt"), "TOP-SECRET\n").unwrap();
    std::fs::write(secret_dir.join("k.txt"), "TOP-SECRET\n").unwrap();
    let up = fx.upper("evil");
    // A link to a secret file, a directory replaced by a link to a secret
    // directory (dir1/x.txt would read the secret if followed), a link in
    // place of a base file, and a hard link to a file in the layer.
    std::os::unix::fs::symlink(secret_dir.join("x.txt"), up.join("leak")).unwrap();
    std::os::unix::fs::symlink(&secret_dir, up.join("dir1")).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", up.join("a.txt")).unwrap();
    std::fs::create_dir(up.join("keep")).unwrap();
    std::fs::write(up.join("mine"), "mine\n").unwrap();
    std::fs::hard_link(up.join("mine"), up.join("keep/k.txt")).unwrap();
    run(Command::new("mkfifo").arg(up.join("same.txt")));

    let changes = fx.ws.changes("evil").unwrap();
    let dir1 = changes
        .iter()
        .find(|c| c.path == Path::new("dir1"))
        .unwrap();
    assert_eq!(dir1.kind, ChangeKind::Modified);
    assert_eq!(
        dir1.after.as_ref().unwrap().kind,
        EntryKind::Symlink(secret_dir.clone().into())
    );
    let diff = fx.ws.diff("evil").unwrap();
    assert!(!diff.contains("TOP-SECRET"), "{diff}");
    assert!(
        diff.contains(&format!("+{}\n", secret_dir.join("x.txt").display())),
        "{diff}"
    );
    assert!(
        diff.contains("+mine\n"),
        "the hard link is read as its own content:\n{diff}"
    );
    let shadow = std::fs::read_to_string("/etc/shadow").unwrap_or_default();
    if let Some(first) = shadow.lines().next() {
        assert!(!diff.contains(first), "{diff}");
    }
    // Copies keep links as links.
    let snap = fx.ws.snapshot("evil").unwrap();
    let copied = fx.ws.cow_dir().join("snapshots").join(snap.to_string());
    assert!(
        std::fs::symlink_metadata(copied.join("dir1"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_link(copied.join("a.txt")).unwrap(),
        Path::new("/etc/shadow")
    );
    assert!(
        std::fs::symlink_metadata(copied.join("same.txt"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    fx.ws.fork("evil", "copy").unwrap();
    assert_eq!(fx.ws.changes("copy").unwrap(), changes);
}

/// The owner swaps a directory for a link to a secret directory and back
/// while the host reads its layer: no read ever reaches the secret.
#[test]
fn a_layer_changing_under_the_walk_never_leads_it_through_a_link() {
    let fx = Fixture::new();
    let secret_dir = fx.dir.path().join("secret");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("x.txt"), "TOP-SECRET\n").unwrap();
    std::fs::write(secret_dir.join("secret-name.txt"), "TOP-SECRET\n").unwrap();
    let up = fx.upper("racer");
    std::fs::create_dir(up.join("dir1")).unwrap();
    std::fs::write(up.join("dir1/x.txt"), "mine\n").unwrap();
    std::os::unix::fs::symlink(&secret_dir, up.join("dir1.link")).unwrap();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (up, stop) = (up.clone(), stop.clone());
        std::thread::spawn(move || {
            let a = CString::new(up.join("dir1").as_os_str().as_bytes()).unwrap();
            let b = CString::new(up.join("dir1.link").as_os_str().as_bytes()).unwrap();
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // dir1 is the real directory, then the link, and so on:
                // swapped atomically, never missing.
                // SAFETY: valid C strings.
                let r = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
                swaps += 1;
            }
            swaps
        })
    };
    let mut rounds = 0;
    for _ in 0..1000 {
        if let Ok(diff) = fx.ws.diff("racer") {
            assert!(!diff.contains("TOP-SECRET"), "{diff}");
            rounds += 1;
        }
        if let Ok(changes) = fx.ws.changes("racer") {
            for c in changes {
                assert!(!c.path.to_string_lossy().contains("secret-name"), "{c:?}");
            }
        }
    }
    for _ in 0..20 {
        if let Ok(id) = fx.ws.snapshot("racer") {
            let snap = fx.ws.cow_dir().join("snapshots").join(id.to_string());
            for (path, node) in tree(&snap) {
                if let Node::File { content, .. } = node {
                    assert!(
                        !content.starts_with(b"TOP-SECRET"),
                        "{path:?} copied from the secret"
                    );
                }
            }
            fx.ws.delete_snapshot(&id).unwrap();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(rounds > 0 && swaps > 0, "{rounds} diffs, {swaps} swaps");
}

// ---------------------------------------------------------------- copies

#[test]
fn fork_snapshot_and_restore_copy_whiteouts_opaque_dirs_links_modes_and_times() {
    let fx = Fixture::new();
    let up = fx.upper("src");
    whiteout(&up.join("del.txt"));
    std::fs::create_dir(up.join("dir1")).unwrap();
    set_xattr(&up.join("dir1"), "trusted.overlay.opaque", b"y");
    set_xattr(&up.join("dir1"), "user.overlay.opaque", b"y");
    std::fs::write(up.join("dir1/new.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        up.join("dir1/new.sh"),
        std::fs::Permissions::from_mode(0o751),
    )
    .unwrap();
    set_xattr(&up.join("dir1/new.sh"), "user.note", b"kept");
    std::os::unix::fs::symlink("/nowhere", up.join("dangling")).unwrap();
    run(Command::new("touch")
        .args(["-h", "-d", "2001-02-03 04:05:06"])
        .arg(up.join("dangling")));
    run(Command::new("touch")
        .args(["-d", "2001-02-03 04:05:06"])
        .arg(up.join("dir1/new.sh")));
    run(Command::new("touch")
        .args(["-d", "2002-02-03 04:05:06"])
        .arg(up.join("dir1")));
    let changes = fx.ws.changes("src").unwrap();
    assert_eq!(changes.len(), 6, "{changes:#?}");

    let check = |owner: &str| {
        let copy = fx.ws.layer(owner).unwrap().upper;
        assert_eq!(fx.ws.changes(owner).unwrap(), changes, "{owner}");
        let w = std::fs::symlink_metadata(copy.join("del.txt")).unwrap();
        assert_eq!(
            (w.mode() & libc::S_IFMT, w.rdev()),
            (libc::S_IFCHR, 0),
            "{owner}: whiteout"
        );
        for attr in ["trusted.overlay.opaque", "user.overlay.opaque"] {
            assert_eq!(
                get_xattr(&copy.join("dir1"), attr).as_deref(),
                Some(&b"y"[..]),
                "{owner}: {attr}"
            );
        }
        assert_eq!(
            get_xattr(&copy.join("dir1/new.sh"), "user.note").as_deref(),
            Some(&b"kept"[..])
        );
        for (path, orig) in [
            ("dir1/new.sh", up.join("dir1/new.sh")),
            ("dangling", up.join("dangling")),
            ("dir1", up.join("dir1")),
        ] {
            let (a, b) = (
                std::fs::symlink_metadata(copy.join(path)).unwrap(),
                std::fs::symlink_metadata(orig).unwrap(),
            );
            assert_eq!(
                (a.mode(), a.mtime(), a.mtime_nsec()),
                (b.mode(), b.mtime(), b.mtime_nsec()),
                "{owner}: {path}"
            );
        }
        assert_eq!(
            std::fs::read_link(copy.join("dangling")).unwrap(),
            Path::new("/nowhere")
        );
    };
    fx.ws.fork("src", "forked").unwrap();
    check("forked");

    let snap = fx.ws.snapshot("src").unwrap();
    assert_eq!(snap.to_string().len(), 16);
    assert_eq!(
        snap.to_string()
            .parse::<dsh_workspace::SnapshotId>()
            .unwrap(),
        snap
    );
    fx.ws.reset("src").unwrap();
    assert!(fx.ws.changes("src").unwrap().is_empty());
    assert_eq!(
        std::fs::read_dir(fx.ws.layer("src").unwrap().upper)
            .unwrap()
            .count(),
        0
    );
    // Any owner from any snapshot, replacing what it had.
    std::fs::write(fx.upper("other").join("junk"), "junk").unwrap();
    for owner in ["src", "other"] {
        fx.ws.restore(owner, &snap).unwrap();
        check(owner);
    }
    // Diverging: the fork's changes do not reach its source.
    std::fs::write(fx.upper("forked").join("only-in-fork"), "f").unwrap();
    assert_eq!(fx.ws.changes("src").unwrap(), changes);

    fx.ws.delete_snapshot(&snap).unwrap();
    for err in [
        fx.ws.delete_snapshot(&snap).unwrap_err(),
        fx.ws.restore("src", &snap).unwrap_err(),
    ] {
        assert!(
            matches!(err, WorkspaceError::SnapshotNotFound { .. }),
            "{err}"
        );
        assert_eq!(err.to_string(), format!("there is no snapshot {snap}"));
    }
    assert!("../etc".parse::<dsh_workspace::SnapshotId>().is_err());

    fx.ws.remove("forked").unwrap();
    fx.ws.remove("forked").unwrap();
    assert!(!fx.ws.cow_dir().join("layers").join("oforked").exists());
    assert_eq!(
        std::fs::read_dir(fx.ws.cow_dir().join("staging"))
            .unwrap()
            .count(),
        0,
        "nothing left in staging"
    );
}

// ---------------------------------------------------------------- real overlay mounts

fn assert_root() {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    assert_eq!(
        uid, 0,
        "this test mounts overlayfs as root: run it as root (.ci/run does)"
    );
}

#[test]
fn a_real_view_mounted_as_root_diffs_to_what_its_commands_did() {
    assert_root();
    let fx = Fixture::new();
    agent_in_real_view(&fx, Mount::Root);
    // The kernel's shapes: a whiteout for the renamed and the deleted
    // directories, an opaque directory made over a deleted one.
    let up = fx.ws.layer("agent").unwrap().upper;
    for gone in ["dir1", "gone", "del.txt"] {
        let md = std::fs::symlink_metadata(up.join(gone)).unwrap();
        assert!(md.file_type().is_char_device() && md.rdev() == 0, "{gone}");
    }
    assert_eq!(
        get_xattr(&up.join("keep"), "trusted.overlay.opaque").as_deref(),
        Some(&b"y"[..])
    );
    // What the kernel left: work/work mode 000. Reset copes.
    fx.ws.reset("agent").unwrap();
    assert!(fx.ws.changes("agent").unwrap().is_empty());
    // A binary file written in a view.
    in_view(
        &fx.ws,
        "agent",
        &fx.dir.path().join("mnt"),
        Mount::Root,
        r"printf '\0\1\2changed' > blob.bin",
    );
    let diff = fx.ws.diff("agent").unwrap();
    assert_eq!(
        diff,
        "diff --git a/blob.bin b/blob.bin\nBinary files a/blob.bin and b/blob.bin differ\n"
    );
}

#[test]
fn a_real_view_in_a_user_namespace_diffs_to_what_its_commands_did() {
    let fx = Fixture::new();
    agent_in_real_view(&fx, Mount::UserNs);
    // A directory made over a deleted one is opaque in the user.* form,
    // and the fork keeps it so.
    let up = fx.ws.layer("agent").unwrap().upper;
    fx.ws.fork("agent", "fork").unwrap();
    let forked = fx.ws.layer("fork").unwrap().upper;
    for upper in [&up, &forked] {
        assert_eq!(
            get_xattr(&upper.join("keep"), "user.overlay.opaque").as_deref(),
            Some(&b"y"[..])
        );
        assert_eq!(
            get_xattr(&upper.join("keep"), "trusted.overlay.opaque"),
            None
        );
    }
    // The fork mounts and shows the same tree as the source.
    let list = "find . -printf '%p %y %m\\n' | sort; cat a.txt";
    let a = in_view(
        &fx.ws,
        "agent",
        &fx.dir.path().join("m1"),
        Mount::UserNs,
        list,
    );
    let b = in_view(
        &fx.ws,
        "fork",
        &fx.dir.path().join("m2"),
        Mount::UserNs,
        list,
    );
    assert_eq!(a, b);
    assert!(
        a.contains("./dir2/sub/y.txt f 644") && a.contains("line three"),
        "{a}"
    );
    assert!(a.contains("./keep/n.txt f") && !a.contains("k.txt"), "{a}");
}

/// An unprivileged user mounts its view in its own user namespace, and
/// the library itself runs as that user (a thread whose credentials are
/// dropped: Linux keeps credentials per thread), so no capability covers
/// for a mode-000 `work/work` or an unreadable `trusted.*` attribute.
#[test]
fn a_real_view_of_an_unprivileged_user_with_the_library_unprivileged_too() {
    assert_root();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let base = dir.path().join("base");
    make_base(&base);
    run(Command::new("chown")
        .arg("-R")
        .arg(format!("{NOBODY}:{NOBODY}"))
        .arg(&base));
    let cow = dir.path().join("cow");
    std::fs::create_dir(&cow).unwrap();
    std::os::unix::fs::chown(&cow, Some(NOBODY), Some(NOBODY)).unwrap();
    let play = dir.path().join("play");
    std::fs::create_dir(&play).unwrap();
    std::os::unix::fs::chown(&play, Some(NOBODY), Some(NOBODY)).unwrap();

    let result = std::thread::spawn(move || {
        // SAFETY: raw syscalls change only this thread's credentials
        // (glibc's wrappers would change every thread's).
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()),
                0
            );
            assert_eq!(
                libc::syscall(libc::SYS_setresgid, NOBODY, NOBODY, NOBODY),
                0
            );
            assert_eq!(
                libc::syscall(libc::SYS_setresuid, NOBODY, NOBODY, NOBODY),
                0
            );
        }
        let ws = Workspace::new(&base, &cow).unwrap();
        let fx = Fixture {
            dir: tempfile::Builder::new().tempdir_in(&play).unwrap(),
            ws,
        };
        agent_in_real_view(&fx, Mount::UserNs);
        let work = fx.ws.layer("agent").unwrap().work;
        let md = std::fs::metadata(work.join("work")).unwrap();
        assert_eq!(md.mode() & 0o777, 0, "the kernel's work/work is mode 000");
        fx.ws.fork("agent", "second").unwrap();
        let snap = fx.ws.snapshot("agent").unwrap();
        fx.ws.reset("agent").unwrap();
        assert!(fx.ws.changes("agent").unwrap().is_empty());
        fx.ws.restore("agent", &snap).unwrap();
        assert_eq!(
            sorted(kinds(&fx.ws.changes("agent").unwrap())),
            agent_changes()
        );
        assert_eq!(
            fx.ws.changes("second").unwrap(),
            fx.ws.changes("agent").unwrap()
        );
        fx.ws.remove("second").unwrap();
        fx.ws.remove("agent").unwrap();
        fx.ws.delete_snapshot(&snap).unwrap();
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() }
    })
    .join();
    assert_eq!(result.unwrap(), NOBODY);
}
