//! Drives the real `dsh-mcp` binary over stdio, as an MCP client would.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{BOUND, Client, Fifo, gone, visible_tmp};
use serde_json::{Value, json};
use tokio::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_session() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let logs = ws.join("logs");
    let mut c = Client::start(&ws, &["--session-log", logs.to_str().unwrap()]).await;

    let list = c.request(2, "tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["bash", "str_replace_editor"]);
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["command"]));
    assert_eq!(
        tools[1]["inputSchema"]["required"],
        json!(["command", "path"])
    );

    assert_eq!(
        c.call(
            3,
            "bash",
            json!({"command": "cd sub 2>/dev/null || mkdir sub && cd sub; export X=42"})
        )
        .await,
        (String::new(), false)
    );
    assert_eq!(
        c.call(4, "bash", json!({"command": "echo $X $PWD"})).await,
        (format!("42 {}/sub", ws.display()), false)
    );
    assert_eq!(
        c.call(5, "bash", json!({"command": "false"})).await,
        ("[exit code: 1]".into(), false)
    );
    assert_eq!(
        c.call(6, "bash", json!({"command": ""})).await,
        ("command must be a non-empty string".into(), true)
    );
    let pid: i32 = c
        .call(7, "bash", json!({"command": "sleep 1000 & echo $$"}))
        .await
        .0
        .lines()
        .last()
        .unwrap()
        .parse()
        .unwrap();

    let file = ws.join("sub/notes.txt");
    let path = file.to_str().unwrap();
    assert_eq!(
        c.call(
            8,
            "str_replace_editor",
            json!({"command": "create", "path": path, "file_text": "a\nb\n"})
        )
        .await,
        (format!("New file created successfully at: {path}"), false)
    );
    assert_eq!(
        c.call(
            9,
            "str_replace_editor",
            json!({"command": "str_replace", "path": path, "old_str": "b", "new_str": "B"})
        )
        .await,
        (
            format!("The file {path} has been edited successfully."),
            false
        )
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "a\nB\n");
    assert_eq!(
        c.call(10, "bash", json!({"command": "cat notes.txt"}))
            .await,
        ("a\nB".into(), false)
    );
    assert_eq!(
        c.call(11, "str_replace_editor", json!({"command": "view", "path": "notes.txt"})).await,
        ("The path notes.txt is not an absolute path, it should start with `/`. Maybe you meant /notes.txt?".into(), true)
    );
    assert_eq!(
        c.call(
            12,
            "str_replace_editor",
            json!({"command": "insert", "path": path, "insert_line": "x", "new_str": "y"})
        )
        .await,
        (
            "Parameter `insert_line` must be an integer, but got a string.".into(),
            true
        )
    );
    // An unknown tool is a JSON-RPC error (-32602), as MCP lists it.
    let err = c
        .request(13, "tools/call", json!({"name": "rm_rf", "arguments": {}}))
        .await;
    assert_eq!(err["error"]["code"], -32602, "{err}");
    assert_eq!(
        err["error"]["message"],
        "Unknown tool `rm_rf`. The available tools are `bash` and `str_replace_editor`."
    );

    // Malformed JSON-RPC gets a JSON-RPC error, and the server goes on.
    c.send_raw("{not json").await;
    let err = c.response(Value::Null).await;
    assert_eq!(err["error"]["code"], -32700, "{err}");
    // Valid JSON that is no request: -32600, with the id where it has one.
    c.send_raw(r#"{"jsonrpc":"2.0","id":77,"method":5}"#).await;
    let err = c.response(json!(77)).await;
    assert_eq!(err["error"]["code"], -32600, "{err}");
    c.send_raw(r#"[{"jsonrpc":"2.0","id":78,"method":"ping"}]"#)
        .await;
    let err = c.response(Value::Null).await;
    assert_eq!(err["error"]["code"], -32600, "{err}");
    // A known method with parameters that do not fit: -32602, with its id.
    c.send_raw(r#"{"jsonrpc":"2.0","id":79,"method":"tools/call","params":5}"#)
        .await;
    let err = c.response(json!(79)).await;
    assert_eq!(err["error"]["code"], -32602, "{err}");
    // Blank lines are skipped; the next request is answered.
    c.send_raw("   ").await;
    assert_eq!(c.request(80, "ping", json!({})).await["result"], json!({}));
    // A line beyond 64 MiB is refused without being kept.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":79,"method":"ping","params":{{"x":"{}"}}}}"#,
        "y".repeat(65 << 20)
    );
    c.send_raw(&huge).await;
    let err = c.response(Value::Null).await;
    assert_eq!(err["error"]["code"], -32600, "{err}");
    assert!(
        err["error"]["message"].as_str().unwrap().contains("64 MiB"),
        "{err}"
    );
    assert_eq!(
        c.call(14, "bash", json!({"command": "echo $X"})).await,
        ("42".into(), false)
    );

    let status = c.finish().await;
    assert!(status.success(), "{status:?}");
    assert!(gone(pid).await, "the shell {pid} outlived the server");

    // One JSONL record per call, written as each ended.
    let log_file = std::fs::read_dir(&logs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let records: Vec<Value> = std::fs::read_to_string(log_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Every tool call, not the call of an unknown tool.
    assert_eq!(records.len(), 11);
    assert_eq!(records[1]["tool"], "bash");
    assert_eq!(records[1]["arguments"], json!({"command": "echo $X $PWD"}));
    assert_eq!(records[1]["result"], format!("42 {}/sub", ws.display()));
    assert_eq!(records[1]["is_error"], false);
    assert_eq!(records[3]["is_error"], true);
    for r in &records {
        assert!(r["ts"].as_str().unwrap().ends_with('Z'));
        assert!(r["duration_ms"].is_u64());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_tail_clipping_keeps_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::start(
        dir.path(),
        &["--clip", "head-tail", "--max-output-chars", "20"],
    )
    .await;
    let (text, is_error) = c.call(2, "bash", json!({"command": "seq 1 1000"})).await;
    assert!(!is_error);
    assert!(text.starts_with("1\n2\n3\n4\n5\n"), "{text}");
    assert!(text.ends_with("</NOTE>\n\n999\n1000"), "{text}");
    assert!(
        text.contains("<NOTE>3873 characters were left out here to save on context.</NOTE>"),
        "{text}"
    );
    assert!(c.finish().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_run_in_arrival_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::start(dir.path(), &[]).await;
    let file = dir.path().join("order.txt");
    // Sent back to back, without waiting: the slow first call still runs first.
    for (id, cmd) in [
        (2, "sleep 0.3; echo first >> order.txt"),
        (3, "echo second >> order.txt"),
    ] {
        c.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": cmd}}}))
            .await;
    }
    c.send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "str_replace_editor", "arguments": {"command": "view", "path": file}}}))
        .await;
    let view = c.response(json!(4)).await;
    let text = view["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.ends_with("     1  first\n     2  second\n     3  \n"),
        "{text}"
    );
    assert!(c.finish().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_resets_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::start(dir.path(), &[]).await;
    c.call(2, "bash", json!({"command": "export KEEP=1"})).await;
    // Cancelled once the command runs: it says so through a FIFO.
    let mut started = Fifo::new(dir.path(), "started");
    c.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": "echo started > started; sleep 1000"}}}))
        .await;
    assert_eq!(started.line().await, "started");
    c.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 3, "reason": "user pressed stop"}}),
    )
    .await;
    // The next result says so, once.
    assert_eq!(
        c.call(4, "bash", json!({"command": "echo ${KEEP-reset}"}))
            .await,
        (
            format!("{}\nreset", dsh_shell_persistent::AFTER_CANCEL_NOTE),
            false
        )
    );
    assert_eq!(
        c.call(5, "bash", json!({"command": "echo once"})).await,
        ("once".into(), false)
    );
    assert!(c.finish().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_kills_every_shell_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::start(
        dir.path(),
        &["--timeout-secs", "30", "--max-output-chars", "100"],
    )
    .await;
    let (out, _) = c
        .call(
            2,
            "bash",
            json!({"command": "(trap '' HUP TERM; sleep 1000) & seq 1 1000"}),
        )
        .await;
    assert!(out.ends_with("</NOTE>"), "{out}");
    let (pid, _) = c.call(3, "bash", json!({"command": "echo $$"})).await;
    let pid: i32 = pid.parse().unwrap();
    let server = c.child.id().unwrap() as i32;
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(server, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(BOUND, c.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(gone(pid).await);
}

fn text_of(r: &Value) -> (String, bool) {
    let result = &r["result"];
    (
        result["content"][0]["text"].as_str().unwrap().to_owned(),
        result["isError"].as_bool().unwrap_or(false),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_flags_confine_and_escalate() {
    // `--sandbox workspace-write` keeps /tmp writable, and the checkout may
    // live there: the outside directory must be elsewhere.
    let ws = tempfile::tempdir_in(visible_tmp()).unwrap();
    let out = tempfile::tempdir_in("/var/tmp").unwrap();
    let target = out.path().join("x");
    let touch = format!("touch {}", target.display());

    // workspace-write, nobody approves: the write is denied and reported.
    let mut c = Client::start(ws.path(), &["--sandbox", "workspace-write"]).await;
    let list = c.request(2, "tools/list", json!({})).await;
    assert!(
        list["result"]["tools"][0]["inputSchema"]["properties"]
            .get("sandbox_permissions")
            .is_none()
    );
    // The confined shell persists between calls.
    let (text, _) = c
        .call(30, "bash", json!({"command": "export KEPT=yes; cd /"}))
        .await;
    assert_eq!(text, "");
    let (text, _) = c
        .call(31, "bash", json!({"command": "echo $KEPT $PWD"}))
        .await;
    assert_eq!(text, "yes /");
    let (text, is_error) = c.call(3, "bash", json!({"command": touch})).await;
    assert!(!is_error);
    assert!(
        text.ends_with("[sandbox: file access denied under workspace-write mode]"),
        "{text}"
    );
    let (text, is_error) = c.call(4, "bash", json!({"command": touch, "sandbox_permissions": "danger-full-access", "justification": "test"})).await;
    assert!(
        is_error && text.starts_with("Escalation is not available"),
        "{text}"
    );
    let (text, is_error) = c
        .call(
            5,
            "str_replace_editor",
            json!({"command": "create", "path": target, "file_text": "x"}),
        )
        .await;
    assert_eq!(
        (text.as_str(), is_error),
        (
            "[sandbox: file access denied under workspace-write mode]",
            true
        )
    );
    assert!(!target.exists());
    assert!(c.finish().await.success());

    // --approve always: one call runs wider.
    let mut c = Client::start(
        ws.path(),
        &["--sandbox", "read-only", "--approve", "always"],
    )
    .await;
    let list = c.request(2, "tools/list", json!({})).await;
    assert_eq!(
        list["result"]["tools"][0]["inputSchema"]["properties"]["sandbox_permissions"]["enum"],
        json!(["workspace-write", "danger-full-access"])
    );
    let (text, _) = c.call(3, "bash", json!({"command": format!("{touch} && echo done"), "sandbox_permissions": "danger-full-access", "justification": "test"})).await;
    assert_eq!(text, "done");
    assert!(target.exists());
    std::fs::remove_file(&target).unwrap();
    assert!(c.finish().await.success());

    // --approve elicit: a client that cannot elicit refuses (fails closed) ...
    let mut c = Client::start(
        ws.path(),
        &["--sandbox", "read-only", "--approve", "elicit"],
    )
    .await;
    let (text, is_error) = c.call(2, "bash", json!({"command": touch, "sandbox_permissions": "workspace-write", "justification": "test"})).await;
    assert!(is_error && text.contains("was denied"), "{text}");
    assert!(c.finish().await.success());
    // ... and a client that can, asks its user: declined, then approved.
    let mut c = Client::start_with(
        ws.path(),
        &["--sandbox", "read-only", "--approve", "elicit"],
        json!({"elicitation": {"form": {}}}),
    )
    .await;
    let args = json!({"name": "bash", "arguments": {"command": format!("touch {}/ok && echo ran", ws.path().display()), "sandbox_permissions": "workspace-write", "justification": "test"}});
    c.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": args}))
        .await;
    let (text, is_error) = text_of(&c.response_answering(json!(2), None).await);
    assert!(is_error && text.contains("was denied"), "{text}");
    c.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": args}))
        .await;
    let (text, is_error) = text_of(&c.response_answering(json!(3), Some(true)).await);
    assert_eq!((text.as_str(), is_error), ("ran", false));
    assert_eq!(c.elicitations, 2);
    assert!(c.finish().await.success());
    assert!(!target.exists());
}

/// A server killed outright (SIGKILL, no cleanup) leaves no confined
/// process behind: the terminal's hangup ends the supervisor, init dies with
/// it, and the kernel empties the namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_leaves_no_confined_process() {
    let ws = tempfile::tempdir_in(visible_tmp()).unwrap();
    // The killed server's scratch directory goes with this one.
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Client::start_env(
        ws.path(),
        &["--sandbox", "workspace-write"],
        &[("TMPDIR", tmp.path().to_str())],
    )
    .await;
    let mark = format!("dsh-orphan-{}", std::process::id());
    let (text, _) = c
        .call(
            2,
            "bash",
            json!({"command": format!("(setsid bash -c 'exec -a {mark} sleep 1000' &); ( (exec -a {mark} sleep 1000 &) & ); echo ok")}),
        )
        .await;
    assert_eq!(text, "ok");
    let alive = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter(|e| {
                std::fs::read(e.as_ref().unwrap().path().join("cmdline"))
                    .is_ok_and(|c| c.starts_with(mark.as_bytes()))
            })
            .count()
    };
    let deadline = std::time::Instant::now() + BOUND;
    while alive() < 2 && std::time::Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
    assert_eq!(alive(), 2, "the detached processes did not start");
    let marked: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(mark.as_bytes()))
        })
        .collect();
    assert_eq!(marked.len(), 2, "{marked:?}");
    c.child.start_kill().unwrap();
    c.child.wait().await.unwrap();
    for pid in marked {
        assert!(
            gone(pid).await,
            "confined process {pid} outlived the server"
        );
    }
}

