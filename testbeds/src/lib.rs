//! Where the contract suites run: this machine, a Docker container, an SSH
//! host. A [`Testbed`] gives a test the PTY backend, the editor's
//! filesystem and a fresh working directory of one of them, and removes what
//! it made when dropped.
//!
//! The remote testbeds need engines: [`Testbed::docker`] a Docker daemon
//! with the image named by `DSH_TEST_IMAGE` (default `dsh-test`, which
//! `.ci/run` builds with `docker import`). Tests that use them are
//! `#[ignore]`d and run with `cargo test -- --ignored` where the engines are.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

/// The top-level README's examples, compiled and run by `cargo test` as
/// this crate's doctests.
#[cfg(all(doctest, target_os = "linux"))]
#[doc = include_str!("../../README.md")]
pub struct Readme;

/// The `dsh-docker` README's examples, compiled by `cargo test` as this
/// crate's doctests (they need a daemon, so they are not run).
#[cfg(doctest)]
#[doc = include_str!("../../dsh-docker/README.md")]
pub struct DockerReadme;

/// The `dsh-ssh` README's examples, compiled by `cargo test` as this
/// crate's doctests (they need an SSH host, so they are not run).
#[cfg(all(doctest, target_os = "linux"))]
#[doc = include_str!("../../dsh-ssh/README.md")]
pub struct SshReadme;

use std::path::Path;
use std::sync::Arc;

use dsh_docker::{Container, ContainerTemplate, DockerBackend, DockerFs};
use dsh_editor::fs::{Fs, LocalFs};
use dsh_pty::PtyBackend;

/// Which machine a testbed is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    /// This machine: the native backend and `LocalFs`.
    Local,
    /// A container of the local Docker daemon, made for the test.
    Docker,
    /// The same, seen as if the daemon ran on another machine: this host's
    /// `/proc` is not read, a script in the container answers instead.
    DockerRemote,
    /// This machine over SSH: an `sshd` of the test's own on a loopback
    /// port, with keys made for it.
    Ssh,
}

