//! The model-visible contract, through real bash in a real PTY: on this
//! machine, and (ignored unless run with `--ignored`, as `.ci/run` does) in a
//! Docker container, through the same assertions.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dsh_shell_persistent::{
    AFTER_CANCEL_NOTE, CallEnd, ERREXIT_NOTE, INPUT_EOF_NOTE, OUTPUT_CLIP_NOTE as CLIP_NOTE,
    SHELL_RESTARTED_NOTE, ShellConfig, ShellError, ShellPool, ShellRequest, contract,
};
use dsh_testbeds::{Testbed, Where};
use serde_json::json;

const RESET: &str = "The persistent bash shell was reset; the next bash call starts from the workspace with a fresh current directory and environment.";

/// A job as agents start them: in the background, printing to the terminal.
/// It counts until `stop` exists, each step a line of 1 KiB, and then writes
/// `done.txt`. A plain command line, so that bash's notice of its end is one
/// line.
const COUNTER: &str = r#"bash -c 'i=0; until [ -e stop ]; do i=$((i+1)); printf "tick %s %01000d\n" $i 0; echo $i > count.txt; done; echo done > done.txt' &"#;

struct Fixture {
    pool: ShellPool,
    bed: Testbed,
}

impl Fixture {
    async fn new(place: Where) -> Fixture {
        Fixture::with(place, |c| c).await
    }

    async fn with(place: Where, f: impl FnOnce(ShellConfig) -> ShellConfig) -> Fixture {
        let bed = Testbed::new(place).await;
        let mut config = ShellConfig::new(&bed.root);
        config.backend = bed.backend.clone();
        let pool = ShellPool::new(f(config)).unwrap();
        Fixture { pool, bed }
    }

    fn root(&self) -> String {
        self.bed.root.clone()
    }

    async fn run_as(&self, owner: &str, cmd: &str) -> String {
        tokio::time::timeout(Duration::from_secs(60), self.pool.run(owner, cmd))
            .await
            .unwrap_or_else(|_| panic!("{cmd:?} hung"))
            .unwrap_or_else(|e| panic!("{cmd:?} failed: {e}"))
    }

    async fn run(&self, cmd: &str) -> String {
        self.run_as("agent", cmd).await
    }
}

/// Each test, once per machine: `local::name` runs everywhere,
/// `docker::name` where a Docker daemon and the test image are (and
/// `docker_remote::name` as if that daemon ran elsewhere), `ssh::name` where
/// OpenSSH's sshd is installed.
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod local {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Where::Local).await
                }
            )*
        }
        mod docker {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs a Docker daemon and the dsh-test image (.ci/run starts and imports both)"]
                async fn $name() {
                    super::$name(super::Where::Docker).await
                }
            )*
        }
        mod docker_remote {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs a Docker daemon and the dsh-test image (.ci/run starts and imports both)"]
                async fn $name() {
                    super::$name(super::Where::DockerRemote).await
                }
            )*
        }
        mod ssh {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs sshd (.ci/engines installs it; each test starts its own)"]
                async fn $name() {
                    super::$name(super::Where::Ssh).await
                }
            )*
        }
    };
}

async fn exact_outputs(w: Where) {
    let f = Fixture::new(w).await;
    let cases = [
        ("echo hi", "hi"),
        ("echo ''", ""),
        ("printf '\\nx'", "\nx"),
        ("printf '\\n\\nx\\n\\n\\n'", "\n\nx\n\n"),
        ("printf '  x'", "  x"),
        ("printf 'a\\n\\n'", "a\n"),
        ("true", ""),
        ("false", "[exit code: 1]"),
        (
            "doesntexist",
            "bash: doesntexist: command not found\n[exit code: 127]",
        ),
        (
            "echo out; exit_status() { return 5; }; exit_status",
            "out\n[exit code: 5]",
        ),
        ("echo A!B", "A!B"),
        ("printf 'tab\\there'", "tab\there"),
    ];
    for (cmd, want) in cases {
        assert_eq!(f.run(cmd).await, want, "{cmd:?}");
    }
}

