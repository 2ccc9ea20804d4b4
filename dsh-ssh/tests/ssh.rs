//! What the SSH backend promises beyond the shared contract suites (which
//! run over it from `dsh-shell-persistent` and `dsh-editor`): host keys are
//! checked, nothing is left running after a reset or a close, SFTP edits
//! keep the file's mode, owner and links, and a connection lost mid-call is
//! reported.
//!
//! Each test starts an sshd of its own on a loopback port (keys made in a
//! temporary directory), so all are ignored unless run with `--ignored`
//! (`.ci/run` does, after `.ci/engines` installs OpenSSH).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ssh {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use dsh_shell_persistent::{ShellConfig, ShellPool};
    use dsh_ssh::{SshBackend, SshError, SshHost};
    use dsh_testbeds::Sshd;

    const RESET: &str = "The persistent bash shell was reset; the next bash call starts from the workspace with a fresh current directory and environment.";

    fn sh(script: &str) -> String {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
    }

    fn pool(host: &SshHost, dir: &Path, timeout: Duration) -> ShellPool {
        let mut config = ShellConfig::new(dir);
        config.backend = Arc::new(SshBackend::new(host.clone()));
        config.timeout = timeout;
        ShellPool::new(config).unwrap()
    }

    /// Starts `spec` on `host` and returns all it printed and how it ended.
    async fn spawned(host: &SshHost, spec: dsh_pty::SpawnSpec) -> (String, dsh_pty::ExitStatus) {
        use dsh_pty::PtyBackend;
        let mut session = SshBackend::new(host.clone()).spawn(spec).await.unwrap();
        let mut output = session.take_output().unwrap();
        let mut text = Vec::new();
        let read = async {
            while let Some(chunk) = output.recv().await {
                text.extend_from_slice(&chunk);
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .unwrap();
        let status = session.wait().await;
        (String::from_utf8_lossy(&text).into_owned(), status)
    }

    /// A host whose sessions get start-up files in their environment
    /// (`ENV` for an interactive `sh`, `BASH_ENV` for a `bash` script,
    /// set by sshd): a spec that removes them, or starts from an empty
    /// environment, runs without them, as on this machine. (The files
    /// speak only in the tagged program, not in the login shell that
    /// sshd runs the command line with, which reads them too.)
    #[tokio::test]
    #[ignore = "needs sshd"]
    async fn removed_and_cleared_variables_are_not_seen() {
        let files = tempfile::tempdir().unwrap();
        let env_file = files.path().join("env");
        let bash_env_file = files.path().join("bash_env");
        std::fs::write(&env_file, "[ -n \"$DSH_TREE\" ] && echo ENV-READ\n").unwrap();
        std::fs::write(
            &bash_env_file,
            "[ -n \"$DSH_TREE\" ] && echo BASH_ENV-READ\n",
        )
        .unwrap();
        let sshd = Sshd::start_with(&format!(
            "SetEnv ENV={} BASH_ENV={} KEPT=1",
            env_file.display(),
            bash_env_file.display()
        ));
        let host = SshHost::connect(sshd.target()).await.unwrap();
        let interactive = || dsh_pty::SpawnSpec::new("sh").args(["-ic", "echo done"]);
        let script = || dsh_pty::SpawnSpec::new("bash").args(["-c", "echo done"]);
        // The host's files are read when the variables stay.
        let (out, _) = spawned(&host, interactive()).await;
        assert!(out.contains("ENV-READ"), "{out:?}");
        let (out, _) = spawned(&host, script()).await;
        assert!(out.contains("BASH_ENV-READ"), "{out:?}");
        // Removed, they are not.
        let (out, status) = spawned(&host, interactive().env_remove("ENV")).await;
        assert!(!out.contains("READ") && out.contains("done"), "{out:?}");
        assert_eq!(status.code(), Some(0));
        let (out, _) = spawned(&host, script().env_remove("BASH_ENV")).await;
        assert!(!out.contains("READ") && out.contains("done"), "{out:?}");
        // A cleared environment holds what the spec sets and the tag only
        // (and what `sh` sets itself).
        let cleared = dsh_pty::SpawnSpec::new("sh")
            .args(["-c", "env | sort"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin");
        let (out, _) = spawned(&host, cleared).await;
        let names: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .collect();
        assert!(
            names.contains(&"DSH_TREE") && names.contains(&"PATH"),
            "{out:?}"
        );
        assert!(
            names
                .iter()
                .all(|n| ["DSH_TREE", "PATH", "PWD", "SHLVL"].contains(n)),
            "{out:?}"
        );
    }

    #[tokio::test]
    #[ignore = "needs sshd"]
    async fn host_keys_and_client_keys_are_checked() {
        let sshd = Sshd::start();
        // A known-hosts file that records another key for this host.
        let other = tempfile::tempdir().unwrap();
        let key = other.path().join("k");
        sh(&format!(
            "ssh-keygen -q -t ed25519 -N '' -f {}",
            key.display()
        ));
        let wrong = other.path().join("known_hosts");
        let other_pub = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        std::fs::write(
            &wrong,
            format!("[127.0.0.1]:{} {}", sshd.port(), other_pub.trim()),
        )
        .unwrap();
        let mut target = sshd.target();
        target.known_hosts = wrong.clone();
        let err = SshHost::connect(target).await.unwrap_err();
        assert!(
            matches!(err, SshError::HostKeyMismatch { line: 1, .. }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "the host key of 127.0.0.1:{} does not match line 1 of {}: refusing to connect (the host was reinstalled, or someone is in the middle)",
                sshd.port(),
                wrong.display()
            )
        );
        // A client key the host does not know.
        let mut target = sshd.target();
        target.identity = key.clone();
        let err = SshHost::connect(target.clone()).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{}@127.0.0.1 refused the SSH key {}",
                target.user,
                key.display()
            )
        );
        // Nobody listening.
        let mut target = sshd.target();
        target.port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = SshHost::connect(target.clone()).await.unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "cannot connect to 127.0.0.1:{} over SSH: ",
                target.port
            )),
            "{err}"
        );
    }

    /// The command lines of `sleep` processes that contain `needle` (not
    /// the `sh -c '…'` that starts one).
    fn running(needle: &str) -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| {
                let cmdline = std::fs::read(e.ok()?.path().join("cmdline")).ok()?;
                let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                (text.starts_with("sleep ") && text.contains(needle)).then_some(text)
            })
            .collect()
    }

    async fn until_none(needle: &str) -> Vec<String> {
        let mut left = running(needle);
        for _ in 0..500 {
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            left = running(needle);
        }
        left
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs sshd"]
    async fn resets_and_closes_leave_nothing_running() {
        let sshd = Sshd::start();
        let dir = tempfile::tempdir().unwrap();
        let host = SshHost::connect(sshd.target()).await.unwrap();
        let pool = pool(&host, dir.path(), Duration::from_secs(2));
        // Unique durations, so that only this test's processes match.
        let n = 3_000_000 + std::process::id() % 100_000;
        let escapes = format!(
            "setsid sleep {n}1 & (sleep {n}2 &) ; (trap '' HUP; exec sleep {n}3) & sleep {n}4 & disown; (setsid sh -c 'sleep {n}5 & exit' &) ; echo started"
        );
        let out = pool.run("a", &escapes).await.unwrap();
        assert!(out.ends_with("\nstarted"), "{out:?}");
        // The detached ones start a moment after the call returned.
        for _ in 0..500 {
            if running(&format!("sleep {n}")).len() == 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            running(&format!("sleep {n}")).len(),
            5,
            "{:?}",
            running(&format!("sleep {n}"))
        );
        let out = pool.run("a", "sleep 60").await.unwrap();
        assert!(out.ends_with(RESET), "{out:?}");
        assert_eq!(
            until_none(&format!("sleep {n}")).await,
            Vec::<String>::new()
        );
        let out = pool.run("a", &escapes).await.unwrap();
        assert!(out.ends_with("\nstarted"), "{out:?}");
        pool.close_all().await;
        assert_eq!(
            until_none(&format!("sleep {n}")).await,
            Vec::<String>::new()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs sshd"]
    async fn sshd_killed_mid_call_is_reported_and_the_next_call_reconnects() {
        let mut sshd = Sshd::start();
        let dir = tempfile::tempdir().unwrap();
        let host = SshHost::connect(sshd.target()).await.unwrap();
        let pool = pool(&host, dir.path(), Duration::from_secs(60));
        assert_eq!(pool.run("a", "echo up").await.unwrap(), "up");
        let flag = dir.path().join("working");
        let call = tokio::spawn({
            let pool = pool.clone();
            async move { pool.run("a", "echo working; touch working; sleep 30").await }
        });
        for _ in 0..1000 {
            if flag.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(flag.exists());
        sshd.stop();
        let out = tokio::time::timeout(Duration::from_secs(60), call)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        dsh_testbeds::assert_connection_lost(&out, "working", "SSH host");
        // The host is back: the next call connects again.
        sshd.launch();
        assert_eq!(pool.run("a", "echo back").await.unwrap(), "back");
        pool.close_all().await;
    }

    #[tokio::test]
    #[ignore = "needs sshd"]
    async fn sftp_edits_keep_mode_owner_and_links_and_refuse_stale_versions() {
        let bed = dsh_testbeds::Testbed::ssh().await;
        dsh_testbeds::edits_keep_mode_owner_and_links_and_refuse_stale_versions(&bed).await;
    }

    #[tokio::test]
    #[ignore = "needs sshd"]
    async fn sftp_same_size_edits_get_a_later_second() {
        let bed = dsh_testbeds::Testbed::ssh().await;
        dsh_testbeds::same_size_edits_get_a_later_second(&bed).await;
    }
}
