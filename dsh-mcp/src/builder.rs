//! [`ServerBuilder`]: the server `dsh-mcp` starts, for a host to embed:
//! where the tools work, the sandbox, the limits, the copy-on-write
//! workspace, approvals, the session log, and stdio or HTTP.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dsh_editor::fs::Fs;
use dsh_editor::{Editor, EditorConfig};
use dsh_sandbox::dsh_shell_persistent::dsh_pty::{LimitsError, ResourceLimits};
use dsh_sandbox::dsh_shell_persistent::{ClipMode, Dialect, ShellConfig};
use dsh_sandbox::{
    Approval, Approver, Enforcement, FixedApprover, ModeChange, Persistence, SandboxConfig,
    SandboxError, SandboxMode, SandboxPolicy, SandboxedShell,
};

use crate::place::{Backend, CloseError, Place, Reach};
use crate::{CopyOnWrite, CopyOnWriteError, DshServer, ElicitApprover, SessionLog};

/// How long [`ApprovalMode::Elicit`] waits for the user's answer.
const ELICIT_TIMEOUT: Duration = Duration::from_secs(300);

/// Who approves a call's `sandbox_permissions` (`--approve`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalMode {
    /// Nobody: an escalation is refused (the default).
    #[default]
    Never,
    /// Every request is allowed, once.
    Always,
    /// The client's user, through MCP elicitation ([`ElicitApprover`],
    /// waiting 300 s for each answer).
    Elicit,
}

