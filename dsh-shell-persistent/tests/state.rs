//! A shell's state captured from one real bash and applied to another:
//! what a fork, a snapshot or a restore of an agent keeps of its shell.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_shell_persistent::{Shell, ShellConfig, ShellError, ShellPool, ShellRequest, ShellState};

/// Generous: shells start on a loaded machine.
const BOUND: Duration = Duration::from_secs(60);

async fn run(shell: &mut Shell, cmd: &str) -> String {
    tokio::time::timeout(BOUND, shell.run(cmd))
        .await
        .unwrap_or_else(|_| panic!("{cmd:?} hung"))
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

async fn capture(shell: &mut Shell) -> ShellState {
    tokio::time::timeout(BOUND, shell.capture_state())
        .await
        .expect("the capture hung")
        .unwrap()
        .expect("a shell runs")
}

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    (tmp, root)
}

/// The session id of process `pid`.
fn session_of(pid: &str) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[3].to_owned()
}

/// A shell whose environment holds `FROM_ENV` and `KEPT_ENV`.
fn shell(dir: &Path) -> Shell {
    let env = [("FROM_ENV", "1"), ("KEPT_ENV", "2")].map(|(k, v)| (k.to_owned(), v.to_owned()));
    Shell::new(ShellConfig::new(dir).env(env.to_vec())).unwrap()
}

/// What the source shell sets up: a directory with a space, variables
/// exported and not (spaces, newlines, quotes, unicode, invalid UTF-8),
/// arrays (sparse, with newlines; associative with odd keys; 20,000
/// elements), attributes, functions (one with an odd name, one that needs
/// `extglob`, one exported), an alias, options and the umask.
const SETUP: &[&str] = &[
    "mkdir -p 'sub dir/deeper' && cd 'sub dir/deeper'",
    r#"export EXP=$'two words\nline "dq" \'sq\' é ✓ $HOME `x`'"#,
    r#"UNEXP='plain $x * ?' BYTES=$'\xff\xfe raw\x01\x1b[31m\r'"#,
    r#"arr=(one "two three" $'four\nfive') && arr[10]=ten"#,
    r#"declare -A assoc=([key one]=v1 [$'k\n2']="v 2" ['*']=star)"#,
    "declare -i num=6*7 && declare -l lower=MiXeD && declare -u upper=quiet && readonly RO=kept",
    "declare -n ref=num && declare -a empty=() && declare -x EXPORTED_NO_VALUE",
    "big=() && for i in $(seq 1 20000); do big+=(\"v$i\"); done",
    "greet() { echo \"hello $1\"; } && export -f greet",
    "function a-b.c:d { echo odd name; }",
    "shopt -s extglob",
    "ext() { case $1 in @(x|y)) echo xy;; *) echo other;; esac; }",
    "alias ll='echo aliased' raw=$'echo \\xff\\xfe'",
    "shopt -s nullglob globstar && set -o noclobber -o pipefail && umask 027",
    "OLDPWD=/tmp; PROMPT_COMMAND='prompted=1'",
    "unset FROM_ENV IFS",
    "set -- 'first arg' $'se\\ncond' '*'",
];