async fn state_persists_between_calls(w: Where) {
    let f = Fixture::new(w).await;
    let root = f.root();
    assert_eq!(f.run("mkdir -p sub/dir && cd sub").await, "");
    assert_eq!(f.run("pwd").await, format!("{root}/sub"));
    f.run("export GREETING=hello; LOCAL_ONLY=1").await;
    assert_eq!(
        f.run("echo $GREETING $LOCAL_ONLY; sh -c 'echo $GREETING'")
            .await,
        "hello 1\nhello"
    );
    f.run("greet() { echo \"hi $1\"; }").await;
    assert_eq!(f.run("greet there").await, "hi there");
    f.run("alias ll='echo aliased'").await;
    assert_eq!(f.run("ll").await, "aliased");

    // A virtualenv-style activation script.
    f.bed.put(
        "venv/bin/activate",
        "VIRTUAL_ENV=\"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")/..\" && pwd)\"\nexport VIRTUAL_ENV\n_OLD_PATH=\"$PATH\"\nexport PATH=\"$VIRTUAL_ENV/bin:$PATH\"\nPS1=\"(venv) ${PS1-}\"\ndeactivate() { export PATH=\"$_OLD_PATH\"; unset VIRTUAL_ENV; unset -f deactivate; }\n",
    )
    .await;
    f.bed
        .put("venv/bin/tool", "#!/bin/sh\necho venv tool\n")
        .await;
    f.run("chmod +x ../venv/bin/tool && source ../venv/bin/activate")
        .await;
    assert_eq!(
        f.run("echo $VIRTUAL_ENV; tool").await,
        format!("{root}/venv\nvenv tool")
    );
    f.run("deactivate").await;
    assert_eq!(
        f.run("echo ${VIRTUAL_ENV-none}; type tool >/dev/null 2>&1 || echo gone")
            .await,
        "none\ngone"
    );
}

async fn owners_are_isolated_and_run_in_parallel(w: Where) {
    let f = Fixture::new(w).await;
    f.run_as("a", "export WHO=a; cd /").await;
    f.run_as("b", "export WHO=b").await;
    assert_eq!(f.run_as("a", "echo $WHO $PWD").await, "a /");
    assert_eq!(
        f.run_as("b", "echo $WHO $PWD").await,
        format!("b {}", f.root())
    );

    // 64 owners at once, each with its own shell.
    let calls = (0..64).map(|i| {
        let pool = f.pool.clone();
        tokio::spawn(async move {
            let owner = format!("owner-{i}");
            pool.run(&owner, &format!("export N={i}")).await.unwrap();
            pool.run(&owner, "echo $N:$$").await.unwrap()
        })
    });
    let mut pids = std::collections::HashSet::new();
    for (i, call) in calls.enumerate() {
        let out = tokio::time::timeout(Duration::from_secs(120), call)
            .await
            .unwrap()
            .unwrap();
        let (n, pid) = out.split_once(':').unwrap();
        assert_eq!(n, i.to_string());
        assert!(pids.insert(pid.to_owned()), "shared shell pid {pid}");
    }
    assert_eq!(f.pool.owners().len(), 66);
}

async fn calls_of_one_owner_run_in_arrival_order(w: Where) {
    let f = Fixture::new(w).await;
    f.run("rm -f order.log").await;
    // Each call is polled once before the next one is made, so it is queued
    // on the owner (or running) first; only then are they all driven.
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut queued = Vec::new();
    for i in 0..8 {
        let pool = f.pool.clone();
        let mut call = Box::pin(async move {
            pool.run(
                "agent",
                &format!("sleep 0.0$(( {i} % 3 )); echo {i} >> order.log"),
            )
            .await
        });
        assert!(call.as_mut().poll(&mut cx).is_pending());
        queued.push(call);
    }
    let handles: Vec<_> = queued.into_iter().map(tokio::spawn).collect();
    for h in handles {
        h.await.unwrap().unwrap();
    }
    assert_eq!(f.run("tr '\\n' ' ' < order.log").await, "0 1 2 3 4 5 6 7 ");
}

