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
            _dir: Some(dir),
        }
    }

    /// A new container of the local daemon, working in `/work/t`.
    pub async fn docker() -> Testbed {
        let docker = dsh_docker::connect(None)
            .await
            .expect("a Docker daemon (this test is ignored unless run with --ignored)");
        let mut template = ContainerTemplate::new(test_image());
        template.labels.push(("dsh-rs-test".into(), "1".into()));
        let container = Container::create(docker, &template)
            .await
            .expect("a container from the test image (.ci/run imports it)");
        let ran = container
            .run(&["mkdir", "-p", "/work/t"], None)
            .await
            .unwrap();
        assert_eq!(ran.code, 0, "{}", ran.stderr_text());
        Testbed {
            place: Where::Docker,
            backend: Arc::new(DockerBackend::new(container.clone())),
            fs: Arc::new(DockerFs::new(container.clone())),
            root: "/work/t".to_owned(),
            container: Some(container),
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
                assert_eq!(ran.code, 0, "{}", ran.stderr_text());
            }
            None => std::fs::create_dir_all(&path).unwrap(),
        }
    }

    /// The content of `root/rel`.
    pub async fn get(&self, rel: &str) -> Vec<u8> {
        let path = self.path(rel);
        self.fs
            .read(Path::new(&path))
            .await
            .unwrap_or_else(|e| panic!("reading {path}: {e}"))
            .0
    }

    /// Whether `root/rel` exists.
    pub async fn exists(&self, rel: &str) -> bool {
        self.fs.stat(Path::new(&self.path(rel))).await.is_ok()
    }

    /// Whether the backend reports signals by name (`SIGKILL`); Docker
    /// reports the exit code `128 + n` instead.
    pub fn names_signals(&self) -> bool {
        self.place != Where::Docker
    }

    /// How the shell's death by `signal` (number `n`) reads to the model.
    pub fn killed_line(&self, signal: &str, n: i32) -> String {
        if self.names_signals() {
            format!("[shell killed by signal: {signal}]")
        } else {
            format!("[shell exited: code {}]", 128 + n)
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
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
