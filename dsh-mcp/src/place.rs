//! Where the tools work: this machine, a Docker container or another host
//! over SSH ([`Backend`]), reached once when the server is built.

// Without the remote backends, what only they read is never read.
#![cfg_attr(not(any(feature = "docker", feature = "ssh")), allow(dead_code))]

use std::path::PathBuf;
use std::sync::Arc;

use dsh_editor::fs::Fs;
use dsh_sandbox::SandboxMode;
use dsh_sandbox::dsh_shell_persistent::dsh_pty::{PtyBackend, ResourceLimits};

use crate::builder::BuildError;

/// Where the tools work ([`ServerBuilder::backend`](crate::ServerBuilder::backend)).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Backend {
    /// This machine (the default): the shells under the sandbox, the
    /// workspace a directory here.
    #[default]
    Local,
    /// A Docker container (feature `docker`); the workspace is a path in
    /// it (default `/`).
    Docker(DockerSettings),
    /// Another host over SSH (feature `ssh`); the workspace is a path
    /// there (default `/`).
    Ssh(SshSettings),
}

/// Which container [`Backend::Docker`] works in, and how it is reached.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct DockerSettings {
    /// A running container to work in (`--container`).
    pub container: Option<String>,
    /// An image (already on the daemon) to make a container from, removed
    /// when the server is closed (`--image`).
    pub image: Option<String>,
    /// With `image`: the network the container joins, by Docker's name
    /// (`--docker-network`); default: Docker's default bridge.
    pub network: Option<String>,
    /// The daemon (`unix:///path`, `tcp://host:port`); default:
    /// `DOCKER_HOST`, else the local socket (`--docker-host`).
    pub host: Option<String>,
    /// The user the tools act as (`name`, `uid` or `uid:gid`); default:
    /// the image's (`--user`).
    pub user: Option<String>,
}

/// Where [`Backend::Ssh`] logs in.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SshSettings {
    /// `USER@HOST[:PORT]` (`--ssh`; required).
    pub login: Option<String>,
    /// The private key; default `~/.ssh/id_ed25519` (`--ssh-identity`).
    pub identity: Option<PathBuf>,
    /// The known-hosts file the host's key must be in; default
    /// `~/.ssh/known_hosts` (`--ssh-known-hosts`).
    pub known_hosts: Option<PathBuf>,
}

/// What a [`Place`] is reached with.
pub(crate) struct Reach<'a> {
    pub(crate) backend: &'a Backend,
    pub(crate) workspace: Option<&'a PathBuf>,
    pub(crate) mode: SandboxMode,
    pub(crate) limits: &'a ResourceLimits,
    pub(crate) tmp_size: Option<u64>,
    pub(crate) tmp_inodes: Option<u64>,
}

impl Reach<'_> {
    /// Whether any limit is asked for: the shells' or `/tmp`'s.
    fn any_limits(&self) -> bool {
        !self.limits.is_empty() || self.tmp_size.is_some() || self.tmp_inodes.is_some()
    }

    /// A remote workspace: the one given, else `/`.
    fn remote_workspace(&self) -> PathBuf {
        self.workspace
            .cloned()
            .unwrap_or_else(|| PathBuf::from("/"))
    }

    /// The sandbox confines shells on this machine only.
    fn remote_sandbox(&self, backend: &'static str) -> Result<(), BuildError> {
        if self.mode == SandboxMode::DangerFullAccess {
            return Ok(());
        }
        Err(BuildError::RemoteSandbox { backend })
    }
}

/// Where the tools work, once reached.
pub(crate) struct Place {
    /// The workspace, on that side.
    pub(crate) workspace: PathBuf,
    /// The shells' backend (`None`: this machine's default).
    pub(crate) backend: Option<Arc<dyn PtyBackend>>,
    /// The editor's filesystem (`None`: this machine's, under the sandbox).
    pub(crate) fs: Option<Arc<dyn Fs>>,
    /// A container made for this server, removed when it is left.
    #[cfg(feature = "docker")]
    made: Option<dsh_docker::Container>,
}

impl std::fmt::Debug for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Place")
            .field("workspace", &self.workspace)
            .field("remote", &self.backend.is_some())
            .finish_non_exhaustive()
    }
}

/// A remote backend's error, as its crate words it.
fn remote(err: impl std::error::Error + Send + Sync + 'static) -> BuildError {
    BuildError::Remote(Box::new(err))
}

impl Place {
    pub(crate) async fn reach(how: &Reach<'_>) -> Result<Place, BuildError> {
        match how.backend {
            Backend::Local => Place::local(how),
            Backend::Docker(docker) => Place::docker(how, docker).await,
            Backend::Ssh(ssh) => Place::ssh(how, ssh).await,
        }
    }