/// A backend, a filesystem and a fresh directory on one machine.
pub struct Testbed {
    /// Which machine.
    pub place: Where,
    /// The PTY backend for shells there.
    pub backend: Arc<dyn PtyBackend>,
    /// The editor's filesystem there.
    pub fs: Arc<dyn Fs>,
    /// A fresh, empty, canonical directory there.
    pub root: String,
    container: Option<Container>,
    #[cfg(target_os = "linux")]
    sshd: Option<Sshd>,
    _dir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Testbed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Testbed")
            .field("place", &self.place)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// Asserts that a call's result is `first_line`, then the line that says
/// the connection to `what` ("Docker container", "SSH host") was lost, then
/// the reset line.
pub fn assert_connection_lost(out: &str, first_line: &str, what: &str) {
    let head = format!("{first_line}\n[the connection to the {what} was lost: ");
    assert!(out.starts_with(&head), "{out:?}");
    let tail = "; what the command did there is unknown]\nThe persistent bash shell was reset; the next bash call starts from the workspace with a fresh current directory and environment.";
    assert!(out.ends_with(tail), "{out:?}");
}

/// What every editor filesystem must keep (run as root, as the testbeds
/// are): an edit keeps a set-uid mode and another owner, writes through a
/// symbolic link (which stays a link), a version read before another writer
/// changed the file is refused and that writer's content stays, create-new
/// never overwrites, and no temporary file is left behind.
pub async fn edits_keep_mode_owner_and_links_and_refuse_stale_versions(bed: &Testbed) {
    use dsh_editor::fs::FsError;
    let root = &bed.root;
    bed.sh(&format!(
        "cd {root} && printf 'old\\n' > run.sh && chown 1000:1000 run.sh && chmod 4751 run.sh \
         && mkdir real && printf 'key = 1\\n' > real/conf && ln -s real/conf link"
    ))
    .await;
    let fs = Arc::clone(&bed.fs);
    let editor = dsh_editor::Editor::new(Arc::clone(&fs));
    let run_sh = format!("{root}/run.sh");
    let edit = |path: &str, old: &str, new: &str| {
        let args = serde_json::json!({"command": "str_replace", "path": path, "old_str": old, "new_str": new});
        let editor = editor.clone();
        async move { editor.execute(&args).await.unwrap() }
    };
    edit(&run_sh, "old", "new").await;
    assert_eq!(
        bed.sh(&format!("cat {run_sh}; stat -c '%a %u:%g' {run_sh}"))
            .await,
        "new\n4751 1000:1000"
    );
    // A read is bounded: one byte over the limit is refused, not loaded.
    assert!(matches!(
        fs.read(Path::new(&run_sh), 3).await,
        Err(FsError::TooLarge {
            len: 4,
            limit: 3,
            ..
        })
    ));
    assert_eq!(fs.read(Path::new(&run_sh), 4).await.unwrap().0, b"new\n");
    let link = format!("{root}/link");
    edit(&link, "1", "2").await;
    assert_eq!(
        bed.sh(&format!("readlink {link}; cat {root}/real/conf"))
            .await,
        "real/conf\nkey = 2"
    );
    // Another writer in the same second (SFTP times are whole seconds).
    let (_, version) = fs.read(Path::new(&run_sh), u64::MAX).await.unwrap();
    bed.sh(&format!("printf 'theirs\\n' > {run_sh}")).await;
    let err = fs
        .replace(Path::new(&run_sh), b"mine\n".to_vec(), &version)
        .await
        .unwrap_err();
    assert!(matches!(err, FsError::Changed(_)), "{err}");
    assert_eq!(bed.sh(&format!("cat {run_sh}")).await, "theirs");
    let err = fs
        .create_new(Path::new(&run_sh), b"x".to_vec())
        .await
        .unwrap_err();
    assert!(matches!(err, FsError::AlreadyExists(_)), "{err}");
    assert_eq!(bed.sh(&format!("cat {run_sh}")).await, "theirs");
    fs.create_new(
        Path::new(&format!("{root}/new/deep/f.txt")),
        b"made\n".to_vec(),
    )
    .await
    .unwrap();
    assert_eq!(
        bed.sh(&format!(
            "cat {root}/new/deep/f.txt; stat -c %a {root}/new/deep/f.txt"
        ))
        .await,
        "made\n644"
    );
    assert_eq!(
        bed.sh(&format!("ls -A {root} {root}/real")).await,
        format!("{root}:\nlink\nnew\nreal\nrun.sh\n\n{root}/real:\nconf")
    );
}

/// Same-size edits, each within the second of the file's last write, each
/// leave the file's modification time in a later whole second than before
/// and never ahead of the clock there (`Fs::replace`'s rule for caches keyed
/// on the time in seconds and the size, as Python's bytecode is).
pub async fn same_size_edits_get_a_later_second(bed: &Testbed) {
    let rel = "later-second.txt";
    let path = bed.path(rel);
    let seconds = |script: String| async move {
        let text = bed.sh(&script).await;
        text.parse::<u64>()
            .unwrap_or_else(|e| panic!("{script}: {text:?}: {e}"))
    };
    bed.put(rel, "old 0\n").await;
    for i in 1..=3 {
        let (_, version) = bed.fs.read(Path::new(&path), 1 << 20).await.unwrap();
        let before = seconds(format!("stat -c %Y {path}")).await;
        let new = format!("new {i}\n");
        bed.fs
            .replace(Path::new(&path), new.clone().into_bytes(), &version)
            .await
            .unwrap();
        let after = seconds(format!("stat -c %Y {path}")).await;
        let now = seconds("date +%s".to_owned()).await;
        assert!(after > before, "edit {i}: {before} then {after}");
        assert!(
            after <= now,
            "edit {i}: {after} is ahead of the clock's {now}"
        );
        assert_eq!(bed.get(rel).await, new.as_bytes());
    }
}

/// The image the Docker testbed uses.
pub fn test_image() -> String {
    std::env::var("DSH_TEST_IMAGE").unwrap_or_else(|_| "dsh-test".to_owned())
}

impl Testbed {
    /// A testbed at `place`.
    pub async fn new(place: Where) -> Testbed {
        match place {
            Where::Local => Testbed::local(),
            Where::Docker => Testbed::docker().await,
            Where::DockerRemote => {
                let mut bed = Testbed::docker().await;
                let container = bed.container.clone().unwrap();
                bed.place = Where::DockerRemote;
                bed.backend = Arc::new(DockerBackend::new(container).host_proc(false));
                bed
            }
            #[cfg(target_os = "linux")]
            Where::Ssh => Testbed::ssh().await,
            #[cfg(not(target_os = "linux"))]
            Where::Ssh => panic!("the SSH testbed runs on Linux only"),
        }
    }

