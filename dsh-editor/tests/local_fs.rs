//! What only the real filesystem can show: permissions, links, atomicity,
//! concurrent writers, crashes, and big files and trees.
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use dsh_editor::fs::{DirEntry, Fs, FsError, LocalFs, MemFs, Metadata, Version};
// `BlockingFs` is named by its path, not imported: its methods have
// `Fs`'s names, and `LocalFs` has both.
use dsh_editor::{Editor, VIEW_CLIP_NOTE as CLIP_NOTE};
use serde_json::json;

fn tempdir() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root.to_str().unwrap().to_owned())
}

fn names_in(dir: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn edits_keep_mode_bits_and_leave_no_temp_files() {
    let (_d, root) = tempdir();
    let editor = Editor::new(LocalFs::new());
    for mode in [0o755, 0o640, 0o600] {
        let p = format!("{root}/script-{mode:o}.sh");
        std::fs::write(&p, "#!/bin/sh\necho old\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        editor
            .execute(
                &json!({"command": "str_replace", "path": p, "old_str": "old", "new_str": "new"}),
            )
            .await
            .unwrap();
        editor
            .execute(
                &json!({"command": "insert", "path": p, "insert_line": 1, "new_str": "set -e"}),
            )
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "#!/bin/sh\nset -e\necho new\n"
        );
        let got = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(got, mode, "{p}");
    }
    assert_eq!(
        names_in(&root),
        ["script-600.sh", "script-640.sh", "script-755.sh"]
    );
}

#[tokio::test]
async fn created_files_get_the_usual_mode() {
    let (_d, root) = tempdir();
    let editor = Editor::new(LocalFs::new());
    let p = format!("{root}/a/b/new.txt");
    editor
        .execute(&json!({"command": "create", "path": p, "file_text": "x"}))
        .await
        .unwrap();
    let umask = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .map(|v| u32::from_str_radix(v.trim(), 8).unwrap())
        })
        .unwrap_or(0o022);
    let got = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(got, 0o666 & !umask);
}