/// `--allow-unix-socket` and `--hide` reach the confined shell and the
/// editor; a socket outside is refused, a hidden directory shows empty,
/// the host's `/tmp` is not the editor's, and a FIFO swapped in for a file
/// over and over never keeps the server from answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_hidden_paths_and_fifos_through_the_server() {
    let ws = tempfile::tempdir_in(visible_tmp()).unwrap();
    let out = tempfile::tempdir_in("/var/tmp").unwrap();
    let refused = out.path().join("refused.sock");
    let allowed = out.path().join("allowed.sock");
    let refused_listener = std::os::unix::net::UnixListener::bind(&refused).unwrap();
    refused_listener.set_nonblocking(true).unwrap();
    let _allowed_listener = std::os::unix::net::UnixListener::bind(&allowed).unwrap();
    let secrets = out.path().join("secrets");
    std::fs::create_dir(&secrets).unwrap();
    std::fs::write(secrets.join("key"), "PRIVATE\n").unwrap();
    let host_tmp = std::env::temp_dir().join(format!("dsh-mcp-host-{}", std::process::id()));
    std::fs::write(&host_tmp, "HOST-ONLY\n").unwrap();
    let mut c = Client::start(
        ws.path(),
        &[
            "--sandbox",
            "workspace-write",
            "--allow-unix-socket",
            allowed.to_str().unwrap(),
            "--hide",
            secrets.to_str().unwrap(),
        ],
    )
    .await;
    let connect = |path: &Path| {
        format!(
            "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"{}\"); print(\"connected\")'",
            path.display()
        )
    };
    let (text, _) = c
        .call(2, "bash", json!({"command": connect(&refused)}))
        .await;
    assert!(text.contains("Permission denied"), "{text}");
    assert!(
        refused_listener.accept().is_err(),
        "the refused socket was reached"
    );
    let (text, _) = c
        .call(3, "bash", json!({"command": connect(&allowed)}))
        .await;
    assert_eq!(text, "connected");
    let (text, _) = c
        .call(
            4,
            "bash",
            json!({"command": format!("ls -A {} | wc -l", secrets.display())}),
        )
        .await;
    assert_eq!(text, "0");
    let (text, is_error) = c
        .call(
            5,
            "str_replace_editor",
            json!({"command": "view", "path": secrets.join("key")}),
        )
        .await;
    assert!(is_error && !text.contains("PRIVATE"), "{text}");
    let (text, is_error) = c
        .call(
            6,
            "str_replace_editor",
            json!({"command": "view", "path": host_tmp}),
        )
        .await;
    assert!(is_error && !text.contains("HOST-ONLY"), "{text}");
    let _ = std::fs::remove_file(&host_tmp);

    // The confined shell swaps a FIFO and a file while the editor views it.
    let (text, _) = c
        .call(
            7,
            "bash",
            json!({"command": "echo regular > f.txt; mkfifo f.fifo; (python3 -c 'import os,ctypes\nlibc=ctypes.CDLL(None)\nlibc.renameat2(-100,b\"f.txt\",-100,b\"f.fifo\",2)\nopen(\"swapping\",\"w\").close()\nwhile True: libc.renameat2(-100,b\"f.txt\",-100,b\"f.fifo\",2)' >/dev/null 2>&1 &); for i in $(seq 400); do [ -e swapping ] && break; sleep 0.05; done; [ -e swapping ] && echo started"}),
        )
        .await;
    assert_eq!(text, "started");
    let file = ws.path().join("f.txt");
    let mut fifo_seen = false;
    for id in 100..400 {
        let (text, _) = c
            .call(
                id,
                "str_replace_editor",
                json!({"command": "view", "path": file}),
            )
            .await;
        fifo_seen |= text.contains("not a regular file");
    }
    let pong = c.request(9, "ping", json!({})).await;
    assert!(pong["result"].is_object(), "{pong}");
    assert!(fifo_seen, "the swap never showed the FIFO");
    assert!(c.finish().await.success());
}