/// What the target must show as the source did.
const SAME: &[&str] = &[
    "pwd",
    "declare -p EXP UNEXP BYTES arr assoc num lower upper RO ref empty EXPORTED_NO_VALUE OLDPWD PROMPT_COMMAND",
    "declare -f greet a-b.c:d ext",
    "declare -F | grep -v ' _D'",
    "alias -p",
    "shopt -p nullglob globstar extglob expand_aliases inherit_errexit nocasematch",
    "set +o | grep -E 'noclobber|pipefail|errexit|nounset|posix'",
    "umask",
    "echo ${#big[@]} ${big[0]} ${big[19999]}",
    "printf %s \"$BYTES\" | od -An -tx1",
    "bash -c 'printf \"%s|%s\" \"$EXP\" \"${UNEXP-unset}\"; greet child'",
    "ll; greet fork; a-b.c:d; ext y",
    "echo \"${FROM_ENV-unset} ${KEPT_ENV-unset} ${IFS-unset}\"; env | grep -c _ENV=",
    "printf '<%s>' \"$@\"; echo \" $#\"",
    "alias raw | od -An -tx1",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_starts_from_every_part_of_the_state_and_no_process() {
    let (_tmp, root) = workspace();
    let mut source = shell(&root);
    for cmd in SETUP {
        assert_eq!(run(&mut source, cmd).await, "", "{cmd}");
    }
    let job = run(&mut source, "sleep 1234 & echo $!").await;
    let job_pid = job.lines().last().unwrap().to_owned();
    assert_eq!(run(&mut source, "false").await, "[exit code: 1]");
    let before: Vec<String> = {
        let mut out = Vec::new();
        for cmd in SAME {
            out.push(run(&mut source, cmd).await);
        }
        out
    };
    // Every piece is there to compare (not two empty answers).
    assert_eq!(before[0], root.join("sub dir/deeper").to_str().unwrap());
    assert!(
        before[1].contains("declare -ir RO") || before[1].contains("declare -r RO"),
        "{}",
        before[1]
    );
    assert!(before[8].starts_with("20000 v1 v20000"), "{}", before[8]);
    assert_eq!(before[11], "aliased\nhello fork\nodd name\nxy");
    assert_eq!(before[7], "0027");
    assert_eq!(before[12], "unset 2 unset\n1");
    assert_eq!(before[13], "<first arg><se\ncond><*> 3");
    // An alias holds bytes that are not UTF-8 (so does the state).
    assert!(before[14].contains("ff fe"), "{}", before[14]);

    // What a call sees of the last one (`$?`, `$_`, `PIPESTATUS`) after
    // a failed command, without and with a capture in between.
    let status_probe = "echo \"$? $_ ${PIPESTATUS[*]}\"";
    assert_eq!(
        run(&mut source, "false | true | false").await,
        "[exit code: 1]"
    );
    let without = run(&mut source, status_probe).await;
    assert_eq!(
        run(&mut source, "false | true | false").await,
        "[exit code: 1]"
    );
    let state = capture(&mut source).await;
    assert_eq!(state.cwd(), root.join("sub dir/deeper"));
    assert!(std::str::from_utf8(state.script()).is_err());
    assert_eq!(run(&mut source, status_probe).await, without);
    // Nothing of the capture is left, and the source is as it was.
    assert_eq!(
        run(&mut source, "declare -p | grep -c '^declare -[^ ]* _Dst_'").await,
        "0\n[exit code: 1]"
    );
    assert_eq!(run(&mut source, "jobs -p").await, job_pid);
    for (cmd, want) in SAME.iter().zip(&before) {
        assert_eq!(
            &run(&mut source, cmd).await,
            want,
            "source after capture: {cmd}"
        );
    }

    let mut fork = shell(&root);
    tokio::time::timeout(BOUND, fork.apply_state(&state))
        .await
        .unwrap()
        .unwrap();
    for (cmd, want) in SAME.iter().zip(&before) {
        assert_eq!(&run(&mut fork, cmd).await, want, "fork: {cmd}");
    }
    // The exported variable is in the child's environment, the other not
    // (checked above through `bash -c`); no job came along.
    assert_eq!(run(&mut fork, "jobs -p").await, "");
    let fork_pid = run(&mut fork, "echo $$").await;
    let source_pid = run(&mut source, "echo $$").await;
    assert_eq!(session_of(&job_pid), session_of(&source_pid));
    assert_ne!(session_of(&job_pid), session_of(&fork_pid));

    // The two diverge.
    run(
        &mut fork,
        "cd / && export EXP=changed && arr[0]=forked && unalias ll",
    )
    .await;
    run(&mut source, "NEW_IN_SOURCE=1").await;
    assert_eq!(
        run(&mut source, "echo \"$PWD|${arr[0]}\" && ll").await,
        format!("{}|one\naliased", root.join("sub dir/deeper").display())
    );
    assert_eq!(
        run(&mut source, "printf %s \"$EXP\" | head -1").await,
        "two words"
    );
    assert_eq!(
        run(
            &mut fork,
            "echo \"$PWD|$EXP|${arr[0]}|${NEW_IN_SOURCE-unset}\""
        )
        .await,
        "/|changed|forked|unset"
    );
    source.close().await;
    fork.close().await;
}

/// `set -e`, `set -u` and POSIX mode on in the source: the capture ends
/// neither the shell nor the options, and the fork gets them (after the
/// function whose name POSIX mode refuses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errexit_nounset_and_posix_mode_survive_capture_and_fork() {
    let (_tmp, root) = workspace();
    let mut source = shell(&root);
    run(&mut source, "function odd-name { echo odd; }; X=1").await;
    run(&mut source, "set -eu -o posix").await;
    let state = capture(&mut source).await;
    let probe = "echo \"$- $X ${POSIXLY_CORRECT+posix}\"; odd-name";
    let want = run(&mut source, probe).await;
    assert!(want.contains('e') && want.contains('u'), "{want}");
    assert!(want.contains("1 posix\nodd"), "{want}");

    let mut fork = shell(&root);
    fork.apply_state(&state).await.unwrap();
    assert_eq!(run(&mut fork, probe).await, want);
    // `set -u` is on in the fork.
    let out = run(&mut fork, "echo $nosuch").await;
    assert!(out.contains("nosuch: unbound variable"), "{out}");
    source.close().await;
    fork.close().await;
}