    /// This machine, in a new temporary directory.
    pub fn local() -> Testbed {
        let dir = tempfile::tempdir().unwrap();
        // Canonical, so symlinked temp dirs don't change paths in messages.
        let root = std::fs::canonicalize(dir.path()).unwrap();
        Testbed {
            place: Where::Local,
            backend: dsh_pty::default_backend(),
            fs: Arc::new(LocalFs::new()),
            root: root.to_str().unwrap().to_owned(),
            container: None,
            #[cfg(target_os = "linux")]
            sshd: None,
            _dir: Some(dir),
        }
    }

    /// This machine over SSH, in a new temporary directory.
    #[cfg(target_os = "linux")]
    pub async fn ssh() -> Testbed {
        let sshd = Sshd::start();
        let host = dsh_ssh::SshHost::connect(sshd.target())
            .await
            .expect("connecting to the test's sshd");
        let mut local = Testbed::local();
        local.place = Where::Ssh;
        local.backend = Arc::new(dsh_ssh::SshBackend::new(host.clone()));
        local.fs = Arc::new(dsh_ssh::SftpFs::open(&host).await.expect("SFTP"));
        local.sshd = Some(sshd);
        local
    }

    /// The test's sshd, for the SSH testbed.
    #[cfg(target_os = "linux")]
    pub fn sshd(&self) -> Option<&Sshd> {
        self.sshd.as_ref()
    }

    /// A new container of the local daemon, working in `/work/t`.
    pub async fn docker() -> Testbed {
        Testbed::docker_with_env(&[]).await
    }

    /// [`Testbed::docker`] with `env` (`NAME=value`) in the container's
    /// environment, as an image's `ENV` puts it there.
    pub async fn docker_with_env(env: &[&str]) -> Testbed {
        let docker = dsh_docker::connect(None)
            .await
            .expect("a Docker daemon (this test is ignored unless run with --ignored)");
        let mut template = ContainerTemplate::new(test_image());
        template.env = env.iter().map(|v| (*v).to_owned()).collect();
        template.labels.push(("dsh-rs-test".into(), "1".into()));
        let container = Container::create(docker, &template)
            .await
            .expect("a container from the test image (.ci/run imports it)");
        let ran = container
            .run(&["mkdir", "-p", "/work/t"], None)
            .await
            .unwrap();
        assert!(ran.status.success(), "{}", ran.stderr_text());
        Testbed {
            place: Where::Docker,
            backend: Arc::new(DockerBackend::new(container.clone())),
            fs: Arc::new(DockerFs::new(container.clone())),
            root: "/work/t".to_owned(),
            container: Some(container),
            #[cfg(target_os = "linux")]
            sshd: None,
            _dir: None,
        }
    }

    /// The container, for the Docker testbed.
    pub fn container(&self) -> Option<&Container> {
        self.container.as_ref()
    }

    /// `root/rel`.
    pub fn path(&self, rel: &str) -> String {
        format!("{}/{rel}", self.root)
    }

    /// Writes a new file at `root/rel` (parents created).
    pub async fn put(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.path(rel);
        self.fs
            .create_new(Path::new(&path), content.as_ref().to_vec())
            .await
            .unwrap_or_else(|e| panic!("writing {path}: {e}"));
    }

