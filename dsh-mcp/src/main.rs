//! The `dsh-mcp` binary: see `dsh-mcp --help`. It parses its arguments
//! (one struct per concern) and hands them to [`ServerBuilder`].
#![allow(clippy::print_stderr)]

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use dsh_mcp::{ApprovalMode, DockerSettings, ServerBuilder, SshSettings};
use dsh_sandbox::{SandboxMode, SandboxPolicy};
use dsh_shell_persistent::{ClipMode, Dialect};

mod secrets;

/// An MCP server with exactly two tools: a persistent shell (`bash`, `sh`
/// or `pwsh`) and `str_replace_editor`, over stdio, or over Streamable HTTP
/// with `--listen`. Every flag has an environment equivalent; flags win.
///
/// A call ends early only when the client sends `notifications/cancelled`
/// for it (or, with `--listen`, closes the connection of the call): the
/// command is stopped and the shell reset. Over stdio, a client that
/// abandons a call without sending it (a client-side timeout, a closed
/// request) leaves the command running, and the next call waits behind it
/// until it ends or reaches `--timeout-secs` (measured: a 3 s call answered
/// after 50 s). Such a client should send the notification when it gives up,
/// or run with a `--timeout-secs` no longer than its own timeout.
#[derive(Debug, Parser)]
#[command(name = "dsh-mcp", version)]
struct Args {
    #[command(flatten)]
    workspace: WorkspaceArgs,

    #[command(flatten)]
    shell: ShellArgs,

    #[command(flatten)]
    log: LogArgs,

    #[command(flatten)]
    sandbox: SandboxArgs,

    #[command(flatten)]
    env: EnvArgs,

    /// Who approves a call's `sandbox_permissions`: nobody (`never`), every
    /// request (`always`), or the client's user through MCP elicitation
    /// (`elicit`, refused when the client cannot ask).
    #[arg(long, env = "DSH_APPROVE", value_enum, default_value_t = Approve::Never)]
    approve: Approve,

    #[command(flatten)]
    backend: BackendArgs,

    #[command(flatten)]
    limits: LimitArgs,

    #[cfg(feature = "http")]
    #[command(flatten)]
    http: HttpArgs,
}

/// The workspace, and each owner's copy-on-write view of it (the rollouts).
#[derive(Debug, clap::Args)]
struct WorkspaceArgs {
    /// The shell's start directory (the workspace). Default: the current directory.
    #[arg(long, env = "DSH_WORKSPACE", value_name = "DIR")]
    workspace: Option<PathBuf>,

    /// Give every owner (each `--listen` session; the one stdio client) a
    /// copy-on-write view of the `--workspace` at its own path: reads come
    /// from it, writes go to the owner's own layer, nothing reaches the
    /// directory or another owner. Over HTTP, harness endpoints beside
    /// `/mcp` fork, snapshot, restore, reset and diff a session
    /// (docs/http.md). In every `--sandbox` mode (the sandbox stands over
    /// each view). Needs Linux user, mount and PID namespaces, overlayfs
    /// and `--backend local`: checked at start.
    #[arg(long, env = "DSH_COPY_ON_WRITE", requires = "workspace")]
    copy_on_write: bool,

    /// `--copy-on-write`: where the owners' layers and the snapshots live
    /// (outside the workspace, on a filesystem overlayfs takes as an upper
    /// layer: tmpfs, ext4, xfs, btrfs). What is made there is removed when
    /// the server exits (SIGTERM, SIGINT, the client gone); DIR is kept.
    /// Default: a new directory under the system's temporary directory,
    /// removed at exit.
    #[arg(
        long,
        env = "DSH_COW_DIR",
        value_name = "DIR",
        requires = "copy_on_write"
    )]
    cow_dir: Option<PathBuf>,
}

/// The shell: its dialect, timeouts and output.
#[derive(Debug, clap::Args)]
struct ShellArgs {
    /// Seconds a shell command may run before the shell is killed and reset.
    #[arg(long, env = "DSH_TIMEOUT_SECS", value_name = "N", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    timeout_secs: u64,

    /// Offer the model an optional `timeout` argument on the shell tool: a
    /// whole number of seconds from 1 to N for that call (a larger one is
    /// refused with the bound). Default: not offered, the schema is exactly
    /// `command`.
    #[arg(long, env = "DSH_MAX_TIMEOUT_SECS", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    max_timeout_secs: Option<u64>,

    /// Output longer than this many characters is clipped.
    #[arg(long, env = "DSH_MAX_OUTPUT_CHARS", value_name = "N", default_value_t = 16_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_output_chars: u64,