/// Through the pool: the owner's turn, `None` for an owner without a
/// shell, the next shell of another owner starting from the state, and a
/// state that cannot be applied in full reported by that call, precisely,
/// its command not run, the rest applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_forks_an_owner_and_says_when_a_state_cannot_be_applied() {
    let (_tmp, root) = workspace();
    let pool = ShellPool::new(ShellConfig::new(&root)).unwrap();
    assert!(pool.capture_state("nobody").await.unwrap().is_none());
    assert!(pool.owners().is_empty());
    pool.run(
        "src",
        "mkdir gone && cd gone && export X=1 && alias ll='echo aliased'",
    )
    .await
    .unwrap();
    let state = pool.capture_state("src").await.unwrap().unwrap();
    pool.set_start_state("fork", state.clone()).unwrap();
    assert_eq!(
        pool.run("fork", "echo \"$PWD $X\"; ll").await.unwrap(),
        format!("{}/gone 1\naliased", root.display())
    );
    // Set for an owner whose shell runs: it waits for the owner's next
    // shell (here after a timeout resets it).
    pool.set_start_state("fork", state.clone()).unwrap();
    assert_eq!(
        pool.run("fork", "echo \"${X-unset}\"; X=2").await.unwrap(),
        "1"
    );
    let timed_out = pool
        .call(
            "fork",
            ShellRequest::new("sleep 30").timeout(Duration::from_secs(1)),
            std::future::pending(),
        )
        .await
        .unwrap();
    assert!(timed_out.shell_reset, "{timed_out:?}");
    assert_eq!(
        pool.run("fork", "echo \"$PWD $X\"").await.unwrap(),
        format!("{}/gone 1", root.display())
    );
    // Once: after a reset the owner starts fresh.
    pool.close_owner("fork").await;
    assert_eq!(
        pool.run("fork", "echo \"$PWD ${X-unset}\"").await.unwrap(),
        format!("{} unset", root.display())
    );

    // The directory is gone when the state is applied.
    std::fs::remove_dir(root.join("gone")).unwrap();
    pool.set_start_state("late", state).unwrap();
    let err = pool.run("late", "touch ran").await.unwrap_err();
    let ShellError::StateNotApplied {
        said, shell_reset, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert!(!shell_reset);
    assert!(said.contains("gone: No such file or directory"), "{said}");
    let text = dsh_shell_persistent::contract::render_error(&err);
    assert!(text.contains("the command was not run"), "{text}");
    assert!(!root.join("ran").exists());
    // The rest of the state is there; the next call runs.
    assert_eq!(
        pool.run("late", "echo \"$PWD $X\"; ll").await.unwrap(),
        format!("{} 1\naliased", root.display())
    );
    pool.close_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_bash_has_a_state() {
    let (_tmp, root) = workspace();
    let pool =
        ShellPool::new(ShellConfig::new(&root).dialect(dsh_shell_persistent::Dialect::Sh)).unwrap();
    assert!(matches!(
        pool.capture_state("a").await,
        Err(ShellError::StateUnsupported { shell: "sh" })
    ));
}

mod values {
    use super::*;
    use proptest::prelude::*;

    /// `$'...'` of any bytes, for the test's own commands.
    fn quoted(bytes: &[u8]) -> String {
        let mut out = String::from("$'");
        for b in bytes {
            out.push_str(&format!("\\x{b:02x}"));
        }
        out.push('\'');
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3))]

        /// Any values (any bytes but NUL), as scalars, array elements and
        /// associative keys, read back from the fork byte for byte.
        #[test]
        fn any_value_round_trips(values in proptest::collection::vec(proptest::collection::vec(1u8..=255, 0..48), 1..40)) {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async {
                let (_tmp, root) = workspace();
                let mut source = shell(&root);
                let mut setup = String::from("declare -A h=(); a=()");
                for (i, v) in values.iter().enumerate() {
                    let q = quoted(v);
                    setup.push_str(&format!("; v{i}={q}; a+=({q})"));
                    if !v.is_empty() {
                        setup.push_str(&format!("; h[{q}]={i}"));
                    }
                }
                run(&mut source, &setup).await;
                let dump = format!(
                    "for n in {}; do printf '%s' \"${{!n}}\" | od -An -tx1 -v; done; for x in \"${{a[@]}}\"; do printf '%s' \"$x\" | od -An -tx1 -v; done; for k in \"${{!h[@]}}\"; do printf '%s=%s' \"$k\" \"${{h[$k]}}\" | od -An -tx1 -v; done | sort",
                    (0..values.len()).map(|i| format!("v{i}")).collect::<Vec<_>>().join(" ")
                );
                let want = run(&mut source, &dump).await;
                let state = capture(&mut source).await;
                let mut fork = shell(&root);
                fork.apply_state(&state).await.unwrap();
                assert_eq!(run(&mut fork, &dump).await, want);
                source.close().await;
                fork.close().await;
            });
        }
    }
}