/// The host's real `git status` in `ws`, as another user than this test's
/// where it may switch (uid 65534, from root), with `safe.directory=*`:
/// `Err` when it found a repository or ran a planted fsmonitor (`marker`).
fn host_git(ws: &Path, marker: &Path) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    let mut command = if unsafe { libc::geteuid() } == 0 {
        let mut c = std::process::Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "git",
        ]);
        c
    } else {
        std::process::Command::new("git")
    };
    let out = command
        .args(["-c", "safe.directory=*", "status", "--porcelain"])
        .current_dir(ws)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", "/nonexistent")
        .env("GIT_CEILING_DIRECTORIES", ws.parent().unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || marker.exists() || !stderr.contains("not a git repository") {
        return Err(format!(
            "git status found a repository in {} (fsmonitor ran: {}): {stderr}",
            ws.display(),
            marker.exists()
        ));
    }
    Ok(())
}

/// A workspace other users can read, under `/var/tmp`, with a directory
/// they may write the marker in.
fn plant_ground() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let ws = dir.path().join("ws");
    let marks = dir.path().join("marks");
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&marks).unwrap();
    for (p, mode) in [(dir.path(), 0o755), (&ws, 0o755), (&marks, 0o777)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    (dir, ws, marks.join("fsmonitor-ran"))
}