    /// How a shell result longer than the limit is cut: its first characters
    /// (`head`, the documented contract), or its first and last halves with
    /// the number left out between them (`head-tail`: the end of a failing
    /// build is kept).
    #[arg(long, env = "DSH_CLIP", default_value = ClipMode::Head.name(),
          value_parser = one_of(&ClipMode::ALL, ClipMode::name))]
    clip: ClipMode,

    /// The shell dialect; the tool is named after it.
    #[arg(long, env = "DSH_SHELL", default_value = Dialect::default().tool_name(),
          value_parser = one_of(&Dialect::ALL, Dialect::tool_name))]
    shell: Dialect,
}

/// The session log.
#[derive(Debug, clap::Args)]
struct LogArgs {
    /// Write one JSONL record per tool call to a new file in DIR. Default:
    /// `$DSH_HOME/sessions` when `DSH_HOME` is set, else no log.
    #[arg(long, env = "DSH_SESSION_LOG", value_name = "DIR")]
    session_log: Option<PathBuf>,
}

/// The sandbox: its mode and what it lets through.
#[derive(Debug, clap::Args)]
struct SandboxArgs {
    /// The sandbox mode. The default runs without a sandbox: use
    /// `workspace-write` for untrusted work.
    #[arg(long, env = "DSH_SANDBOX", default_value = SandboxMode::DangerFullAccess.name(),
          value_parser = one_of(&SandboxMode::ALL, SandboxMode::name))]
    sandbox: SandboxMode,

    /// Allow network access in the restricted sandbox modes.
    #[arg(long, env = "DSH_NETWORK")]
    network: bool,

    /// In the restricted modes, let the shell reach HOST[:PORT] by name
    /// through the server's proxy (repeatable; `*.example.com` for its
    /// subdomains; without a port, 80 and 443): HTTP_PROXY and friends are
    /// set inside, every other connection reaches nothing. Not with
    /// `--network` nor danger-full-access. In the environment,
    /// comma-separated.
    #[arg(
        long = "allow-domain",
        env = "DSH_ALLOW_DOMAINS",
        value_name = "HOST[:PORT]",
        value_delimiter = ','
    )]
    allow_domain: Vec<String>,

    /// In the restricted modes, let confined processes connect to this Unix
    /// socket, or to the sockets in this directory (repeatable). Sockets
    /// beneath the workspace and the private `/tmp` need no flag; every
    /// other one (a Docker, systemd or ssh-agent socket) is refused. In the
    /// environment, several paths are `:`-separated.
    #[arg(
        long = "allow-unix-socket",
        env = "DSH_ALLOW_UNIX_SOCKET",
        value_name = "PATH",
        value_delimiter = ':'
    )]
    allow_unix_socket: Vec<PathBuf>,

    /// In the restricted modes, hide this path from the shell and the
    /// editor (repeatable): a directory shows empty, a file empty. Added to
    /// the default list of credential stores (`~/.ssh`, `~/.aws`,
    /// `~/.docker`, `~/.kube`, `~/.netrc`, `~/.git-credentials`,
    /// `/etc/shadow`, ...). In the environment, several paths are
    /// `:`-separated.
    #[arg(
        long = "hide",
        env = "DSH_HIDE",
        value_name = "PATH",
        value_delimiter = ':'
    )]
    hide: Vec<PathBuf>,

    /// Do not hide the default credential stores (only `--hide` paths).
    #[arg(long, env = "DSH_NO_DEFAULT_HIDE")]
    no_default_hide: bool,

    /// In the restricted modes, run every call in a fresh confined shell
    /// instead of one persistent confined shell.
    #[arg(long, env = "DSH_ONE_SHOT")]
    one_shot: bool,
}

