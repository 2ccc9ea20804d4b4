//! The editor's confined reader as a process: it starts with the first
//! read, a reader that died is reported once and replaced, and it goes
//! with its filesystem. Alone in its test binary, so the only process of
//! this test that leaves this process's user namespace is the reader.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use dsh_editor::Editor;
use dsh_sandbox::{SandboxFs, SandboxMode, SandboxPolicy};
use serde_json::json;

/// Children of this process in another user namespace: the reader's
/// supervisor (a shell's would be too, but this binary starts none).
fn readers() -> Vec<i32> {
    let me = std::process::id().to_string();
    let my_ns = std::fs::read_link("/proc/self/ns/user").unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let parent = status
                .lines()
                .find_map(|l| l.strip_prefix("PPid:"))
                .map(str::trim);
            parent == Some(me.as_str())
                && std::fs::read_link(format!("/proc/{pid}/ns/user")).is_ok_and(|ns| ns != my_ns)
        })
        .collect()
}

/// Live (not zombie) processes in the user namespace `ns`.
fn live_in(ns: &std::path::Path) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/user")).is_ok_and(|n| n == ns)
                && std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| !s.contains(") Z"))
        })
        .collect()
}

/// Polls `done` (the reaping of a child of the editor's, which no event
/// announces to this test) for 30 s at most.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_reader_is_reported_then_replaced_and_none_outlives_its_filesystem() {
    let dir = tempfile::tempdir_in(common::visible_tmp()).unwrap();
    let file = dir.path().join("a.txt");
    std::fs::write(&file, "hello\n").unwrap();
    let view = json!({"command": "view", "path": file});
    let editor = Editor::new(SandboxFs::new(
        SandboxPolicy::default().mode(SandboxMode::WorkspaceWrite),
        dir.path(),
    ));
    assert!(readers().is_empty(), "no reader before the first read");
    assert!(editor.execute(&view).await.unwrap().contains("hello"));
    let first = readers();
    assert_eq!(first.len(), 1, "one reader: {first:?}");

    // The reader's processes: the supervisor and, in their own PID
    // namespace, its init and the helper that answers.
    let reader_ns = std::fs::read_link(format!("/proc/{}/ns/user", first[0])).unwrap();
    // Read before the kill: after it, the whole namespace may be gone
    // before a reading could see it.
    let live = live_in(&reader_ns);
    assert!(!live.is_empty(), "no process in the reader's namespace");
    // SAFETY: killing the reader this test's filesystem started.
    unsafe { libc::kill(first[0], libc::SIGKILL) };
    // The supervisor is reaped only by its owner (a zombie until the next
    // read); the helper goes a moment after it: wait until no live process
    // is left in the reader's namespace, so the next read finds it dead.
    let left = common::ended_within(&live, Duration::from_secs(30)).await;
    assert!(left.is_empty(), "the reader did not die: {left:?} live");
    let err = dsh_editor::contract::render_error(&editor.execute(&view).await.unwrap_err());
    assert!(err.contains("stopped answering"), "{err}");
    assert!(editor.execute(&view).await.unwrap().contains("hello"));
    let second = readers();
    assert_eq!(second.len(), 1, "one reader again: {second:?}");
    assert_ne!(second, first);

    drop(editor);
    until("the reader outlived its filesystem", || {
        readers().is_empty()
    })
    .await;
}