/// The shell's half of the plant: `objects/`, `refs/`, a `config` with a
/// `core.fsmonitor`, and its try at `HEAD` (a placeholder is there).
fn plant_command(marker: &Path) -> String {
    format!(
        "mkdir -p objects/info refs/heads; : > objects/info/keep; : > refs/heads/keep; \
         printf '[core]\\n\\tbare = false\\n\\tworktree = .\\n\\tfsmonitor = \"touch {}; :\"\\n' > config; \
         rmdir HEAD; printf 'ref: refs/heads/main\\n' > HEAD; true",
        marker.display()
    )
}

/// `--one-shot`: the editor and one fresh shell per call, in any order,
/// leave no repository at a root that had none; after the server exits
/// another user's `git status` there finds none, and the placeholders are
/// gone with the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_calls_and_the_editor_plant_no_repository() {
    let (_dir, ws, marker) = plant_ground();
    let mut c = Client::start(&ws, &["--sandbox", "workspace-write", "--one-shot"]).await;
    let head = ws.join("HEAD");
    let (text, is_error) = c
        .call(
            2,
            "str_replace_editor",
            json!({"command": "create", "path": head, "file_text": "ref: refs/heads/main\n"}),
        )
        .await;
    assert!(is_error, "{text}");
    assert_eq!(
        text,
        "[sandbox: file access denied under workspace-write mode]"
    );
    c.call(3, "bash", json!({"command": plant_command(&marker)}))
        .await;
    // Between one-shot calls the placeholder stays.
    assert!(
        head.is_dir(),
        "the HEAD placeholder went with the one-shot shell"
    );
    let (text, is_error) = c
        .call(
            4,
            "str_replace_editor",
            json!({"command": "create", "path": head, "file_text": "ref: refs/heads/main\n"}),
        )
        .await;
    assert!(is_error, "{text}");
    c.call(5, "bash", json!({"command": plant_command(&marker)}))
        .await;
    assert!(c.finish().await.success());
    assert!(
        !head.exists() && !ws.join(".git").exists(),
        "the placeholders outlived the server"
    );
    assert!(
        ws.join("config").is_file(),
        "the plant's other half did not land"
    );
    host_git(&ws, &marker).unwrap();
}

/// A server killed with `SIGKILL` leaves its placeholders, empty
/// directories no `git` takes for a repository; a later server keeps them
/// read-only, and leaves them as it found them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_leaves_no_repository() {
    let (_dir, ws, marker) = plant_ground();
    // The killed server's scratch directory goes with this one.
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Client::start_env(
        &ws,
        &["--sandbox", "workspace-write"],
        &[("TMPDIR", tmp.path().to_str())],
    )
    .await;
    let tag = format!("dsh-crash-{}", std::process::id());
    let (text, _) = c
        .call(2, "bash", json!({"command": format!("(exec -a {tag} sleep 1000 &) ; {}", plant_command(&marker))}))
        .await;
    assert!(
        ws.join("HEAD").is_dir() && ws.join(".git").is_dir(),
        "{text}"
    );
    // The shell's tree goes with the server.
    let started = |tag: &str| {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.starts_with(tag.as_bytes()))
            })
            .collect::<Vec<i32>>()
    };
    let mut left = started(&tag);
    for _ in 0..500 {
        if !left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = started(&tag);
    }
    assert!(
        !left.is_empty(),
        "the shell's background process did not start"
    );
    c.child.kill().await.unwrap();
    for pid in left.clone() {
        if gone(pid).await {
            left.retain(|p| *p != pid);
        }
    }
    for pid in &left {
        // SAFETY: a process this test's shell started.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "the shell's processes outlived the killed server: {left:?}"
    );
    // What is left is no repository.
    assert!(ws.join("HEAD").is_dir() && ws.join(".git").is_dir());
    host_git(&ws, &marker).unwrap();
    // A later server over the leftovers: the plant fails the same way.
    let mut c = Client::start(&ws, &["--sandbox", "workspace-write"]).await;
    let (text, is_error) = c
        .call(
            2,
            "str_replace_editor",
            json!({"command": "create", "path": ws.join(".git"), "file_text": "gitdir: inner\n"}),
        )
        .await;
    assert!(is_error, "{text}");
    c.call(3, "bash", json!({"command": plant_command(&marker)}))
        .await;
    assert!(c.finish().await.success());
    assert!(
        ws.join("HEAD").is_dir() && ws.join(".git").is_dir(),
        "the leftovers were removed"
    );
    host_git(&ws, &marker).unwrap();
}

