//! Git plants at a writable root that has no repository: through the
//! editor alone, across one-shot calls, across a reset, over what a crash
//! leaves, and beside a `HEAD` of the user's. Each ground is checked after
//! the sandbox is gone by the host's real `git status`, run as another
//! user (uid 65534 when this test runs as root; the unprivileged run's
//! grounds are checked again by root afterwards), with `safe.directory=*`;
//! the planted `core.fsmonitor` would write a marker file.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dsh_editor::Editor;
use dsh_sandbox::{
    Persistence, SandboxConfig, SandboxFs, SandboxMode, SandboxPolicy, SandboxedShell,
};
use dsh_shell_persistent::ShellConfig;
use serde_json::json;

use super::{Engine, UNPRIVILEGED};

const DENIED: &str = "[sandbox: file access denied under workspace-write mode]";

/// A workspace without a repository and a directory for the marker.
struct Ground {
    name: String,
    ws: PathBuf,
    marks: PathBuf,
}

impl Ground {
    fn new(parent: &Path, name: &str) -> Ground {
        let base = parent.join(name);
        let ws = base.join("ws");
        let marks = base.join("marks");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&marks).unwrap();
        std::fs::write(ws.join("notes.txt"), "no repository here\n").unwrap();
        set_mode(&base, 0o755);
        set_mode(&ws, 0o755);
        // The other user's git writes the marker here.
        set_mode(&marks, 0o777);
        Ground {
            name: name.to_owned(),
            ws: std::fs::canonicalize(ws).unwrap(),
            marks,
        }
    }

    fn marker(&self) -> PathBuf {
        self.marks.join("fsmonitor-ran")
    }

    /// The files that make a root a repository with a `core.fsmonitor`:
    /// the root itself as a bare repository, and `inner/` as another one
    /// that a `.git` file at the root would name.
    fn plant(&self) -> Vec<(String, String)> {
        let config = |worktree: &str| {
            format!(
                "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = {worktree}\n\tfsmonitor = \"touch {}; :\"\n",
                self.marker().display()
            )
        };
        let mut files = Vec::new();
        for (dir, worktree) in [("", "."), ("inner/", "..")] {
            files.push((format!("{dir}HEAD"), "ref: refs/heads/main\n".to_owned()));
            files.push((format!("{dir}config"), config(worktree)));
            files.push((format!("{dir}objects/info/keep"), String::new()));
            files.push((format!("{dir}refs/heads/keep"), String::new()));
        }
        files.push((".git".to_owned(), "gitdir: inner\n".to_owned()));
        // Beside a valid HEAD, objects/ and refs/ where `commondir` says.
        files.push(("commondir".to_owned(), "inner\n".to_owned()));
        files
    }

    /// The plant as a shell command, removing the placeholders first.
    fn plant_command(&self) -> String {
        let mut cmd = format!(
            "cd {} || exit 1; rmdir HEAD .git objects refs commondir 2>/dev/null; mv -f HEAD .HEAD-away 2>/dev/null; ",
            self.ws.display()
        );
        for (path, text) in self.plant() {
            let path = Path::new(&path);
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                cmd.push_str(&format!("mkdir -p {} 2>/dev/null; ", dir.display()));
            }
            cmd.push_str(&format!(
                "printf '%s' '{}' > {} 2>/dev/null; ",
                text.replace('\'', "'\\''"),
                path.display()
            ));
        }
        cmd.push_str("true");
        cmd
    }

    /// The plant through the editor: `HEAD` and `.git` at the root are
    /// refused, with the denial line where nothing is there yet (the
    /// others are no repository alone).
    async fn plant_with<F: dsh_editor::fs::Fs + 'static>(&self, editor: &Editor<F>) -> Vec<String> {
        let mut failures = Vec::new();
        for (path, text) in self.plant() {
            let args = json!({"command": "create", "path": self.ws.join(&path), "file_text": text});
            let result = editor.execute(&args).await;
            if path == "HEAD" || path == ".git" {
                match result {
                    Err(e) if dsh_editor::contract::render_error(&e) == DENIED => {}
                    // A placeholder (or the user's own) is there.
                    Err(dsh_editor::EditorError::CreateExists(_)) => {}
                    other => failures.push(format!(
                        "[{}] the editor's create of {path} was not refused: {other:?}",
                        self.name
                    )),
                }
            }
        }
        failures
    }

    /// The host's real `git status` in the root, as another user where
    /// this process may switch (root), else as this user.
    fn host_git(&self) -> Result<(), String> {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let root = uid == 0;
        let mut command = if root {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={UNPRIVILEGED}"),
                &format!("--regid={UNPRIVILEGED}"),
                "--clear-groups",
                "--",
                "git",
            ]);
            c
        } else {
            Command::new("git")
        };
        let out = command
            .args(["-c", "safe.directory=*", "status", "--porcelain"])
            .current_dir(&self.ws)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", "/nonexistent")
            .env("GIT_CEILING_DIRECTORIES", self.ws.parent().unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let ran = self.marker().exists();
        if out.status.success() || ran || !stderr.contains("not a git repository") {
            let _ = std::fs::remove_file(self.marker());
            return Err(format!(
                "[{}] the host's git status (as uid {}) found a repository in {}{}: {}{stderr}",
                self.name,
                if root { UNPRIVILEGED } else { uid },
                self.ws.display(),
                if ran { " and ran its fsmonitor" } else { "" },
                String::from_utf8_lossy(&out.stdout),
            ));
        }
        Ok(())
    }

    /// Whether the placeholder at `name` is in place on the host.
    fn holds(&self, name: &str) -> bool {
        self.ws.join(name).is_dir()
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn tool(ground: &Ground, engine: Engine, persistence: Persistence) -> SandboxedShell {
    let policy = SandboxPolicy::default()
        .mode(SandboxMode::WorkspaceWrite)
        .bubblewrap((engine == Engine::Bubblewrap).then(|| PathBuf::from("bwrap")));
    SandboxedShell::new(
        SandboxConfig::new(
            policy,
            ShellConfig::new(&ground.ws)
                .env(vec![(
                    "GIT_CEILING_DIRECTORIES".to_owned(),
                    ground.ws.parent().unwrap().display().to_string(),
                )])
                .timeout(Duration::from_secs(120)),
        )
        .restricted(persistence),
    )
    .unwrap()
}

async fn run(s: &SandboxedShell, cmd: &str) -> String {
    s.execute("agent", &json!({ "command": cmd }))
        .await
        .unwrap_or_else(|e| format!("tool error: {}", dsh_sandbox::contract::render_error(&e)))
}

/// Where the grounds go: `DSH_ESCAPE_DIR` (the unprivileged run's, which
/// the parent checks again afterwards) or a directory of this test's
/// under `/var/tmp` that other users can traverse.
pub(super) fn grounds_dir() -> (Option<tempfile::TempDir>, PathBuf) {
    if let Some(dir) = std::env::var_os("DSH_ESCAPE_DIR") {
        return (None, PathBuf::from(dir));
    }
    let dir = tempfile::Builder::new()
        .prefix("dsh-git-plant-")
        .tempdir_in("/var/tmp")
        .unwrap();
    set_mode(dir.path(), 0o755);
    let path = dir.path().to_owned();
    (Some(dir), path)
}

/// Every plant, with `engine` doing the shell's namespaces; returns the
/// failures.
async fn plants(parent: &Path, engine: Engine) -> Vec<String> {
    let tag = format!("{engine:?}").to_lowercase();
    let mut failures = Vec::new();
    let mut grounds = Vec::new();

    if engine == Engine::Native {
        // The editor alone, no tool around it.
        let g = Ground::new(parent, "editor-alone");
        let policy = SandboxPolicy::default().mode(SandboxMode::WorkspaceWrite);
        let editor = Editor::new(SandboxFs::new(policy, &g.ws));
        failures.extend(g.plant_with(&editor).await);
        drop(editor);
        grounds.push(g);

        // The tool's editor, before any shell call.
        let g = Ground::new(parent, "editor-before-the-shell");
        let s = tool(&g, engine, Persistence::Persistent);
        let editor = Editor::new(s.editor_fs("agent"));
        failures.extend(g.plant_with(&editor).await);
        s.close_all().await;
        drop((editor, s));
        grounds.push(g);
    }

    // Across one-shot calls: the placeholders stay between them.
    let g = Ground::new(parent, &format!("one-shot-{tag}"));
    let s = tool(&g, engine, Persistence::OneShot);
    let editor = Editor::new(s.editor_fs("agent"));
    run(&s, &g.plant_command()).await;
    if !(g.holds(".git") && g.holds("HEAD")) {
        failures.push(format!(
            "[{}] the placeholders went with the one-shot shell",
            g.name
        ));
    }
    failures.extend(g.plant_with(&editor).await);
    run(&s, &g.plant_command()).await;
    s.close_all().await;
    drop((editor, s));
    if g.holds(".git") || g.holds("HEAD") {
        failures.push(format!("[{}] the placeholders outlived the tool", g.name));
    }
    grounds.push(g);

    // Across a reset: the shell killed, the editor, a new shell.
    let g = Ground::new(parent, &format!("reset-{tag}"));
    let s = tool(&g, engine, Persistence::Persistent);
    let editor = Editor::new(s.editor_fs("agent"));
    run(&s, &g.plant_command()).await;
    run(&s, "kill -9 $$").await;
    if !(g.holds(".git") && g.holds("HEAD")) {
        failures.push(format!("[{}] the placeholders went with the shell", g.name));
    }
    failures.extend(g.plant_with(&editor).await);
    run(&s, &g.plant_command()).await;
    s.close_all().await;
    drop((editor, s));
    grounds.push(g);

    // What a crash of the server leaves (the empty placeholders): no
    // repository, and a later sandbox keeps them read-only.
    let g = Ground::new(parent, &format!("after-a-crash-{tag}"));
    std::fs::create_dir(g.ws.join(".git")).unwrap();
    std::fs::create_dir(g.ws.join("HEAD")).unwrap();
    if let Err(e) = g.host_git() {
        failures.push(format!("{e} (the leftovers alone)"));
    }
    let s = tool(&g, engine, Persistence::Persistent);
    let editor = Editor::new(s.editor_fs("agent"));
    failures.extend(g.plant_with(&editor).await);
    run(&s, &g.plant_command()).await;
    s.close_all().await;
    drop((editor, s));
    grounds.push(g);

    // The tool dropped while its shell runs, not closed: the shell is
    // killed, not waited for, so the placeholders stay, as after a crash.
    let g = Ground::new(parent, &format!("dropped-{tag}"));
    let s = tool(&g, engine, Persistence::Persistent);
    run(&s, &g.plant_command()).await;
    drop(s);
    if !(g.holds(".git") && g.holds("HEAD")) {
        failures.push(format!(
            "[{}] the placeholders went before the shell was seen gone",
            g.name
        ));
    }
    grounds.push(g);

    // A `HEAD` of the user's that git reads: half a bare repository.
    let g = Ground::new(parent, &format!("user-head-{tag}"));
    std::fs::write(g.ws.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    let s = tool(&g, engine, Persistence::Persistent);
    let editor = Editor::new(s.editor_fs("agent"));
    run(&s, &g.plant_command()).await;
    failures.extend(g.plant_with(&editor).await);
    // With the placeholders in place the host's git finds none either.
    if let Err(e) = g.host_git() {
        failures.push(format!("{e} (while the sandbox lives)"));
    }
    s.close_all().await;
    drop((editor, s));
    if std::fs::read_to_string(g.ws.join("HEAD")).unwrap() != "ref: refs/heads/main\n" {
        failures.push(format!("[{}] the user's HEAD changed", g.name));
    }
    for name in [".git", "objects", "refs", "commondir"] {
        if std::fs::symlink_metadata(g.ws.join(name)).is_ok() {
            failures.push(format!(
                "[{}] the {name} placeholder outlived the tool",
                g.name
            ));
        }
    }
    grounds.push(g);

    for g in &grounds {
        if let Err(e) = g.host_git() {
            failures.push(e);
        }
    }
    failures
}

/// The plants by the shell and the editor in a copy-on-write view of a
/// ground (no placeholders there: the view is the owner's own): the
/// host's git finds no repository in the view's base.
pub(super) async fn plants_in_a_view(parent: &Path) -> Vec<String> {
    let g = Ground::new(parent, "copy-on-write-view");
    let layers = parent.join("copy-on-write-layers");
    let view = dsh_sandbox::dsh_workspace::Workspace::new(&g.ws, layers).unwrap();
    let s = SandboxedShell::new(
        SandboxConfig::new(
            SandboxPolicy::default().mode(SandboxMode::WorkspaceWrite),
            ShellConfig::new(&g.ws).timeout(Duration::from_secs(120)),
        )
        .copy_on_write(Some(std::sync::Arc::new(view))),
    )
    .unwrap();
    run(&s, &g.plant_command()).await;
    let editor = Editor::new(s.editor_fs("agent"));
    let mut failures = s.in_view("agent", g.plant_with(&editor)).await.unwrap();
    failures.extend(g.host_git().err());
    s.close_all().await;
    failures.extend(g.host_git().err());
    failures
}

async fn plants_as_this_user(engine: Engine) {
    let (_keep, parent) = grounds_dir();
    let failures = plants(&parent, engine).await;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    assert!(
        failures.is_empty(),
        "git plants as uid {uid} ({engine:?}):\n{}",
        failures.join("\n")
    );
    println!("git plants held as uid {uid} ({engine:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_plants_leave_no_repository() {
    plants_as_this_user(Engine::Native).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs bwrap (bubblewrap); .ci/run installs it and runs this"]
async fn git_plants_leave_no_repository_under_bubblewrap() {
    plants_as_this_user(Engine::Bubblewrap).await;
}

#[test]
fn git_plants_leave_no_repository_as_an_unprivileged_user() {
    as_unprivileged(Engine::Native);
}

#[test]
#[ignore = "needs bwrap (bubblewrap); .ci/run installs it and runs this"]
fn git_plants_leave_no_repository_under_bubblewrap_as_an_unprivileged_user() {
    as_unprivileged(Engine::Bubblewrap);
}

/// As root: the plants run by a copy of this binary as uid 65534, then
/// every ground checked again by root's `git` (another user than the one
/// that planted). Not root: the plants, here.
fn as_unprivileged(engine: Engine) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(plants_as_this_user(engine));
        return;
    }
    let test = match engine {
        Engine::Native | Engine::CopyOnWrite => "git_plant::git_plants_leave_no_repository",
        Engine::Bubblewrap => "git_plant::git_plants_leave_no_repository_under_bubblewrap",
    };
    let dir = tempfile::Builder::new()
        .prefix("dsh-git-plant-user-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::os::unix::fs::chown(dir.path(), Some(UNPRIVILEGED), Some(UNPRIVILEGED)).unwrap();
    let stdout = super::run_as_unprivileged(test, dir.path());
    assert!(
        stdout.contains(&format!(
            "git plants held as uid {UNPRIVILEGED} ({engine:?})"
        )),
        "the plants did not run as uid {UNPRIVILEGED}:\n{stdout}"
    );
    let mut failures = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let base = entry.unwrap().path();
        if !base.join("ws").is_dir() {
            continue;
        }
        let g = Ground {
            name: base.file_name().unwrap().to_string_lossy().into_owned(),
            ws: base.join("ws"),
            marks: base.join("marks"),
        };
        checked += 1;
        // Root's git, another user than the planter's.
        let out = Command::new("git")
            .args(["-c", "safe.directory=*", "status", "--porcelain"])
            .current_dir(&g.ws)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", "/nonexistent")
            .env("GIT_CEILING_DIRECTORIES", &base)
            .output()
            .unwrap();
        if out.status.success() || g.marker().exists() {
            failures.push(format!(
                "[{}] root's git status found a repository: {}",
                g.name,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(checked >= 4, "only {checked} grounds were left to check");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!(
        "git plants of uid {UNPRIVILEGED} held against root's git ({checked} grounds, {engine:?})"
    );
}

/// The check can fail: the same plants made on the host, with no sandbox,
/// are found by the other user's `git status`, which runs the fsmonitor.
#[test]
fn the_git_check_finds_a_plant_made_without_the_sandbox() {
    let (_keep, parent) = grounds_dir();
    // Each shape alone: the root a bare repository; a `.git` file naming
    // `inner/`; a valid HEAD whose `commondir` names `inner/`.
    let shapes: [(&str, fn(&str) -> bool); 3] = [
        ("control-bare-root", |p| {
            !p.starts_with("inner/") && p != ".git" && p != "commondir"
        }),
        ("control-git-file", |p| {
            p.starts_with("inner/") || p == ".git"
        }),
        ("control-commondir", |p| {
            p == "HEAD" || p == "commondir" || (p.starts_with("inner/") && p != "inner/HEAD")
        }),
    ];
    for (name, keep) in shapes {
        let g = Ground::new(&parent, name);
        for (path, text) in g.plant() {
            if !keep(&path) {
                continue;
            }
            let p = g.ws.join(&path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
        }
        let found = g
            .host_git()
            .expect_err(&format!("{name}: the plant made on the host was not found"));
        // (The commondir shape's worktree is not the root's: git finds the
        // repository and stops there, before the fsmonitor.)
        if name != "control-commondir" {
            assert!(found.contains("ran its fsmonitor"), "{found}");
        }
    }
}

/// What docs/sandbox.md says of nested repositories, which stay out of
/// scope: git's `safe.bareRepository=explicit` refuses a nested *bare*
/// layout, not a nested `.git` directory, whose `core.fsmonitor` runs.
#[test]
fn safe_bare_repository_explicit_refuses_only_a_nested_bare_layout() {
    let (_keep, parent) = grounds_dir();
    let g = Ground::new(&parent, "nested");
    for (path, text) in g.plant() {
        if path == ".git" || path == "commondir" || path.starts_with("inner/") {
            continue;
        }
        for dir in ["bare", "sub/.git"] {
            let p = g.ws.join(dir).join(&path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            let text = text.replace(
                "worktree = .\n",
                if dir == "bare" {
                    "worktree = .\n"
                } else {
                    "worktree = ..\n"
                },
            );
            std::fs::write(&p, text).unwrap();
        }
    }
    let git = |dir: &str| {
        Command::new("git")
            .args([
                "-c",
                "safe.directory=*",
                "-c",
                "safe.bareRepository=explicit",
                "status",
                "--porcelain",
            ])
            .current_dir(g.ws.join(dir))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", "/nonexistent")
            .env("GIT_CEILING_DIRECTORIES", g.ws.parent().unwrap())
            .output()
            .unwrap()
    };
    let bare = git("bare");
    assert!(!bare.status.success(), "the nested bare layout was used");
    assert!(
        String::from_utf8_lossy(&bare.stderr).contains("cannot use bare repository"),
        "{}",
        String::from_utf8_lossy(&bare.stderr)
    );
    assert!(
        !g.marker().exists(),
        "the nested bare layout's fsmonitor ran"
    );
    let nested = git("sub");
    assert!(
        nested.status.success() && g.marker().exists(),
        "the nested .git's fsmonitor did not run: {}",
        String::from_utf8_lossy(&nested.stderr)
    );
}
