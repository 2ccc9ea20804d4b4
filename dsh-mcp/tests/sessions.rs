//! Agent sessions: development loops scripted as a model acts, through the
//! real `dsh-mcp` binary over stdio, in each mode: `danger-full-access`,
//! `--sandbox workspace-write` (the persistent confined shell) and
//! `--backend docker` where the test image allows (busybox and a static
//! bash: no Python, no compiler).
//!
//! Each step asserts what matters to the agent — the tests pass, the diff
//! is the fix, the state is kept, the server answers — not only the text's
//! shape. Every test is under `agent_session::`, so `.ci/run` times them apart
//! from the rest of the workspace's tests.
//!
//! What they need of the host: `/usr/bin/python3` (its standard library),
//! git, curl, make and a Rust toolchain on `PATH` (the one building this
//! test); the Python project also needs `venv` and pytest (Debian's
//! `python3-venv` and `python3-pytest`), so it is ignored unless asked for
//! (`.ci/run` installs both and runs it with `--ignored`). `DSH_TEST_PYTHON`
//! names another Python for every session (`.ci/run` runs the rest with
//! one that has no pytest, to show that they need none). Nothing is
//! fetched from a network.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Client;
use serde_json::{Value, json};

/// The Python the sessions use: `DSH_TEST_PYTHON`, else the system's,
/// whose pytest `.ci/run` installs (`python3-pytest`); a venv made with
/// `--system-site-packages` sees it.
fn python() -> String {
    std::env::var("DSH_TEST_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".to_owned())
}

/// A job as agents start them: in the background, printing to the terminal.
/// It counts until `stop` exists, each step a line of 1 KiB, and then writes
/// `done.txt`. A plain command line, so that bash's notice of its end is one
/// line.
const COUNTER: &str = r#"bash -c 'i=0; until [ -e stop ]; do i=$((i+1)); printf "tick %s %01000d\n" $i 0; echo $i > count.txt; done; echo done > done.txt' &"#;

/// Variables of the environment running the tests that a session must not
/// inherit: without the sandbox the shell keeps the host's environment, and
/// a CI machine's `PYTHONDONTWRITEBYTECODE=1` would leave the bytecode cache
/// (which the stale-bytecode round is about) unwritten.
const HOST_CHOICES: &[(&str, Option<&str>)] = &[
    ("PYTHONDONTWRITEBYTECODE", None),
    ("PYTHONPYCACHEPREFIX", None),
];

/// Where a session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No sandbox.
    Full,
    /// `--sandbox workspace-write`.
    WorkspaceWrite,
    /// `--sandbox read-only`.
    ReadOnly,
    /// `--backend docker --image dsh-test`.
    Docker,
}

/// One agent's session: the server, and the directory it works in.
struct Session {
    client: Client,
    next_id: u64,
    /// The project directory, absolute, as the shell and the editor see it.
    root: PathBuf,
    mode: Mode,
    name: &'static str,
    _dir: Option<tempfile::TempDir>,
}

/// Where the sessions' projects live: where a confined shell sees them (its
/// `/tmp` is its own), and outside this checkout, whose `Cargo.toml` would
/// otherwise claim the Rust session's crate for its workspace (`target/`,
/// where `CARGO_TARGET_TMPDIR` is by default, is inside it).
fn projects() -> PathBuf {
    let var_tmp = Path::new("/var/tmp");
    if var_tmp.is_dir() {
        var_tmp.to_owned()
    } else {
        common::visible_tmp()
    }
}

/// The status a result ends with (`[exit code: N]`), 0 when it has none.
fn status_of(text: &str) -> i32 {
    text.rsplit('\n')
        .next()
        .and_then(|last| last.strip_prefix("[exit code: "))
        .and_then(|rest| rest.strip_suffix(']'))
        .map_or(0, |n| n.parse().unwrap())
}

impl Session {
    async fn open(name: &'static str, mode: Mode) -> Session {
        Session::open_with(name, mode, &[], &[]).await
    }