/// `--backend docker`, driven through the real binary (ignored where no
/// Docker daemon runs; `.ci/run` runs it).
mod docker {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn both_tools_work_in_a_container_made_for_the_session() {
        let image = dsh_testbeds::test_image();
        let mut c = Client::start(
            Path::new("/tmp"),
            &["--backend", "docker", "--image", &image],
        )
        .await;
        let (text, error) = c
            .call(
                2,
                "bash",
                json!({"command": "cat /etc/hostname; echo $PWD"}),
            )
            .await;
        assert!(!error, "{text}");
        let (hostname, pwd) = text.split_once('\n').unwrap();
        assert_eq!(pwd, "/tmp");
        let (text, error) = c
            .call(
                3,
                "str_replace_editor",
                json!({"command": "create", "path": "/tmp/a.txt", "file_text": "in the container\n"}),
            )
            .await;
        assert!(!error, "{text}");
        assert_eq!(
            c.call(4, "bash", json!({"command": "cat a.txt"})).await.0,
            "in the container"
        );
        assert!(c.finish().await.success());
        // The container made for the session is gone with it.
        let docker = dsh_docker::connect(None).await.unwrap();
        let err = dsh_docker::Container::existing(docker, hostname)
            .await
            .unwrap_err();
        assert!(
            matches!(err, dsh_docker::DockerError::NoSuchContainer(_)),
            "{err}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn the_container_made_keeps_its_network_and_names_its_memory_kills() {
        let image = dsh_testbeds::test_image();
        let mut c = Client::start(
            Path::new("/tmp"),
            &[
                "--backend",
                "docker",
                "--image",
                &image,
                "--docker-network",
                "none",
                "--memory",
                "64m",
            ],
        )
        .await;
        let (text, error) = c
            .call(2, "bash", json!({"command": "ls /sys/class/net"}))
            .await;
        assert!(!error, "{text}");
        assert_eq!(text, "lo");
        let (text, _) = c
            .call(
                3,
                "bash",
                json!({"command": "head -c 300m /dev/zero | tail > /dev/null; echo after"}),
            )
            .await;
        // The kernel kills `tail`; at times the shell too, when `head` meets
        // the limit again before `tail`'s memory is freed. Either way the
        // limit is named.
        assert!(
            text.ends_with("after\n[killed: memory limit of 64 MiB reached]")
                || text.contains(
                    "[killed: memory limit of 64 MiB reached]\n[shell killed by signal: SIGKILL]\n"
                ),
            "{text}"
        );
        assert!(c.finish().await.success());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn an_existing_container_is_used_and_kept() {
        let bed = dsh_testbeds::Testbed::docker().await;
        let name = bed.container().unwrap().id().to_owned();
        let mut c = Client::start(
            Path::new(&bed.root),
            &[
                "--backend",
                "docker",
                "--container",
                &name,
                "--user",
                "1000",
            ],
        )
        .await;
        assert_eq!(
            c.call(2, "bash", json!({"command": "id -u; echo $PWD"}))
                .await
                .0,
            format!("1000\n{}", bed.root)
        );
        let (text, error) = c
            .call(
                3,
                "str_replace_editor",
                json!({"command": "create", "path": "/etc/x", "file_text": "x"}),
            )
            .await;
        assert!(error, "{text}");
        assert!(text.contains("ermission"), "{text}");
        assert!(c.finish().await.success());
        assert!(
            bed.container()
                .unwrap()
                .run(&["true"], None)
                .await
                .unwrap()
                .status
                .success()
        );
    }

    #[tokio::test]
    #[ignore = "needs a Docker daemon"]
    async fn unreachable_places_are_named() {
        let image = dsh_testbeds::test_image();
        for (args, want) in [
            (
                vec![
                    "--backend",
                    "docker",
                    "--container",
                    "dsh-no-such-container",
                ],
                "dsh-mcp: there is no Docker container `dsh-no-such-container`\n",
            ),
            (
                vec!["--backend", "docker"],
                "dsh-mcp: --backend docker needs --container NAME or --image IMAGE\n",
            ),
            (
                vec![
                    "--backend",
                    "docker",
                    "--container",
                    "task-1",
                    "--docker-network",
                    "none",
                ],
                "dsh-mcp: --docker-network none applies to the container dsh-mcp makes with --image; the existing container `task-1` keeps its own networks (change them with `docker network connect` and `docker network disconnect`)\n",
            ),
            (
                vec![
                    "--backend",
                    "docker",
                    "--image",
                    &image,
                    "--docker-network",
                    "dsh-rs-no-such-network",
                ],
                "dsh-mcp: the Docker network `dsh-rs-no-such-network` does not exist on the daemon (create it with `docker network create dsh-rs-no-such-network`, or use `none`, `bridge` or `host`)\n",
            ),
            (
                vec![
                    "--backend",
                    "docker",
                    "--image",
                    "x",
                    "--sandbox",
                    "workspace-write",
                ],
                "dsh-mcp: --sandbox confines shells on this machine; with --backend docker leave it at danger-full-access (the other side confines them)\n",
            ),
        ] {
            let out = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
                .args(&args)
                .stdin(Stdio::null())
                .output()
                .await
                .unwrap();
            assert!(!out.status.success());
            assert_eq!(String::from_utf8_lossy(&out.stderr), want, "{args:?}");
        }
        let out = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
            .args([
                "--backend",
                "docker",
                "--image",
                "x",
                "--docker-host",
                "unix:///nonexistent.sock",
            ])
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with(
                "dsh-mcp: cannot reach the Docker daemon at unix:///nonexistent.sock: "
            ),
            "{err}"
        );
    }
}

/// `--backend ssh`, driven through the real binary against an sshd of the
/// test's own (ignored where no sshd is installed; `.ci/run` runs it).
mod ssh {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs sshd (.ci/engines installs it)"]
    async fn both_tools_work_on_the_host() {
        let sshd = dsh_testbeds::Sshd::start();
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let target = sshd.target();
        let login = format!("{}@127.0.0.1:{}", target.user, sshd.port());
        let mut c = Client::start(
            &root,
            &[
                "--backend",
                "ssh",
                "--ssh",
                &login,
                "--ssh-identity",
                target.identity.to_str().unwrap(),
                "--ssh-known-hosts",
                target.known_hosts.to_str().unwrap(),
            ],
        )
        .await;
        let (text, error) = c
            .call(
                2,
                "bash",
                json!({"command": "echo $PWD; echo ${SSH_CONNECTION%% *}"}),
            )
            .await;
        assert!(!error, "{text}");
        assert_eq!(text, format!("{}\n127.0.0.1", root.display()));
        let path = root.join("a.txt");
        let (text, error) = c
            .call(
                3,
                "str_replace_editor",
                json!({"command": "create", "path": path, "file_text": "over sftp\n"}),
            )
            .await;
        assert!(!error, "{text}");
        assert_eq!(
            c.call(4, "bash", json!({"command": "cat a.txt"})).await.0,
            "over sftp"
        );
        assert_eq!(
            c.call(5, "bash", json!({"command": "kill -9 $$"})).await.0,
            "[shell killed by signal: SIGKILL]\nThe persistent bash shell was reset; the next bash call starts from the workspace with a fresh current directory and environment."
        );
        assert!(c.finish().await.success());
    }