/// The shell's environment.
#[derive(Debug, clap::Args)]
struct EnvArgs {
    /// A variable for the shell (repeatable): `NAME=VALUE`, or `NAME` for
    /// this server's own value (left out when it has none), whatever the
    /// name: this is how a host hands over a credential on purpose (`--env
    /// GITHUB_TOKEN`). Without the sandbox the shell starts from the
    /// server's environment less the variables that look like credentials
    /// (see `--pass-secrets`); a confined shell keeps only `PATH`, `HOME`,
    /// `USER`, `LOGNAME`, `LANG`, `LANGUAGE`, `LC_*`, `TZ` and `SHELL` of
    /// it: this is how a host passes a proxy (`--env HTTPS_PROXY`), a
    /// package index (`PIP_INDEX_URL`) or a toolchain's home (`CARGO_HOME`,
    /// `RUSTUP_HOME`); a container or an SSH host gets only these. In the
    /// environment, one `NAME[=VALUE]` a line (a value may hold `:`, `,`
    /// and spaces, as proxies and paths do).
    #[arg(
        long = "env",
        env = "DSH_ENV",
        value_name = "NAME[=VALUE]",
        value_parser = parse_env,
        value_delimiter = '\n'
    )]
    env: Vec<(String, Option<String>)>,

    /// Without the sandbox, also hand the shell the server's variables
    /// whose names look like credentials. By default they stay out: names
    /// (in any case) holding `KEY`, `SECRET`, `TOKEN`, `PASSWORD`,
    /// `PASSWD`, `PASSPHRASE` or `CREDENTIAL`, with a word starting with
    /// `AUTH` (not `AUTHOR`, `AUTHORITY`; so `SSH_AUTH_SOCK` stays out), or
    /// with a later word `PASS`, `PWD` or `PAT`, and `CI_JOB_JWT`; but
    /// `TOKENIZERS_PARALLELISM`, `TIKTOKEN_CACHE_DIR` and
    /// `PYTHON_KEYRING_BACKEND` pass. A confined shell keeps its short list
    /// either way; `--env NAME` hands over one variable. The server's own
    /// `DSH_TOKEN` is never passed.
    #[arg(long, env = "DSH_PASS_SECRETS")]
    pass_secrets: bool,
}

/// Where the tools work.
#[derive(Debug, clap::Args)]
struct BackendArgs {
    /// Where the tools work: this machine (`local`), a Docker container
    /// (`docker`, with `--container` or `--image`), or another host (`ssh`,
    /// with `--ssh`). Elsewhere than `local` the workspace is a path there
    /// (default `/`), and `--sandbox` stays `danger-full-access` (it
    /// confines shells on this machine only).
    #[arg(long, env = "DSH_BACKEND", value_enum, default_value_t = Backend::Local)]
    backend: Backend,

    /// `--backend docker`: the running container to work in.
    #[arg(
        long,
        env = "DSH_CONTAINER",
        value_name = "NAME",
        conflicts_with = "image"
    )]
    container: Option<String>,

    /// `--backend docker`: make a container from this image (already on the
    /// daemon) for the session, and remove it when the server exits.
    #[arg(long, env = "DSH_IMAGE", value_name = "IMAGE")]
    image: Option<String>,

    /// `--backend docker` with `--image`: the network the container joins,
    /// by Docker's name: `none` (only loopback inside), `bridge`, `host`,
    /// or a user-defined network (which must exist). Default: Docker's
    /// default bridge. Refused with `--container` (an existing container
    /// keeps its networks).
    #[arg(long, env = "DSH_DOCKER_NETWORK", value_name = "none|NAME")]
    docker_network: Option<String>,

    /// `--backend docker`: the daemon (`unix:///path`, `tcp://host:port`).
    /// Default: `DOCKER_HOST`, else the local socket.
    #[arg(long, env = "DSH_DOCKER_HOST", value_name = "URL")]
    docker_host: Option<String>,

    /// `--backend docker`: the user the tools act as in the container
    /// (`name`, `uid` or `uid:gid`). Default: the image's user.
    #[arg(long, env = "DSH_USER", value_name = "USER")]
    user: Option<String>,

    /// `--backend ssh`: where to log in, `USER@HOST[:PORT]`.
    #[arg(long, env = "DSH_SSH", value_name = "USER@HOST[:PORT]")]
    ssh: Option<String>,

    /// `--backend ssh`: the private key. Default: `~/.ssh/id_ed25519`.
    #[arg(long, env = "DSH_SSH_IDENTITY", value_name = "FILE")]
    ssh_identity: Option<PathBuf>,

    /// `--backend ssh`: the known-hosts file the host's key must be in
    /// (unknown keys are refused). Default: `~/.ssh/known_hosts`.
    #[arg(long, env = "DSH_SSH_KNOWN_HOSTS", value_name = "FILE")]
    ssh_known_hosts: Option<PathBuf>,
}

/// Each shell's resource limits.
#[derive(Debug, clap::Args)]
struct LimitArgs {
    /// Each shell's process tree may use this much memory (`256m`, `2g`;
    /// Docker's syntax), tmpfs pages included, no swap; a process past it is
    /// killed and the call says so. Locally this needs `--cgroup-parent`
    /// (`auto` in a delegated cgroup); with `--backend docker`, `--image`
    /// (the container's limit).
    #[arg(long, env = "DSH_MEMORY", value_name = "SIZE", value_parser = dsh_pty::parse_size)]
    memory: Option<u64>,