#[tokio::test]
async fn symlinks_are_written_through_and_stay_links() {
    let (_d, root) = tempdir();
    std::fs::create_dir(format!("{root}/real")).unwrap();
    let target = format!("{root}/real/config.toml");
    std::fs::write(&target, "key = 1\n").unwrap();
    let link = format!("{root}/config.toml");
    std::os::unix::fs::symlink("real/config.toml", &link).unwrap();

    let editor = Editor::new(LocalFs::new());
    editor
        .execute(&json!({"command": "str_replace", "path": link, "old_str": "1", "new_str": "2"}))
        .await
        .unwrap();
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("real/config.toml")
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "key = 2\n");
    assert_eq!(names_in(&format!("{root}/real")), ["config.toml"]);

    // `create` never replaces a link, dangling or not.
    let dangling = format!("{root}/dangling");
    std::os::unix::fs::symlink("nowhere", &dangling).unwrap();
    let err = editor
        .execute(&json!({"command": "create", "path": dangling, "file_text": "x"}))
        .await
        .unwrap_err();
    assert_eq!(
        dsh_editor::contract::render_error(&err),
        format!(
            "File already exists at: {dangling}. Cannot overwrite files using command `create`."
        )
    );
    assert!(
        std::fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[tokio::test]
async fn replace_refuses_a_stale_version() {
    let (_d, root) = tempdir();
    let fs = LocalFs::new();
    let p = format!("{root}/f.txt");
    let path = Path::new(&p);
    std::fs::write(path, "v1\n").unwrap();
    let (_, version) = fs.read(path, u64::MAX).await.unwrap();
    // Someone else writes, same size, via rename (new inode).
    let other = format!("{root}/other");
    std::fs::write(&other, "v2\n").unwrap();
    std::fs::rename(&other, path).unwrap();
    let err = fs
        .replace(path, b"v3\n".to_vec(), &version)
        .await
        .unwrap_err();
    assert!(matches!(err, FsError::Changed(_)), "{err:?}");
    assert_eq!(std::fs::read_to_string(path).unwrap(), "v2\n");

    // In-place write with another size.
    let (_, version) = fs.read(path, u64::MAX).await.unwrap();
    std::fs::write(path, "v2 longer\n").unwrap();
    assert!(matches!(
        fs.replace(path, b"v3\n".to_vec(), &version).await,
        Err(FsError::Changed(_))
    ));
    assert_eq!(std::fs::read_to_string(path).unwrap(), "v2 longer\n");
}

/// What [`Observed`] runs after each operation: its name and path.
type Hook = Box<dyn Fn(&'static str, &Path) + Send + Sync>;

/// `LocalFs` with a hook run after each operation, and a choice of whether
/// it hands out its blocking calls (`Fs::blocking`).
struct Observed {
    local: LocalFs,
    blocking: bool,
    /// What `reads_quickly` answers.
    quick: bool,
    after: Hook,
    /// How many operations were blocking calls.
    blocking_ops: AtomicUsize,
}

impl Observed {
    fn new(blocking: bool, after: impl Fn(&'static str, &Path) + Send + Sync + 'static) -> Self {
        Observed {
            local: LocalFs::new(),
            blocking,
            quick: false,
            after: Box::new(after),
            blocking_ops: AtomicUsize::new(0),
        }
    }

    /// Runs the hook after a blocking call.
    fn blocking_op<T>(&self, op: &'static str, path: &Path, out: T) -> T {
        self.blocking_ops.fetch_add(1, Ordering::SeqCst);
        (self.after)(op, path);
        out
    }
}

#[async_trait]
impl Fs for Observed {
    async fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        let out = Fs::stat(&self.local, path).await;
        (self.after)("stat", path);
        out
    }
    async fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        let out = Fs::read(&self.local, path, limit).await;
        (self.after)("read", path);
        out
    }
    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        let out = Fs::read_dir(&self.local, path).await;
        (self.after)("read_dir", path);
        out
    }
    async fn create_new(&self, path: &Path, data: Vec<u8>) -> Result<(), FsError> {
        let out = Fs::create_new(&self.local, path, data).await;
        (self.after)("create_new", path);
        out
    }
    async fn replace(
        &self,
        path: &Path,
        data: Vec<u8>,
        expected: &Version,
    ) -> Result<Version, FsError> {
        let out = Fs::replace(&self.local, path, data, expected).await;
        (self.after)("replace", path);
        out
    }
    fn blocking(&self) -> Option<&dyn dsh_editor::fs::BlockingFs> {
        self.blocking
            .then_some(self as &dyn dsh_editor::fs::BlockingFs)
    }
}

impl dsh_editor::fs::BlockingFs for Observed {
    fn reads_quickly(&self) -> bool {
        self.quick
    }
    fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        self.blocking_op(
            "stat",
            path,
            dsh_editor::fs::BlockingFs::stat(&self.local, path),
        )
    }
    fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        self.blocking_op(
            "read",
            path,
            dsh_editor::fs::BlockingFs::read(&self.local, path, limit),
        )
    }
    /// Runs the hook for each block (`"block"`), then once more.
    fn read_blocks(
        &self,
        path: &Path,
        limit: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<Version, FsError> {
        let mut counted = |block: &[u8]| {
            (self.after)("block", path);
            each(block);
        };
        let out = self.local.read_blocks(path, limit, &mut counted);
        self.blocking_op("read_blocks", path, out)
    }
    fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        self.blocking_op(
            "read_dir",
            path,
            dsh_editor::fs::BlockingFs::read_dir(&self.local, path),
        )
    }
    fn create_new(&self, path: &Path, data: &[u8]) -> Result<(), FsError> {
        let out = dsh_editor::fs::BlockingFs::create_new(&self.local, path, data);
        self.blocking_op("create_new", path, out)
    }
    fn replace(&self, path: &Path, data: &[u8], expected: &Version) -> Result<Version, FsError> {
        let out = dsh_editor::fs::BlockingFs::replace(&self.local, path, data, expected);
        self.blocking_op("replace", path, out)
    }
}

/// A filesystem on which another writer changes the file right after every read.
fn interfering() -> Observed {
    Observed::new(false, |op, path| {
        if op == "read" {
            let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
            std::io::Write::write_all(&mut f, b"appended by someone else\n").unwrap();
        }
    })
}