    #[tokio::test]
    #[ignore = "needs sshd (.ci/engines installs it)"]
    async fn an_unknown_host_key_is_refused() {
        let sshd = dsh_testbeds::Sshd::start();
        let target = sshd.target();
        let empty = tempfile::NamedTempFile::new().unwrap();
        let login = format!("{}@127.0.0.1:{}", target.user, sshd.port());
        let out = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
            .args(["--backend", "ssh", "--ssh", &login, "--ssh-identity"])
            .arg(&target.identity)
            .arg("--ssh-known-hosts")
            .arg(empty.path())
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        assert!(!out.status.success());
        let known = empty.path().display();
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "dsh-mcp: the host key of 127.0.0.1:{port} is not in {known}: add it (for example with `ssh-keyscan -p {port} 127.0.0.1 >> {known}`) after checking it\n",
                port = sshd.port()
            )
        );
    }
}

/// Stdin and stdout that are files, not pipes: the server falls back to
/// tokio's stdin and stdout and answers the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_as_stdio_work_too() {
    let dir = tempfile::tempdir().unwrap();
    let requests = dir.path().join("requests.jsonl");
    let responses = dir.path().join("responses.jsonl");
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "file-client", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
    ];
    let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    text.push_str("{not json\n");
    std::fs::write(&requests, text).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
        .arg("--workspace")
        .arg(dir.path())
        .env_remove("DSH_HOME")
        .stdin(std::fs::File::open(&requests).unwrap())
        .stdout(std::fs::File::create(&responses).unwrap())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .status()
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
    let answers: Vec<Value> = std::fs::read_to_string(&responses)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers[0]["result"]["serverInfo"]["name"], "dsh-mcp");
    assert!(
        answers
            .iter()
            .any(|a| a["id"] == 2 && a["result"] == json!({})),
        "{answers:?}"
    );
    assert!(
        answers.iter().any(|a| a["error"]["code"] == -32700),
        "{answers:?}"
    );
}

/// `--best-effort-limits` says on stderr, once at start, how each limit is
/// kept and which is not kept at all (here, with no cgroup parent: memory
/// by `RLIMIT_AS`, processes not at all, and why), and the server serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn best_effort_limits_say_on_stderr_what_holds_by_what() {
    let ws = tempfile::tempdir_in(visible_tmp()).unwrap();
    let not_held = "dsh-mcp: the process limit (50) is not held at all: no cgroup parent was given (`ResourceLimits::cgroup_parent`; `dsh-mcp --cgroup-parent`: a cgroup path, or `auto` in a delegated cgroup, see \"Delegated cgroups\" in docs/limits.md)";
    let memory = "dsh-mcp: the memory limit (256 MiB) is held by RLIMIT_AS, per process (its address space), not for the whole tree";
    for (mode, extra, want) in [
        ("danger-full-access", &[][..], vec![not_held, memory]),
        (
            "workspace-write",
            &["--tmp-size", "64m", "--open-files", "99"][..],
            vec![
                not_held,
                memory,
                "dsh-mcp: the /tmp size limit (64 MiB) is held by the private /tmp's tmpfs (size=)",
                "dsh-mcp: the open-file limit (99) is held by RLIMIT_NOFILE, per process",
            ],
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
            .args([
                "--sandbox",
                mode,
                "--best-effort-limits",
                "--memory",
                "256m",
                "--pids-limit",
                "50",
            ])
            .args(extra)
            .arg("--workspace")
            .arg(ws.path())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{mode}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("dsh-mcp: the "))
            .collect();
        assert_eq!(lines, want, "{mode}: {err}");
    }
    // Without the flag, nothing is said: the same limits stop the server.
    let out = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
        .args(["--memory", "256m", "--pids-limit", "50", "--workspace"])
        .arg(ws.path())
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("is held by"), "{err}");
}

/// The private `/tmp`'s bounds are reported and refused at start as they
/// always were, in their place among the other limits: kept by the tmpfs
/// in a restricted mode, not at all in danger-full-access (with the
/// shell's own reasons first), and a refusal names them with the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tmp_bounds_say_on_stderr_what_holds_by_what() {
    let ws = tempfile::tempdir_in(visible_tmp()).unwrap();
    let no_cgroup = "no cgroup parent was given (`ResourceLimits::cgroup_parent`; `dsh-mcp --cgroup-parent`: a cgroup path, or `auto` in a delegated cgroup, see \"Delegated cgroups\" in docs/limits.md)";
    let no_tmp = "only the sandbox's restricted modes make a private /tmp";
    let flags = [
        "--best-effort-limits",
        "--file-size",
        "1m",
        "--tmp-inodes",
        "500",
        "--cpus",
        "0.5",
        "--tmp-size",
        "64m",
        "--open-files",
        "99",
    ];
    let restricted = vec![
        format!("dsh-mcp: the CPU limit (0.5 CPUs) is not held at all: {no_cgroup}"),
        "dsh-mcp: the /tmp size limit (64 MiB) is held by the private /tmp's tmpfs (size=)"
            .to_owned(),
        "dsh-mcp: the /tmp inode limit (500) is held by the private /tmp's tmpfs (nr_inodes=)"
            .to_owned(),
        "dsh-mcp: the open-file limit (99) is held by RLIMIT_NOFILE, per process".to_owned(),
        "dsh-mcp: the file-size limit (1 MiB) is held by RLIMIT_FSIZE, per process".to_owned(),
    ];
    let full = vec![
        format!("dsh-mcp: the CPU limit (0.5 CPUs) is not held at all: {no_cgroup}; {no_tmp}"),
        format!("dsh-mcp: the /tmp size limit (64 MiB) is not held at all: {no_cgroup}; {no_tmp}"),
        format!("dsh-mcp: the /tmp inode limit (500) is not held at all: {no_cgroup}; {no_tmp}"),
        "dsh-mcp: the open-file limit (99) is held by RLIMIT_NOFILE, per process".to_owned(),
        "dsh-mcp: the file-size limit (1 MiB) is held by RLIMIT_FSIZE, per process".to_owned(),
    ];
    for (mode, want) in [("read-only", restricted), ("danger-full-access", full)] {
        let out = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
            .args(["--sandbox", mode])
            .args(flags)
            .arg("--workspace")
            .arg(ws.path())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{mode}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("dsh-mcp: the "))
            .collect();
        assert_eq!(lines, want, "{mode}: {err}");
    }
    // Without best effort, one refusal names every limit not kept.
    let out = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
        .args([
            "--sandbox",
            "danger-full-access",
            "--tmp-inodes",
            "500",
            "--pids-limit",
            "50",
            "--tmp-size",
            "64m",
            "--workspace",
        ])
        .arg(ws.path())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "dsh-mcp: the process limit, the /tmp size limit and the /tmp inode limit cannot be enforced: {no_cgroup}; {no_tmp}\n"
        )
    );
}