    /// Each shell's process tree may hold this many processes and threads;
    /// a fork past it fails and the shell stays usable.
    #[arg(long, env = "DSH_PIDS_LIMIT", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pids_limit: Option<u64>,

    /// Each shell's process tree may use this many CPUs' time (`0.5`, `2`).
    #[arg(long, env = "DSH_CPUS", value_name = "N", value_parser = parse_cpus)]
    cpus: Option<f64>,

    /// In the restricted modes, the private `/tmp` (and `/dev/shm`) holds at
    /// most this much (`64m`); writing past it gets "No space left on device".
    #[arg(long, env = "DSH_TMP_SIZE", value_name = "SIZE", value_parser = dsh_pty::parse_size)]
    tmp_size: Option<u64>,

    /// In the restricted modes, the private `/tmp` holds at most this many
    /// files and directories.
    #[arg(long, env = "DSH_TMP_INODES", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    tmp_inodes: Option<u64>,

    /// Each process may hold this many open descriptors (`RLIMIT_NOFILE`).
    #[arg(long, env = "DSH_OPEN_FILES", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    open_files: Option<u64>,

    /// No process may write a file larger than this (`RLIMIT_FSIZE`).
    #[arg(long, env = "DSH_FILE_SIZE", value_name = "SIZE", value_parser = dsh_pty::parse_size)]
    file_size: Option<u64>,

    /// The cgroup under which each local shell gets its own: a path inside
    /// the hierarchy, as Docker's `--cgroup-parent` (`/dsh`, made if
    /// missing), or `auto`: the cgroup v2 this server was started in, when
    /// it is delegated to it (systemd's `Delegate=yes`, e.g. `systemd-run
    /// --user --scope -p Delegate=yes dsh-mcp ...`, or a container's own
    /// cgroup namespace); the server moves into a leaf of it at start and
    /// the shells' cgroups go beside it (docs/limits.md, "Delegated
    /// cgroups"). Needed for `--memory`, `--pids-limit` and `--cpus` locally.
    #[arg(long, env = "DSH_CGROUP_PARENT", value_name = "PATH|auto", value_parser = parse_cgroup_parent)]
    cgroup_parent: Option<dsh_pty::CgroupParent>,

    /// Run with the limits that can be kept here instead of refusing to start
    /// when one cannot; at start, stderr says how each limit is kept and
    /// which is not kept at all.
    #[arg(long, env = "DSH_BEST_EFFORT_LIMITS")]
    best_effort_limits: bool,
}

#[cfg(feature = "http")]
/// `--listen`: Streamable HTTP and its settings.
#[derive(Debug, clap::Args)]
struct HttpArgs {
    /// Serve MCP over Streamable HTTP at `http://HOST:PORT/mcp` instead of
    /// stdio: each MCP session is an owner with its own shell (and its own
    /// sandbox mode), made at its first call; the flags above apply to each
    /// session's shell. Every request to `/mcp` needs `Authorization:
    /// Bearer TOKEN` (`--token-file` or `DSH_TOKEN`; without one the server
    /// refuses to start). `GET /healthz` answers 200 without a token. Port 0
    /// picks a free port; the address is printed on stderr.
    #[arg(long, env = "DSH_LISTEN", value_name = "HOST:PORT")]
    listen: Option<String>,

    /// `--listen`: the file holding the bearer token (at least 16
    /// printable characters; a trailing newline is dropped), read once at
    /// start. Without the sandbox a regular file is refused (the shells, of
    /// this server's user, could read it): use `DSH_TOKEN` or a pipe
    /// (`/dev/stdin`); the confined modes hide the file. Default: the
    /// `DSH_TOKEN` variable, which no shell gets.
    #[arg(long, env = "DSH_TOKEN_FILE", value_name = "FILE", requires = "listen")]
    token_file: Option<PathBuf>,