#[tokio::test]
async fn an_edit_never_overwrites_a_change_it_did_not_see() {
    let (_d, root) = tempdir();
    let p = format!("{root}/shared.txt");
    std::fs::write(&p, "mine\n").unwrap();
    let editor = Editor::new(interfering());
    let err = editor
        .execute(
            &json!({"command": "str_replace", "path": p, "old_str": "mine", "new_str": "ours"}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        dsh_editor::contract::render_error(&err),
        format!(
            "No edit was made: the file {p} was changed by someone else after it was read. View it again and retry the edit."
        )
    );
    assert_eq!(
        std::fs::read_to_string(&p).unwrap(),
        "mine\nappended by someone else\n"
    );
}

/// In the child that `a_crash_mid_write_leaves_the_original_intact` starts
/// (this test binary, that test, `DSH_CRASH_TARGET` set): replaces the file
/// with 8 MiB while the file-size limit is 1 MiB, so the kernel kills the
/// process (SIGXFSZ) in the middle of the write.
fn crash_mid_write(target: &str) -> ! {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let fs = LocalFs::new();
        let path = Path::new(target);
        let (_, version) = fs.read(path, u64::MAX).await.unwrap();
        let _ = fs.replace(path, vec![b'x'; 8 << 20], &version).await;
    });
    // Reaching this line means the kernel did not stop the write.
    std::process::exit(3);
}

#[test]
fn a_crash_mid_write_leaves_the_original_intact() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    if let Ok(target) = std::env::var("DSH_CRASH_TARGET") {
        crash_mid_write(&target);
    }
    let (_d, root) = tempdir();
    let p = format!("{root}/precious.txt");
    let original = "precious content\n".repeat(1000);
    std::fs::write(&p, &original).unwrap();

    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "a_crash_mid_write_leaves_the_original_intact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("DSH_CRASH_TARGET", &p);
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1 << 20,
                rlim_max: 1 << 20,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGXFSZ),
        "the child should die mid-write: {out:?}"
    );
    assert_eq!(std::fs::read_to_string(&p).unwrap(), original);
    // The half-written temporary file is the only trace, beside the original.
    let names = names_in(&root);
    assert!(names.contains(&"precious.txt".to_owned()));
    assert!(
        names
            .iter()
            .all(|n| n == "precious.txt" || n.starts_with(".precious.txt.dsh-")),
        "{names:?}"
    );
}

#[tokio::test]
async fn a_50_mb_file_is_edited_in_the_middle() {
    let (_d, root) = tempdir();
    let p = format!("{root}/big.log");
    let line = "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ\t\n";
    let n = 50_000_000 / line.len();
    let mut text = line.repeat(n);
    let mid = (n / 2) * line.len();
    text.replace_range(mid..mid + line.len(), "THE MIDDLE LINE\n");
    std::fs::write(&p, &text).unwrap();

    let editor = Editor::new(LocalFs::new());
    editor
        .execute(&json!({"command": "str_replace", "path": p, "old_str": "THE MIDDLE LINE", "new_str": "edited"}))
        .await
        .unwrap();
    let after = std::fs::read(&p).unwrap();
    let want = text.replacen("THE MIDDLE LINE", "edited", 1);
    assert!(after == want.as_bytes(), "content differs");

    let view = editor
        .execute(&json!({"command": "view", "path": p, "view_range": [n as i64 / 2 + 1, n as i64 / 2 + 1]}))
        .await
        .unwrap();
    assert!(
        view.ends_with(&format!("{:>6}  edited\n", n / 2 + 1)),
        "{view}"
    );
}

#[tokio::test]
async fn a_directory_of_100_000_entries_is_listed_within_the_bound() {
    let (_d, root) = tempdir();
    let big = format!("{root}/big");
    std::fs::create_dir(&big).unwrap();
    for i in 0..100_000 {
        std::fs::File::create(format!("{big}/file-{i:06}")).unwrap();
    }
    let editor = Editor::new(LocalFs::new());
    let out = editor
        .execute(&json!({"command": "view", "path": big}))
        .await
        .unwrap();
    assert!(out.ends_with(CLIP_NOTE));
    assert_eq!(out.chars().count(), 16_000 + CLIP_NOTE.chars().count());
    assert!(out.contains(&format!("\nf\t{big}/file-000000\n")));
}