/// The limit flags reach the local shell in every mode (rlimits and the
/// private `/tmp` here; the cgroup ones are the VM's tests), and a limit
/// that cannot be kept stops the server before it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_flags_reach_the_shell_and_unkeepable_ones_stop_the_server() {
    let ws = tempfile::tempdir_in(visible_tmp()).unwrap();
    // The servers end killed: their scratch directories go with this one.
    let tmp = tempfile::tempdir().unwrap();
    for mode in ["danger-full-access", "workspace-write"] {
        let mut c = Client::start_env(
            ws.path(),
            &["--sandbox", mode, "--open-files", "77", "--file-size", "1m"],
            &[("TMPDIR", tmp.path().to_str())],
        )
        .await;
        let (text, _) = c
            .call(
                2,
                "bash",
                json!({"command": "ulimit -n; head -c 2000000 /dev/zero > big; stat -c %s big"}),
            )
            .await;
        assert!(text.starts_with("77\n"), "{mode}: {text}");
        assert!(text.contains("File too large"), "{mode}: {text}");
        assert!(text.contains("1048576"), "{mode}: {text}");
        // The editor's writes are bounded the same way: nothing written.
        let big = ws.path().join(format!("editor-{mode}.txt"));
        let (text, is_error) = c
            .call(
                3,
                "str_replace_editor",
                json!({"command": "create", "path": big, "file_text": "x".repeat(2_000_000)}),
            )
            .await;
        assert!(is_error, "{mode}: {text}");
        assert_eq!(
            text,
            format!(
                "Nothing was written: {}: File too large (the file would be 2000000 bytes; no process here may write a file larger than 1048576 bytes).",
                big.display()
            ),
            "{mode}"
        );
        assert!(!big.exists(), "{mode}");
    }
    let mut c = Client::start_env(
        ws.path(),
        &["--sandbox", "workspace-write", "--tmp-size", "16m"],
        &[("TMPDIR", tmp.path().to_str())],
    )
    .await;
    let (text, _) = c
        .call(
            2,
            "bash",
            json!({"command": "head -c 40000000 /dev/zero > /tmp/f; echo rc=$?"}),
        )
        .await;
    assert!(text.contains("No space left on device"), "{text}");
    assert!(text.contains("rc=1"), "{text}");
    for (args, want) in [
        (
            vec!["--memory", "256m"],
            "dsh-mcp: the memory limit cannot be enforced: no cgroup parent was given (`ResourceLimits::cgroup_parent`; `dsh-mcp --cgroup-parent`: a cgroup path, or `auto` in a delegated cgroup, see \"Delegated cgroups\" in docs/limits.md)\n",
        ),
        (
            vec!["--tmp-size", "64m"],
            "dsh-mcp: the /tmp size limit cannot be enforced: only the sandbox's restricted modes make a private /tmp\n",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
            .args(&args)
            .arg("--workspace")
            .arg(ws.path())
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), want, "{args:?}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
        .args(["--memory", "lots"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"lots\" is not a size"), "{err}");
}

/// With stderr a pipe (as every MCP client runs it), the logs are plain
/// text: not one escape byte, even with every level on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_to_a_pipe_carry_no_colour() {
    let dir = tempfile::tempdir().unwrap();
    let requests = dir.path().join("requests.jsonl");
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "file-client", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&requests, text).unwrap();
    let out = tokio::time::timeout(
        BOUND,
        Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
            .arg("--workspace")
            .arg(dir.path())
            .env_remove("DSH_HOME")
            .env("RUST_LOG", "trace")
            .stdin(std::fs::File::open(&requests).unwrap())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the server did not exit at the end of its input")
    .unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!log.trim().is_empty(), "RUST_LOG=trace logged nothing");
    assert!(!out.stderr.contains(&0x1b), "an escape byte in {log:?}");
}

/// `--help`: every flag names its environment variable, and the help says
/// what a client that abandons a call without cancelling it gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_names_every_flags_environment_variable() {
    let out = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
        .arg("--help")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let help = String::from_utf8(out.stdout).unwrap();
    // Each option's block: from its `--name` line to the next one.
    let mut blocks: Vec<(String, String)> = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        let option = trimmed
            .strip_prefix("-h, ")
            .or_else(|| trimmed.strip_prefix("-V, "))
            .unwrap_or(trimmed);
        if line.starts_with("  ") && option.starts_with("--") {
            let name = option.split_whitespace().next().unwrap().to_owned();
            blocks.push((name, String::new()));
        } else if let Some((_, text)) = blocks.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    let names: Vec<&str> = blocks.iter().map(|(n, _)| n.as_str()).collect();
    for flag in [
        "--session-log",
        "--docker-host",
        "--max-timeout-secs",
        "--hide",
    ] {
        assert!(names.contains(&flag), "{flag} missing from {names:?}");
    }
    for (name, text) in &blocks {
        if name == "--help" || name == "--version" {
            continue;
        }
        // A list in one variable is named in the plural.
        let plural = if name == "--allow-domain" { "S" } else { "" };
        let want = format!(
            "[env: DSH_{}{plural}=",
            name.trim_start_matches("--")
                .replace('-', "_")
                .to_uppercase()
        );
        assert!(text.contains(&want), "{name} does not show {want}]: {text}");
    }
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("Over stdio, a client that abandons a call without sending it"),
        "{help}"
    );
}

