//! Copy-on-write workspaces: every owner sees the base at its own path as
//! a view of its own, through real overlay mounts in real namespaces; the
//! base, the other owners and the layers stay out of reach of what one
//! owner's shell does; fork, snapshot, restore, reset, changes and diff.
//! The escape checks run as root and, through a copy of this binary, as an
//! unprivileged user.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_editor::Editor;
use dsh_sandbox::dsh_workspace::{ChangeKind, Workspace};
use dsh_sandbox::{SandboxConfig, SandboxMode, SandboxPolicy, SandboxedShell};
use dsh_shell_persistent::ShellConfig;
use serde_json::json;

const UNPRIVILEGED: u32 = 65534;

/// A base directory with a few kinds of entries, the layers' directory
/// beside it, and the tool over them (danger-full-access).
struct Lab {
    _dir: tempfile::TempDir,
    base: PathBuf,
    cow: PathBuf,
    tool: SandboxedShell,
}

fn lab() -> Lab {
    lab_in(SandboxMode::DangerFullAccess)
}

/// [`lab`] with its owners in `mode`.
fn lab_in(mode: SandboxMode) -> Lab {
    // Under /var/tmp, where a restricted mode's shell sees it (not under
    // its private /tmp); unprivileged, in a directory that user owns.
    let parent =
        std::env::var_os("DSH_COW_LAB").map_or_else(|| PathBuf::from("/var/tmp"), PathBuf::from);
    let dir = tempfile::tempdir_in(parent).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap().join("base");
    let cow = std::fs::canonicalize(dir.path()).unwrap().join("cow");
    std::fs::create_dir_all(base.join("sub")).unwrap();
    std::fs::create_dir_all(base.join("dir/deep")).unwrap();
    std::fs::write(base.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(base.join("sub/b.txt"), "beta\n").unwrap();
    std::fs::write(base.join("dir/deep/c.txt"), "gamma\n").unwrap();
    std::fs::write(base.join("bin.dat"), [0u8, 1, 2, 255, 0, 7]).unwrap();
    std::fs::write(base.join("run.sh"), "#!/bin/sh\necho run\n").unwrap();
    std::fs::set_permissions(base.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("a.txt", base.join("link")).unwrap();
    // Beside the base: a file no owner may write, and one hidden from it.
    let top = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(top.join("outside.txt"), "outside\n").unwrap();
    std::fs::write(top.join("secret.txt"), "TOP-SECRET\n").unwrap();
    let workspace = Workspace::new(&base, &cow).unwrap();
    let mut hidden = SandboxPolicy::default_hidden_paths();
    hidden.push(top.join("secret.txt"));
    let policy = SandboxPolicy::default().mode(mode).hidden_paths(hidden);
    let config = SandboxConfig::new(policy, ShellConfig::new(&base))
        .copy_on_write(Some(Arc::new(workspace)));
    Lab {
        _dir: dir,
        base,
        cow,
        tool: SandboxedShell::new(config).unwrap(),
    }
}

/// Everything of a tree a change could touch: per path (not following
/// links), the type and mode, owner, size, modification time, content or
/// link target, and extended attributes.
fn fingerprint(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        // The overlay's work directory is mode 000: its name is enough.
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let body = if meta.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_file() {
                format!("{:?}", std::fs::read(&path).unwrap())
            } else {
                stack.push(path.clone());
                String::new()
            };
            let xattrs = xattr_names(&path);
            out.insert(
                path.strip_prefix(root).unwrap().to_owned(),
                format!(
                    "{:o} {}:{} {} {}.{} {body} {xattrs}",
                    meta.mode(),
                    meta.uid(),
                    meta.gid(),
                    meta.len(),
                    meta.mtime(),
                    meta.mtime_nsec()
                ),
            );
        }
    }
    out
}