    /// A session whose server gets the flags `more` and the environment
    /// changes `env` too.
    async fn open_with(
        name: &'static str,
        mode: Mode,
        more: &[&str],
        env: &[(&str, Option<&str>)],
    ) -> Session {
        let env: Vec<(&str, Option<&str>)> = HOST_CHOICES.iter().chain(env).copied().collect();
        match mode {
            Mode::Full | Mode::WorkspaceWrite | Mode::ReadOnly => {
                let dir = tempfile::tempdir_in(projects()).unwrap();
                let root = std::fs::canonicalize(dir.path()).unwrap();
                let mut extra: Vec<&str> = match mode {
                    Mode::Full => vec![],
                    Mode::ReadOnly => vec!["--sandbox", "read-only"],
                    _ => vec!["--sandbox", "workspace-write"],
                };
                extra.extend(more);
                let client = Client::start_env(&root, &extra, &env).await;
                Session {
                    client,
                    next_id: 2,
                    root,
                    mode,
                    name,
                    _dir: Some(dir),
                }
            }
            Mode::Docker => {
                let image = dsh_testbeds::test_image();
                let mut extra = vec!["--backend", "docker", "--image", &image];
                extra.extend(more);
                let client = Client::start_env(Path::new("/tmp"), &extra, &env).await;
                let mut session = Session {
                    client,
                    next_id: 2,
                    root: PathBuf::from("/tmp/project"),
                    mode,
                    name,
                    _dir: None,
                };
                session.ok("mkdir -p /tmp/project && cd /tmp/project").await;
                session
            }
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A `bash` call's text; the call itself must not fail.
    async fn bash(&mut self, command: &str) -> String {
        let id = self.id();
        let (text, is_error) = self
            .client
            .call(id, "bash", json!({"command": command}))
            .await;
        assert!(!is_error, "{command}: {text}");
        text
    }

    /// A `bash` call that must exit 0; its text.
    async fn ok(&mut self, command: &str) -> String {
        let text = self.bash(command).await;
        assert_eq!(status_of(&text), 0, "{command}: {text}");
        text
    }

    /// A `str_replace_editor` call that must succeed; its text.
    async fn edit(&mut self, mut args: Value) -> String {
        let rel = args["path"].as_str().unwrap().to_owned();
        args["path"] = json!(self.path(&rel));
        let id = self.id();
        let (text, is_error) = self.client.call(id, "str_replace_editor", args).await;
        assert!(!is_error, "{text}");
        text
    }

    async fn create(&mut self, rel: &str, text: &str) {
        self.edit(json!({"command": "create", "path": rel, "file_text": text}))
            .await;
    }

    async fn replace(&mut self, rel: &str, old: &str, new: &str) {
        self.edit(json!({"command": "str_replace", "path": rel, "old_str": old, "new_str": new}))
            .await;
    }

    fn path(&self, rel: &str) -> String {
        self.root.join(rel).display().to_string()
    }

    async fn close(self) {
        let Session {
            client, name, mode, ..
        } = self;
        assert!(client.finish().await.success(), "session {name} ({mode:?})");
    }
}

/// The note a clipped result ends with.
fn dsh_tool_note() -> &'static str {
    "<response clipped><NOTE>To save on context only part of this file has been shown to you. You should retry this tool after you have searched inside the file with `grep -n` in order to find the line numbers of what you are looking for.</NOTE>"
}

/// Fails with what to install when the sessions' Python has no pytest.
fn needs_pytest() {
    let py = python();
    let ok = std::process::Command::new(&py)
        .args(["-c", "import ensurepip, pytest"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the Python project needs {py} with venv and pytest (Debian: python3-venv python3-pytest; .ci/run installs them)"
    );
}

/// Runs `git` on the host in `dir`, as a harness preparing a checkout.
fn host_git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.email=host@example.com", "-c", "user.name=Host"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// A port free on this host's loopback just now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The editor's edits are seen by the next command: ten rounds of create →
/// import → same-size `str_replace` → import, each within a second, all
/// run the new code (Python's bytecode cache keys on the source's time in
/// whole seconds and its size).
async fn stale_bytecode(mode: Mode) {
    let py = python();
    let mut s = Session::open("stale bytecode", mode).await;
    let mut fresh = 0;
    for i in 0..10 {
        let module = format!("round{i}");
        s.create(&format!("{module}.py"), "VALUE = 'old'\n").await;
        let import = format!("{py} -c 'import {module}; print({module}.VALUE)'");
        assert_eq!(s.ok(&import).await, "old");
        // The cache the round is about was written.
        let cached = s
            .ok(&format!("ls __pycache__ | grep -c '^{module}\\.'"))
            .await;
        assert_eq!(cached, "1", "no bytecode cached for {module}");
        s.replace(&format!("{module}.py"), "'old'", "'new'").await;
        match s.ok(&import).await.as_str() {
            "new" => fresh += 1,
            other => assert_eq!(other, "old"),
        }
    }
    eprintln!("stale bytecode ({mode:?}): {fresh} of 10 imports ran the new code");
    assert_eq!(fresh, 10, "imports that ran the edited code, of 10");
    s.close().await;
}

/// A Python project: a venv, a dependency installed from a wheel built
/// here, pytest failing, the editor's fix, pytest passing, and `git diff`
/// showing exactly the fix.
async fn python_project(mode: Mode) {
    needs_pytest();
    let py = python();
    // A package index handed over with `--env`, which the venv's pip reads
    // (installs below name their wheel and use no index).
    let index = "PIP_INDEX_URL=http://127.0.0.1:9/simple";
    let mut s = Session::open_with("python project", mode, &["--env", index], &[]).await;
    let files = [
        (
            ".gitignore",
            ".venv/\ndist/\n__pycache__/\n.pytest_cache/\n",
        ),
        (
            "calc.py",
            "from mathutil import double\n\n\ndef add(a, b):\n    return a - b\n\n\ndef twice_sum(a, b):\n    return double(add(a, b))\n",
        ),
        (
            "test_calc.py",
            "from calc import add, twice_sum\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_twice_sum():\n    assert twice_sum(1, 2) == 6\n",
        ),
    ];
    if mode == Mode::WorkspaceWrite {
        // A confined shell cannot make or change a repository (`.git` is
        // read-only in its view): the host checks the project out first,
        // as a benchmark's harness does.
        for (rel, text) in files {
            std::fs::write(s.root.join(rel), text).unwrap();
        }
        host_git(&s.root, &["init", "-q"]);
        host_git(&s.root, &["add", "-A"]);
        host_git(&s.root, &["commit", "-qm", "calc"]);
        let refused = s.bash("git commit -q --allow-empty -m mine").await;
        assert!(refused.contains("Read-only file system"), "{refused}");
        assert!(refused.contains("\n[exit code: 128]\n"), "{refused}");
    } else {
        s.ok(
            "git init -q && git config user.email agent@example.com && git config user.name Agent",
        )
        .await;
        for (rel, text) in files {
            s.create(rel, text).await;
        }
        let left = s
            .ok("git add -A && git commit -qm 'calc' && git status --short | wc -l")
            .await;
        assert_eq!(left.trim(), "0", "nothing left uncommitted");
    }
    // The dependency, as a wheel built by hand (no network, no setuptools).
    let built = s
        .ok(&format!(
            r#"mkdir -p dist && {py} - <<'EOF'
import base64, hashlib, zipfile
files = {{
    "mathutil/__init__.py": "def double(x):\n    return 2 * x\n",
    "mathutil-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: mathutil\nVersion: 1.0\n",
    "mathutil-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}}
record = []
with zipfile.ZipFile("dist/mathutil-1.0-py3-none-any.whl", "w") as z:
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{{path}},sha256={{digest}},{{len(data)}}")
        z.writestr(path, data)
    record.append("mathutil-1.0.dist-info/RECORD,,")
    z.writestr("mathutil-1.0.dist-info/RECORD", "\n".join(record) + "\n")
print("built", *z.namelist())
EOF"#
        ))
        .await;
    assert!(built.starts_with("built mathutil/__init__.py"), "{built}");
    let installed = s
        .ok(&format!(
            "{py} -m venv --system-site-packages .venv && . .venv/bin/activate \
             && pip install --no-index --disable-pip-version-check dist/mathutil-1.0-py3-none-any.whl"
        ))
        .await;
    assert!(
        installed.contains("Successfully installed mathutil-1.0"),
        "{installed}"
    );
    // The venv stays active: the next calls' `python` is its own.
    let python = s.ok("command -v python").await;
    assert_eq!(python, s.path(".venv/bin/python"));
    // pip reads the index it was given.
    let pip = s
        .ok("pip config debug 2>/dev/null | grep -c PIP_INDEX_URL || true")
        .await;
    assert_eq!(pip, "1", "pip does not see PIP_INDEX_URL");
    let failing = s.bash("python -m pytest -q").await;
    assert_eq!(status_of(&failing), 1, "{failing}");
    assert!(failing.contains("2 failed"), "{failing}");
    // The fix, of the same size (the stale-bytecode rounds show why that
    // matters).
    s.replace("calc.py", "return a - b", "return a + b").await;
    let passing = s.bash("python -m pytest -q").await;
    assert_eq!(status_of(&passing), 0, "{passing}");
    assert!(passing.contains("2 passed"), "{passing}");
    let diff = s.ok("git diff").await;
    let changed: Vec<&str> = diff
        .lines()
        .filter(|l| {
            (l.starts_with('+') || l.starts_with('-'))
                && !l.starts_with("+++")
                && !l.starts_with("---")
        })
        .collect();
    assert_eq!(
        changed,
        ["-    return a - b", "+    return a + b"],
        "{diff}"
    );
    assert!(diff.starts_with("diff --git a/calc.py b/calc.py"), "{diff}");
    // Coloured output reaches the model as plain text.
    let coloured = s.bash("python -m pytest -q --color=yes").await;
    assert!(!coloured.contains('\x1b'), "{coloured:?}");
    assert!(coloured.contains("2 passed"), "{coloured}");
    s.close().await;
}

/// A Rust crate: `cargo new`, test, a same-size edit that breaks it, test,
/// the fix, test; coloured cargo output normalized.
async fn rust_crate(mode: Mode) {
    let mut s = Session::open("rust crate", mode).await;
    let first = s
        .bash("cargo new --offline --vcs none --lib tiny 2>&1 && cd tiny && cargo test --offline --color always 2>&1")
        .await;
    assert_eq!(status_of(&first), 0, "{first}");
    assert!(!first.contains('\x1b'), "{first:?}");
    assert!(first.contains("test result: ok. 1 passed"), "{first}");
    // The shell stayed in the crate.
    assert_eq!(s.ok("pwd").await, s.path("tiny"));
    s.replace("tiny/src/lib.rs", "left + right", "left - right")
        .await;
    let broken = s.bash("cargo test --offline 2>&1").await;
    assert_eq!(status_of(&broken), 101, "{broken}");
    assert!(broken.contains("test result: FAILED"), "{broken}");
    s.replace("tiny/src/lib.rs", "left - right", "left + right")
        .await;
    let fixed = s.bash("cargo test --offline --color always 2>&1").await;
    assert_eq!(status_of(&fixed), 0, "{fixed}");
    assert!(fixed.contains("test result: ok. 1 passed"), "{fixed}");
    assert!(!fixed.contains('\x1b'), "{fixed:?}");
    s.close().await;
}

/// `make` in a fast edit → build loop: every same-size edit is rebuilt, and
/// no source is ever ahead of the clock (`make` would warn of clock skew).
async fn make_loop(mode: Mode) {
    let mut s = Session::open("make loop", mode).await;
    s.create("Makefile", "out.txt: src.txt\n\tcp src.txt out.txt\n")
        .await;
    s.create("src.txt", "round 0\n").await;
    assert_eq!(s.ok("make 2>&1").await, "cp src.txt out.txt");
    for i in 1..=5 {
        s.replace(
            "src.txt",
            &format!("round {}", i - 1),
            &format!("round {i}"),
        )
        .await;
        let built = s.ok("make 2>&1").await;
        assert_eq!(built, "cp src.txt out.txt", "round {i}");
        assert_eq!(s.ok("cat out.txt").await, format!("round {i}"));
        assert_eq!(s.ok("make 2>&1").await, "make: 'out.txt' is up to date.");
    }
    s.close().await;
}

/// A server started in one call, queried in the next, gone after a reset.
async fn background_server(mode: Mode) {
    let py = python();
    let mut s = Session::open("background server", mode).await;
    let port = free_port();
    s.ok("echo hello from the server > hello.txt").await;
    let (start, fetch) = match mode {
        Mode::Docker => (
            format!("httpd -f -p 127.0.0.1:{port} -h . & echo $!"),
            format!("wget -q -O - http://127.0.0.1:{port}/hello.txt"),
        ),
        _ => (
            format!("{py} -u -m http.server {port} --bind 127.0.0.1 > server.log 2>&1 & echo $!"),
            format!("curl -sS http://127.0.0.1:{port}/hello.txt"),
        ),
    };
    let started = s.ok(&start).await;
    // The job's start line, `[1] PID`.
    let pid: i32 = started
        .strip_prefix("[1] ")
        .and_then(|rest| rest.lines().next())
        .expect(&started)
        .parse()
        .expect(&started);
    // As an agent waits for a server: poll until it answers.
    let answer = s
        .ok(&format!(
            "for i in $(seq 100); do {fetch} 2>/dev/null && exit_now=1 && break; sleep 0.05; done; [ -n \"$exit_now\" ]"
        ))
        .await;
    assert_eq!(answer, "hello from the server");
    // Still there a call later.
    assert_eq!(s.ok(&fetch).await, "hello from the server");
    // The agent resets its shell.
    let reset = s.bash("exit").await;
    assert!(reset.contains("was reset"), "{reset}");
    let after = s.bash(&format!("{fetch}; echo \"fetch: $?\"")).await;
    assert!(
        !after.contains("hello from the server") && !after.ends_with("fetch: 0"),
        "{after}"
    );
    if mode == Mode::Full {
        assert!(common::gone(pid).await, "the server outlived the reset");
    }
    s.close().await;
}

/// Jobs left running with `&` that print to the terminal, as agents start
/// them, keep running while no call is under way: a counter (its count read
/// from outside, through the file it rewrites) goes on, and a Python HTTP
/// server that logs every request to the terminal answers 3,000 requests
/// from this process. The next call carries nothing they printed.
async fn printing_jobs_run_between_calls(mode: Mode) {
    // Workspace-write with the network on, so that this process reaches the
    // server on loopback.
    let net: &[&str] = match mode {
        Mode::WorkspaceWrite => &["--network"],
        _ => &[],
    };
    let py = python();
    let mut s = Session::open_with("printing jobs between calls", mode, net, &[]).await;
    // It counts until this process makes `stop`, then says it is done. Each
    // step prints a line of 1 KiB: 10,000 steps are more than every buffer
    // between it and the tool holds (the terminal's, the session's channel
    // of 64 chunks of at most 64 KiB).
    let started = s.ok(COUNTER).await;
    // bash's `[1] PID` and the job's first lines race to the terminal.
    assert!(started.lines().any(|l| l.starts_with("[1] ")), "{started}");
    let file = s.root.join("count.txt");
    let count = move || -> Option<u64> { std::fs::read_to_string(&file).ok()?.trim().parse().ok() };
    // No call runs from here on: the counter must go on by itself.
    let first = common::until_in(&s.root, "the counter's first step", &count).await;
    let goal = first + 10_000;
    common::until_in(&s.root, "10,000 more steps of the counter", || {
        count().filter(|&n| n >= goal)
    })
    .await;
    std::fs::write(s.root.join("stop"), "").unwrap();
    let done = s.root.join("done.txt");
    common::until_in(&s.root, "the counter's end", || done.exists().then_some(())).await;

    let port = free_port();
    s.ok(&format!("{py} -m http.server {port} --bind 127.0.0.1 &"))
        .await;
    let served = tokio::task::spawn_blocking(move || {
        // The server starts; then every request must be answered.
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(port, "/count.txt").is_none() {
            assert!(Instant::now() < deadline, "the server never answered");
            std::thread::yield_now();
        }
        (0..3_000)
            .map(|i| {
                http_get(port, "/count.txt").unwrap_or_else(|| panic!("request {i} got no answer"))
            })
            .filter(|status| status.starts_with("HTTP/1.0 200"))
            .count()
    })
    .await
    .unwrap();
    assert_eq!(served, 3_000);
    // Nothing the jobs printed between calls (the counter's steps, the
    // server's log of 3,000 requests) reaches this call.
    assert_eq!(s.bash("echo next").await, "next");
    s.bash("kill %2; wait").await;
    s.close().await;
}

/// One `GET` of `path` on loopback `port`: the status line, or `None` when
/// the server did not answer within ten seconds.
fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut conn = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    conn.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .ok()?;
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).ok()?;
    let text = String::from_utf8_lossy(&answer);
    text.lines().next().map(str::to_owned)
}

/// Commands that ask for input are answered by end-of-file, and what they
/// guard is left as it was.
async fn input_prompts(mode: Mode) {
    let mut s = Session::open("input prompts", mode).await;
    let read = s
        .bash("read -r -p 'Your name? ' name; echo \"status $? name [$name]\"")
        .await;
    assert!(read.contains("status 1 name []"), "{read}");
    assert!(read.contains("end-of-file (Ctrl-D) was sent"), "{read}");
    let confirm = s
        .bash("printf 'data\\n' > keep.txt; read -r -p 'Overwrite keep.txt? [y/N] ' a; case $a in [yY]) : > keep.txt; echo overwritten;; *) echo kept;; esac")
        .await;
    assert!(confirm.contains("kept"), "{confirm}");
    let rm = s.bash("rm -i keep.txt; cat keep.txt").await;
    assert!(rm.contains("end-of-file (Ctrl-D) was sent"), "{rm}");
    assert_eq!(s.ok("cat keep.txt").await, "data");
    // The shell's state survived the prompts.
    assert_eq!(s.ok("echo $a-$name-done").await, "--done");
    s.close().await;
}

/// Heredocs write files byte for byte, quoted or expanded.
async fn heredoc(mode: Mode) {
    let mut s = Session::open("heredoc", mode).await;
    s.ok("cat > notes.md <<'EOF'\n# Notes\nprice: $5 and `date`\n\tindented\nEOF")
        .await;
    let view = s.edit(json!({"command": "view", "path": "notes.md"})).await;
    assert!(view.contains("price: $5 and `date`"), "{view}");
    assert!(view.contains("\tindented"), "{view}");
    assert_eq!(
        s.ok("cat notes.md").await,
        "# Notes\nprice: $5 and `date`\n\tindented"
    );
    s.ok("who=world; cat > greet.txt <<EOF\nhello $who\nEOF")
        .await;
    assert_eq!(s.ok("cat greet.txt").await, "hello world");
    // A heredoc the model indents, as many do.
    s.ok("cat > run.sh <<-EOF\n\techo ran\n\tEOF\nchmod +x run.sh")
        .await;
    assert_eq!(s.ok("./run.sh").await, "ran");
    s.close().await;
}

/// A 20 MB build log is clipped, quickly, and the shell goes on.
async fn huge_log(mode: Mode) {
    let mut s = Session::open("20 MB log", mode).await;
    let started = Instant::now();
    let text = s
        .bash("yes 'compiling unit ... ok' | head -c 20000000; printf '\\nerror: the build failed\\n'")
        .await;
    let took = started.elapsed();
    assert!(text.len() < 17_000, "{} characters", text.len());
    assert!(text.starts_with("compiling unit ... ok\n"), "{text:.100}");
    // The default clip keeps the head (`--clip head-tail` would keep the end).
    assert!(
        text.ends_with(dsh_tool_note()),
        "{}",
        &text[text.len() - 300..]
    );
    assert!(!text.contains("error: the build failed"));
    eprintln!("20 MB log ({mode:?}) took {took:?}");
    // The end an agent needs is one call away.
    assert_eq!(
        s.ok("yes 'compiling unit ... ok' | head -c 20000000 > build.log; printf '\\nerror: the build failed\\n' >> build.log; tail -n 1 build.log")
            .await,
        "error: the build failed"
    );
    assert_eq!(s.ok("echo still here").await, "still here");
    s.close().await;
}

/// What a shell keeps of the server's environment, and what a host passes
/// with `--env`: a package index, a proxy. Without the sandbox an ordinary
/// variable of the server's passes and a token does not; a confined shell
/// keeps neither.
async fn environment(mode: Mode) {
    let passed = [
        "PIP_INDEX_URL=http://127.0.0.1:9/simple",
        "NO_PROXY=localhost, 127.0.0.1",
        "HTTPS_PROXY",
        "DSH_NOT_SET_ANYWHERE",
    ];
    let lines = passed.join("\n");
    let mut flags = Vec::new();
    let mut env = vec![
        ("HTTPS_PROXY", Some("http://proxy.invalid:3128")),
        ("DSH_SECRET_TOKEN", Some("hunter2")),
        ("DSH_ORDINARY", Some("kept")),
    ];
    match mode {
        // The flags in one mode, the environment variable in the other.
        Mode::Full => flags.extend(passed.iter().flat_map(|p| ["--env", p])),
        _ => env.push(("DSH_ENV", Some(&lines))),
    }
    let mut s = Session::open_with("environment", mode, &flags, &env).await;
    let seen = s
        .ok("echo \"$PIP_INDEX_URL|$NO_PROXY|$HTTPS_PROXY|${DSH_NOT_SET_ANYWHERE-unset}|${DSH_SECRET_TOKEN-absent}|${DSH_ORDINARY-absent}|$HOME\"")
        .await;
    let ordinary = match mode {
        // Without the sandbox the shell starts from the server's
        // environment, less what looks like a credential.
        Mode::Full => "kept",
        _ => "absent",
    };
    assert_eq!(
        seen,
        format!(
            "http://127.0.0.1:9/simple|localhost, 127.0.0.1|http://proxy.invalid:3128|unset|absent|{ordinary}|{}",
            std::env::var("HOME").unwrap()
        )
    );
    s.close().await;
}

/// Credentials in the server's environment, as a host's API keys are.
const SECRETS: [(&str, &str); 5] = [
    ("OPENAI_API_KEY", "sk-dsh-test-openai"),
    ("ANTHROPIC_API_KEY", "sk-ant-dsh-test"),
    ("GITHUB_TOKEN", "ghp_dshtest"),
    ("AWS_SECRET_ACCESS_KEY", "dsh/test/aws"),
    ("DB_PASSWORD", "hunter2"),
];

/// Each of [`SECRETS`] as the shell sees it: its value, or `absent`.
const SHOW_SECRETS: &str = "for v in OPENAI_API_KEY ANTHROPIC_API_KEY GITHUB_TOKEN AWS_SECRET_ACCESS_KEY DB_PASSWORD; do echo \"$v=${!v-absent}\"; done; env | grep -c -e sk-dsh-test -e sk-ant-dsh -e ghp_dshtest -e dsh/test/aws -e hunter2 || true";

/// What [`SHOW_SECRETS`] prints when the shell has exactly `passed`.
fn secrets_seen(passed: &[&str]) -> String {
    let mut lines: Vec<String> = SECRETS
        .iter()
        .map(|(name, value)| {
            let value = if passed.contains(name) {
                value
            } else {
                "absent"
            };
            format!("{name}={value}")
        })
        .collect();
    lines.push(passed.len().to_string());
    lines.join("\n")
}

/// The server's credentials reach no shell by default; `--env NAME` hands
/// over exactly that one; `--pass-secrets` (or `DSH_PASS_SECRETS`) all of
/// them, where the shell starts from the server's environment (without the
/// sandbox, on this machine): a confined shell keeps its short list, and a
/// container gets nothing of the server's environment but `--env`.
async fn secrets(mode: Mode) {
    let env: Vec<(&str, Option<&str>)> = SECRETS.iter().map(|(k, v)| (*k, Some(*v))).collect();
    let mut s = Session::open_with("secrets", mode, &[], &env).await;
    assert_eq!(s.ok(SHOW_SECRETS).await, secrets_seen(&[]));
    s.close().await;

    let mut s = Session::open_with(
        "secrets, one passed",
        mode,
        &["--env", "GITHUB_TOKEN"],
        &env,
    )
    .await;
    assert_eq!(s.ok(SHOW_SECRETS).await, secrets_seen(&["GITHUB_TOKEN"]));
    s.close().await;

    // The environment variable where it shows, the flag in the other modes.
    let mut with = env.clone();
    let flag: &[&str] = match mode {
        Mode::Full => {
            with.push(("DSH_PASS_SECRETS", Some("true")));
            &[]
        }
        _ => &["--pass-secrets"],
    };
    let mut s = Session::open_with("secrets, all passed", mode, flag, &with).await;
    let all: Vec<&str> = SECRETS.iter().map(|(name, _)| *name).collect();
    let expected = match mode {
        Mode::Full => secrets_seen(&all),
        _ => secrets_seen(&[]),
    };
    assert_eq!(s.ok(SHOW_SECRETS).await, expected);
    s.close().await;
}

/// Every session as its own test in each local mode.
mod agent_session {
    use super::*;

    macro_rules! local {
        ($($(#[$attr:meta])* $name:ident),*) => {$(
            mod $name {
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                $(#[$attr])*
                async fn danger_full_access() {
                    super::super::$name(Mode::Full).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                $(#[$attr])*
                async fn workspace_write() {
                    super::super::$name(Mode::WorkspaceWrite).await;
                }
            }
        )*};
    }

    local!(
        stale_bytecode,
        #[ignore = "needs python3-venv and python3-pytest (.ci/run installs them)"]
        python_project,
        rust_crate,
        background_server,
        printing_jobs_run_between_calls,
        input_prompts,
        heredoc,
        huge_log,
        environment,
        make_loop
    );

    /// The credentials in every mode of this machine, read-only too.
    mod secrets {
        use super::*;

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn danger_full_access() {
            super::super::secrets(Mode::Full).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn workspace_write() {
            super::super::secrets(Mode::WorkspaceWrite).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn read_only() {
            super::super::secrets(Mode::ReadOnly).await;
        }
    }

    /// `--backend docker`: the sessions the test image allows (ignored
    /// where no Docker daemon runs; `.ci/run` runs them).
    mod docker {
        use super::*;

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn edits_get_a_later_second() {
            // No Python in the image: the rule itself, ten times.
            let mut s = Session::open("later second", Mode::Docker).await;
            for i in 0..10 {
                let file = format!("f{i}.txt");
                s.create(&file, "old\n").await;
                let before: u64 = s.ok(&format!("stat -c %Y {file}")).await.parse().unwrap();
                s.replace(&file, "old", "new").await;
                let after: u64 = s.ok(&format!("stat -c %Y {file}")).await.parse().unwrap();
                assert!(after > before, "round {i}: {before} then {after}");
                let now: u64 = s.ok("date +%s").await.parse().unwrap();
                assert!(after <= now, "round {i}: {after} is ahead of {now}");
                assert_eq!(s.ok(&format!("cat {file}")).await, "new");
            }
            s.close().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn background_server() {
            super::super::background_server(Mode::Docker).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn input_prompts() {
            super::super::input_prompts(Mode::Docker).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn heredoc() {
            super::super::heredoc(Mode::Docker).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn huge_log() {
            super::super::huge_log(Mode::Docker).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn secrets() {
            super::super::secrets(Mode::Docker).await;
        }
    }
}
