//! A workspace per owner in one sandboxed tool: where each owner's confined
//! shell starts (and starts again after a reset), and what it and its
//! editor may write: its own directory, not its neighbours'.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

mod common;
use common::visible_tmp;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_editor::Editor;
use dsh_sandbox::{SandboxConfig, SandboxMode, SandboxPolicy, SandboxRequest, SandboxedShell};
use dsh_shell_persistent::{CallEnd, OwnerDirError, ShellConfig};
use serde_json::json;

/// Generous: ten confined shells start at once on a loaded machine.
const BOUND: Duration = Duration::from_secs(180);

const OWNERS: usize = 10;

/// The shared root (the tool's workspace) and `n` owner directories in it,
/// each holding `mine.txt` (its own name), where a confined shell sees them.
fn dirs(n: usize) -> (tempfile::TempDir, PathBuf, Vec<PathBuf>) {
    let tmp = tempfile::tempdir_in(visible_tmp()).unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let owners = (0..n)
        .map(|i| {
            let dir = root.join(format!("agent-{i}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("mine.txt"), format!("agent-{i}\n")).unwrap();
            dir
        })
        .collect();
    (tmp, root, owners)
}

/// workspace-write without `/tmp`: writable is the owner's directory alone.
fn tool(root: &Path) -> SandboxedShell {
    let policy = SandboxPolicy::default()
        .mode(SandboxMode::WorkspaceWrite)
        .tmp_writable(false);
    SandboxedShell::new(SandboxConfig::new(policy, ShellConfig::new(root))).unwrap()
}

async fn run(tool: &SandboxedShell, owner: &str, cmd: &str) -> String {
    tool.execute(owner, &json!({"command": cmd}))
        .await
        .unwrap_or_else(|e| panic!("{owner}: {cmd:?}: {e}"))
}

/// `cmd` failed on a write the confinement refused.
async fn refused(tool: &SandboxedShell, owner: &str, cmd: &str) {
    let outcome = tool
        .call(owner, SandboxRequest::new(cmd), std::future::pending())
        .await
        .unwrap();
    assert!(
        matches!(outcome.call.end, CallEnd::Exited { code } if code != 0)
            && outcome.likely_denial.is_some(),
        "{owner}: {cmd:?} was not refused: {outcome:?}"
    );
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Ten owners of one tool in workspace-write, each with its own directory:
/// each starts there, writes there, cannot write its neighbour's directory
/// nor the shared root, times out once after a `cd` elsewhere, and is back
/// in its directory, still confined to it, after the reset (where every
/// owner was confined to, and reset into, the one shared workspace when the
/// tool had one for all). Checked from outside: nothing changed but each
/// owner's own files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_owner_is_confined_to_its_own_directory_across_a_timeout() {
    let (_tmp, root, owner_dirs) = dirs(OWNERS);
    let tool = Arc::new(tool(&root));
    let mut agents = tokio::task::JoinSet::new();
    for (i, dir) in owner_dirs.iter().cloned().enumerate() {
        let tool = Arc::clone(&tool);
        let neighbour = owner_dirs[(i + 1) % OWNERS].display().to_string();
        let root = root.display().to_string();
        agents.spawn(async move {
            let owner = format!("agent-{i}");
            tool.set_owner_dir(&owner, &dir).unwrap();
            assert_eq!(tool.owner_dir(&owner), Some(dir.clone()));
            let here = dir.display().to_string();
            assert_eq!(run(&tool, &owner, "pwd").await, here);
            assert_eq!(
                run(&tool, &owner, "echo written > own.txt && cat own.txt").await,
                "written"
            );
            refused(
                &tool,
                &owner,
                &format!("echo intruder > {neighbour}/mine.txt"),
            )
            .await;
            refused(&tool, &owner, &format!("touch {neighbour}/intruder.txt")).await;
            refused(&tool, &owner, &format!("touch {root}/shared.txt")).await;

            let slow = SandboxRequest::new("cd / && sleep 600").timeout(Duration::from_secs(1));
            let outcome = tool
                .call(&owner, slow, std::future::pending())
                .await
                .unwrap();
            assert!(
                matches!(outcome.call.end, CallEnd::TimedOut { .. }),
                "{owner}: {:?}",
                outcome.call.end
            );
            assert!(outcome.call.shell_reset, "{owner}: the shell was not reset");

            // The new confined shell: in the owner's directory, its root.
            assert_eq!(run(&tool, &owner, "pwd").await, here);
            assert_eq!(
                run(&tool, &owner, "echo again > own2.txt && cat own2.txt").await,
                "again"
            );
            refused(&tool, &owner, &format!("touch {neighbour}/after-reset.txt")).await;
        });
    }
    let all = async {
        while let Some(agent) = agents.join_next().await {
            agent.unwrap();
        }
    };
    tokio::time::timeout(BOUND, all)
        .await
        .expect("the owners did not finish");
    tool.close_all().await;

    let want: Vec<String> = (0..OWNERS).map(|i| format!("agent-{i}")).collect();
    assert_eq!(
        names(&root),
        want,
        "something was written in the shared root"
    );
    for (i, dir) in owner_dirs.iter().enumerate() {
        assert_eq!(
            names(dir),
            ["mine.txt", "own.txt", "own2.txt"],
            "agent-{i}'s directory"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("mine.txt")).unwrap(),
            format!("agent-{i}\n"),
            "a neighbour wrote agent-{i}'s file"
        );
    }
}

/// A sandboxed owner's editor is confined to the owner's directory: a
/// create or an edit in a neighbour's directory, or in the shared root, is
/// refused and changes nothing. The directory cannot be changed once the
/// editor's filesystem or a shell holds the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_of_an_owner_writes_only_its_own_directory() {
    let (_tmp, root, owner_dirs) = dirs(2);
    let (mine, theirs) = (&owner_dirs[0], &owner_dirs[1]);
    let tool = tool(&root);
    tool.set_owner_dir("a", mine).unwrap();
    tool.set_owner_dir("b", theirs).unwrap();
    let editor = Editor::new(tool.editor_fs("a"));

    let create = |path: PathBuf| json!({"command": "create", "path": path, "file_text": "x\n"});
    editor.execute(&create(mine.join("new.txt"))).await.unwrap();
    let denied = "[sandbox: file access denied under workspace-write mode]";
    for path in [theirs.join("intruder.txt"), root.join("shared.txt")] {
        let err = editor.execute(&create(path.clone())).await.unwrap_err();
        assert_eq!(
            dsh_editor::contract::render_error(&err),
            denied,
            "{}",
            path.display()
        );
    }
    let edit = json!({"command": "str_replace", "path": theirs.join("mine.txt"),
                      "old_str": "agent-1", "new_str": "agent-0 was here"});
    assert_eq!(
        dsh_editor::contract::render_error(&editor.execute(&edit).await.unwrap_err()),
        denied
    );
    assert_eq!(names(theirs), ["mine.txt"]);
    assert_eq!(
        std::fs::read_to_string(theirs.join("mine.txt")).unwrap(),
        "agent-1\n"
    );
    assert_eq!(
        names(&root),
        ["agent-0", "agent-1"],
        "the editor wrote in the shared root"
    );

    // The editor filesystem handed out holds the directory.
    let err = tool.set_owner_dir("a", theirs).unwrap_err();
    assert!(matches!(err, OwnerDirError::InUse { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "cannot set the start directory of owner \"a\" while its editor filesystem was handed out; \
         set it before the owner's first use, or close the owner first"
    );
    // So does a running shell.
    assert_eq!(run(&tool, "b", "pwd").await, theirs.display().to_string());
    let err = tool.set_owner_dir("b", mine).unwrap_err();
    assert!(
        err.to_string().contains("while its shell is running"),
        "{err}"
    );
    // Closing the owner forgets it: set again, it holds.
    tool.close_owner("b").await;
    assert_eq!(tool.owner_dir("b"), None);
    tool.set_owner_dir("b", mine).unwrap();
    assert_eq!(run(&tool, "b", "pwd").await, mine.display().to_string());
    tool.close_all().await;
}