    /// `--listen`: a browser origin allowed to call (repeatable;
    /// `scheme://host:port`, `:*` for any port, or `null`). A request
    /// carrying any other `Origin` gets 403; by default every request that
    /// carries one does. In the environment, several are `,`-separated.
    #[arg(
        long = "allow-origin",
        env = "DSH_ALLOW_ORIGIN",
        value_name = "ORIGIN",
        value_delimiter = ',',
        requires = "listen"
    )]
    allow_origin: Vec<String>,

    /// `--listen`: the largest request body, in bytes (413 past it).
    #[arg(long, env = "DSH_MAX_REQUEST_BYTES", value_name = "N",
          default_value_t = dsh_mcp::http::DEFAULT_MAX_REQUEST_BYTES as u64,
          value_parser = clap::value_parser!(u64).range(1024..))]
    max_request_bytes: u64,

    /// `--listen`: end a session (its shell and that shell's processes)
    /// after this many seconds without a request and without a running
    /// call; its id then gets 404. 0: never.
    #[arg(
        long,
        env = "DSH_SESSION_IDLE_SECS",
        value_name = "N",
        default_value_t = 1800
    )]
    session_idle_secs: u64,

    /// `--listen`: the most sessions open at once; an `initialize` past it
    /// gets 503 with the reason.
    #[arg(long, env = "DSH_MAX_SESSIONS", value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_sessions: u64,

    /// `--listen`: while a call runs, its answer's stream carries a comment
    /// every N seconds, so that a client's read timeout or a proxy's idle
    /// timeout shorter than the call does not drop it. 0: never.
    #[arg(
        long,
        env = "DSH_SSE_KEEPALIVE_SECS",
        value_name = "N",
        default_value_t = 15
    )]
    sse_keepalive_secs: u64,

    /// `--listen`: serve HTTPS with this PEM certificate chain (with
    /// `--tls-key`).
    #[cfg(feature = "tls")]
    #[arg(long, env = "DSH_TLS_CERT", value_name = "FILE", requires_all = ["listen", "tls_key"])]
    tls_cert: Option<PathBuf>,

    /// `--listen`: the PEM private key of `--tls-cert`.
    #[cfg(feature = "tls")]
    #[arg(long, env = "DSH_TLS_KEY", value_name = "FILE", requires_all = ["listen", "tls_cert"])]
    tls_key: Option<PathBuf>,
}

/// `err` and its sources, each after a colon: how the errors of the tool
/// crates (whose `Display` leaves the cause to the source chain) read on
/// stderr.
fn report(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `--cgroup-parent`: `auto` or a path.
fn parse_cgroup_parent(text: &str) -> Result<dsh_pty::CgroupParent, String> {
    if text.is_empty() {
        return Err("an empty cgroup parent: give a path such as /dsh, or auto".to_owned());
    }
    Ok(text.into())
}

/// `--best-effort-limits`' lines on stderr: how each requested limit of
/// `limits` and each bound of the private `/tmp` (`tmp`) is kept, from the
/// sandbox's `enforcement`; the `/tmp` bounds after the cgroup's limits
/// (processes, memory, CPU) and before the rlimits.
fn limit_lines(
    limits: &dsh_pty::ResourceLimits,
    tmp: dsh_sandbox::TmpLimits,
    enforcement: &dsh_sandbox::Enforcement,
) -> Vec<String> {
    use dsh_pty::format_bytes;
    use dsh_pty::{CgroupVersion, Held, Limit};
    use dsh_sandbox::{TmpHeld, TmpLimit};
    let report = &enforcement.limits;
    let not_held = |limit: &dyn std::fmt::Display, amount: &str| {
        format!(
            "dsh-mcp: the {limit} ({amount}) is not held at all: {}",
            report.why_not_held
        )
    };
    let line = |(limit, value): (Limit, u64)| {
        let held = report.held(limit)?;
        let amount = match limit {
            Limit::Memory | Limit::FileSize => format_bytes(value),
            Limit::Cpu => format!("{} CPUs", value as f64 / 1000.0),
            _ => value.to_string(),
        };
        let v1 = matches!(held, Held::Cgroup(CgroupVersion::V1));
        let by = match (limit, held) {
            (_, Held::NotHeld) => return Some(not_held(&limit, &amount)),
            (Limit::Pids, Held::Cgroup(_)) => "each shell's cgroup (pids.max), for its whole tree",
            (Limit::Memory, Held::Cgroup(_)) if v1 => {
                "each shell's cgroup (memory.limit_in_bytes), for its whole tree"
            }
            (Limit::Memory, Held::Cgroup(_)) => {
                "each shell's cgroup (memory.max, memory.swap.max 0), for its whole tree"
            }
            (Limit::Cpu, Held::Cgroup(_)) if v1 => {
                "each shell's cgroup (cpu.cfs_quota_us), for its whole tree"
            }
            (Limit::Cpu, Held::Cgroup(_)) => "each shell's cgroup (cpu.max), for its whole tree",
            (Limit::Memory, Held::Rlimit) => {
                "RLIMIT_AS, per process (its address space), not for the whole tree"
            }
            (Limit::OpenFiles, Held::Rlimit) => "RLIMIT_NOFILE, per process",
            (Limit::FileSize, Held::Rlimit) => "RLIMIT_FSIZE, per process",
            _ => {
                return Some(format!(
                    "dsh-mcp: the {limit} ({amount}) is held ({held:?})"
                ));
            }
        };
        Some(format!("dsh-mcp: the {limit} ({amount}) is held by {by}"))
    };
    let tmp_line = |(limit, value): (TmpLimit, u64)| {
        let held = enforcement.tmp_held(limit)?;
        let amount = match limit {
            TmpLimit::Size => format_bytes(value),
            _ => value.to_string(),
        };
        let by = match (limit, held) {
            (_, TmpHeld::NotHeld) => return Some(not_held(&limit, &amount)),
            (TmpLimit::Size, TmpHeld::Tmpfs) => "the private /tmp's tmpfs (size=)",
            (TmpLimit::Inodes, TmpHeld::Tmpfs) => "the private /tmp's tmpfs (nr_inodes=)",
            _ => {
                return Some(format!(
                    "dsh-mcp: the {limit} ({amount}) is held ({held:?})"
                ));
            }
        };
        Some(format!("dsh-mcp: the {limit} ({amount}) is held by {by}"))
    };
    let cgroup =
        |(limit, _): &(Limit, u64)| matches!(limit, Limit::Pids | Limit::Memory | Limit::Cpu);
    limits
        .requested()
        .filter(cgroup)
        .filter_map(line)
        .chain(tmp.requested().filter_map(tmp_line))
        .chain(limits.requested().filter(|l| !cgroup(l)).filter_map(line))
        .collect()
}

/// `--cpus`: a positive number of CPUs.
fn parse_cpus(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(n) if n.is_finite() && n >= 0.001 => Ok(n),
        _ => Err(format!(
            "{text:?} is not a number of CPUs of at least 0.001 (e.g. 0.5 or 2)"
        )),
    }
}

