//! A container to work in: an existing one, or one this crate created from
//! an image and removes.

use std::sync::Arc;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};

use crate::DockerError;

/// Connects to the Docker daemon named by `host` (`unix:///path` or
/// `tcp://host:port`; `ssh://` is not built in: forward the remote socket,
/// e.g. `ssh -L /tmp/d.sock:/var/run/docker.sock host`), or by
/// `DOCKER_HOST`, or the platform's default socket; agrees on the API
/// version and checks that the daemon answers.
///
/// ```no_run
/// # async fn demo() -> Result<(), dsh_docker::DockerError> {
/// let docker = dsh_docker::connect(None).await?;
/// # Ok(()) }
/// ```
pub async fn connect(host: Option<&str>) -> Result<Docker, DockerError> {
    let shown = host
        .map(str::to_owned)
        .or_else(|| std::env::var("DOCKER_HOST").ok())
        .unwrap_or_else(|| "the default socket".to_owned());
    let connect = |source| DockerError::Connect {
        host: shown.clone(),
        source,
    };
    let docker = match host {
        Some(host) => Docker::connect_with_host(host),
        None => Docker::connect_with_defaults(),
    }
    .map_err(connect)?;
    let docker = docker.negotiate_version().await.map_err(connect)?;
    docker.ping().await.map_err(connect)?;
    Ok(docker)
}

/// A running container the tools work in: both the shell backend and the
/// filesystem take one. Cloning is cheap (the connection is shared).
#[derive(Debug, Clone)]
pub struct Container {
    docker: Docker,
    id: Arc<str>,
    name: Arc<str>,
    /// The memory and process limits it was made with (by
    /// [`Container::create`]), whose events the sessions in it report.
    limits: Option<Watched>,
}

/// The memory and process limits of a container this crate made: the
/// sessions in it read the counters of its cgroup against them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Watched {
    pub(crate) memory: Option<u64>,
    pub(crate) pids: Option<u64>,
}

impl Watched {
    /// What `limits` asks to watch, if anything.
    pub(crate) fn of(limits: &dsh_pty::ResourceLimits) -> Option<Watched> {
        (limits.memory.is_some() || limits.pids.is_some()).then_some(Watched {
            memory: limits.memory,
            pids: limits.pids,
        })
    }
}

/// How [`Container::create`] makes a container.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ContainerTemplate {
    /// The image (it must be on the daemon already: nothing is pulled).
    pub image: String,
    /// Extra environment, `NAME=value`.
    pub env: Vec<String>,
    /// The network the container joins, by Docker's name (`--network`):
    /// `none` (only a loopback interface inside), `bridge` (Docker's
    /// default bridge), `host` (this host's interfaces) or the name of a
    /// user-defined network (`docker network create`), which must exist:
    /// [`Container::create`] fails with [`DockerError::NoSuchNetwork`]
    /// otherwise. `None` (the default): the daemon's default, the default
    /// bridge.
    pub network: Option<String>,
    /// The container's limits (the same knobs as a local shell's): memory
    /// (swap off, as `--memory-swap` equal to `--memory`), processes, CPU
    /// share, open files and file size (ulimits). Its cgroup parent and
    /// best-effort flag are not used: the daemon keeps every limit or
    /// refuses the container.
    pub limits: dsh_pty::ResourceLimits,
    /// `/tmp` as a tmpfs of at most this many bytes (`--tmpfs
    /// /tmp:rw,nosuid,nodev,mode=1777,size=N`; default: none, the image's
    /// `/tmp`). With [`ContainerTemplate::tmp_inodes`], one tmpfs with both.
    pub tmp_size: Option<u64>,
    /// `/tmp` as a tmpfs of at most this many files and directories
    /// (`nr_inodes=N`; default: none).
    pub tmp_inodes: Option<u64>,
    /// Labels to put on the container (the crate adds `dsh-rs=1`).
    pub labels: Vec<(String, String)>,
}

impl ContainerTemplate {
    /// A template for `image`, with no limits, on the daemon's default
    /// network.
    pub fn new(image: impl Into<String>) -> Self {
        ContainerTemplate {
            image: image.into(),
            env: Vec::new(),
            network: None,
            limits: dsh_pty::ResourceLimits::default(),
            tmp_size: None,
            tmp_inodes: None,
            labels: Vec::new(),
        }
    }
}