    /// Makes the directory `root/rel` (parents too).
    pub async fn mkdir(&self, rel: &str) {
        let path = self.path(rel);
        match &self.container {
            Some(c) => {
                let ran = c.run(&["mkdir", "-p", &path], None).await.unwrap();
                assert!(ran.status.success(), "{}", ran.stderr_text());
            }
            None => std::fs::create_dir_all(&path).unwrap(),
        }
    }

    /// The content of `root/rel`.
    pub async fn get(&self, rel: &str) -> Vec<u8> {
        let path = self.path(rel);
        self.fs
            .read(Path::new(&path), u64::MAX)
            .await
            .unwrap_or_else(|e| panic!("reading {path}: {e}"))
            .0
    }

    /// Whether `root/rel` exists.
    pub async fn exists(&self, rel: &str) -> bool {
        self.fs.stat(Path::new(&self.path(rel))).await.is_ok()
    }

    /// Runs `script` with `sh` on the testbed's machine (in the container for
    /// Docker, here otherwise) and returns its output without the final
    /// newline; panics when it fails.
    pub async fn sh(&self, script: &str) -> String {
        let (code, stdout, stderr) = match &self.container {
            Some(c) => {
                let ran = c.run(&["sh", "-c", script], None).await.unwrap();
                (ran.status.code().unwrap_or(-1), ran.stdout, ran.stderr)
            }
            None => {
                let out = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(script)
                    .output()
                    .unwrap();
                (out.status.code().unwrap_or(-1), out.stdout, out.stderr)
            }
        };
        assert_eq!(code, 0, "{script}: {}", String::from_utf8_lossy(&stderr));
        String::from_utf8(stdout).unwrap().trim_end().to_owned()
    }

    /// How the shell's death by `signal` reads to the model: by name, on
    /// every backend.
    pub fn killed_line(&self, signal: &str) -> String {
        format!("[shell killed by signal: {signal}]")
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(mut sshd) = self.sshd.take() {
            sshd.stop();
        }
        let Some(container) = self.container.take() else {
            return;
        };
        // Dropped in any runtime (or none, after a panic): remove the
        // container from a thread of its own, over a fresh connection.
        let id = container.id().to_owned();
        let removed = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let docker = dsh_docker::connect(None).await?;
                Container::unchecked(docker, &id).remove().await
            })
        })
        .join();
        if let Ok(Err(e)) = removed {
            eprintln!("the test container was not removed: {e}");
        }
    }
}

#[cfg(target_os = "linux")]
pub use sshd::Sshd;

#[cfg(target_os = "linux")]
mod sshd {
    use std::path::Path;

    /// An `sshd` of the test's own: a loopback port, a host key and a client
    /// key made in a temporary directory, logins for the current user with that
    /// key only. Stopped (with every session it serves) when dropped.
    #[derive(Debug)]
    pub struct Sshd {
        dir: tempfile::TempDir,
        port: u16,
        /// Lines added to its configuration.
        extra: String,
        child: Option<std::process::Child>,
    }

    impl Sshd {
        /// Makes the keys and the configuration, starts `sshd` and waits until
        /// it listens.
        pub fn start() -> Sshd {
            Sshd::start_with("")
        }

        /// [`Sshd::start`] with `extra` lines in its configuration (such as
        /// `SetEnv NAME=value`, which sessions then find in their
        /// environment).
        pub fn start_with(extra: &str) -> Sshd {
            let dir = tempfile::tempdir().unwrap();
            let d = dir.path();
            for key in ["host_key", "id_ed25519"] {
                let made = std::process::Command::new("ssh-keygen")
                    .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                    .arg(d.join(key))
                    .status()
                    .expect("ssh-keygen (openssh-client)");
                assert!(made.success());
            }
            std::fs::copy(d.join("id_ed25519.pub"), d.join("authorized_keys")).unwrap();
            let mut sshd = Sshd {
                dir,
                port: 0,
                extra: extra.to_owned(),
                child: None,
            };
            // A port free when asked can be taken by another test's sshd
            // before ours binds it: then ours exits, and another port is
            // tried.
            let mut refused = String::new();
            for _ in 0..10 {
                sshd.port = std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port();
                sshd.configure();
                match sshd.try_launch() {
                    Ok(()) => return sshd,
                    Err(log) => refused = log,
                }
            }
            panic!("sshd did not start on any of ten ports: {refused}");
        }