/// Why a server could not be built. Its `Display` is the sentence
/// `dsh-mcp` prints (naming the flag of each setting); where it has a
/// [`source`](std::error::Error::source), the cause follows in the chain.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Allowed domains without a restricted sandbox mode.
    #[error(
        "--allow-domain needs --sandbox read-only or workspace-write: with --sandbox danger-full-access nothing keeps the shell off the network"
    )]
    DomainsWithoutSandbox,
    /// Allowed domains and open network together.
    #[error(
        "--allow-domain and --network exclude each other: --network already opens every address (use one or the other)"
    )]
    DomainsWithNetwork,
    /// No workspace was given and the current directory cannot be read.
    #[error("cannot read the current directory: {0}")]
    CurrentDir(std::io::Error),
    /// The workspace is not a directory (`on`: on which remote side).
    #[error("the workspace {} is not a directory{}", workspace.display(), on.as_deref().map(|on| format!(" {on}")).unwrap_or_default())]
    NotADirectory {
        /// The workspace.
        workspace: PathBuf,
        /// Where, for a remote backend (`in the container ...`, `on ...`).
        on: Option<String>,
    },
    /// A restricted sandbox mode with a remote backend.
    #[error(
        "--sandbox confines shells on this machine; with --backend {backend} leave it at danger-full-access (the other side confines them)"
    )]
    RemoteSandbox {
        /// `docker` or `ssh`.
        backend: &'static str,
    },
    /// The backend needs a feature this build lacks.
    #[error("this dsh-mcp was built without the `{feature}` feature")]
    NotBuiltWith {
        /// `docker` or `ssh`.
        feature: &'static str,
    },
    /// Limits with the SSH backend.
    #[error(
        "resource limits are not kept with --backend ssh (set them on the remote host, e.g. in the sshd's systemd unit)"
    )]
    SshLimits,
    /// The SSH backend without a login.
    #[error("--backend ssh needs --ssh USER@HOST[:PORT]")]
    SshNoLogin,
    /// An SSH login that is not `USER@HOST[:PORT]`.
    #[error("--ssh {login}: expected USER@HOST[:PORT]")]
    SshLogin {
        /// What was given.
        login: String,
    },
    /// The Docker backend with neither a container nor an image.
    #[error("--backend docker needs --container NAME or --image IMAGE")]
    DockerNoTarget,
    /// A Docker network for an existing container.
    #[error(
        "--docker-network {network} applies to the container dsh-mcp makes with --image; the existing container `{container}` keeps its own networks (change them with `docker network connect` and `docker network disconnect`)"
    )]
    DockerNetworkWithContainer {
        /// The container.
        container: String,
        /// The network.
        network: String,
    },
    /// Limits for an existing container.
    #[error(
        "resource limits with --backend docker need --image: they are set on the container dsh-mcp makes (set an existing container's own with `docker update`)"
    )]
    DockerLimitsWithContainer,
    /// The remote backend failed (as its crate words it: a daemon or host
    /// not reached, a container not found, a host key refused).
    #[error("{0}")]
    Remote(Box<dyn std::error::Error + Send + Sync>),
    /// Copy-on-write with a remote backend.
    #[error("--copy-on-write works with --backend local only")]
    CopyOnWriteRemote,
    /// The copy-on-write workspace could not be set up.
    #[error("--copy-on-write")]
    CopyOnWrite(#[source] CopyOnWriteError),
    /// This kernel cannot give the copy-on-write views (or the sandbox
    /// over them).
    #[error("--copy-on-write")]
    CopyOnWriteCheck(#[source] SandboxError),
    /// The limits' cgroup cannot be taken.
    #[error(transparent)]
    Limits(#[from] LimitsError),
    /// The sandboxed shell cannot be made, or its limits cannot be kept.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The session log cannot be created.
    #[error("cannot create the session log: {0}")]
    SessionLog(std::io::Error),
    /// The editor's settings are invalid.
    #[error("{0}")]
    Editor(dsh_editor::EditorConfigError),
    /// The HTTP server cannot be made, or its address listened on.
    #[cfg(feature = "http")]
    #[error("{0}")]
    Http(crate::http::HttpError),
}

/// Why serving stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// [`Server::serve`] was called again.
    #[error("this server was served already")]
    Served,
    /// The HTTP server failed (its certificate or key cannot be used).
    #[cfg(feature = "http")]
    #[error("{0}")]
    Http(crate::http::HttpError),
}

/// Builds the server `dsh-mcp` runs, for a host that embeds it: the same
/// settings as the binary's flags (named beside each setter), checked and
/// set up by [`ServerBuilder::build`] as the binary does at start: a
/// backend reached (a container made), the copy-on-write workspace made,
/// limits that cannot be kept refused, an HTTP address bound.
///
/// ```
/// use dsh_mcp::ServerBuilder;
/// use dsh_mcp::dsh_sandbox::{SandboxMode, SandboxPolicy};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let workspace = tempfile::tempdir()?;
/// let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// runtime.block_on(async {
///     let server = ServerBuilder::new()
///         .workspace(workspace.path())
///         .policy(SandboxPolicy::default().mode(SandboxMode::DangerFullAccess))
///         .timeout(std::time::Duration::from_secs(60))
///         .build()
///         .await?;
///     // Over stdio: `server.serve(shutdown).await` serves this process's
///     // stdin and stdout until the client leaves or `shutdown` resolves.
///     assert_eq!(server.shell().tool_name(), "bash");
///     server.close().await?;
///     Ok(())
/// })
/// # }
/// ```
///
/// Over Streamable HTTP, one owner per MCP session:
///
/// ```no_run
/// use dsh_mcp::ServerBuilder;
/// use dsh_mcp::dsh_sandbox::{SandboxMode, SandboxPolicy};
/// use dsh_mcp::http::{HttpOptions, Token};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let options = HttpOptions::new(Token::new("a-token-of-at-least-16-chars", "in the host")?);
/// let mut server = ServerBuilder::new()
///     .workspace("/srv/work")
///     .policy(SandboxPolicy::default().mode(SandboxMode::WorkspaceWrite))
///     .copy_on_write(true)
///     .http("127.0.0.1:0", options)
///     .build()
///     .await?;
/// let addr = server.http_addr().expect("serving HTTP")?;
/// println!("http://{addr}/mcp");
/// server.serve(async { let _ = tokio::signal::ctrl_c().await; }).await?;
/// server.close().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ServerBuilder {
    workspace: Option<PathBuf>,
    backend: Backend,
    dialect: Dialect,
    timeout: Duration,
    max_timeout: Option<Duration>,
    max_output_chars: usize,
    clip: ClipMode,
    env: Vec<(String, String)>,
    pass_secrets: bool,
    policy: SandboxPolicy,
    one_shot: bool,
    limits: ResourceLimits,
    copy_on_write: bool,
    cow_dir: Option<PathBuf>,
    approval: ApprovalMode,
    session_log: Option<PathBuf>,
    #[cfg(feature = "http")]
    http: Option<(String, crate::http::HttpOptions)>,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder {
            workspace: None,
            backend: Backend::Local,
            dialect: Dialect::default(),
            timeout: Duration::from_secs(300),
            max_timeout: None,
            max_output_chars: 16_000,
            clip: ClipMode::Head,
            env: Vec::new(),
            pass_secrets: false,
            policy: SandboxPolicy::default(),
            one_shot: false,
            limits: ResourceLimits::default(),
            copy_on_write: false,
            cow_dir: None,
            approval: ApprovalMode::Never,
            session_log: None,
            #[cfg(feature = "http")]
            http: None,
        }
    }
}