/// `set -x` and `set -v` on in the source: the capture's reading is
/// neither traced into what it reads nor left off afterwards; the fork has
/// them on too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracing_options_survive_capture_and_fork() {
    let (_tmp, root) = workspace();
    let mut source = shell(&root);
    run(&mut source, "X='a b'; set -xv").await;
    let state = capture(&mut source).await;
    let probe = "echo \"$- $X\"";
    let want = run(&mut source, probe).await;
    assert!(want.ends_with("himvxBs a b"), "{want}");
    // A shell's own start state: applied when its process starts, before
    // the first command.
    let fork = shell(&root);
    fork.set_start_state(Some(state));
    let mut fork = fork;
    assert_eq!(run(&mut fork, probe).await, want);
    source.close().await;
    fork.close().await;
}

/// A job that keeps printing to the terminal (a dev server's log) while
/// the state is read: its lines are not taken for the state, which reads
/// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_printing_to_the_terminal_does_not_spoil_the_capture() {
    let (_tmp, root) = workspace();
    let mut source = shell(&root);
    run(
        &mut source,
        "big=(); for i in $(seq 1 3000); do big+=(\"value number $i\"); done",
    )
    .await;
    run(
        &mut source,
        "(while :; do echo 'GET /health 200'; sleep 0.002; done) &",
    )
    .await;
    let state = capture(&mut source).await;
    let mut fork = shell(&root);
    fork.apply_state(&state).await.unwrap();
    assert_eq!(
        run(&mut fork, "echo ${#big[@]} \"${big[2999]}\"").await,
        "3000 value number 3000"
    );
    source.close().await;
    fork.close().await;
}