fn parse_env(text: &str) -> Result<(String, Option<String>), String> {
    let (name, value) = match text.split_once('=') {
        Some((name, value)) => (name, Some(value.to_owned())),
        None => (text, None),
    };
    if name.is_empty() {
        return Err(format!("{text:?} names no variable (NAME=VALUE or NAME)"));
    }
    Ok((name.to_owned(), value))
}

impl EnvArgs {
    /// The `--env` variables, a bare `NAME` with this process's value.
    fn vars(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .filter_map(|(name, value)| {
                let value = value.clone().or_else(|| secrets::var(name))?;
                Some((name.clone(), value))
            })
            .collect()
    }
}

impl LimitArgs {
    /// The private `/tmp`'s bounds the flags ask for (the sandbox's, or a
    /// container's `/tmp`).
    fn tmp_limits(&self) -> dsh_sandbox::TmpLimits {
        dsh_sandbox::TmpLimits::new(self.tmp_size, self.tmp_inodes)
    }

    /// The resource limits of each shell the flags ask for (the private
    /// `/tmp`'s are [`LimitArgs::tmp_limits`]).
    fn limits(&self) -> dsh_pty::ResourceLimits {
        dsh_pty::ResourceLimits::default()
            .memory(self.memory)
            .pids(self.pids_limit)
            .cpus(self.cpus)
            .open_files(self.open_files)
            .file_size(self.file_size)
            .cgroup_parent(self.cgroup_parent.clone())
            .best_effort(self.best_effort_limits)
    }
}