/// Counts `read_dir` calls.
struct Counting {
    inner: MemFs,
    dirs_read: AtomicUsize,
}

#[async_trait]
impl Fs for Counting {
    async fn stat(&self, path: &Path) -> Result<Metadata, FsError> {
        self.inner.stat(path).await
    }
    async fn read(&self, path: &Path, limit: u64) -> Result<(Vec<u8>, Version), FsError> {
        self.inner.read(path, limit).await
    }
    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>, FsError> {
        self.dirs_read.fetch_add(1, Ordering::Relaxed);
        self.inner.read_dir(path).await
    }
    async fn create_new(&self, path: &Path, data: Vec<u8>) -> Result<(), FsError> {
        self.inner.create_new(path, data).await
    }
    async fn replace(
        &self,
        path: &Path,
        data: Vec<u8>,
        expected: &Version,
    ) -> Result<Version, FsError> {
        self.inner.replace(path, data, expected).await
    }
}

#[tokio::test]
async fn listing_reads_only_the_directories_it_shows() {
    let fs = Arc::new(Counting {
        inner: MemFs::new(),
        dirs_read: AtomicUsize::new(0),
    });
    for d in 0..2_000 {
        fs.inner.put(Path::new(&format!("/t/dir-{d:04}/a.txt")), "");
    }
    let editor = Editor::new(Arc::clone(&fs));
    let out = editor
        .execute(&json!({"command": "view", "path": "/t"}))
        .await
        .unwrap();
    assert!(out.ends_with(CLIP_NOTE));
    let shown = out.matches("\nd\t/t/dir-").count();
    let read = fs.dirs_read.load(Ordering::Relaxed);
    // The root, plus each shown directory (and at most the one being read when
    // the bound was reached).
    assert!(read <= shown + 2, "read {read} directories, showed {shown}");
    assert!(read < 2_000 / 4, "read {read} directories");
}

#[tokio::test]
async fn reads_are_bounded_by_the_limit_given() {
    let (_dir, root) = tempdir();
    let path = format!("{root}/four");
    std::fs::write(&path, "abcd").unwrap();
    let mem = MemFs::new();
    mem.create_new(Path::new("/four"), b"abcd".to_vec())
        .await
        .unwrap();
    for (fs, path) in [
        (&LocalFs::new() as &dyn Fs, path.as_str()),
        (&mem as &dyn Fs, "/four"),
    ] {
        assert!(
            matches!(
                fs.read(Path::new(path), 3).await,
                Err(FsError::TooLarge {
                    len: 4,
                    limit: 3,
                    ..
                })
            ),
            "{path}"
        );
        assert_eq!(fs.read(Path::new(path), 4).await.unwrap().0, b"abcd");
    }
    // The same bound on a read in blocks (of the filesystems that have them).
    assert!(mem.blocking().is_none());
    let local = LocalFs::new();
    let blocks = Fs::blocking(&local).unwrap();
    let mut seen = Vec::new();
    let mut keep = |block: &[u8]| seen.extend_from_slice(block);
    assert!(
        matches!(
            blocks.read_blocks(Path::new(&path), 3, &mut keep),
            Err(FsError::TooLarge {
                len: 4,
                limit: 3,
                ..
            })
        ),
        "{path}"
    );
    blocks.read_blocks(Path::new(&path), 4, &mut keep).unwrap();
    assert_eq!(seen, b"abcd");
    // The editor passes its bound down: the error names the size.
    let editor = Editor::with_config(
        LocalFs::new(),
        dsh_editor::EditorConfig::default().max_file_bytes(3),
    )
    .unwrap();
    let err = editor
        .execute(&json!({"command": "view", "path": path}))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            dsh_editor::EditorError::TooLarge { len: 4, max: 3, .. }
        ),
        "{err}"
    );
}