    /// Checks that the workspace is a directory on the other side; the
    /// place is left (what it made is removed) when it is not.
    #[cfg(any(feature = "docker", feature = "ssh"))]
    async fn checked(self, on: String) -> Result<Place, BuildError> {
        let is_dir = match &self.fs {
            Some(fs) => fs
                .stat(&self.workspace)
                .await
                .is_ok_and(|m| m.kind == dsh_editor::fs::FileKind::Directory),
            None => true,
        };
        if is_dir {
            return Ok(self);
        }
        let workspace = self.workspace.clone();
        if let Err(err) = self.leave().await {
            tracing::warn!(%err, "removing what the server made failed");
        }
        Err(BuildError::NotADirectory {
            workspace,
            on: Some(on),
        })
    }

    #[cfg(not(feature = "ssh"))]
    async fn ssh(_how: &Reach<'_>, _ssh: &SshSettings) -> Result<Place, BuildError> {
        Err(BuildError::NotBuiltWith { feature: "ssh" })
    }

    #[cfg(feature = "ssh")]
    async fn ssh(how: &Reach<'_>, ssh: &SshSettings) -> Result<Place, BuildError> {
        use dsh_ssh::{SftpFs, SshBackend, SshHost, SshTarget};
        how.remote_sandbox("ssh")?;
        if how.any_limits() {
            return Err(BuildError::SshLimits);
        }
        let Some(spec) = &ssh.login else {
            return Err(BuildError::SshNoLogin);
        };
        let mut target = SshTarget::parse(spec).ok_or_else(|| BuildError::SshLogin {
            login: spec.clone(),
        })?;
        if let Some(key) = &ssh.identity {
            target.identity.clone_from(key);
        }
        if let Some(known) = &ssh.known_hosts {
            target.known_hosts.clone_from(known);
        }
        let host = SshHost::connect(target).await.map_err(remote)?;
        let fs = SftpFs::open(&host).await.map_err(remote)?;
        Place {
            workspace: how.remote_workspace(),
            backend: Some(Arc::new(SshBackend::new(host))),
            fs: Some(Arc::new(fs)),
            #[cfg(feature = "docker")]
            made: None,
        }
        .checked(format!("on {spec}"))
        .await
    }

    fn local(how: &Reach<'_>) -> Result<Place, BuildError> {
        let workspace = match how
            .workspace
            .cloned()
            .map_or_else(std::env::current_dir, Ok)
        {
            Ok(dir) => std::path::absolute(&dir).unwrap_or(dir),
            Err(err) => return Err(BuildError::CurrentDir(err)),
        };
        if !workspace.is_dir() {
            return Err(BuildError::NotADirectory {
                workspace,
                on: None,
            });
        }
        Ok(Place {
            workspace,
            backend: None,
            fs: None,
            #[cfg(feature = "docker")]
            made: None,
        })
    }

    #[cfg(not(feature = "docker"))]
    async fn docker(_how: &Reach<'_>, _docker: &DockerSettings) -> Result<Place, BuildError> {
        Err(BuildError::NotBuiltWith { feature: "docker" })
    }

    #[cfg(feature = "docker")]
    async fn docker(how: &Reach<'_>, settings: &DockerSettings) -> Result<Place, BuildError> {
        use dsh_docker::{Container, ContainerTemplate, DockerBackend, DockerFs};
        how.remote_sandbox("docker")?;
        let docker = dsh_docker::connect(settings.host.as_deref())
            .await
            .map_err(remote)?;
        if let (Some(container), Some(network)) = (&settings.container, &settings.network) {
            return Err(BuildError::DockerNetworkWithContainer {
                container: container.clone(),
                network: network.clone(),
            });
        }
        let (container, made) = match (&settings.container, &settings.image) {
            (Some(name), _) => (Container::existing(docker, name).await, false),
            (None, Some(image)) => {
                let mut template = ContainerTemplate::new(image);
                template.limits = how.limits.clone();
                template.tmp_size = how.tmp_size;
                template.tmp_inodes = how.tmp_inodes;
                template.network = settings.network.clone();
                (Container::create(docker, &template).await, true)
            }
            (None, None) => return Err(BuildError::DockerNoTarget),
        };
        if !made && how.any_limits() {
            return Err(BuildError::DockerLimitsWithContainer);
        }
        let container = container.map_err(remote)?;
        let mut backend = DockerBackend::new(container.clone());
        let mut fs = DockerFs::new(container.clone());
        if let Some(user) = &settings.user {
            backend = backend.user(user);
            fs = fs.user(user);
        }
        let on = format!("in the container `{}`", container.name());
        Place {
            workspace: how.remote_workspace(),
            backend: Some(Arc::new(backend)),
            fs: Some(Arc::new(fs)),
            made: made.then_some(container),
        }
        .checked(on)
        .await
    }

    /// Removes what this server made (the container of
    /// [`DockerSettings::image`]).
    pub(crate) async fn leave(&self) -> Result<(), CloseError> {
        #[cfg(feature = "docker")]
        if let Some(container) = &self.made {
            container
                .remove()
                .await
                .map_err(|e| CloseError::Remote(Box::new(e)))?;
        }
        Ok(())
    }
}

/// Why [`Server::close`](crate::Server::close) could not remove what the
/// server made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloseError {
    /// The container made from [`DockerSettings::image`] could not be
    /// removed (as the backend's crate words it).
    #[error("{0}")]
    Remote(Box<dyn std::error::Error + Send + Sync>),
}