fn xattr_names(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` has room for its length; the path is NUL-terminated.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return String::new();
    }
    String::from_utf8_lossy(&buf[..n as usize]).into_owned()
}

async fn run(tool: &SandboxedShell, owner: &str, command: &str) -> String {
    tool.execute(owner, &json!({ "command": command }))
        .await
        .unwrap_or_else(|e| panic!("{command}: {e}"))
}

/// Runs `test` (exactly) in a copy of this binary as [`UNPRIVILEGED`], in
/// a directory that user owns under `/var/tmp`, and asserts it passed.
fn as_unprivileged(test: &str) {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::Builder::new()
        .prefix("dsh-cow-user-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let lab = dir.path().join("lab");
    std::fs::create_dir(&lab).unwrap();
    std::os::unix::fs::chown(&lab, Some(UNPRIVILEGED), Some(UNPRIVILEGED)).unwrap();
    let copy = dir.path().join("copy_on_write");
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    let mut command = std::process::Command::new(&copy);
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("DSH_COW_LAB", &lab)
        .env("HOME", &lab)
        .current_dir(&lab)
        .uid(UNPRIVILEGED)
        .gid(UNPRIVILEGED);
    let out = output(&mut command);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} as uid {UNPRIVILEGED} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `command` (a fresh copy of this binary): `ETXTBSY` while another
/// test's fork still holds the copy's descriptor (until it `exec`s) is
/// tried again.
fn output(command: &mut std::process::Command) -> std::process::Output {
    for _ in 0..100 {
        match command.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other.unwrap(),
        }
    }
    panic!("the copy of the test binary stayed busy")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

async fn two_owners_see_their_own_views() {
    let lab = lab();
    two_owners_see_their_own_views_in(&lab, None).await;
    lab.tool.close_all().await;
}

/// Owner a changes its view of `lab`'s base (in the lab's mode), owner b
/// (in `b_mode`, if given) sees the base: each change stays in a's view.
async fn two_owners_see_their_own_views_in(lab: &Lab, b_mode: Option<SandboxMode>) {
    if let Some(mode) = b_mode {
        lab.tool.set_mode("b", mode).await.unwrap();
    }
    let before = fingerprint(&lab.base);
    let tool = &lab.tool;
    let out = run(
        tool,
        "a",
        "echo changed > a.txt && rm sub/b.txt && mv dir moved && ln a.txt hard && \
         mkdir new && echo n > new/f && chmod 600 run.sh && ln -s /etc/passwd pw && \
         printf '\\000\\001x' > bin.dat && echo done",
    )
    .await;
    assert!(out.contains("done"), "{out}");
    // The editor writes in the owner's view too.
    let editor = Editor::new(tool.editor_fs("a"));
    let made = lab.base.join("made.txt");
    tool.in_view("a", async {
        editor
            .execute(&json!({"command": "create", "path": made, "file_text": "by the editor\n"}))
            .await
            .unwrap();
        let view = editor
            .execute(&json!({"command": "view", "path": lab.base.join("a.txt")}))
            .await
            .unwrap();
        assert!(view.contains("changed"), "{view}");
    })
    .await
    .unwrap();
    let seen_by_a = run(tool, "a", "cat made.txt a.txt; ls").await;
    assert!(seen_by_a.contains("by the editor") && seen_by_a.contains("changed"));
    assert!(
        seen_by_a.contains("moved") && !seen_by_a.contains("dir\n"),
        "{seen_by_a}"
    );
    // Owner b sees the base as it was.
    let seen_by_b = run(
        tool,
        "b",
        "cat a.txt sub/b.txt dir/deep/c.txt; ls; test -e made.txt || echo no-made",
    )
    .await;
    assert!(
        seen_by_b.contains("alpha") && seen_by_b.contains("beta") && seen_by_b.contains("gamma"),
        "{seen_by_b}"
    );
    assert!(
        seen_by_b.contains("no-made") && !seen_by_b.contains("moved"),
        "{seen_by_b}"
    );
    // b's editor reads b's view.
    let editor_b = Editor::new(tool.editor_fs("b"));
    let read = tool
        .in_view("b", async {
            editor_b
                .execute(&json!({"command": "view", "path": lab.base.join("a.txt")}))
                .await
                .unwrap()
        })
        .await
        .unwrap();
    assert!(read.contains("alpha"), "{read}");
    // The host's base is byte for byte, mode and time what it was.
    assert_eq!(fingerprint(&lab.base), before);
    // What a changed, as the layer says.
    let changes = tool.changes("a").await.unwrap();
    let kind = |p: &str| {
        changes
            .iter()
            .find(|c| c.path == Path::new(p))
            .map(|c| c.kind)
    };
    assert_eq!(kind("a.txt"), Some(ChangeKind::Modified), "{changes:?}");
    assert_eq!(kind("sub/b.txt"), Some(ChangeKind::Deleted), "{changes:?}");
    assert_eq!(
        kind("dir/deep/c.txt"),
        Some(ChangeKind::Deleted),
        "{changes:?}"
    );
    assert_eq!(
        kind("moved/deep/c.txt"),
        Some(ChangeKind::Added),
        "{changes:?}"
    );
    assert_eq!(kind("made.txt"), Some(ChangeKind::Added), "{changes:?}");
    assert_eq!(kind("pw"), Some(ChangeKind::Added), "{changes:?}");
    assert!(tool.changes("b").await.unwrap().is_empty());
    // The diff names the link, never the file it points to.
    let diff = tool.diff("a").await.unwrap();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let first_line = passwd.lines().next().unwrap();
    assert!(diff.contains("+/etc/passwd"), "{diff}");
    assert!(!diff.contains(first_line), "{diff}");
}

/// Two owners on one base in the restricted modes (a in workspace-write,
/// b in read-only): a's changes stay in its view, and the sandbox's walls
/// hold in both views (nothing written outside the workspace, nothing in
/// read-only, hidden paths and the layers hidden, processes apart).
async fn restricted_owners() {
    let lab = lab_in(SandboxMode::WorkspaceWrite);
    let top = lab.base.parent().unwrap().to_owned();
    let tool = &lab.tool;
    let outside = fingerprint(&top);
    two_owners_see_their_own_views_in(&lab, Some(SandboxMode::ReadOnly)).await;
    let walls = format!(
        "echo x > {top}/outside.txt; echo x > {top}/new.txt; cat {top}/secret.txt; ls -A {cow}; \
         (exec -a dsh-cow-ro-marker sleep 600 &); echo walls-done",
        top = top.display(),
        cow = lab.cow.display()
    );
    let a = run(tool, "a", &walls).await;
    assert!(a.contains("walls-done"), "{a}");
    assert!(!a.contains("TOP-SECRET") && !a.contains("layers"), "{a}");
    assert_eq!(a.matches("Read-only file system").count(), 2, "{a}");
    let b = run(
        tool,
        "b",
        "echo x > a.txt; rm -f sub/b.txt; cat secret.txt ../secret.txt; \
         pgrep -f dsh-cow-ro-marker || echo not-seen; cat a.txt sub/b.txt",
    )
    .await;
    assert!(b.contains("Read-only file system"), "{b}");
    assert!(!b.contains("TOP-SECRET") && b.contains("not-seen"), "{b}");
    assert!(b.contains("alpha") && b.contains("beta"), "{b}");
    // b's editor is refused too.
    let editor = Editor::new(tool.editor_fs("b"));
    let refused = tool
        .in_view("b", async {
            editor
                .execute(
                    &json!({"command": "create", "path": lab.base.join("e.txt"), "file_text": "e"}),
                )
                .await
        })
        .await
        .unwrap();
    assert!(refused.is_err(), "{refused:?}");
    assert!(tool.changes("b").await.unwrap().is_empty());
    tool.close_all().await;
    // Nothing beside the base changed either (the layers aside).
    let mut now = fingerprint(&top);
    let mut was = outside;
    now.retain(|p, _| !p.starts_with("cow"));
    was.retain(|p, _| !p.starts_with("cow"));
    assert_eq!(now, was);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_see_their_own_views_in_the_restricted_modes() {
    restricted_owners().await;
}

#[test]
fn owners_see_their_own_views_in_the_restricted_modes_as_an_unprivileged_user() {
    if is_root() {
        as_unprivileged("owners_see_their_own_views_in_the_restricted_modes");
    } else {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(restricted_owners());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_see_their_own_views() {
    two_owners_see_their_own_views().await;
}

#[test]
fn owners_see_their_own_views_as_an_unprivileged_user() {
    if is_root() {
        as_unprivileged("owners_see_their_own_views");
    } else {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(two_owners_see_their_own_views());
    }
}

/// The owner's shell attacks its own view: unmounting it, a nested user
/// and mount namespace, a bind mount over it, the layer paths its mount
/// table names, the layers' directory, other owners' processes.
async fn the_view_holds() {
    the_view_holds_in(SandboxMode::DangerFullAccess).await;
}

/// [`the_view_holds`] with the owners in `mode`.
async fn the_view_holds_in(mode: SandboxMode) {
    let lab = lab_in(mode);
    let tool = &lab.tool;
    // b exists first, with a change and a process of its own.
    let out = run(
        tool,
        "b",
        "echo b-was-here > b.txt; (exec -a dsh-cow-marker sleep 600 &) ; echo ok",
    )
    .await;
    assert!(out.contains("ok"), "{out}");
    // a's layer exists before the snapshot of the layers is taken; what
    // a's shell writes in its own view may change it, nothing else.
    run(tool, "a", "true").await;
    let workspace = tool.copy_on_write().unwrap();
    let own = workspace.layer("a").unwrap().upper;
    let own = own
        .parent()
        .unwrap()
        .strip_prefix(&lab.cow)
        .unwrap()
        .to_owned();
    let base_before = fingerprint(&lab.base);
    let cow_before = fingerprint(&lab.cow);
    let base = lab.base.display();
    // The attack runs only where the shell sees namespaces of its own: a
    // shell that were the host's would unmount, mount and kill there.
    let host_ns = |ns: &str| std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
    let guard = format!(
        "[ \"$(readlink /proc/self/ns/pid)\" != '{}' ] && [ \"$(readlink /proc/self/ns/mnt)\" != '{}' ] || {{ echo NOT-ISOLATED; exit 99; }}; ",
        host_ns("pid").display(),
        host_ns("mnt").display()
    );
    let attack = format!(
        "{guard}cd /; umount {base}; umount -l {base}; \
         unshare -Urm sh -c 'umount {base}; umount -l {base}; echo inner > {base}/a.txt; cat {base}/a.txt' ; \
         mount --bind /tmp {base}; \
         for up in $(grep -o 'upperdir=[^,]*' /proc/self/mountinfo | cut -d= -f2); do \
           echo evil > $up/evil.txt; ls $up; done; \
         ls -a {cow}; echo evil > {cow}/evil; \
         pkill -f dsh-cow-marker; kill -9 -1; \
         echo ATTACKED; cat {base}/a.txt",
        cow = lab.cow.display()
    );
    let out = run(tool, "a", &attack).await;
    assert!(
        out.contains("ATTACKED") && !out.contains("NOT-ISOLATED"),
        "{out}"
    );
    // What a wrote in its own view stays there; the base and every layer
    // (b's included) are what they were.
    assert_eq!(fingerprint(&lab.base), base_before, "{out}");
    let cow_after = fingerprint(&lab.cow);
    for (path, before) in cow_before.iter().filter(|(p, _)| !p.starts_with(&own)) {
        assert_eq!(
            cow_after.get(path),
            Some(before),
            "{} changed:\n{out}",
            path.display()
        );
    }
    assert!(
        cow_after
            .keys()
            .all(|p| !p.ends_with("evil.txt") && !p.ends_with("evil")),
        "{out}"
    );
    // b's process and file are untouched; b's shell still answers.
    let seen = run(
        tool,
        "b",
        "cat b.txt; pgrep -f dsh-cow-marker >/dev/null && echo alive",
    )
    .await;
    assert!(
        seen.contains("b-was-here") && seen.contains("alive"),
        "{seen}"
    );
    // Each owner has a PID namespace of its own.
    let ns = run(tool, "b", "readlink /proc/self/ns/pid").await;
    let host = std::fs::read_link("/proc/self/ns/pid").unwrap();
    assert!(!ns.contains(host.to_str().unwrap()), "{ns}");
    tool.close_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_holds_against_its_shell() {
    the_view_holds().await;
}

#[test]
fn the_view_holds_against_its_shell_as_an_unprivileged_user() {
    if is_root() {
        as_unprivileged("the_view_holds_against_its_shell");
    } else {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(the_view_holds());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_holds_against_its_shell_in_workspace_write() {
    the_view_holds_in(SandboxMode::WorkspaceWrite).await;
}

#[test]
fn the_view_holds_against_its_shell_in_workspace_write_as_an_unprivileged_user() {
    if is_root() {
        as_unprivileged("the_view_holds_against_its_shell_in_workspace_write");
    } else {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(the_view_holds_in(SandboxMode::WorkspaceWrite));
    }
}

/// The Python the pip test runs: `DSH_TEST_PYTHON`, else `/usr/bin/python3`.
fn test_python() -> PathBuf {
    std::env::var_os("DSH_TEST_PYTHON")
        .map_or_else(|| PathBuf::from("/usr/bin/python3"), PathBuf::from)
}

/// `pip install -e .` in a venv made in a workspace-write view (offline:
/// the venv sees the system's setuptools and pip): it works there, and
/// neither the host's base nor another owner sees the venv or the
/// install.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Python 3 with venv, pip, setuptools >= 64 and wheel (DSH_TEST_PYTHON or /usr/bin/python3); .ci/run runs it"]
async fn pip_install_editable_in_a_view() {
    let lab = lab_in(SandboxMode::WorkspaceWrite);
    std::fs::create_dir_all(lab.base.join("src/viewpkg")).unwrap();
    std::fs::write(
        lab.base.join("pyproject.toml"),
        "[build-system]\nrequires = [\"setuptools>=64\"]\nbuild-backend = \"setuptools.build_meta\"\n\
         [project]\nname = \"viewpkg\"\nversion = \"0.1\"\n",
    )
    .unwrap();
    std::fs::write(
        lab.base.join("src/viewpkg/__init__.py"),
        "WHERE = 'in a view'\n",
    )
    .unwrap();
    let before = fingerprint(&lab.base);
    let python = test_python();
    let out = run(
        &lab.tool,
        "a",
        &format!(
            "{py} -m venv --without-pip --system-site-packages .venv && \
             .venv/bin/python -m pip install -q --no-cache-dir --no-index --no-build-isolation -e . && \
             cd / && {base}/.venv/bin/python -c 'import viewpkg; print(viewpkg.WHERE)'",
            py = python.display(),
            base = lab.base.display()
        ),
    )
    .await;
    assert!(out.contains("in a view"), "{out}");
    let other = run(&lab.tool, "b", "test -e .venv || echo no-venv; ls src").await;
    assert!(
        other.contains("no-venv") && !other.contains("egg-info"),
        "{other}"
    );
    assert_eq!(fingerprint(&lab.base), before);
    assert!(
        lab.tool
            .changes("a")
            .await
            .unwrap()
            .iter()
            .any(|c| c.path.starts_with(".venv"))
    );
    lab.tool.close_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_snapshot_and_restore_keep_files_and_shell_state() {
    let lab = lab();
    let tool = &lab.tool;
    let setup = "mkdir -p work && cd work && export EXP='a b' && PLAIN=$'line1\\nline2' && \
        declare -a ARR=(x 'y z') && declare -A MAP=([k]=v) && declare -i NUM=41 && \
        greet() { echo \"hi $1\"; } && alias ll='echo aliased' && shopt -s nullglob && \
        set -o noclobber && umask 027 && echo forked-file > f.txt && \
        (exec -a dsh-cow-forked sleep 600 &) ; echo ready";
    assert!(run(tool, "a", setup).await.contains("ready"));
    tool.fork("a", "b").await.unwrap();
    let check = "pwd; echo \"[$EXP]\"; echo \"$PLAIN\"; echo ${ARR[1]}; echo ${MAP[k]}; \
        NUM+=1; echo $NUM; greet you; ll; shopt -q nullglob && echo nullglob; \
        [[ -o noclobber ]] && echo noclobber; umask; cat f.txt; \
        export -p | grep -c 'EXP=' ; pgrep -f dsh-cow-forked >/dev/null || echo no-process";
    let seen = run(tool, "b", check).await;
    for want in [
        "/work\n",
        "[a b]",
        "line1\nline2",
        "y z",
        "\nv\n",
        "42",
        "hi you",
        "aliased",
        "nullglob",
        "noclobber",
        "0027",
        "forked-file",
        "no-process",
    ] {
        assert!(
            seen.contains(want),
            "{want:?} missing after the fork:\n{seen}"
        );
    }
    // The two diverge.
    run(tool, "b", "echo only-b > f.txt; export EXP=b").await;
    let a = run(tool, "a", "cat f.txt; echo \"[$EXP]\"").await;
    assert!(a.contains("forked-file") && a.contains("[a b]"), "{a}");
    // A snapshot, a change, and back; into another owner too.
    let id = tool.snapshot("a").await.unwrap();
    run(tool, "a", "echo later > f.txt; export EXP=later; cd /").await;
    tool.restore("a", &id).await.unwrap();
    let back = run(tool, "a", "pwd; cat f.txt; echo \"[$EXP]\"").await;
    assert!(
        back.contains("/work\n") && back.contains("forked-file") && back.contains("[a b]"),
        "{back}"
    );
    tool.restore("c", &id).await.unwrap();
    let c = run(tool, "c", "cat f.txt; echo \"[$EXP]\"").await;
    assert!(c.contains("forked-file") && c.contains("[a b]"), "{c}");
    tool.delete_snapshot(&id).await.unwrap();
    assert!(tool.restore("a", &id).await.is_err());
    assert!(tool.delete_snapshot(&id).await.is_err());
    // Reset: the base again, a fresh shell. The old view ends in the
    // background: its processes and its layer go.
    let old = "(exec -a dsh-cow-reset-old sleep 600 &) ; echo started";
    assert!(run(tool, "b", old).await.contains("started"));
    tool.reset_workspace("b").await.unwrap();
    let fresh = run(tool, "b", "test -e work || echo no-work; echo \"[$EXP]\"").await;
    assert!(fresh.contains("no-work") && fresh.contains("[]"), "{fresh}");
    let staging = lab.cow.join("staging");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let old_alive = std::fs::read_dir("/proc").unwrap().any(|e| {
            std::fs::read(e.unwrap().path().join("cmdline"))
                .is_ok_and(|c| c.starts_with(b"dsh-cow-reset-old"))
        });
        let staged = std::fs::read_dir(&staging).unwrap().count();
        if !old_alive && staged == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "30 s after a reset: old process alive {old_alive}, {staged} staged layers left"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tool.close_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_diff_applies_to_a_copy_of_the_base() {
    let lab = lab();
    let tool = &lab.tool;
    run(
        tool,
        "a",
        "echo changed >> a.txt && rm sub/b.txt && mv dir moved && mkdir -p new && \
         printf 'x\\ny\\n' > new/f && chmod 644 run.sh && echo same > tmp && rm tmp && \
         echo alpha > a2 && ln -s sub/b.txt dangling && echo done",
    )
    .await;
    let diff = tool.diff("a").await.unwrap();
    let copy = lab._dir.path().join("copy");
    let status = std::process::Command::new("cp")
        .args(["-a"])
        .arg(&lab.base)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    let patch = lab._dir.path().join("a.diff");
    std::fs::write(&patch, &diff).unwrap();
    let out = std::process::Command::new("git")
        .args(["apply", "--unsafe-paths", "-p1"])
        .arg(&patch)
        .current_dir(&copy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git apply: {}\n{diff}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The owner's view, listed by its shell, equals the patched copy.
    let listing = "find . -path ./.git -prune -o -print0 | sort -z | \
        xargs -0 stat -c '%n %F %a' ; find . -type f -print0 | sort -z | xargs -0 sha256sum";
    let view = run(tool, "a", listing).await;
    let host = std::process::Command::new("bash")
        .args(["-c", listing])
        .current_dir(&copy)
        .output()
        .unwrap();
    let host = String::from_utf8_lossy(&host.stdout);
    for line in host.lines() {
        assert!(
            view.contains(line),
            "{line:?} not in the view:\n{view}\n---\n{diff}"
        );
    }
    tool.close_all().await;
}

/// The editor of an owner that has run no command yet: its view is made
/// for it, and its shell then sees what it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_first_makes_the_view() {
    let lab = lab();
    let tool = &lab.tool;
    let editor = Editor::new(tool.editor_fs("e"));
    let path = lab.base.join("sub/new.txt");
    // Outside the owner's view the editor does nothing, and says why.
    let err = editor
        .execute(&json!({"command": "create", "path": path, "file_text": "x\n"}))
        .await
        .unwrap_err();
    assert!(
        dsh_editor::contract::render_error(&err).contains("view is not running"),
        "{err}"
    );
    tool.in_view("e", async {
        editor
            .execute(&json!({"command": "create", "path": path, "file_text": "first\n"}))
            .await
            .unwrap();
        editor
            .execute(&json!({"command": "str_replace", "path": lab.base.join("a.txt"), "old_str": "alpha", "new_str": "omega"}))
            .await
            .unwrap();
    })
    .await
    .unwrap();
    let seen = run(tool, "e", "cat sub/new.txt a.txt").await;
    assert!(seen.contains("first") && seen.contains("omega"), "{seen}");
    assert_eq!(
        std::fs::read_to_string(lab.base.join("a.txt")).unwrap(),
        "alpha\n"
    );
    assert!(!path.exists());
    tool.close_all().await;
}

/// Real work in a view: a git branch, commit and stash, and a Rust
/// crate's build; the host's repository sees none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_work_in_a_view() {
    let lab = lab();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(&lab.base)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(
        lab.base.join("Cargo.toml"),
        "[package]\nname = \"viewed\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::create_dir(lab.base.join("src")).unwrap();
    std::fs::write(
        lab.base.join("src/main.rs"),
        "fn main() { println!(\"built in a view\"); }\n",
    )
    .unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "base"]);
    let before = fingerprint(&lab.base);
    let tool = &lab.tool;
    let out = run(
        tool,
        "a",
        "git -c user.name=a -c user.email=a@a checkout -q -b feature && echo more >> a.txt && \
         git -c user.name=a -c user.email=a@a commit -qam change && echo wip >> a.txt && \
         git stash -q && git stash list | wc -l && git log --oneline | wc -l && \
         CARGO_TARGET_DIR=$PWD/target cargo run -q --offline && echo work-done",
    )
    .await;
    assert!(
        out.contains("built in a view") && out.contains("work-done"),
        "{out}"
    );
    let b = run(
        tool,
        "b",
        "git branch --list feature | wc -l; test -e target || echo no-target",
    )
    .await;
    assert!(b.contains("0\n") && b.contains("no-target"), "{b}");
    assert_eq!(git(&["branch", "--list", "feature"]), "");
    assert_eq!(fingerprint(&lab.base), before);
    tool.close_all().await;
}

/// Where user namespaces are denied, the first call fails with a line
/// naming what the kernel refused. Run in a user namespace of its own
/// whose nested user namespaces are limited to none (a setting of that
/// namespace only), by a copy of this binary.
#[test]
fn refused_where_user_namespaces_are_denied() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::Builder::new()
        .prefix("dsh-cow-denied-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let copy = dir.path().join("copy_on_write");
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut command = std::process::Command::new(&copy);
    command
        .args([
            "--ignored",
            "--exact",
            "refusal_where_denied",
            "--nocapture",
        ])
        .env("DSH_COW_LAB", dir.path());
    // SAFETY: the hook makes system calls and writes /proc files only.
    unsafe {
        command.pre_exec(move || {
            let write = |path: &str, text: String| std::fs::write(path, text);
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            write("/proc/self/setgroups", "deny".into())?;
            write("/proc/self/uid_map", format!("0 {uid} 1"))?;
            write("/proc/self/gid_map", format!("0 {gid} 1"))?;
            write("/proc/sys/user/max_user_namespaces", "0".into())
        });
    }
    let out = output(&mut command);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by refused_where_user_namespaces_are_denied, in a user namespace that allows no other"]
async fn refusal_where_denied() {
    assert_eq!(
        std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .unwrap()
            .trim(),
        "0"
    );
    let lab = lab();
    let err = lab
        .tool
        .execute("a", &json!({"command": "echo should-not-run"}))
        .await
        .unwrap_err();
    let text = dsh_sandbox::contract::render_error(&err);
    assert!(
        text.starts_with("The copy-on-write view of the workspace could not be made: ")
            && text.contains("user namespaces")
            && text.ends_with("The command was not run."),
        "{text}"
    );
    // The editor's view says the same.
    let err = lab.tool.in_view("a", async {}).await.unwrap_err();
    assert!(
        dsh_sandbox::contract::render_error(&err).contains("could not be made"),
        "{err}"
    );
}