/// `--copy-on-write` over stdio: the one owner works in its own view of
/// the workspace, at the workspace's path, shell and editor alike; the
/// workspace is unchanged; the default layers directory (under `TMPDIR`)
/// is gone when the server ends. The flag without `--workspace` is
/// refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_on_write_gives_the_one_owner_a_view() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(ws.join("a.txt"), "base\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "here\n").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let tmp_dir = tmp.path().to_str().unwrap();

    let no_workspace = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
        .arg("--copy-on-write")
        .env_remove("DSH_WORKSPACE")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!no_workspace.status.success());
    assert!(
        String::from_utf8_lossy(&no_workspace.stderr).contains("--workspace <DIR>"),
        "{no_workspace:?}"
    );
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);

    let mut c = Client::start_env(&ws, &["--copy-on-write"], &[("TMPDIR", Some(tmp_dir))]).await;
    let (out, err) = c
        .call(
            2,
            "bash",
            json!({"command": "pwd && echo view > a.txt && rm gone.txt && cat a.txt"}),
        )
        .await;
    assert!(!err, "{out}");
    assert_eq!(out, format!("{}\nview", ws.display()));
    let new = ws.join("new.txt");
    let (out, err) = c
        .call(
            3,
            "str_replace_editor",
            json!({"command": "create", "path": new, "file_text": "from the editor\n"}),
        )
        .await;
    assert!(!err, "{out}");
    let (out, err) = c
        .call(
            4,
            "str_replace_editor",
            json!({"command": "view", "path": ws.join("a.txt")}),
        )
        .await;
    assert!(!err && out.contains("view"), "{out}");
    let (out, _) = c
        .call(5, "bash", json!({"command": "cat new.txt; ls -1"}))
        .await;
    assert_eq!(out, "from the editor\na.txt\nnew.txt");
    // The workspace itself is as it was.
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "base\n");
    assert!(ws.join("gone.txt").exists());
    assert!(!new.exists());
    // The layers live under TMPDIR while the server runs (only this user
    // may reach them), and go with it.
    let made: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(made.len(), 1, "{made:?}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &made[0].as_ref().unwrap().metadata().unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);
    let status = c.finish().await;
    assert!(status.success(), "{status:?}");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `--copy-on-write` where user namespaces are denied: the server does not
/// start, and says why in one line (and leaves no layers directory). It
/// runs in a user namespace of the test's own whose nested user namespaces
/// are limited to none (a setting of that namespace only), in every
/// sandbox mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_on_write_refuses_to_start_without_user_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    for mode in ["danger-full-access", "workspace-write", "read-only"] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"));
        command
            .arg("--workspace")
            .arg(&ws)
            .args(["--copy-on-write", "--sandbox", mode])
            .env("TMPDIR", tmp.path())
            .stdin(Stdio::null());
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
        let out = tokio::time::timeout(Duration::from_secs(60), command.output())
            .await
            .expect("the server ended")
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{mode}: {stderr}");
        let line = stderr.lines().last().unwrap_or_default();
        assert!(
            line.starts_with(
                "dsh-mcp: --copy-on-write: the copy-on-write view of the workspace could not be made: "
            ) && line.contains("user namespaces"),
            "{mode}: {stderr}"
        );
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "{mode}");
    }
}

/// `--allow-domain` where nothing could enforce it stops the server,
/// naming the flag and the mode (or `--network`).
#[tokio::test]
async fn allow_domain_is_refused_where_nothing_enforces_it() {
    for (args, want) in [
        (
            vec!["--allow-domain", "pypi.org"],
            "dsh-mcp: --allow-domain needs --sandbox read-only or workspace-write: with --sandbox danger-full-access nothing keeps the shell off the network\n",
        ),
        (
            vec![
                "--sandbox",
                "workspace-write",
                "--network",
                "--allow-domain",
                "pypi.org",
            ],
            "dsh-mcp: --allow-domain and --network exclude each other: --network already opens every address (use one or the other)\n",
        ),
        (
            vec!["--sandbox", "read-only", "--allow-domain", "a.*.org"],
            "dsh-mcp: the allowed domain \"a.*.org\" is not HOST[:PORT] or *.DOMAIN[:PORT]: a wildcard is only a leading '*.' (subdomains of a domain)\n",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"))
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), want, "{args:?}");
    }
}

/// `DSH_ALLOW_DOMAINS` (as `--allow-domain`): the confined shell's curl
/// reaches the named host through the proxy, and the same server by its
/// IP literal gets the 403 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_domain_reaches_the_named_host_only() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = stream
                .write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nreached\n",
                )
                .await;
        }
    });
    let dir = tempfile::tempdir_in(visible_tmp()).unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let allowed = format!("localhost:{port},pypi.org");
    let mut c = Client::start_env(
        &ws,
        &["--sandbox", "workspace-write"],
        &[("DSH_ALLOW_DOMAINS", Some(&allowed))],
    )
    .await;
    let (text, _) = c
        .call(
            2,
            "bash",
            json!({"command": format!("curl -sS http://localhost:{port}/; curl -sS http://127.0.0.1:{port}/; curl -sS --noproxy '*' http://127.0.0.1:{port}/; echo \"exit=$?\"")}),
        )
        .await;
    assert!(text.contains("reached"), "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{port} is not in --allow-domain")),
        "{text}"
    );
    assert!(text.contains("exit=7"), "{text}");
    assert_eq!(text.matches("reached").count(), 1, "{text}");
    assert!(c.finish().await.success());
    server.abort();
}