/// A view of a file of many 64 KiB blocks shows what decoding the whole file
/// shows: UTF-8 with characters cut by the block ends, `\r\n` throughout, a
/// byte-order mark, windows-1252 (decoded whole), and a NUL past the first
/// block (binary).
#[tokio::test]
async fn views_of_long_files_show_the_lines_asked_for() {
    use std::sync::Mutex;
    let (_dir, root) = tempdir();
    let ops: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let record = Arc::clone(&ops);
    let editor = Editor::new(Observed::new(true, move |op, _| {
        record.lock().unwrap().push(op)
    }));
    let n = 40_000usize;
    let line = |i: usize| {
        if i <= n {
            format!("line {i} é€😀")
        } else {
            String::new()
        }
    };
    let utf8: String = (1..=n).map(|i| line(i) + "\n").collect();
    let cases: [(&str, Vec<u8>); 4] = [
        ("utf8", utf8.clone().into_bytes()),
        ("crlf", utf8.replace('\n', "\r\n").into_bytes()),
        ("bom", [&b"\xEF\xBB\xBF"[..], utf8.as_bytes()].concat()),
        (
            "cp1252",
            utf8.replace("é€😀", "é€")
                .chars()
                .map(|c| match c {
                    'é' => 0xE9,
                    '€' => 0x80,
                    c => c as u8,
                })
                .collect(),
        ),
    ];
    for (name, bytes) in cases {
        assert!(bytes.len() > 8 * 64 * 1024, "{name}: {}", bytes.len());
        let path = format!("{root}/{name}.txt");
        std::fs::write(&path, &bytes).unwrap();
        // A file that is not UTF-8 says which encoding it was read in.
        let read_as = if name == "cp1252" {
            ", read as windows-1252"
        } else {
            ""
        };
        let shown = |i: usize| {
            let l = line(i);
            if name == "cp1252" {
                l.replace("é€😀", "é€")
            } else {
                l
            }
        };
        for (a, b) in [(n as i64 - 2, -1), (1, 3), (n as i64 / 2, n as i64 / 2 + 1)] {
            let out = editor
                .execute(&json!({"command": "view", "path": path, "view_range": [a, b]}))
                .await
                .unwrap();
            let last = if b == -1 { n + 1 } else { b as usize };
            let mut want = format!(
                "Here's the content of {path} with line numbers (which has a total of {} lines{read_as}) with view_range=[{a}, {b}]:\n",
                n + 1
            );
            for i in a as usize..=last {
                want += &format!("{i:>6}  {}\n", shown(i));
            }
            assert_eq!(out, want, "{name} [{a}, {b}]");
            // Read once, in blocks; only a file that is not UTF-8 again whole.
            let ops = std::mem::take(&mut *ops.lock().unwrap());
            let count = |op| ops.iter().filter(|&&o| o == op).count();
            assert!(count("block") >= 8, "{name}: {ops:?}");
            assert_eq!(count("read_blocks"), 1, "{name}: {ops:?}");
            assert_eq!(
                count("read"),
                usize::from(name == "cp1252"),
                "{name}: {ops:?}"
            );
        }
        // The whole file: the first 16,000 characters (the default
        // `max_output_chars`), then the note; only about that much is kept.
        let whole = editor
            .execute(&json!({"command": "view", "path": path}))
            .await
            .unwrap();
        let mut full = format!(
            "Here's the content of {path} with line numbers (which has a total of {} lines{read_as}):\n",
            n + 1
        );
        for i in 1..=n + 1 {
            full += &format!("{i:>6}  {}\n", shown(i));
        }
        let shown_part: String = full.chars().take(16_000).collect();
        assert_eq!(whole, shown_part + dsh_editor::VIEW_CLIP_NOTE, "{name}");
        ops.lock().unwrap().clear();
    }
    let mut binary = utf8.into_bytes();
    binary[200_000] = 0;
    let path = format!("{root}/binary.txt");
    std::fs::write(&path, &binary).unwrap();
    let err = editor
        .execute(&json!({"command": "view", "path": path, "view_range": [n as i64, -1]}))
        .await
        .unwrap_err();
    assert!(matches!(err, dsh_editor::EditorError::Binary(_)), "{err}");
}

