//! The [`PtyBackend`] that starts programs in containers.

use async_trait::async_trait;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use dsh_pty::remote::RemoteLink;
use dsh_pty::{PtyBackend, PtyError, PtySession, SpawnSpec, SpecField, SpecSupport};

use crate::link::{DockerLink, DockerSession, ExecTerminal};
use crate::{Container, ContainerTemplate, DockerError};

/// Where a backend runs its programs.
#[derive(Debug, Clone)]
enum Placement {
    /// In one container that outlives the sessions.
    Shared(Container),
    /// In a container of its own per session, made from a template and
    /// removed when the session ends.
    PerSession {
        docker: bollard::Docker,
        template: ContainerTemplate,
    },
}

/// Starts programs in Docker containers, each in a terminal of its own
/// (`docker exec -it`).
///
/// ```no_run
/// use std::sync::Arc;
/// use dsh_docker::{Container, DockerBackend};
/// use dsh_shell_persistent::{ShellConfig, ShellPool};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let docker = dsh_docker::connect(None).await?;
/// let container = Container::existing(docker, "my-task").await?;
/// let mut config = ShellConfig::new("/testbed");
/// config.backend = Arc::new(DockerBackend::new(container));
/// let shell = ShellPool::new(config)?;
/// println!("{}", shell.run("agent", "uname -a").await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DockerBackend {
    placement: Placement,
    user: Option<String>,
    host_proc: bool,
}

impl DockerBackend {
    /// Runs every session in `container`.
    pub fn new(container: Container) -> Self {
        DockerBackend {
            placement: Placement::Shared(container),
            user: None,
            host_proc: true,
        }
    }

    /// Runs every session in a new container made from `template`, removed
    /// (with everything in it) when the session ends.
    pub fn per_session(docker: bollard::Docker, template: ContainerTemplate) -> Self {
        DockerBackend {
            placement: Placement::PerSession { docker, template },
            user: None,
            host_proc: true,
        }
    }

    /// Whether to read this host's `/proc` for a session's processes when
    /// the daemon runs here (default `true`: it is the cheapest and most
    /// exact view). With `false`, or with a daemon elsewhere, a small script
    /// in the container answers instead ([`dsh_pty::remote::FOREGROUND_SCRIPT`]).
    pub fn host_proc(mut self, on: bool) -> Self {
        self.host_proc = on;
        self
    }

    /// Runs the programs as `user` (`name`, `uid` or `uid:gid`), not the
    /// image's default user.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }
}

fn lossy(s: &std::ffi::OsStr) -> String {
    s.to_string_lossy().into_owned()
}

/// A spawn that failed on the Docker side: "spawning `bash` failed: there
/// is no Docker container `x`".
fn spawn_failed(spec: &SpawnSpec, e: DockerError) -> PtyError {
    PtyError::Spawn {
        program: lossy(spec.program()),
        source: std::io::Error::other(e),
    }
}

#[async_trait]
impl PtyBackend for DockerBackend {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn is_local(&self) -> bool {
        false
    }

    /// All but hooks (the container is the confinement) and the
    /// terminal's modes; limits only with a container per session. The
    /// environment through the shared prologue
    /// ([`dsh_pty::remote::command_line`]).
    fn keeps(&self) -> SpecSupport {
        let keeps = SpecSupport::ALL
            .without(
                SpecField::PreExec,
                "confinement hooks run on this machine (the container is the confinement)",
            )
            .without(
                SpecField::Echo,
                "the exec's terminal modes are the daemon's",
            )
            .without(
                SpecField::OutputProcessing,
                "the exec's terminal modes are the daemon's",
            );
        match self.placement {
            Placement::Shared(_) => keeps.without(
                SpecField::Limits,
                "limits per session need a container per session (or set them on the container)",
            ),
            Placement::PerSession { .. } => keeps,
        }
    }

    async fn spawn(&self, spec: SpawnSpec) -> Result<Box<dyn PtySession>, PtyError> {
        self.keeps().check(self.name(), &spec)?;
        let limits = spec.get_limits();
        let (container, owned) = match &self.placement {
            Placement::Shared(c) => (c.clone(), false),
            Placement::PerSession { docker, template } => {
                // The spawn's limits, where it has any, else the template's.
                let mut template = template.clone();
                if !limits.is_empty() {
                    template.limits = limits.clone();
                }
                (
                    Container::create(docker.clone(), &template)
                        .await
                        .map_err(|e| spawn_failed(&spec, e))?,
                    true,
                )
            }
        };
        let spawned = self.start(&spec, &container, owned).await;
        if spawned.is_err() && owned {
            let _ = container.remove().await;
        }
        spawned
    }
}

impl DockerBackend {
    async fn start(
        &self,
        spec: &SpawnSpec,
        container: &Container,
        owned: bool,
    ) -> Result<Box<dyn PtySession>, PtyError> {
        let tag = dsh_pty::remote::new_tag()?;
        // The tag from the start (this host's view finds the exec's
        // process by it), the rest through the shared prologue.
        let env = vec![format!("{}={tag}", dsh_pty::remote::TAG_VAR)];
        let cmd = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            dsh_pty::remote::command_line(spec, &tag),
        ];
        let docker = container.docker();
        let exec = docker
            .create_exec(
                container.id(),
                CreateExecOptions {
                    cmd: Some(cmd),
                    env: Some(env),
                    attach_stdin: Some(true),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    tty: Some(true),
                    working_dir: spec.get_cwd().map(|p| p.to_string_lossy().into_owned()),
                    user: self.user.clone(),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| {
                spawn_failed(
                    spec,
                    DockerError::about(container.name(), "creating the shell's exec", e),
                )
            })?;
        let started = docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: true,
                    output_capacity: None,
                }),
            )
            .await
            .map_err(|e| {
                spawn_failed(
                    spec,
                    DockerError::about(container.name(), "starting the shell's exec", e),
                )
            })?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(PtyError::Closed);
        };
        let terminal = ExecTerminal {
            output,
            container: container.clone(),
            exec_id: exec.id.clone(),
            broke: None,
        };
        tracing::debug!(container = %container.name(), exec = %exec.id, "shell exec started");
        let link = DockerLink {
            container: container.clone(),
            exec_id: exec.id,
            user: self.user.clone(),
            owned,
            host_proc: self.host_proc,
            watched: container.watched(),
            input: tokio::sync::Mutex::new(input),
        };
        if let Err(e) = link.resize(spec.get_size()).await {
            tracing::debug!(error = %e, "sizing the exec's terminal failed");
        }
        let session = DockerSession::start(link, tag, terminal, spec);
        // The counters as the session starts, so that its first call's
        // limit events are its own.
        session.refresh_limit_events().await;
        Ok(Box::new(session))
    }
}