dsh_pty::setters!(ServerBuilder {
    /// Where the tools work (`--backend`).
    backend: Backend,
    /// The shell dialect; the tool is named after it (`--shell`).
    dialect: Dialect,
    /// How long a command may run before the shell is reset
    /// (`--timeout-secs`).
    timeout: Duration,
    /// Offer the model a per-call `timeout` up to this
    /// (`--max-timeout-secs`); `None`: not offered.
    max_timeout: Option<Duration>,
    /// Clip a tool's output past this many characters
    /// (`--max-output-chars`).
    max_output_chars: usize,
    /// How a long shell result is clipped (`--clip`).
    clip: ClipMode,
    /// Without the sandbox, also hand the shell the server's variables
    /// whose names look like credentials (`--pass-secrets`).
    pass_secrets: bool,
    /// The sandbox: its mode (`--sandbox`), network (`--network`), allowed
    /// domains (`--allow-domain`), Unix sockets (`--allow-unix-socket`),
    /// hidden paths (`--hide`), and the private `/tmp`'s bounds
    /// (`--tmp-size`, `--tmp-inodes`; a container's `/tmp` with
    /// [`Backend::Docker`]).
    policy: SandboxPolicy,
    /// In the restricted modes, a fresh confined shell per call
    /// (`--one-shot`).
    one_shot: bool,
    /// Each shell's resource limits (`--memory`, `--pids-limit`, `--cpus`,
    /// `--open-files`, `--file-size`, `--cgroup-parent`,
    /// `--best-effort-limits`); with [`Backend::Docker`], the container's.
    limits: ResourceLimits,
    /// Give every owner a copy-on-write view of the workspace
    /// (`--copy-on-write`; this machine only).
    copy_on_write: bool,
    /// Who approves a call's `sandbox_permissions` (`--approve`).
    approval: ApprovalMode,
});

impl ServerBuilder {
    /// The binary's defaults: this machine, the current directory, bash,
    /// 300 s a call, 16,000 characters, no sandbox, no limits, stdio.
    pub fn new() -> Self {
        ServerBuilder::default()
    }