/// The part of a container's host config that keeps `template`'s limits
/// and `/tmp` bounds.
pub(crate) fn host_limits(template: &ContainerTemplate) -> HostConfig {
    let limits = &template.limits;
    let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let ulimit = |name: &str, v: u64| bollard::models::ResourcesUlimits {
        name: Some(name.to_owned()),
        soft: Some(signed(v)),
        hard: Some(signed(v)),
    };
    let ulimits: Vec<_> = [
        limits.open_files.map(|v| ulimit("nofile", v)),
        limits.file_size.map(|v| ulimit("fsize", v)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let tmpfs = (template.tmp_size.is_some() || template.tmp_inodes.is_some()).then(|| {
        let mut options = vec![
            "rw".to_owned(),
            "nosuid".to_owned(),
            "nodev".to_owned(),
            "mode=1777".to_owned(),
        ];
        options.extend(template.tmp_size.map(|v| format!("size={v}")));
        options.extend(template.tmp_inodes.map(|v| format!("nr_inodes={v}")));
        std::collections::HashMap::from([("/tmp".to_owned(), options.join(","))])
    });
    HostConfig {
        memory: limits.memory.map(signed),
        memory_swap: limits.memory.map(signed),
        pids_limit: limits.pids.map(signed),
        nano_cpus: limits
            .cpu_millis
            .map(|m| signed(m.saturating_mul(1_000_000))),
        ulimits: (!ulimits.is_empty()).then_some(ulimits),
        tmpfs,
        ..Default::default()
    }
}

/// [`DockerError::NoSuchNetwork`] when `template` names a network of its
/// own and the daemon has none by that name; asked after the daemon refused
/// the container, so a working create costs no extra round trip.
async fn missing_network(docker: &Docker, template: &ContainerTemplate) -> Option<DockerError> {
    let name = template.network.as_deref()?;
    // Docker's own modes, and another container's network namespace.
    if matches!(name, "none" | "bridge" | "host" | "default") || name.starts_with("container:") {
        return None;
    }
    match docker.inspect_network(name, None).await {
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Some(DockerError::NoSuchNetwork(name.to_owned())),
        _ => None,
    }
}

impl Container {
    /// The existing container `name` (a name or an id), which must be running.
    pub async fn existing(docker: Docker, name: &str) -> Result<Container, DockerError> {
        let info = docker
            .inspect_container(name, None)
            .await
            .map_err(|e| DockerError::about(name, "inspecting the container", e))?;
        if info.state.as_ref().and_then(|s| s.running) != Some(true) {
            return Err(DockerError::NotRunning(name.to_owned()));
        }
        let id = info.id.unwrap_or_else(|| name.to_owned());
        Ok(Container {
            docker,
            id: id.into(),
            name: name.into(),
            limits: None,
        })
    }

    /// A handle on container `name` without asking the daemon anything, for
    /// paths that only clean up ([`Container::remove`] of a stopped one).
    pub fn unchecked(docker: Docker, name: &str) -> Container {
        Container {
            docker,
            id: name.into(),
            name: name.into(),
            limits: None,
        }
    }

    /// Creates and starts a container from `template.image` that sleeps
    /// until it is removed (its command is `sleep 2147483647`, whatever the
    /// image's own entrypoint: the image needs `sleep`); remove it with
    /// [`Container::remove`].
    pub async fn create(
        docker: Docker,
        template: &ContainerTemplate,
    ) -> Result<Container, DockerError> {
        let mut labels: std::collections::HashMap<String, String> =
            template.labels.iter().cloned().collect();
        labels.insert("dsh-rs".into(), "1".into());
        let body = ContainerCreateBody {
            image: Some(template.image.clone()),
            // Keep it alive without depending on the image's own command.
            entrypoint: Some(vec!["sleep".into()]),
            cmd: Some(vec!["2147483647".into()]),
            env: Some(template.env.clone()),
            labels: Some(labels),
            host_config: Some(HostConfig {
                network_mode: template.network.clone(),
                init: Some(false),
                ..host_limits(template)
            }),
            ..Default::default()
        };
        let created = match docker
            .create_container(None::<CreateContainerOptions>, body)
            .await
        {
            Ok(created) => created,
            Err(source) => {
                if let Some(missing) = missing_network(&docker, template).await {
                    return Err(missing);
                }
                return Err(match &source {
                    bollard::errors::Error::DockerResponseServerError {
                        status_code: 404, ..
                    } => DockerError::NoSuchImage(template.image.clone()),
                    _ => DockerError::Api {
                        what: "creating a container",
                        source,
                    },
                });
            }
        };
        let container = Container {
            docker,
            name: created.id.clone().into(),
            id: created.id.into(),
            limits: Watched::of(&template.limits),
        };
        if let Err(source) = container.docker.start_container(&container.id, None).await {
            let _ = container.remove().await;
            // Some daemons accept a missing network at creation and refuse
            // the start.
            if let Some(missing) = missing_network(&container.docker, template).await {
                return Err(missing);
            }
            return Err(DockerError::Api {
                what: "starting the container",
                source,
            });
        }
        tracing::debug!(container = %container.id, image = %template.image, "container created");
        Ok(container)
    }

    /// Removes the container and everything running in it (`docker rm -f`).
    /// A container that is already gone is not an error.
    pub async fn remove(&self) -> Result<(), DockerError> {
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        match self.docker.remove_container(&self.id, Some(options)).await {
            Ok(()) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(()),
            Err(e) => Err(DockerError::about(&self.name, "removing the container", e)),
        }
    }

    /// Runs `argv` in the container to completion, without a terminal,
    /// feeding it `stdin` (then end-of-file) when given.
    ///
    /// ```no_run
    /// # async fn demo(container: dsh_docker::Container) -> Result<(), dsh_docker::DockerError> {
    /// let ran = container.run(&["cat"], Some(b"hello")).await?;
    /// assert_eq!((ran.stdout.as_slice(), ran.status.code()), (&b"hello"[..], Some(0)));
    /// # Ok(()) }
    /// ```
    pub async fn run(
        &self,
        argv: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<crate::Ran, DockerError> {
        crate::exec::run(self, None, argv.to_vec(), stdin).await
    }

    /// The container's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The name it was opened by (the id for created containers).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The daemon connection.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The memory and process limits it was made with, if any.
    pub(crate) fn watched(&self) -> Option<Watched> {
        self.limits
    }
}