impl Args {
    /// The files holding this server's own keys (its token, its TLS key,
    /// its SSH key), absolute: the confined shells do not see them.
    fn own_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<&PathBuf> = Vec::new();
        #[cfg(feature = "http")]
        files.extend(&self.http.token_file);
        #[cfg(feature = "tls")]
        files.extend(&self.http.tls_key);
        files.extend(&self.backend.ssh_identity);
        files
            .into_iter()
            .map(|file| std::path::absolute(file).unwrap_or_else(|_| file.clone()))
            .collect()
    }

    /// The sandbox the flags ask for, the private `/tmp`'s bounds included.
    fn policy(&self) -> SandboxPolicy {
        let sandbox = &self.sandbox;
        let tmp = self.limits.tmp_limits();
        let mut hidden = if sandbox.no_default_hide {
            Vec::new()
        } else {
            SandboxPolicy::default_hidden_paths()
        };
        hidden.extend(sandbox.hide.iter().cloned());
        // The server's own key files, whatever `--no-default-hide` says.
        hidden.extend(self.own_files());
        SandboxPolicy::default()
            .mode(sandbox.sandbox)
            .tmp_size(tmp.size)
            .tmp_inodes(tmp.inodes)
            .network(sandbox.network)
            .allow_domains(sandbox.allow_domain.clone())
            .unix_sockets(sandbox.allow_unix_socket.clone())
            .hidden_paths(hidden)
    }

    /// Where the tools work.
    fn backend(&self) -> dsh_mcp::Backend {
        let args = &self.backend;
        match args.backend {
            Backend::Local => dsh_mcp::Backend::Local,
            Backend::Docker => {
                let mut docker = DockerSettings::default();
                docker.container.clone_from(&args.container);
                docker.image.clone_from(&args.image);
                docker.network.clone_from(&args.docker_network);
                docker.host.clone_from(&args.docker_host);
                docker.user.clone_from(&args.user);
                dsh_mcp::Backend::Docker(docker)
            }
            Backend::Ssh => {
                let mut ssh = SshSettings::default();
                ssh.login.clone_from(&args.ssh);
                ssh.identity.clone_from(&args.ssh_identity);
                ssh.known_hosts.clone_from(&args.ssh_known_hosts);
                dsh_mcp::Backend::Ssh(ssh)
            }
        }
    }

    /// The server the flags ask for, but how it is reached (stdio unless
    /// [`listen_options`] adds HTTP).
    fn builder(&self) -> ServerBuilder {
        let shell = &self.shell;
        let mut builder = ServerBuilder::new()
            .backend(self.backend())
            .dialect(shell.shell)
            .timeout(Duration::from_secs(shell.timeout_secs))
            .max_timeout(shell.max_timeout_secs.map(Duration::from_secs))
            .max_output_chars(usize::try_from(shell.max_output_chars).unwrap_or(usize::MAX))
            .clip(shell.clip)
            .env(self.env.vars())
            .pass_secrets(self.env.pass_secrets)
            .policy(self.policy())
            .one_shot(self.sandbox.one_shot)
            .limits(self.limits.limits())
            .copy_on_write(self.workspace.copy_on_write)
            .approval(match self.approve {
                Approve::Never => ApprovalMode::Never,
                Approve::Always => ApprovalMode::Always,
                Approve::Elicit => ApprovalMode::Elicit,
            });
        if let Some(dir) = &self.workspace.workspace {
            builder = builder.workspace(dir);
        }
        if let Some(dir) = &self.workspace.cow_dir {
            builder = builder.cow_dir(dir);
        }
        let log = self.log.session_log.clone().or_else(|| {
            std::env::var_os("DSH_HOME").map(|home| PathBuf::from(home).join("sessions"))
        });
        if let Some(dir) = log {
            builder = builder.session_log(dir);
        }
        builder
    }
}

/// `--listen`: where, and the HTTP server's settings.
#[cfg(feature = "http")]
fn listen_options(args: &Args) -> Result<Option<(String, dsh_mcp::http::HttpOptions)>, String> {
    use dsh_mcp::http::{HttpOptions, Token};
    let http = &args.http;
    let Some(addr) = &http.listen else {
        return Ok(None);
    };
    if let Some(file) = &http.token_file
        && args.sandbox.sandbox == SandboxMode::DangerFullAccess
        && args.backend.backend == Backend::Local
    {
        secrets::token_file_unreachable(file)?;
    }
    let token = match (&http.token_file, secrets::var("DSH_TOKEN")) {
        (Some(file), _) => Token::from_file(file),
        (None, Some(token)) => Token::new(&token, "in DSH_TOKEN"),
        (None, None) => {
            return Err("--listen needs a bearer token: --token-file FILE or DSH_TOKEN (the server never runs open)".to_owned());
        }
    }
    .map_err(|e| e.to_string())?;
    let mut options = HttpOptions::new(token);
    options.allowed_origins.clone_from(&http.allow_origin);
    options.max_request_bytes = usize::try_from(http.max_request_bytes).unwrap_or(usize::MAX);
    options.session_idle =
        (http.session_idle_secs > 0).then(|| Duration::from_secs(http.session_idle_secs));
    options.max_sessions = usize::try_from(http.max_sessions).unwrap_or(usize::MAX);
    options.sse_keep_alive =
        (http.sse_keepalive_secs > 0).then(|| Duration::from_secs(http.sse_keepalive_secs));
    #[cfg(feature = "tls")]
    if let (Some(cert), Some(key)) = (&http.tls_cert, &http.tls_key) {
        options.tls = Some(dsh_mcp::http::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        });
    }
    Ok(Some((addr.clone(), options)))
}