        /// Writes the configuration and the known-hosts file for `self.port`.
        fn configure(&self) {
            let d = self.dir.path();
            let port = self.port;
            let host_pub = std::fs::read_to_string(d.join("host_key.pub")).unwrap();
            std::fs::write(
                d.join("known_hosts"),
                format!("[127.0.0.1]:{port} {}", host_pub.trim()),
            )
            .unwrap();
            std::fs::write(
                d.join("sshd_config"),
                format!(
                    "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nAuthorizedKeysFile {ak}\nPidFile {pid}\n\
                     StrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                     PermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\nLogLevel ERROR\n{extra}\n",
                    extra = self.extra,
                    hk = d.join("host_key").display(),
                    ak = d.join("authorized_keys").display(),
                    pid = d.join("sshd.pid").display(),
                ),
            )
            .unwrap();
        }

        /// Starts `sshd` (again, after [`Sshd::stop`]) on the same port and keys.
        pub fn launch(&mut self) {
            if let Err(log) = self.try_launch() {
                panic!("sshd did not start: {log}");
            }
        }

        /// Starts `sshd` and waits until it listens: sshd writes its pid file
        /// after its listening socket is bound, and exits if it cannot bind
        /// it. (A probe connection proves less: it can reach another test's
        /// sshd on the same port, or connect to itself.) `Err` holds its log.
        fn try_launch(&mut self) -> Result<(), String> {
            let d = self.dir.path();
            let pid_file = d.join("sshd.pid");
            let _ = std::fs::remove_file(&pid_file);
            let log = std::fs::File::create(d.join("sshd.log")).unwrap();
            let mut child = std::process::Command::new("/usr/sbin/sshd")
                .args(["-D", "-e", "-f"])
                .arg(d.join("sshd_config"))
                .stderr(log)
                .spawn()
                .expect("/usr/sbin/sshd (openssh-server; it also needs /run/sshd)");
            let pid = child.id().to_string();
            let log = || std::fs::read_to_string(d.join("sshd.log")).unwrap_or_default();
            for _ in 0..6000 {
                if std::fs::read_to_string(&pid_file).is_ok_and(|p| p.trim() == pid) {
                    self.child = Some(child);
                    return Ok(());
                }
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("{status}: {}", log()));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("no pid file after 60 s: {}", log()))
        }

        /// Where to connect, with the test's key and known-hosts file.
        pub fn target(&self) -> dsh_ssh::SshTarget {
            let user = std::env::var("USER").unwrap_or_else(|_| "root".to_owned());
            let mut target =
                dsh_ssh::SshTarget::parse(&format!("{user}@127.0.0.1:{}", self.port)).unwrap();
            target.identity = self.dir.path().join("id_ed25519");
            target.known_hosts = self.dir.path().join("known_hosts");
            target
        }

        /// The directory with the keys and the known-hosts file.
        pub fn dir(&self) -> &Path {
            self.dir.path()
        }

        /// The port it listens on.
        pub fn port(&self) -> u16 {
            self.port
        }

        /// Stops the listening `sshd` and the per-connection `sshd` processes
        /// it forked (its children), which ends every SSH session it served.
        pub fn stop(&mut self) {
            let Some(mut child) = self.child.take() else {
                return;
            };
            let pid = child.id();
            // The per-connection sshd processes are the listener's children.
            let _ = std::process::Command::new("pkill")
                .args(["-KILL", "-P", &pid.to_string()])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    impl Drop for Sshd {
        fn drop(&mut self) {
            self.stop();
        }
    }
}