/// Over a filesystem of blocking calls, a whole tool call is one job on the
/// blocking pool: every operation is a blocking call on the same thread.
#[tokio::test(flavor = "current_thread")]
async fn a_call_over_local_files_is_one_blocking_hop() {
    use std::sync::Mutex;
    use std::thread::ThreadId;
    let seen: Arc<Mutex<Vec<ThreadId>>> = Arc::default();
    let record = Arc::clone(&seen);
    let fs = Observed::new(true, move |_, _| {
        record.lock().unwrap().push(std::thread::current().id());
    });
    let (_dir, root) = tempdir();
    let path = format!("{root}/a.txt");
    std::fs::write(&path, "one\ntwo\n").unwrap();
    let editor = Editor::new(fs);
    let runtime_thread = std::thread::current().id();
    editor
        .execute(&json!({"command": "str_replace", "path": path, "old_str": "two", "new_str": "2"}))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\n2\n");
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(seen.len(), 3, "stat, read, replace: {seen:?}");
    assert_eq!(editor.fs().blocking_ops.load(Ordering::SeqCst), 3);
    assert!(seen.iter().all(|&thread| thread == seen[0]));
    assert_ne!(seen[0], runtime_thread);
}

/// Over a filesystem that reads quickly, a view of a small file runs on the
/// calling thread; a larger file, a directory and every edit still hop to
/// the blocking pool.
#[tokio::test]
async fn only_small_views_of_quick_files_stay_on_the_calling_thread() {
    use std::sync::Mutex;
    use std::thread::ThreadId;
    let seen: Arc<Mutex<Vec<ThreadId>>> = Arc::default();
    let record = Arc::clone(&seen);
    let mut fs = Observed::new(true, move |_, _| {
        record.lock().unwrap().push(std::thread::current().id());
    });
    fs.quick = true;
    let editor = Editor::new(fs);
    let (_dir, root) = tempdir();
    let small = format!("{root}/small.txt");
    std::fs::write(&small, "one\ntwo\n").unwrap();
    let large = format!("{root}/large.txt");
    let limit = dsh_editor::fs::QUICK_READ_BYTES as usize;
    std::fs::write(&large, "x\n".repeat(limit / 2 + 1)).unwrap();
    let here = std::thread::current().id();
    let threads_of = async |args: serde_json::Value| {
        editor.execute(&args).await.unwrap();
        std::mem::take(&mut *seen.lock().unwrap())
    };
    let ops = threads_of(json!({"command": "view", "path": small})).await;
    assert!(!ops.is_empty() && ops.iter().all(|&t| t == here), "{ops:?}");
    // A view's deciding stat is made here; the call itself hops.
    for args in [
        json!({"command": "view", "path": large}),
        json!({"command": "view", "path": root}),
    ] {
        let ops = threads_of(args.clone()).await;
        assert_eq!(ops.first(), Some(&here), "{args}: {ops:?}");
        assert!(
            ops.len() > 1 && ops[1..].iter().all(|&t| t != here),
            "{args}: {ops:?}"
        );
    }
    let edit = json!({"command": "str_replace", "path": small, "old_str": "two", "new_str": "2"});
    let ops = threads_of(edit).await;
    assert!(!ops.is_empty() && ops.iter().all(|&t| t != here), "{ops:?}");
}

#[tokio::test]
async fn same_size_edits_get_a_later_second() {
    let bed = dsh_testbeds::Testbed::local();
    dsh_testbeds::same_size_edits_get_a_later_second(&bed).await;
}

#[tokio::test]
async fn an_edit_of_another_size_does_not_wait() {
    // A size change tells a cache keyed on seconds and size apart already:
    // ten quick edits that grow the file take no second each.
    let (_dir, root) = tempdir();
    let path = format!("{root}/grow.txt");
    let fs = LocalFs::new();
    Fs::create_new(&fs, Path::new(&path), b"x".to_vec())
        .await
        .unwrap();
    let started = std::time::Instant::now();
    for i in 2..12 {
        let (_, version) = Fs::read(&fs, Path::new(&path), 1 << 20).await.unwrap();
        Fs::replace(&fs, Path::new(&path), vec![b'x'; i], &version)
            .await
            .unwrap();
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