async fn serve(args: Args) -> ExitCode {
    #[cfg_attr(not(feature = "http"), allow(unused_mut))]
    let mut builder = args.builder();
    // The flags' own contradictions first, before the token is read.
    if let Err(err) = builder.check() {
        eprintln!("dsh-mcp: {err}");
        return ExitCode::FAILURE;
    }
    #[cfg(feature = "http")]
    match listen_options(&args) {
        Ok(Some((addr, options))) => builder = builder.http(addr, options),
        Ok(None) => {}
        Err(err) => {
            eprintln!("dsh-mcp: {err}");
            return ExitCode::FAILURE;
        }
    }
    let mut server = match builder.build().await {
        Ok(server) => server,
        Err(err) => {
            eprintln!("dsh-mcp: {}", report(&err));
            return ExitCode::FAILURE;
        }
    };
    if args.limits.best_effort_limits
        && let Some(enforcement) = server.enforcement()
    {
        for line in limit_lines(&args.limits.limits(), args.limits.tmp_limits(), enforcement) {
            eprintln!("{line}");
        }
    }
    #[cfg(feature = "http")]
    listening(&server, args.http.listen.as_deref().unwrap_or_default());
    let shutdown = async {
        tokio::select! {
            () = terminated() => tracing::info!("SIGTERM: shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        }
    };
    let code = match server.serve(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("dsh-mcp: {err}");
            ExitCode::FAILURE
        }
    };
    if let Err(err) = server.close().await {
        eprintln!("dsh-mcp: {err}");
    }
    code
}

/// Says on stderr where HTTP is served (`addr` as given: `--listen`).
#[cfg(feature = "http")]
fn listening(server: &dsh_mcp::Server, addr: &str) {
    let Some(local) = server.http_addr() else {
        return;
    };
    let scheme = if server.is_https() { "https" } else { "http" };
    match local {
        Ok(local) => eprintln!("dsh-mcp: listening on {scheme}://{local}/mcp"),
        Err(err) => eprintln!("dsh-mcp: listening on {addr} (its port unknown: {err})"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    Local,
    Docker,
    Ssh,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Approve {
    Never,
    Always,
    Elicit,
}

/// A flag whose values are a library type's names: clap lists them in
/// `--help` and refuses any other.
fn one_of<T: Copy + Send + Sync + 'static>(
    all: &'static [T],
    name: fn(T) -> &'static str,
) -> impl clap::builder::TypedValueParser<Value = T> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(all.iter().map(|&v| name(v))).try_map(move |given| {
        all.iter()
            .copied()
            .find(|&v| name(v) == given)
            .ok_or("not one of the possible values")
    })
}

/// mimalloc: a request's small, short-lived allocations (its task, its
/// parsed message, its answer) cost a few dozen instructions each, not the
/// hundreds glibc's allocator spends once its per-thread cache misses
/// (server instructions per `tools/call bash true`: 83,540 -> 67,221).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // First, while there is one thread: nothing of the server's
    // credentials stays where its shells can read it (secrets.rs).
    if let Err(err) = secrets::hold() {
        eprintln!("dsh-mcp: {err}");
        return ExitCode::FAILURE;
    }
    // The server's own token never goes to a shell, `--pass-secrets` or
    // not (`--env DSH_TOKEN` hands it over on purpose).
    let args = secrets::parse_with(Args::parse, |args, name| {
        args.env.pass_secrets && name != "DSH_TOKEN"
    });
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: an MCP client's log file
        // gets plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    // Over stdio, one thread: requests reach the handler in the order they
    // arrived (the tools are I/O-bound anyway). Over HTTP, sessions are
    // independent and may use every core; each session's calls still run
    // one at a time, in its turn.
    #[cfg(feature = "http")]
    let multi = args.http.listen.is_some();
    #[cfg(not(feature = "http"))]
    let multi = false;
    let mut builder = if multi {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("dsh-mcp: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(serve(args));
    // A pending read of stdin cannot be cancelled; do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

/// Resolves on SIGTERM (never where there is no such signal).
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(err) => {
                tracing::warn!(%err, "cannot watch SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    }
    #[cfg(not(unix))]
    std::future::pending::<()>().await;
}