    /// The shell's start directory (`--workspace`); default: the current
    /// directory here, `/` elsewhere.
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = Some(dir.into());
        self
    }

    /// Variables for the shell, added to what it keeps of the server's
    /// environment (`--env`).
    pub fn env(mut self, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        self.env.extend(vars);
        self
    }

    /// Where the copy-on-write layers and snapshots live (`--cow-dir`);
    /// default: a new directory under the system's temporary directory.
    pub fn cow_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cow_dir = Some(dir.into());
        self
    }

    /// Write one JSONL record per tool call to a new file in `dir`
    /// (`--session-log`).
    pub fn session_log(mut self, dir: impl Into<PathBuf>) -> Self {
        self.session_log = Some(dir.into());
        self
    }

    /// Serve Streamable HTTP on `addr` (`HOST:PORT`; port 0 picks one)
    /// with `options` (`--listen` and the flags after it) instead of
    /// stdio.
    #[cfg(feature = "http")]
    pub fn http(mut self, addr: impl Into<String>, options: crate::http::HttpOptions) -> Self {
        self.http = Some((addr.into(), options));
        self
    }

    /// Checks the settings [`ServerBuilder::build`] refuses without
    /// reaching anything (allowed domains only in a restricted mode and
    /// without open network); `build` checks them first.
    pub fn check(&self) -> Result<(), BuildError> {
        if !self.policy.allow_domains.is_empty() {
            if self.policy.mode == SandboxMode::DangerFullAccess {
                return Err(BuildError::DomainsWithoutSandbox);
            }
            if self.policy.network {
                return Err(BuildError::DomainsWithNetwork);
            }
        }
        Ok(())
    }

    /// Checks the settings and sets the server up, as `dsh-mcp` does at
    /// start: the backend is reached (a container made from an image),
    /// the copy-on-write workspace made and checked, limits that cannot
    /// be kept refused (unless best effort), the session log created and
    /// the HTTP address bound. What it made is removed again when it fails.
    pub async fn build(self) -> Result<Server, BuildError> {
        self.check()?;
        let place = Place::reach(&Reach {
            backend: &self.backend,
            workspace: self.workspace.as_ref(),
            mode: self.policy.mode,
            limits: &self.limits,
            tmp_size: self.policy.tmp_size,
            tmp_inodes: self.policy.tmp_inodes,
        })
        .await?;
        match self.set_up(&place).await {
            Ok((serving, cow, enforcement)) => Ok(Server {
                place,
                cow,
                serving,
                served: false,
                enforcement,
            }),
            Err(err) => {
                if let Err(left) = place.leave().await {
                    tracing::warn!(err = %left, "removing what the server made failed");
                }
                Err(err)
            }
        }
    }

    /// Everything after the backend is reached.
    async fn set_up(
        self,
        place: &Place,
    ) -> Result<(Serving, Option<CopyOnWrite>, Option<Enforcement>), BuildError> {
        // Every owner's view of the workspace, at the workspace's own
        // (canonical) path; dropped (its layers and snapshots removed)
        // after every shell ended.
        let cow = if self.copy_on_write {
            if place.backend.is_some() {
                return Err(BuildError::CopyOnWriteRemote);
            }
            Some(
                CopyOnWrite::open(&place.workspace, self.cow_dir.as_deref())
                    .map_err(BuildError::CopyOnWrite)?,
            )
        } else {
            None
        };
        let workspace = cow.as_ref().map_or_else(
            || place.workspace.clone(),
            |c| c.workspace().base().to_owned(),
        );
        let mut config = ShellConfig::new(&workspace)
            .dialect(self.dialect)
            .timeout(self.timeout)
            .timeout_parameter(self.max_timeout)
            .max_output_chars(self.max_output_chars)
            .clip(self.clip);
        config.env.extend(self.env);
        config.pass_secrets = self.pass_secrets;
        let mut policy = self.policy;
        // A remote backend's limits are the container's, set when it was
        // made, and so is its `/tmp`.
        let config = match &place.backend {
            Some(backend) => {
                policy.tmp_size = None;
                policy.tmp_inodes = None;
                config.backend(Arc::clone(backend))
            }
            None => {
                // `cgroup_parent` auto: the server moves into its leaf
                // now, and a cgroup that cannot be taken stops it here.
                self.limits.prepare()?;
                config.limits(self.limits)
            }
        };
        let approver: Option<Arc<dyn Approver>> = match self.approval {
            ApprovalMode::Never => None,
            ApprovalMode::Always => Some(Arc::new(FixedApprover(Approval::AllowedOnce))),
            ApprovalMode::Elicit => Some(Arc::new(ElicitApprover::new(ELICIT_TIMEOUT))),
        };
        let mode = policy.mode;
        let shell = SandboxedShell::new(
            SandboxConfig::new(policy, config)
                .mode_change(ModeChange::Reject)
                .approver(approver)
                .restricted(if self.one_shot {
                    Persistence::OneShot
                } else {
                    Persistence::Persistent
                })
                .copy_on_write(cow.as_ref().map(|c| Arc::clone(c.workspace()))),
        )?;
        // A kernel that cannot give the views (or the sandbox over them)
        // stops the server now, not at the first call.
        if cow.is_some() {
            shell
                .check_copy_on_write()
                .await
                .map_err(BuildError::CopyOnWriteCheck)?;
        }
        // Limits that cannot be kept stop the server now, not at the
        // first call.
        let enforcement = match shell.enforcement(mode) {
            Err(err @ (SandboxError::Limits(_) | SandboxError::LimitsNotHeld { .. })) => {
                return Err(err.into());
            }
            Ok(enforcement) if place.backend.is_none() => Some(enforcement),
            _ => None,
        };
        let editor_config = EditorConfig::default().max_output_chars(self.max_output_chars);
        let log = match &self.session_log {
            Some(dir) => Some(SessionLog::create(dir).map_err(BuildError::SessionLog)?),
            None => None,
        };
        if let Some(log) = &log {
            tracing::info!(path = %log.path().display(), "session log");
        }
        #[cfg(feature = "http")]
        if let Some((addr, options)) = self.http {
            use crate::http::HttpServer;
            let server = HttpServer::new(shell, editor_config, place.fs.clone(), log, options)
                .map_err(BuildError::Http)?;
            let listener = HttpServer::bind(&addr).await.map_err(BuildError::Http)?;
            return Ok((
                Serving::Http(Box::new(server), Some(listener)),
                cow,
                enforcement,
            ));
        }
        let fs: Arc<dyn Fs> = match &place.fs {
            Some(fs) => Arc::clone(fs),
            None => shell.editor_fs(crate::OWNER),
        };
        let editor = Editor::with_config(fs, editor_config).map_err(BuildError::Editor)?;
        Ok((
            Serving::Stdio(DshServer::new(shell, editor, log)),
            cow,
            enforcement,
        ))
    }
}