async fn syntax_that_peers_get_wrong(w: Where) {
    let f = Fixture::new(w).await;
    assert_eq!(
        f.run("cat <<'EOF'\nline $HOME\n  indented\nEOF").await,
        "line $HOME\n  indented"
    );
    assert_eq!(f.run("cat <<EOF\nx\nEOF\n").await, "x");
    assert_eq!(f.run("tr a-z A-Z <<< 'here string'").await, "HERE STRING");
    assert_eq!(f.run("echo one \\\n  two").await, "one two");
    f.run("mkdir -p fx && touch fx/a.txt fx/b.txt").await;
    assert_eq!(
        f.run("find fx -name '*.txt' -exec echo found {} \\; | sort")
            .await,
        "found fx/a.txt\nfound fx/b.txt"
    );
    assert_eq!(f.run("echo commented # a comment").await, "commented");
    assert_eq!(
        f.run("echo 'single \"double\" $dollar' \"it's\"").await,
        "single \"double\" $dollar it's"
    );
    assert_eq!(
        f.run("for i in 1 2 3; do\n  echo $i\ndone").await,
        "1\n2\n3"
    );
}

async fn background_jobs_return_at_once_and_never_leak(w: Where) {
    let f = Fixture::new(w).await;
    let started = std::time::Instant::now();
    let out = f.run("sleep 60 &").await;
    // bash reports the job it started; nothing else.
    assert!(out.starts_with("[1] "), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let out = f
        .run("(sleep 0.2; echo from-background; touch bg.done) & sleep 0.01")
        .await;
    assert!(out.starts_with("[2] "), "{out:?}");
    // Let the background job print and finish between calls.
    for _ in 0..2000 {
        if f.bed.exists("bg.done").await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(f.bed.exists("bg.done").await);
    assert_eq!(f.run("echo next").await, "next");
    assert_eq!(f.run("echo again").await, "again");
    f.run("kill %1").await;
}

async fn the_shell_ending_is_reported_and_reset(w: Where) {
    let f = Fixture::new(w).await;
    let root = f.root();
    f.run("cd / && export KEPT=1").await;
    // Exactly the output, the diagnostic and the reset line: bash's
    // interactive `exit` echo is not the command's output.
    assert_eq!(
        f.run("echo bye; exit 3").await,
        format!("bye\n[shell exited: code 3]\n{RESET}")
    );
    // A line `exit` the command printed stays: bash's own echo follows it.
    assert_eq!(
        f.run("echo exit; exit 4").await,
        format!("exit\n[shell exited: code 4]\n{RESET}")
    );
    assert_eq!(
        f.run("printf x; exit 5").await,
        format!("x\n[shell exited: code 5]\n{RESET}")
    );
    assert_eq!(f.run("echo exit").await, "exit");
    assert_eq!(f.run("echo exit; false").await, "exit\n[exit code: 1]");
    assert_eq!(
        f.run("echo ${KEPT-unset} $PWD").await,
        format!("unset {root}")
    );

    assert_eq!(
        f.run("kill -9 $$").await,
        format!("{}\n{RESET}", f.bed.killed_line("SIGKILL"))
    );
    assert_eq!(
        f.run("exec true").await,
        format!("[shell exited: code 0]\n{RESET}")
    );
    assert_eq!(f.run("echo alive").await, "alive");

    let out = f.run("set -e; false").await;
    assert!(
        out.ends_with(&format!("[shell exited: code 1]\n{RESET}")),
        "{out:?}"
    );
    assert_eq!(f.run("echo fresh").await, "fresh");
}

/// `set -e` and `set -x` left on by earlier calls: each later call is
/// traced, and the call whose failure ends the shell says `set -e` was on.
async fn options_left_on_reach_later_calls(w: Where) {
    let f = Fixture::new(w).await;
    assert_eq!(f.run("set -e").await, "");
    assert_eq!(f.run("set -x; echo one").await, "++ echo one\none");
    assert_eq!(f.run("echo two").await, "++ echo two\ntwo");
    assert_eq!(
        f.run("false").await,
        format!("++ false\n[shell exited: code 1]\n{ERREXIT_NOTE}\n{RESET}")
    );
    assert_eq!(f.run("echo fresh").await, "fresh");
}

async fn nounset_keeps_the_protocol_working(w: Where) {
    let f = Fixture::new(w).await;
    assert_eq!(f.run("set -u").await, "");
    assert_eq!(
        f.run("echo $NOT_SET_ANYWHERE").await,
        "bash: NOT_SET_ANYWHERE: unbound variable\n[exit code: 1]"
    );
    assert_eq!(f.run("echo still fine").await, "still fine");
}

async fn timeout_kills_reports_partial_output_and_resets(w: Where) {
    let f = Fixture::with(w, |c| c.timeout(Duration::from_millis(1500))).await;
    f.run("cd / && export GONE=1").await;
    let out = f.run("echo partial; sleep 1000 & sleep 1000").await;
    assert!(
        out.starts_with("Your command timed out after 2 seconds or experienced an OOM error. Below is partial output:\n"),
        "{out:?}"
    );
    assert!(out.contains("\npartial\n"), "{out:?}");
    assert!(out.ends_with(RESET), "{out:?}");
    assert_eq!(
        f.run("echo ${GONE-unset} $PWD").await,
        format!("unset {}", f.root())
    );
    let quiet = f.run("sleep 1000").await;
    assert_eq!(
        quiet,
        format!(
            "Your command timed out after 2 seconds or experienced an OOM error. Below is partial output:\n{RESET}"
        )
    );
}

async fn a_calls_own_timeout_overrides_the_pools(w: Where) {
    let f = Fixture::with(w, |c| c.timeout(Duration::from_secs(300))).await;
    f.run("cd / && export GONE=1").await;
    let quick = ShellRequest::new("echo partial; sleep 1000").timeout(Duration::from_secs(1));
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        f.pool.call("agent", quick, std::future::pending()),
    )
    .await
    .unwrap_or_else(|_| panic!("a 1 s timeout did not end the call"))
    .unwrap();
    assert!(
        matches!(outcome.end, CallEnd::TimedOut { after } if after == Duration::from_secs(1)),
        "{:?}",
        outcome.end
    );
    assert!(outcome.shell_reset);
    assert_eq!(
        contract::render(&outcome),
        format!(
            "Your command timed out after 1 seconds or experienced an OOM error. Below is partial output:\npartial\n{RESET}"
        )
    );
    // The shell was reset, and the next call without a timeout has the
    // pool's 300 s: longer than one second, and it succeeds.
    assert_eq!(
        f.run("echo ${GONE-unset} $PWD").await,
        format!("unset {}", f.root())
    );
    assert_eq!(f.run("sleep 2; echo done").await, "done");
}

async fn the_model_sets_a_timeout_only_where_the_host_offers_it(w: Where) {
    let plain = Fixture::new(w).await;
    // Not offered: the schema is exactly `command`, and a `timeout` sent
    // anyway is ignored (the pool's 300 s holds).
    assert!(plain.pool.spec().get("timeout").is_none());
    let text = plain
        .pool
        .execute(
            "agent",
            &json!({"command": "sleep 2; echo done", "timeout": 1}),
        )
        .await
        .unwrap();
    assert_eq!(text, "done");

    let f = Fixture::with(w, |c| c.timeout_parameter(Some(Duration::from_secs(60)))).await;
    let spec = f.pool.spec().openai();
    assert_eq!(spec["parameters"]["required"], json!(["command"]));
    assert_eq!(
        spec["parameters"]["properties"]["timeout"]["type"],
        "integer"
    );
    let err = f
        .pool
        .execute("agent", &json!({"command": "true", "timeout": 61}))
        .await
        .unwrap_err();
    assert_eq!(
        dsh_shell_persistent::contract::render_error(&err),
        "timeout must be a whole number of seconds from 1 to 60"
    );
    let text = f
        .pool
        .execute(
            "agent",
            &json!({"command": "echo partial; sleep 1000", "timeout": 1}),
        )
        .await
        .unwrap();
    assert_eq!(
        text,
        format!(
            "Your command timed out after 1 seconds or experienced an OOM error. Below is partial output:\npartial\n{RESET}"
        )
    );
    assert_eq!(f.run("sleep 2; echo done").await, "done");
}

/// Whether the shell `pid` at the test bed's place is blocked waiting for
/// its terminal (standard input), as it is once it printed its prompt: no
/// event says so, its system call is looked at (`/proc/PID/syscall`, as
/// the PTY layer does: a read of descriptor 0, or a poll).
#[cfg(target_os = "linux")]
async fn reads_its_terminal(bed: &Testbed, pid: &str) -> bool {
    // read, then the poll family, by this architecture's numbers.
    let (read, polls): (&str, &[&str]) = if cfg!(target_arch = "x86_64") {
        ("0", &["7", "23", "270", "271"])
    } else if cfg!(any(target_arch = "x86", target_arch = "arm")) {
        ("3", &["142", "168", "308", "309", "335", "336"])
    } else {
        ("63", &["72", "73"])
    };
    let path = format!("/proc/{pid}/syscall");
    let syscall = match bed.container() {
        Some(_) => bed.sh(&format!("cat {path}")).await,
        None => std::fs::read_to_string(&path).unwrap_or_default(),
    };
    let mut fields = syscall.split_whitespace();
    match (fields.next(), fields.next()) {
        (Some(nr), Some(fd)) if nr == read => fd == "0x0",
        (Some(nr), _) => polls.contains(&nr),
        _ => false,
    }
}

/// Whether the shell `pid` at the test bed's place waits for terminal
/// input (BSD `ps` names that wait `ttyin`).
#[cfg(not(target_os = "linux"))]
async fn reads_its_terminal(bed: &Testbed, pid: &str) -> bool {
    bed.sh(&format!("ps -o wchan= -p {pid}")).await.trim() == "ttyin"
}

async fn cancellation_resets_even_after_the_marker(w: Where) {
    let f = Fixture::new(w).await;
    f.run("export BEFORE=1").await;
    // A cancel that fires at once: the command may even finish, the result is discarded.
    let err = f
        .pool
        .call("agent", "export SHOULD_NOT_SURVIVE=1", async {})
        .await
        .unwrap_err();
    assert!(matches!(err, ShellError::Cancelled { .. }));
    // The next result says the shell was reset, once.
    assert_eq!(
        f.run("echo ${BEFORE-reset} ${SHOULD_NOT_SURVIVE-gone}")
            .await,
        format!("{AFTER_CANCEL_NOTE}\nreset gone")
    );
    assert_eq!(f.run("echo once").await, "once");

    // Dropping the call's future after the command finished and its end
    // marker was printed, before the future saw it: still a reset.
    f.run("export BEFORE=1").await;
    {
        let mut call = Box::pin(f.pool.run(
            "agent",
            "export DROPPED=1; echo $$ > shell.pid; touch dropped.flag; sleep 0.3",
        ));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut polls = 0;
        while !f.bed.exists("dropped.flag").await {
            assert!(
                call.as_mut().poll(&mut cx).is_pending(),
                "the call finished early"
            );
            polls += 1;
            assert!(polls < 2000, "the command never ran");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The end marker is the prompt bash prints 0.3 s later, before it
        // reads its terminal again: once it reads, the marker is out; the
        // call is dropped unread.
        let pid = String::from_utf8(f.bed.get("shell.pid").await).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !reads_its_terminal(&f.bed, pid.trim()).await {
            assert!(
                std::time::Instant::now() < deadline,
                "the shell never went back to reading its terminal"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(call);
    }
    assert_eq!(
        f.run("echo ${BEFORE-reset} ${DROPPED-gone}").await,
        format!("{AFTER_CANCEL_NOTE}\nreset gone")
    );
    let outcome = f
        .pool
        .call("agent", "true", std::future::pending())
        .await
        .unwrap();
    assert!(!outcome.after_cancel);
}

/// A job left running with `&` that prints to the terminal goes on while no
/// call runs (its count read by another owner's shell), and the next call
/// carries nothing it printed. Each step prints 1 KiB: 10,000 steps are more
/// than every buffer between the job and the tool holds.
async fn printing_jobs_run_between_calls(w: Where) {
    let f = Fixture::new(w).await;
    let started = f.run(COUNTER).await;
    // bash's `[1] PID` and the job's first lines race to the terminal.
    assert!(started.lines().any(|l| l.starts_with("[1] ")), "{started}");
    let count = || async {
        f.run_as("observer", "cat count.txt 2>/dev/null")
            .await
            .parse::<u64>()
            .ok()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut first = None;
    loop {
        let now = count().await;
        match (first, now) {
            (None, Some(n)) => first = Some(n),
            (Some(start), Some(n)) if n >= start + 10_000 => break,
            _ => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the counter stood still at {now:?} (from {first:?}) with no call running"
        );
    }
    f.run_as("observer", "touch stop").await;
    while f.run_as("observer", "cat done.txt 2>/dev/null").await != "done" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the counter never saw stop"
        );
    }
    assert_eq!(f.run("echo next").await, "next");
}

async fn fake_markers_cannot_end_a_call(w: Where) {
    let f = Fixture::new(w).await;
    // A command can read every prompt the shell holds, even expanded as bash
    // would show it (`@P`): the next call's start marker and the
    // abandoned-line prompt. Printing them ends nothing.
    for _ in 0..2 {
        let out = f
            .run("printf '%s\\n' \"${PS0@P}\" \"${PS1@P}\" \"$PS0\" \"$PS1\"; sleep 0.3; echo done")
            .await;
        assert!(out.ends_with("\ndone"), "{out:?}");
        assert!(!out.contains("[exit code"), "{out:?}");
    }
    assert_eq!(f.run("echo $PWD").await, f.root());
}

async fn the_protocol_survives_what_commands_do_to_the_shell(w: Where) {
    let f = Fixture::new(w).await;
    let hostile = [
        "printf() { echo HIJACKED; }",
        "echo() { command echo \"HIJACKED $*\"; }",
        "read() { :; }",
        "builtin() { :; }",
        "alias eval='false'",
        "alias printf='false'",
        "IFS=:",
        "PS1='$ '",
        "PROMPT_COMMAND='PS1=\"> \"; command echo prompt-noise'",
        "trap 'true' DEBUG",
        "trap 'true' ERR",
        "trap 'command echo exit-trap' EXIT",
        "stty echo",
    ];
    for cmd in hostile {
        assert_eq!(f.run(cmd).await, "", "{cmd}");
        assert_eq!(
            f.run("command printf '%s\\n' ok").await,
            "ok",
            "after {cmd}"
        );
    }
    let out = f.run("set -x; command printf 'traced\\n'").await;
    assert!(out.contains("traced"), "{out:?}");
    let out = f.run("set +x; set -v; command printf 'verbose\\n'").await;
    assert!(out.contains("verbose"), "{out:?}");
    f.run("set +v").await;
    // Raw control characters and tabs inside the command.
    assert_eq!(
        f.run("command printf '%s' $'a\\tb' | od -An -c | tr -s ' '")
            .await,
        " a \\t b"
    );
    assert_eq!(
        f.run("X='\u{3}\u{4}\u{7f}'; command printf '%s' \"$X\" | od -An -tx1")
            .await
            .trim(),
        "03 04 7f"
    );
}

async fn long_commands_and_long_output(w: Where) {
    let f = Fixture::new(w).await;
    // A 100 kB command, well past the terminal's 4 KiB line limit.
    let payload = "x".repeat(100_000);
    assert_eq!(
        f.run(&format!("V='{payload}'; echo ${{#V}}")).await,
        "100000"
    );
    let many = (0..3000)
        .map(|i| format!("echo {i} >/dev/null"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(f.run(&format!("{many}\necho last")).await, "last");

    // 50,000 lines are clipped to max_output_chars with the note.
    let out = f.run("seq 1 50000").await;
    assert!(out.ends_with(CLIP_NOTE));
    assert_eq!(out.chars().count(), 16_000 + CLIP_NOTE.chars().count());
    assert!(out.starts_with("1\n2\n3\n"));
    assert_eq!(f.run("echo after").await, "after");

    // A 200 kB single line.
    let out = f.run("head -c 200000 /dev/zero | tr '\\0' y; echo").await;
    assert_eq!(out.chars().count(), 16_000 + CLIP_NOTE.chars().count());
    assert!(out.starts_with("yyyy"));
    // Ended here, not by the drop: a remote session removes its scratch
    // directory (where the long commands went) as it ends, which a drop
    // leaves to a task the test's runtime would cancel.
    f.pool.close_all().await;
}

async fn output_is_normalized_for_the_model(w: Where) {
    let f = Fixture::new(w).await;
    assert_eq!(
        f.run("printf '\\xff\\xfe\\x00ok'").await,
        "\u{FFFD}\u{FFFD}\u{0}ok"
    );
    assert_eq!(
        f.run("for p in 10 50 100; do printf '\\rprogress %3d%%' $p; done; echo")
            .await,
        "progress 100%"
    );
    assert_eq!(
        f.run("printf '\\033[1;31mred\\033[0m plain\\n'").await,
        "red plain"
    );
    assert_eq!(f.run("printf 'a\\r\\nb\\n'").await, "a\nb");
}

async fn commands_waiting_for_input_do_not_hang(w: Where) {
    let f = Fixture::new(w).await;
    assert_eq!(f.run("cat").await, INPUT_EOF_NOTE);
    assert_eq!(
        f.run("read x; echo \"got [$x]\"").await,
        format!("got []\n{INPUT_EOF_NOTE}")
    );
    assert_eq!(f.run("echo usable").await, "usable");
    if f.run("command -v python3 >/dev/null && echo yes").await == "yes" {
        let out = f.run("python3 -q").await;
        assert!(out.contains(INPUT_EOF_NOTE), "{out:?}");
        assert_eq!(f.run("echo still usable").await, "still usable");
    }
}

/// A program waiting on anything but the terminal (a socket, a growing
/// file, nothing) gets no end-of-file and runs on to its end or to the
/// call's timeout; the shell keeps its state. A shell killed from outside
/// between calls is replaced: the next call runs, led by the reset line.
async fn only_a_wait_on_the_terminal_is_a_wait_for_input(w: Where) {
    let f = Fixture::new(w).await;
    f.run("export KEPT=yes").await;
    // Ends by itself after three seconds of waiting: on a socket
    // (`pselect6`; the image has BusyBox, not Python), or on nothing.
    let waits = match w {
        Where::Docker | Where::DockerRemote => "timeout 3 telnetd -F -p 2323; echo ended",
        _ => "python3 -c 'import select; select.select([], [], [], 3)'; echo ended",
    };
    let out = f.run(waits).await;
    // (BusyBox's `timeout` says `Terminated`.)
    assert!(out.ends_with("ended"), "{out:?}");
    assert!(!out.contains(INPUT_EOF_NOTE), "{out:?}");
    assert!(!out.contains("interactive terminal"), "{out:?}");
    assert_eq!(f.run("echo $KEPT").await, "yes");
    let tail = "touch app.log; (for i in 1 2 3; do sleep 0.4; echo line$i >> app.log; done) & tail -f app.log";
    let request = ShellRequest::new(tail).timeout(Duration::from_secs(3));
    let outcome = f
        .pool
        .call("agent", request, std::future::pending())
        .await
        .unwrap();
    let out = contract::render(&outcome);
    assert!(matches!(outcome.end, CallEnd::TimedOut { .. }), "{out:?}");
    assert!(out.contains("line1\nline2\nline3"), "{out:?}");
    assert!(out.ends_with(RESET), "{out:?}");
    f.run("export KEPT=again").await;
    let pid = f.run("echo $$").await;
    f.bed.sh(&format!("kill -9 {pid}")).await;
    assert_eq!(
        f.run("echo ran ${KEPT:-fresh}").await,
        format!("{RESET}\n{SHELL_RESTARTED_NOTE}\nran fresh")
    );
    assert_eq!(f.run("echo again").await, "again");
}

/// `set -x` and `set -v` trace and echo the model's commands, never a step
/// of the protocol (no line of it, none of its variables).
async fn tracing_shows_only_the_commands(w: Where) {
    let f = Fixture::new(w).await;
    let out = f.run("set -x; printf '%s\\n' traced").await;
    assert_eq!(out, "++ printf '%s\\n' traced\ntraced");
    let out = f.run("echo two; false").await;
    assert_eq!(out, "++ echo two\ntwo\n++ false\n[exit code: 1]");
    let out = f.run("set +x; set -v; echo verbose").await;
    // The line was read before `set -v`: its rest is not echoed.
    assert_eq!(out, "++ set +x\nverbose");
    let out = f.run("echo three").await;
    assert_eq!(out, "echo three\nthree");
    assert_eq!(f.run("set +v").await, "set +v");
    let out = f
        .run("case $- in *[xv]*) echo on;; *) echo off;; esac")
        .await;
    assert_eq!(out, "off");
}

async fn a_deleted_working_directory_is_survivable(w: Where) {
    let f = Fixture::new(w).await;
    f.run("mkdir doomed && cd doomed && rmdir ../doomed").await;
    let out = f.run("ls").await;
    assert!(out.ends_with("[exit code: 2]") || out.is_empty(), "{out:?}");
    assert_eq!(
        f.run("cd .. 2>/dev/null || cd /; echo recovered").await,
        "recovered"
    );
}

async fn invalid_calls_and_schema(w: Where) {
    let f = Fixture::new(w).await;
    for args in [json!({"command": ""}), json!({}), json!({"command": 3})] {
        let err = f.pool.execute("agent", &args).await.unwrap_err();
        assert_eq!(
            dsh_shell_persistent::contract::render_error(&err),
            "command must be a non-empty string"
        );
    }
    assert_eq!(
        f.pool
            .execute("agent", &json!({"command": "echo ok"}))
            .await
            .unwrap(),
        "ok"
    );
    let schema = f.pool.spec().openai();
    assert_eq!(
        schema,
        json!({
            "name": "bash",
            "description": "Run commands in a persistent bash shell. State, including the current directory and exported environment variables, persists across calls for this agent.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The bash command to run. Relative path is preferred in the command."}},
                "required": ["command"]
            }
        })
    );
}

suite!(
    exact_outputs,
    state_persists_between_calls,
    owners_are_isolated_and_run_in_parallel,
    calls_of_one_owner_run_in_arrival_order,
    syntax_that_peers_get_wrong,
    background_jobs_return_at_once_and_never_leak,
    the_shell_ending_is_reported_and_reset,
    nounset_keeps_the_protocol_working,
    options_left_on_reach_later_calls,
    timeout_kills_reports_partial_output_and_resets,
    a_calls_own_timeout_overrides_the_pools,
    the_model_sets_a_timeout_only_where_the_host_offers_it,
    cancellation_resets_even_after_the_marker,
    fake_markers_cannot_end_a_call,
    the_protocol_survives_what_commands_do_to_the_shell,
    long_commands_and_long_output,
    output_is_normalized_for_the_model,
    commands_waiting_for_input_do_not_hang,
    only_a_wait_on_the_terminal_is_a_wait_for_input,
    printing_jobs_run_between_calls,
    tracing_shows_only_the_commands,
    a_deleted_working_directory_is_survivable,
    invalid_calls_and_schema,
);
