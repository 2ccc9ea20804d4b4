//! What the Docker backend promises beyond the shared contract suites
//! (which run over it from `dsh-shell-persistent` and `dsh-editor`): the
//! filesystem's guarantees, nothing left running after a reset or a close,
//! and clear results when the container or the daemon goes away.
//!
//! Every test needs a Docker daemon and the `dsh-test` image, so all are
//! ignored unless run with `--ignored` (`.ci/run` does, after `.ci/engines`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod docker {
    use std::sync::Arc;
    use std::time::Duration;

    use dsh_docker::{Container, ContainerTemplate, DockerBackend, DockerError, DockerFs};
    use dsh_editor::Editor;
    use dsh_shell_persistent::{ShellConfig, ShellError, ShellPool};
    use dsh_testbeds::{Testbed, test_image};
    use serde_json::json;

    const NEEDS: &str = "needs a Docker daemon and the dsh-test image";
    const RESET: &str = "The persistent bash shell was reset; the next bash call starts from the workspace with a fresh current directory and environment.";
    /// A memory kill that took the shell too. The kernel kills the process
    /// holding the memory; at times the one writing into its pipe meets the
    /// limit again before that memory is freed, and the kernel then kills
    /// the shell as well. Either way the result names the limit.
    const SHELL_KILLED_TOO: &str =
        "[killed: memory limit of 64 MiB reached]\n[shell killed by signal: SIGKILL]\n";

    async fn sh(c: &Container, script: &str) -> String {
        let ran = c.run(&["sh", "-c", script], None).await.unwrap();
        assert!(ran.status.success(), "{script}: {}", ran.stderr_text());
        String::from_utf8(ran.stdout).unwrap().trim_end().to_owned()
    }

    /// The command lines of the container's processes (but for the
    /// helper that lists them).
    async fn processes(c: &Container) -> Vec<String> {
        let out = sh(
            c,
            r#"for d in /proc/[0-9]*; do [ "${d#/proc/}" = $$ ] && continue; tr '\0' ' ' < $d/cmdline 2>/dev/null; echo; done"#,
        )
        .await;
        out.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.contains("/proc/"))
            .map(str::to_owned)
            .collect()
    }

    /// Waits (bounded) until no process command line contains any of `gone`.
    async fn until_gone(c: &Container, gone: &[&str]) -> Vec<String> {
        let mut left = Vec::new();
        for _ in 0..100 {
            left = processes(c)
                .await
                .into_iter()
                .filter(|p| gone.iter().any(|g| p.contains(g)))
                .collect();
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        left
    }

    /// Runs `echo working; sleep 30` in `pool`, does `fault` once the sleep
    /// runs in `c`, and returns the call's result and what `fault` returned.
    async fn with_fault_mid_call<F, Fut, T>(
        pool: &ShellPool,
        c: &Container,
        fault: F,
    ) -> (String, T)
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let call = tokio::spawn({
            let pool = pool.clone();
            async move { pool.run("a", "echo working; sleep 30").await }
        });
        for _ in 0..200 {
            if processes(c).await.iter().any(|p| p.contains("sleep 30")) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let kept = fault().await;
        let out = tokio::time::timeout(Duration::from_secs(60), call)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        (out, kept)
    }

    fn pool(c: &Container, user: Option<&str>, timeout: Duration) -> ShellPool {
        let mut backend = DockerBackend::new(c.clone());
        if let Some(user) = user {
            backend = backend.user(user);
        }
        let mut config = ShellConfig::new("/tmp");
        config.backend = Arc::new(backend);
        config.timeout = timeout;
        ShellPool::new(config).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn the_filesystem_keeps_mode_owner_and_links_and_refuses_stale_versions() {
        let _ = NEEDS;
        let bed = Testbed::docker().await;
        dsh_testbeds::edits_keep_mode_owner_and_links_and_refuse_stale_versions(&bed).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn same_size_edits_get_a_later_second() {
        let _ = NEEDS;
        let bed = Testbed::docker().await;
        dsh_testbeds::same_size_edits_get_a_later_second(&bed).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn a_refused_edit_changes_nothing() {
        let bed = Testbed::docker().await;
        let c = bed.container().unwrap();
        let root = &bed.root;
        sh(c, &format!("printf 'a\\nb\\n' > {root}/f && chmod 644 {root}/f && touch -d '2001-01-01 00:00:00' {root}/f")).await;
        let before = sh(
            c,
            &format!("stat -c '%a %u %s %Y %i' {root}/f; ls -A {root}"),
        )
        .await;
        let as_user = DockerFs::new(c.clone()).user("1000");
        let editor = Editor::new(as_user);
        let err = editor
            .execute(&json!({"command": "str_replace", "path": format!("{root}/f"), "old_str": "a", "new_str": "z"}))
            .await
            .unwrap_err();
        assert!(
            dsh_editor::contract::render_error(&err).contains("ermission"),
            "{err}"
        );
        assert_eq!(
            sh(
                c,
                &format!("stat -c '%a %u %s %Y %i' {root}/f; ls -A {root}")
            )
            .await,
            before
        );
        assert_eq!(sh(c, &format!("cat {root}/f")).await, "a\nb");
    }

    /// Starts `spec` with `backend` and returns all it printed and how it
    /// ended.
    async fn spawned(
        backend: &DockerBackend,
        spec: dsh_pty::SpawnSpec,
    ) -> (String, dsh_pty::ExitStatus) {
        use dsh_pty::PtyBackend;
        let mut session = backend.spawn(spec).await.unwrap();
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

    /// An image whose environment names start-up files (`ENV` for an
    /// interactive `sh`, `BASH_ENV` for a `bash` script): a spec that
    /// removes them, or starts from an empty environment, runs without
    /// them, as on this machine.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn removed_and_cleared_variables_are_not_seen() {
        let bed =
            Testbed::docker_with_env(&["ENV=/etc/dsh-env", "BASH_ENV=/etc/dsh-bash-env", "KEPT=1"])
                .await;
        let c = bed.container().unwrap();
        sh(
            c,
            "echo 'echo ENV-READ' > /etc/dsh-env; echo 'echo BASH_ENV-READ' > /etc/dsh-bash-env",
        )
        .await;
        let backend = DockerBackend::new(c.clone());
        let interactive = || dsh_pty::SpawnSpec::new("sh").args(["-ic", "echo done"]);
        let script = || dsh_pty::SpawnSpec::new("bash").args(["-c", "echo done"]);
        // The image's files are read when the variables stay.
        let (out, _) = spawned(&backend, interactive()).await;
        assert!(out.contains("ENV-READ"), "{out:?}");
        let (out, _) = spawned(&backend, script()).await;
        assert!(out.contains("BASH_ENV-READ"), "{out:?}");
        // Removed, they are not.
        let (out, status) = spawned(&backend, interactive().env_remove("ENV")).await;
        assert!(!out.contains("READ") && out.contains("done"), "{out:?}");
        assert_eq!(status.code(), Some(0));
        let (out, _) = spawned(&backend, script().env_remove("BASH_ENV")).await;
        assert!(!out.contains("READ") && out.contains("done"), "{out:?}");
        // A cleared environment holds what the spec sets and the tag only
        // (and what `sh` sets itself).
        let cleared = dsh_pty::SpawnSpec::new("sh")
            .args(["-c", "env | sort"])
            .env_clear()
            .env("PATH", "/bin");
        let (out, _) = spawned(&backend, cleared).await;
        let names: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .collect();
        assert_eq!(names, ["DSH_TREE", "PATH", "PWD", "SHLVL"], "{out:?}");
    }

    /// A program killed by a signal is reported by the signal's name, as
    /// the other backends report it: the shell's terminal and the commands
    /// run next to it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn signals_are_named() {
        let bed = Testbed::docker().await;
        let c = bed.container().unwrap();
        let ran = c.run(&["sh", "-c", "kill -TERM $$"], None).await.unwrap();
        assert_eq!(ran.status.signal_name(), Some("SIGTERM"));
        let ran = c.run(&["sh", "-c", "exit 3"], None).await.unwrap();
        assert_eq!(ran.status.code(), Some(3));
        let backend = DockerBackend::new(c.clone());
        let spec = dsh_pty::SpawnSpec::new("sh").args(["-c", "kill -KILL $$"]);
        let (_, status) = spawned(&backend, spec).await;
        assert_eq!(status.signal_name(), Some("SIGKILL"));
        let pool = pool(c, None, Duration::from_secs(10));
        assert_eq!(
            pool.run("a", "kill -9 $$").await.unwrap(),
            format!("[shell killed by signal: SIGKILL]\n{RESET}")
        );
        pool.close_all().await;
    }

    /// Starts, in the shell, processes that try every way of outliving it.
    const ESCAPES: &str = "setsid sleep 1001 & (sleep 1002 &) ; (trap '' HUP; exec sleep 1003) & sleep 1004 & disown; (setsid sh -c 'sleep 1005 & exit' &) ; echo started";
    const ESCAPEES: [&str; 5] = [
        "sleep 1001",
        "sleep 1002",
        "sleep 1003",
        "sleep 1004",
        "sleep 1005",
    ];

    async fn nothing_survives(user: Option<&str>) {
        let bed = Testbed::docker().await;
        let c = bed.container().unwrap();
        // A process of the container that is not the shell's: it must stay.
        sh(c, "sleep 1999 >/dev/null 2>&1 &").await;
        let pool = pool(c, user, Duration::from_secs(2));
        let out = pool.run("a", ESCAPES).await.unwrap();
        assert!(out.ends_with("\nstarted"), "{out:?}");
        // The detached ones start a moment after the call returned.
        let mut running = processes(c).await;
        for _ in 0..200 {
            if ESCAPEES
                .iter()
                .all(|p| running.iter().any(|r| r.contains(p)))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
            running = processes(c).await;
        }
        for p in ESCAPEES {
            assert!(
                running.iter().any(|r| r.contains(p)),
                "{p} not started: {running:?}"
            );
        }
        // A timeout resets the shell: its whole tree goes.
        let out = pool.run("a", "sleep 60").await.unwrap();
        assert!(out.ends_with(RESET), "{out:?}");
        assert_eq!(until_gone(c, &ESCAPEES).await, Vec::<String>::new());
        // Closing does the same.
        let out = pool.run("a", ESCAPES).await.unwrap();
        assert!(out.ends_with("\nstarted"), "{out:?}");
        pool.close_all().await;
        assert_eq!(until_gone(c, &ESCAPEES).await, Vec::<String>::new());
        assert!(processes(c).await.iter().any(|p| p.contains("sleep 1999")));
        // The scratch directory of long commands goes with the session.
        assert_eq!(sh(c, "ls -A /tmp").await, "");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn resets_and_closes_leave_nothing_running_as_root() {
        nothing_survives(None).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn resets_and_closes_leave_nothing_running_as_a_user() {
        nothing_survives(Some("1000")).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn a_container_per_session_is_removed_with_it() {
        let docker = dsh_docker::connect(None).await.unwrap();
        let mut template = ContainerTemplate::new(test_image());
        let label = format!("dsh-rs-per-session-test-{}", std::process::id());
        template.labels.push((label.clone(), "1".into()));
        let count = || async {
            let mut filters = std::collections::HashMap::new();
            filters.insert("label".to_owned(), vec![label.clone()]);
            docker
                .list_containers(Some(bollard::query_parameters::ListContainersOptions {
                    all: true,
                    filters: Some(filters),
                    ..Default::default()
                }))
                .await
                .unwrap()
                .len()
        };
        let mut config = ShellConfig::new("/tmp");
        config.backend = Arc::new(DockerBackend::per_session(docker.clone(), template));
        let pool = ShellPool::new(config).unwrap();
        assert_eq!(
            pool.run("a", "echo $HOSTNAME > /tmp/h; echo a")
                .await
                .unwrap(),
            "a"
        );
        assert_eq!(
            pool.run("b", "cat /tmp/h 2>/dev/null || echo separate")
                .await
                .unwrap(),
            "separate"
        );
        assert_eq!(count().await, 2);
        pool.close_all().await;
        assert_eq!(count().await, 0);
    }

    /// A pool of containers per session made from `template`, with
    /// `limits` on its shells.
    fn per_session_pool(
        docker: &dsh_docker::Docker,
        template: ContainerTemplate,
        limits: dsh_docker::dsh_pty::ResourceLimits,
    ) -> ShellPool {
        let mut config = ShellConfig::new("/tmp");
        config.backend = Arc::new(DockerBackend::per_session(docker.clone(), template));
        config.limits = limits;
        config.timeout = Duration::from_secs(120);
        ShellPool::new(config).unwrap()
    }

    /// Runs `docker ARGS` and returns its output, trimmed.
    fn docker_cli(args: &[&str]) -> String {
        let out = std::process::Command::new("docker")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "docker {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Removes the containers labelled `label`, then the network `network`,
    /// whatever the test found.
    struct NetworkCleanup {
        label: String,
        network: String,
    }

    impl Drop for NetworkCleanup {
        fn drop(&mut self) {
            let ids = std::process::Command::new("docker")
                .args(["ps", "-aq", "--filter", &format!("label={}", self.label)])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            for id in ids.split_whitespace() {
                let _ = std::process::Command::new("docker")
                    .args(["rm", "-f", id])
                    .output();
            }
            let _ = std::process::Command::new("docker")
                .args(["network", "rm", &self.network])
                .output();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn a_container_on_network_none_has_only_loopback() {
        let docker = dsh_docker::connect(None).await.unwrap();
        let mut template = ContainerTemplate::new(test_image());
        template.network = Some("none".into());
        let pool = per_session_pool(&docker, template, Default::default());
        assert_eq!(pool.run("a", "ls /sys/class/net").await.unwrap(), "lo");
        pool.close_all().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn a_container_joins_the_named_network() {
        let docker = dsh_docker::connect(None).await.unwrap();
        let network = format!("dsh-rs-test-net-{}", std::process::id());
        let _cleanup = NetworkCleanup {
            label: network.clone(),
            network: network.clone(),
        };
        docker_cli(&["network", "create", "--internal", &network]);
        let mut template = ContainerTemplate::new(test_image());
        template.network = Some(network.clone());
        template.labels.push((network.clone(), "1".into()));
        let pool = per_session_pool(&docker, template, Default::default());
        let out = pool
            .run("a", "cat /etc/hostname; ls /sys/class/net | tr '\\n' ' '")
            .await
            .unwrap();
        let (hostname, interfaces) = out.split_once('\n').unwrap();
        assert_eq!(interfaces.trim(), "eth0 lo");
        let members = docker_cli(&[
            "network",
            "inspect",
            &network,
            "--format",
            "{{range $id, $c := .Containers}}{{$id}} {{end}}",
        ]);
        assert!(
            members
                .split_whitespace()
                .any(|id| id.starts_with(hostname)),
            "{hostname} is not on {network}: {members}"
        );
        pool.close_all().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn a_missing_network_is_named_at_the_first_call() {
        let docker = dsh_docker::connect(None).await.unwrap();
        let network = format!("dsh-rs-no-such-net-{}", std::process::id());
        let mut template = ContainerTemplate::new(test_image());
        template.network = Some(network.clone());
        template.labels.push((network.clone(), "1".into()));
        let _cleanup = NetworkCleanup {
            label: network.clone(),
            network: network.clone(),
        };
        let err = Container::create(docker.clone(), &template)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, DockerError::NoSuchNetwork(n) if *n == network),
            "{err:?}"
        );
        let pool = per_session_pool(&docker, template, Default::default());
        let err =
            dsh_shell_persistent::contract::render_error(&pool.run("a", "true").await.unwrap_err());
        assert!(
            err.contains(&format!("the Docker network `{network}` does not exist")),
            "{err}"
        );
        pool.close_all().await;
        // Nothing made is left behind.
        assert_eq!(
            docker_cli(&["ps", "-aq", "--filter", &format!("label={network}")]),
            ""
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn a_memory_kill_in_the_container_is_named() {
        let docker = dsh_docker::connect(None).await.unwrap();
        // The limit is the container's own (the shells' config has none).
        let mut template = ContainerTemplate::new(test_image());
        template.limits.memory = Some(64 << 20);
        let pool = per_session_pool(&docker, template, Default::default());
        assert_eq!(pool.run("a", "echo fits").await.unwrap(), "fits");
        let out = pool
            .run("a", "head -c 300m /dev/zero | tail > /dev/null; echo after")
            .await
            .unwrap();
        // `tail` holds the memory, `head` writes into its pipe.
        if out.contains("[shell killed by signal: SIGKILL]") {
            assert!(out.contains(SHELL_KILLED_TOO), "{out}");
        } else {
            assert!(out.contains("Killed"), "{out}");
            assert!(out.contains("after"), "{out}");
            assert!(
                out.ends_with("[killed: memory limit of 64 MiB reached]"),
                "{out}"
            );
        }
        // Only the call that met it says so.
        assert_eq!(pool.run("a", "echo fine").await.unwrap(), "fine");
        pool.close_all().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn forks_past_the_process_limit_are_named() {
        let docker = dsh_docker::connect(None).await.unwrap();
        // The limit is the shells' own, kept by the container made per
        // session.
        let limits = dsh_docker::dsh_pty::ResourceLimits::default().pids(Some(24));
        let pool = per_session_pool(&docker, ContainerTemplate::new(test_image()), limits);
        assert_eq!(pool.run("a", "echo fits").await.unwrap(), "fits");
        // BusyBox's `sh` forks until one is refused, then (it gives up at
        // once, where bash retries) kills and reaps what it started.
        let out = pool
            .run(
                "a",
                r#"sh -c 'p=; trap "kill \$p 2>/dev/null; wait" EXIT; i=0; while [ $i -lt 60 ]; do sleep 30 & p="$p $!"; i=$((i+1)); done'; echo done"#,
            )
            .await
            .unwrap();
        assert!(out.contains("can't fork"), "{out}");
        assert!(
            out.ends_with("done\n[process limit of 24 reached: new processes were refused]"),
            "{out}"
        );
        assert_eq!(pool.run("a", "echo fine").await.unwrap(), "fine");
        pool.close_all().await;
    }

    #[cfg(unix)]
    /// Imports an image named `name` of BusyBox's applets without the ones
    /// in `without`, with the Docker CLI; `sh` is BusyBox's when `bash` is
    /// `false` (which finds every applet without a link), else bash. The
    /// caller removes it.
    fn busybox_image(name: &str, without: &[&str], bash: bool) {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(root.path().join("tmp")).unwrap();
        std::fs::copy("/bin/busybox", bin.join("busybox")).unwrap();
        let list = std::process::Command::new("/bin/busybox")
            .arg("--list")
            .output()
            .unwrap();
        if bash {
            std::fs::copy("/bin/bash-static", bin.join("bash")).unwrap();
            std::os::unix::fs::symlink("bash", bin.join("sh")).unwrap();
        }
        for applet in String::from_utf8(list.stdout).unwrap().lines() {
            if !without.contains(&applet) && !bin.join(applet).exists() {
                std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
            }
        }
        let mut tar = std::process::Command::new("tar")
            .arg("-C")
            .arg(root.path())
            .args(["-c", "."])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let imported = std::process::Command::new("docker")
            .args(["import", "-c", "ENV PATH=/bin", "-", name])
            .stdin(tar.stdout.take().unwrap())
            .output()
            .unwrap();
        assert!(tar.wait().unwrap().success());
        assert!(imported.status.success(), "{imported:?}");
    }

    /// An image without bash, and one without `stat`: the first call of the
    /// shell, and of the editor, fails with an error naming what is missing.
    #[cfg(unix)]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn images_without_what_the_tools_need_say_what_is_missing() {
        let docker = dsh_docker::connect(None).await.unwrap();
        let stem = format!("dsh-rs-test-missing-{}", std::process::id());
        // The images and containers this test makes go whatever it finds.
        struct Cleanup(String);
        impl Drop for Cleanup {
            fn drop(&mut self) {
                let ids = std::process::Command::new("docker")
                    .args(["ps", "-aq", "--filter", &format!("label={}", self.0)])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                for id in ids.split_whitespace() {
                    let _ = std::process::Command::new("docker")
                        .args(["rm", "-f", id])
                        .output();
                }
                for image in ["bash", "stat"] {
                    let _ = std::process::Command::new("docker")
                        .args(["rmi", &format!("{}-{image}", self.0)])
                        .output();
                }
            }
        }
        let _cleanup = Cleanup(stem.clone());
        let (no_bash, no_stat) = (format!("{stem}-bash"), format!("{stem}-stat"));
        busybox_image(&no_bash, &[], false);
        busybox_image(&no_stat, &["stat"], true);
        let mut template = ContainerTemplate::new(no_bash.clone());
        template.labels.push((stem.clone(), "1".into()));
        let mut config = ShellConfig::new("/tmp");
        config.backend = Arc::new(DockerBackend::per_session(docker.clone(), template));
        let pool = ShellPool::new(config).unwrap();
        let err = pool.run("a", "true").await.unwrap_err();
        assert!(matches!(err, ShellError::EndedAtStart { .. }), "{err:?}");
        // `env` of the remote prologue names what it cannot start.
        assert!(
            dsh_shell_persistent::contract::render_error(&err)
                .contains("'bash': No such file or directory"),
            "{err}"
        );
        pool.close_all().await;

        let mut template = ContainerTemplate::new(no_stat.clone());
        template.labels.push((stem.clone(), "1".into()));
        let container = Container::create(docker.clone(), &template).await.unwrap();
        let editor = Editor::new(DockerFs::new(container.clone()));
        let err = editor
            .execute(&json!({"command": "view", "path": "/tmp"}))
            .await
            .unwrap_err();
        let err = dsh_editor::contract::render_error(&err);
        assert!(err.contains("has no stat, which the editor needs"), "{err}");
        container.remove().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn a_container_per_session_carries_the_shells_limits() {
        let docker = dsh_docker::connect(None).await.unwrap();
        let limits = dsh_pty::ResourceLimits::default()
            .memory(Some(64 << 20))
            .pids(Some(64))
            .cpus(Some(0.5))
            .open_files(Some(100));
        let grow = "bash -c 'x=$(head -c 200000000 /dev/zero | tr \"\\0\" a); echo grew ${#x}'; echo rc=$?";
        for limited in [true, false] {
            let mut config = ShellConfig::new("/tmp");
            let mut template = ContainerTemplate::new(test_image());
            if limited {
                config.limits = limits.clone();
                template.tmp_size = Some(32 << 20);
            }
            config.backend = Arc::new(DockerBackend::per_session(docker.clone(), template));
            let pool = ShellPool::new(config).unwrap();
            let host = pool.run("a", "echo $HOSTNAME").await.unwrap();
            let info = docker.inspect_container(host.trim(), None).await.unwrap();
            let hc = info.host_config.unwrap();
            let grew = pool.run("a", grow).await.unwrap();
            let tmp = pool
                .run(
                    "a",
                    "head -c 50000000 /dev/zero > /tmp/f 2>/dev/null; echo rc=$?; stat -c %s /tmp/f; ulimit -n",
                )
                .await
                .unwrap();
            if limited {
                assert_eq!(hc.memory, Some(64 << 20));
                assert_eq!(hc.memory_swap, Some(64 << 20));
                assert_eq!(hc.pids_limit, Some(64));
                assert_eq!(hc.nano_cpus, Some(500_000_000));
                let tmpfs = hc.tmpfs.unwrap();
                assert!(tmpfs["/tmp"].contains("size=33554432"), "{tmpfs:?}");
                assert!(!grew.contains("grew"), "{grew}");
                // The inner bash holds the memory, `tr` writes into its pipe.
                assert!(
                    grew.ends_with("rc=137\n[killed: memory limit of 64 MiB reached]")
                        || grew.contains(SHELL_KILLED_TOO),
                    "{grew}"
                );
                let lines: Vec<&str> = tmp.lines().collect();
                assert_eq!(lines[0], "rc=1", "{tmp}");
                assert!(lines[1].parse::<u64>().unwrap() <= 32 << 20, "{tmp}");
                assert_eq!(lines[2], "100", "{tmp}");
            } else {
                assert_eq!(hc.memory.unwrap_or(0), 0);
                assert!(hc.pids_limit.unwrap_or(0) <= 0);
                assert!(grew.ends_with("grew 200000000\nrc=0"), "{grew}");
                assert!(tmp.starts_with("rc=0\n50000000\n"), "{tmp}");
            }
            // The shell answers after the kill.
            assert_eq!(pool.run("a", "echo alive").await.unwrap(), "alive");
            pool.close_all().await;
        }
        // A shared container cannot take one session's limits.
        let bed = Testbed::docker().await;
        let mut config = ShellConfig::new("/tmp");
        config.limits = limits;
        config.backend = bed.backend.clone();
        let err = ShellPool::new(config)
            .unwrap()
            .run("a", "true")
            .await
            .unwrap_err();
        assert!(
            dsh_shell_persistent::contract::render_error(&err).contains(
                "the docker backend cannot keep the spawn spec's `limits`: limits per session need a container per session"
            ),
            "{err}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn a_container_removed_mid_call_is_reported() {
        let bed = Testbed::docker().await;
        let c = bed.container().unwrap().clone();
        let pool = pool(&c, None, Duration::from_secs(60));
        assert_eq!(pool.run("a", "echo up").await.unwrap(), "up");
        let (out, ()) =
            with_fault_mid_call(&pool, &c, || async { c.remove().await.unwrap() }).await;
        dsh_testbeds::assert_connection_lost(&out, "working", "Docker container");
        let err = pool.run("a", "echo again").await.unwrap_err();
        assert!(matches!(err, ShellError::Spawn { .. }), "{err:?}");
        assert_eq!(
            dsh_shell_persistent::contract::render_error(&err),
            format!(
                "The bash shell could not be started: spawning `bash` failed: there is no Docker container `{}`",
                c.name()
            )
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs a Docker daemon and the dsh-test image"]
    async fn missing_daemons_containers_and_images_are_named() {
        let err = dsh_docker::connect(Some("unix:///nonexistent/docker.sock"))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot reach the Docker daemon at unix:///nonexistent/docker.sock: "),
            "{err}"
        );
        let docker = dsh_docker::connect(None).await.unwrap();
        let err = Container::existing(docker.clone(), "dsh-no-such-container")
            .await
            .unwrap_err();
        assert!(matches!(err, DockerError::NoSuchContainer(_)));
        assert_eq!(
            err.to_string(),
            "there is no Docker container `dsh-no-such-container`"
        );
        let err = Container::create(docker, &ContainerTemplate::new("dsh-no-such-image:1"))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the Docker image `dsh-no-such-image:1` is not on the daemon (pull or import it first)"
        );
    }

    /// A Docker daemon of the test's own, on a private socket and a
    /// loopback TCP port, keeping containers running across its restarts
    /// (`--live-restore`). Its containers use a bridge the test makes and
    /// removes (`--bridge=none` would make dockerd delete the host's
    /// `docker0`), and it writes no iptables rules.
    struct OwnDaemon {
        dir: tempfile::TempDir,
        port: u16,
        bridge: String,
        child: Option<std::process::Child>,
    }

    impl OwnDaemon {
        fn start() -> OwnDaemon {
            let dir = tempfile::Builder::new()
                .prefix("dshd")
                .tempdir_in("/tmp")
                .unwrap();
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let bridge = format!("dsht{}", std::process::id() % 100_000);
            let made = std::process::Command::new("ip")
                .args(["link", "add", "name", &bridge, "type", "bridge"])
                .status()
                .unwrap();
            assert!(made.success(), "could not make the test's bridge {bridge}");
            let mut daemon = OwnDaemon {
                dir,
                port,
                bridge,
                child: None,
            };
            daemon.launch();
            daemon
        }

        fn socket(&self) -> String {
            format!("unix://{}/d.sock", self.dir.path().display())
        }

        fn tcp(&self) -> String {
            format!("tcp://127.0.0.1:{}", self.port)
        }

        fn launch(&mut self) {
            let d = self.dir.path();
            let log = std::fs::File::create(d.join("log")).unwrap();
            let child = std::process::Command::new("dockerd")
                .args(["--data-root", &format!("{}/data", d.display())])
                .args(["--exec-root", &format!("{}/x", d.display())])
                .args(["--pidfile", &format!("{}/pid", d.display())])
                .args(["-H", &self.socket(), "-H", &self.tcp()])
                .args([
                    "--bridge",
                    &self.bridge,
                    "--iptables=false",
                    "--ip6tables=false",
                ])
                .args(["--storage-driver", "vfs", "--live-restore"])
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("dockerd");
            self.child = Some(child);
            for _ in 0..300 {
                if std::process::Command::new("docker")
                    .args(["-H", &self.socket(), "info"])
                    .output()
                    .is_ok_and(|o| o.status.success())
                {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            panic!(
                "the test's dockerd did not start: {}",
                std::fs::read_to_string(d.join("log")).unwrap_or_default()
            );
        }

        /// SIGTERM, and wait for it to exit.
        fn stop(&mut self) {
            if let Some(mut child) = self.child.take() {
                let pid = child.id().to_string();
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", &pid])
                    .status();
                let _ = child.wait();
            }
        }
    }

    impl Drop for OwnDaemon {
        fn drop(&mut self) {
            if self.child.is_some() {
                // Without live-restore semantics for the test's leftovers.
                let _ = std::process::Command::new("docker")
                    .args(["-H", &self.socket(), "rm", "-f", "dsh-own-daemon-test"])
                    .output();
            }
            self.stop();
            // dockerd mounts its data root on itself: undo the test's mounts
            // (deepest first) so that the temporary directory can go.
            let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
            let dir = self.dir.path().display().to_string();
            let mut ours: Vec<&str> = mounts
                .lines()
                .filter_map(|l| l.split(' ').nth(1))
                .filter(|m| m.starts_with(&dir))
                .collect();
            ours.sort_by_key(|m| std::cmp::Reverse(m.len()));
            for m in ours {
                let _ = std::process::Command::new("umount")
                    .args(["-l", m])
                    .status();
            }
            let _ = std::process::Command::new("ip")
                .args(["link", "del", &self.bridge])
                .status();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs dockerd and the dsh-test image"]
    async fn a_daemon_restart_mid_call_is_reported_over_tcp() {
        let mut daemon = OwnDaemon::start();
        let load = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "docker save {} | docker -H {} load",
                test_image(),
                daemon.socket()
            ))
            .output()
            .unwrap();
        assert!(
            load.status.success(),
            "{}",
            String::from_utf8_lossy(&load.stderr)
        );
        // Driven over TCP, as a daemon on another machine would be.
        let docker = dsh_docker::connect(Some(&daemon.tcp())).await.unwrap();
        let container = Container::create(docker, &ContainerTemplate::new(test_image()))
            .await
            .unwrap();
        let _ = std::process::Command::new("docker")
            .args([
                "-H",
                &daemon.socket(),
                "rename",
                container.id(),
                "dsh-own-daemon-test",
            ])
            .output();
        let pool = pool(&container, None, Duration::from_secs(60));
        assert_eq!(pool.run("a", "echo up").await.unwrap(), "up");
        let (out, _daemon) = with_fault_mid_call(&pool, &container, move || async move {
            tokio::task::spawn_blocking(move || {
                daemon.stop();
                daemon.launch();
                daemon
            })
            .await
            .unwrap()
        })
        .await;
        dsh_testbeds::assert_connection_lost(&out, "working", "Docker container");
        // The container lived through the restart: the next call works.
        assert_eq!(pool.run("a", "echo back").await.unwrap(), "back");
        pool.close_all().await;
    }

    /// The editor's helper: what it must carry and what it survives.
    mod helper {
        use std::path::{Path, PathBuf};
        use std::time::Duration;

        use dsh_docker::DockerFs;
        use dsh_editor::fs::{Fs, FsError};
        use dsh_testbeds::Testbed;

        use super::sh;

        /// The helper's process id, learned from the helper itself: `head`,
        /// which reads a file for it, is its child.
        async fn helper_pid(fs: &DockerFs) -> String {
            let (stat, _) = fs.read(Path::new("/proc/self/stat"), 4096).await.unwrap();
            let stat = String::from_utf8(stat).unwrap();
            // pid (comm) state ppid ...
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            after.split(' ').nth(1).unwrap().to_owned()
        }

        fn file(bed: &Testbed, name: &str) -> PathBuf {
            PathBuf::from(format!("{}/{name}", bed.root))
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn binary_content_and_frame_lookalikes_pass_unchanged() {
            let bed = Testbed::docker().await;
            let fs = DockerFs::new(bed.container().unwrap().clone());
            let path = file(&bed, "bin");
            let mut data: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
            data.extend_from_slice(b"\n0123456789abcdef 0\n\n0123456789abcdef 0 x\n\0\0");
            fs.create_new(&path, data.clone()).await.unwrap();
            let (read, version) = fs.read(&path, 1 << 20).await.unwrap();
            assert_eq!(read, data);
            // Content that ends like an answer, and no final newline.
            let mut next = data.clone();
            next.extend_from_slice(b"\nffffffffffffffff 0");
            fs.replace(&path, next.clone(), &version).await.unwrap();
            assert_eq!(fs.read(&path, 1 << 20).await.unwrap().0, next);
            // Empty content, and a path with a newline and a backslash.
            let odd = file(&bed, "a\nb\\c d");
            fs.create_new(&odd, Vec::new()).await.unwrap();
            assert_eq!(fs.read(&odd, 10).await.unwrap().0, b"");
            assert_eq!(fs.stat(&odd).await.unwrap().len, 0);
            let names: Vec<_> = fs.read_dir(Path::new(&bed.root)).await.unwrap();
            assert!(names.iter().any(|e| e.name == "a\nb\\c d"), "{names:?}");
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn a_large_file_goes_both_ways() {
            let bed = Testbed::docker().await;
            let c = bed.container().unwrap();
            let fs = DockerFs::new(c.clone());
            let path = file(&bed, "large");
            let data: Vec<u8> = (0..6_000_000u32).map(|i| (i % 251) as u8).collect();
            fs.create_new(&path, data.clone()).await.unwrap();
            let (read, version) = fs.read(&path, 1 << 24).await.unwrap();
            assert!(read == data, "{} bytes came back", read.len());
            let mut next = data;
            next.truncate(4_000_000);
            fs.replace(&path, next.clone(), &version).await.unwrap();
            assert!(fs.read(&path, 1 << 24).await.unwrap().0 == next);
            assert_eq!(
                sh(c, &format!("wc -c < {}", path.display())).await,
                "4000000"
            );
            // Too large for the limit: refused, and the helper stays in step.
            assert!(matches!(
                fs.read(&path, 1000).await,
                Err(FsError::TooLarge { .. })
            ));
            assert_eq!(fs.stat(&path).await.unwrap().len, 4_000_000);
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn concurrent_operations_each_get_their_own_answer() {
            let bed = Testbed::docker().await;
            let fs = DockerFs::new(bed.container().unwrap().clone());
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..40 {
                let fs = fs.clone();
                let path = file(&bed, &format!("f{i}"));
                tasks.spawn(async move {
                    let body = format!("file {i}\n").repeat(i + 1).into_bytes();
                    fs.create_new(&path, body.clone()).await.unwrap();
                    let (read, version) = fs.read(&path, 1 << 16).await.unwrap();
                    assert_eq!(read, body);
                    let next = format!("edited {i}\n").into_bytes();
                    fs.replace(&path, next.clone(), &version).await.unwrap();
                    assert_eq!(fs.read(&path, 1 << 16).await.unwrap().0, next);
                    assert_eq!(fs.stat(&path).await.unwrap().len, next.len() as u64);
                });
            }
            while let Some(done) = tasks.join_next().await {
                done.unwrap();
            }
            let entries = fs.read_dir(Path::new(&bed.root)).await.unwrap();
            assert_eq!(entries.len(), 40, "{entries:?}");
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn a_killed_helper_is_reported_and_started_again() {
            let bed = Testbed::docker().await;
            let c = bed.container().unwrap();
            let fs = DockerFs::new(c.clone());
            let path = file(&bed, "f");
            fs.create_new(&path, b"one\n".to_vec()).await.unwrap();

            // Killed while idle: the next call works (on a new helper) or
            // says the helper ended; the one after works.
            let first = helper_pid(&fs).await;
            sh(c, &format!("kill -9 {first}")).await;
            match fs.read(&path, 100).await {
                Ok((data, _)) => assert_eq!(data, b"one\n"),
                Err(e) => assert!(
                    e.to_string()
                        .contains("helper process in the container ended"),
                    "{e}"
                ),
            }
            assert_eq!(fs.read(&path, 100).await.unwrap().0, b"one\n");
            let second = helper_pid(&fs).await;
            assert_ne!(first, second);

            // Killed mid-call (reading a FIFO nobody writes): that call
            // fails and says so; the next one works.
            let fifo = file(&bed, "fifo");
            sh(c, &format!("mkfifo {}", fifo.display())).await;
            let stuck = tokio::spawn({
                let fs = fs.clone();
                async move { fs.read(&fifo, 100).await }
            });
            // Wait (bounded) for the helper's `head` on the FIFO.
            let mut child = String::new();
            for _ in 0..400 {
                child = sh(
                    c,
                    &format!(
                        "for d in /proc/[0-9]*; do set -- $(cat $d/stat 2>/dev/null); [ \"$4\" = {second} ] && echo ${{d#/proc/}}; done; true"
                    ),
                )
                .await;
                if !child.is_empty() {
                    break;
                }
                tokio::task::yield_now().await;
            }
            assert!(
                !child.is_empty(),
                "the helper never started reading the FIFO"
            );
            sh(c, &format!("kill -9 {second} {child}")).await;
            let err = tokio::time::timeout(Duration::from_secs(60), stuck)
                .await
                .unwrap()
                .unwrap()
                .unwrap_err();
            let said = err.to_string();
            assert!(
                said.contains("helper process in the container ended"),
                "{said}"
            );
            assert!(
                said.contains("whether this operation took effect is not known"),
                "{said}"
            );
            assert_eq!(fs.read(&path, 100).await.unwrap().0, b"one\n");
            assert_ne!(helper_pid(&fs).await, second);
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn a_dropped_filesystem_leaves_no_helper() {
            let bed = Testbed::docker().await;
            let c = bed.container().unwrap();
            let fs = DockerFs::new(c.clone());
            let user = fs.clone().user("1000");
            let pids = [helper_pid(&fs).await, helper_pid(&user).await];
            assert_ne!(pids[0], pids[1], "a user gets a helper of its own");
            let running = |pid: &str| format!("[ -e /proc/{pid} ] && echo yes; true");
            assert_eq!(sh(c, &running(&pids[0])).await, "yes");
            drop((fs, user));
            // The helpers see their input end and go.
            assert_eq!(
                super::until_gone(c, &["op_replace"]).await,
                Vec::<String>::new()
            );
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn a_helper_that_cannot_start_says_why() {
            let bed = Testbed::docker().await;
            let c = bed.container().unwrap();
            let fs = DockerFs::new(c.clone());
            c.remove().await.unwrap();
            let err = fs.stat(Path::new("/")).await.unwrap_err().to_string();
            assert!(err.contains("there is no Docker container"), "{err}");
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "needs a Docker daemon and the dsh-test image"]
        async fn a_same_size_edit_moves_the_whole_second() {
            let bed = Testbed::docker().await;
            let c = bed.container().unwrap();
            let fs = DockerFs::new(c.clone());
            let path = file(&bed, "m.py");
            fs.create_new(&path, b"x = 1\n".to_vec()).await.unwrap();
            let seconds = || async {
                sh(c, &format!("stat -c %Y {}", path.display()))
                    .await
                    .parse::<i64>()
                    .unwrap()
            };
            let before = seconds().await;
            let (_, version) = fs.read(&path, 100).await.unwrap();
            fs.replace(&path, b"x = 2\n".to_vec(), &version)
                .await
                .unwrap();
            let after = seconds().await;
            // (Made and edited within a second, the rule set it to the next
            // second; else the clock moved it on.)
            assert!(after > before, "a same-size edit kept the mtime's second");
            assert_eq!(
                sh(c, &format!("cat {}; ls -A {}", path.display(), bed.root)).await,
                "x = 2\nm.py"
            );
            // An edit that changes the size keeps the clock's time.
            let (_, version) = fs.read(&path, 100).await.unwrap();
            fs.replace(&path, b"x = 30\n".to_vec(), &version)
                .await
                .unwrap();
            assert!(
                !sh(c, &format!("stat -c %y {}", path.display()))
                    .await
                    .contains(".000000000")
            );
        }
    }
}