/// How a built server is reached.
#[derive(Debug)]
enum Serving {
    /// The process's stdin and stdout: one owner, [`OWNER`](crate::OWNER).
    Stdio(DshServer),
    /// Streamable HTTP on a bound address (taken when served): one owner
    /// per MCP session.
    #[cfg(feature = "http")]
    Http(Box<crate::http::HttpServer>, Option<crate::http::Listener>),
}

/// A server built by [`ServerBuilder::build`]: serve it
/// ([`Server::serve`]), then close it ([`Server::close`]), which removes
/// what it made (a container, the copy-on-write layers).
#[derive(Debug)]
pub struct Server {
    place: Place,
    /// Dropped after every shell ended (their views are mounted while
    /// they run).
    cow: Option<CopyOnWrite>,
    serving: Serving,
    /// Whether [`Server::serve`] was called.
    served: bool,
    enforcement: Option<Enforcement>,
}

impl Server {
    /// A builder with the binary's defaults ([`ServerBuilder::new`]).
    pub fn builder() -> ServerBuilder {
        ServerBuilder::new()
    }

    /// The shell tool (every owner's shell).
    pub fn shell(&self) -> &SandboxedShell {
        match &self.serving {
            Serving::Stdio(server) => server.shell(),
            #[cfg(feature = "http")]
            Serving::Http(server, _) => server.shell(),
        }
    }

    /// How each limit and each bound of the private `/tmp` is kept on this
    /// machine (what `--best-effort-limits` reports); `None` with a remote
    /// backend.
    pub fn enforcement(&self) -> Option<&Enforcement> {
        self.enforcement.as_ref()
    }

    /// The address HTTP is served on (with the port picked for port 0);
    /// `None` over stdio or once served.
    #[cfg(feature = "http")]
    pub fn http_addr(&self) -> Option<std::io::Result<std::net::SocketAddr>> {
        match &self.serving {
            Serving::Http(_, Some(listener)) => Some(listener.local_addr()),
            _ => None,
        }
    }

    /// Whether it serves HTTPS.
    pub fn is_https(&self) -> bool {
        #[cfg(feature = "http")]
        if let Serving::Http(server, _) = &self.serving {
            return server.is_https();
        }
        false
    }

    /// Serves until `shutdown` resolves (over stdio, or until the client
    /// leaves), then ends every shell's process tree. Once:
    /// [`ServeError::Served`] after.
    pub async fn serve(&mut self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        if std::mem::replace(&mut self.served, true) {
            return Err(ServeError::Served);
        }
        match &mut self.serving {
            Serving::Stdio(server) => {
                tokio::select! {
                    served = run_stdio(server.clone()) => {
                        if let Err(err) = served {
                            tracing::warn!(%err, "the MCP session ended with an error");
                        }
                    }
                    () = shutdown => {}
                }
                // Every shell's process tree goes with the server.
                server.shell().close_all().await;
                Ok(())
            }
            #[cfg(feature = "http")]
            Serving::Http(server, listener) => {
                let listener = listener.take().ok_or(ServeError::Served)?;
                let served = server.serve(listener, shutdown).await;
                server.shell().close_all().await;
                served.map_err(ServeError::Http)
            }
        }
    }

    /// Removes what the server made: the container made from an image,
    /// the copy-on-write layers and snapshots. Call it after
    /// [`Server::serve`] (which ended the shells); a server dropped
    /// unclosed leaves a container it made running.
    pub async fn close(self) -> Result<(), CloseError> {
        // A server never served: its shells end first.
        self.shell().close_all().await;
        let Server {
            place,
            cow,
            serving,
            ..
        } = self;
        drop(serving);
        drop(cow);
        place.leave().await
    }
}

/// Serves `server` over this process's stdin and stdout until the client
/// leaves.
async fn run_stdio(server: DshServer) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use rmcp::ServiceExt;
    // Behind `into_dyn`, each request's handler future is boxed: rmcp
    // spawns a task per request holding it, and the handler future of
    // rmcp's `ServerHandler` dispatch is kilobytes, moved several times on
    // every spawn.
    let running = server
        .into_dyn()
        .serve(crate::transport::StdioTransport::stdio())
        .await?;
    running.waiting().await?;
    Ok(())
}
