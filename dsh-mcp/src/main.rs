//! The `dsh-mcp` binary: see `dsh-mcp --help`.
#![allow(clippy::print_stderr)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use dsh_editor::{Editor, EditorConfig};
use dsh_mcp::{DshServer, ElicitApprover, SessionLog};
use dsh_sandbox::{
    Approval, Approver, FixedApprover, ModeChange, Persistence, SandboxConfig, SandboxFs,
    SandboxMode, SandboxPolicy, SandboxedShell,
};
use dsh_shell_persistent::{ClipMode, Dialect, ShellConfig};
use rmcp::ServiceExt;

/// An MCP stdio server with exactly two tools: a persistent shell (`bash`,
/// `sh` or `pwsh`) and `str_replace_editor`. Every flag has an environment
/// equivalent; flags win.
#[derive(Debug, Parser)]
#[command(name = "dsh-mcp", version)]
struct Args {
    /// The shell's start directory (the workspace). Default: the current directory.
    #[arg(long, env = "DSH_WORKSPACE", value_name = "DIR")]
    workspace: Option<PathBuf>,

    /// Seconds a shell command may run before the shell is killed and reset.
    #[arg(long, env = "DSH_TIMEOUT_SECS", value_name = "N", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    timeout_secs: u64,

    /// Output longer than this many characters is clipped.
    #[arg(long, env = "DSH_MAX_OUTPUT_CHARS", value_name = "N", default_value_t = 16_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_output_chars: u64,

    /// How a shell result longer than the limit is cut: its first characters
    /// (`head`, the documented contract), or its first and last halves with
    /// the number left out between them (`head-tail`: the end of a failing
    /// build is kept).
    #[arg(long, env = "DSH_CLIP", value_enum, default_value_t = Clip::Head)]
    clip: Clip,

    /// The shell dialect; the tool is named after it.
    #[arg(long, env = "DSH_SHELL", value_enum, default_value_t = Shell::default())]
    shell: Shell,

    /// Write one JSONL record per tool call to a new file in DIR. Default:
    /// `$DSH_HOME/sessions` when `DSH_HOME` is set, else no log.
    #[arg(long, value_name = "DIR")]
    session_log: Option<PathBuf>,

    /// The sandbox mode. The default runs without a sandbox: use
    /// `workspace-write` for untrusted work.
    #[arg(long, env = "DSH_SANDBOX", value_enum, default_value_t = Mode::DangerFullAccess)]
    sandbox: Mode,

    /// Allow network access in the restricted sandbox modes.
    #[arg(long, env = "DSH_NETWORK")]
    network: bool,

    /// In the restricted modes, run every call in a fresh confined shell
    /// instead of one persistent confined shell.
    #[arg(long, env = "DSH_ONE_SHOT")]
    one_shot: bool,

    /// Who approves a call's `sandbox_permissions`: nobody (`never`), every
    /// request (`always`), or the client's user through MCP elicitation
    /// (`elicit`, refused when the client cannot ask).
    #[arg(long, env = "DSH_APPROVE", value_enum, default_value_t = Approve::Never)]
    approve: Approve,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    ReadOnly,
    WorkspaceWrite,
    DangerFullAccess,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Clip {
    Head,
    HeadTail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Approve {
    Never,
    Always,
    Elicit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Shell {
    Bash,
    Sh,
    Pwsh,
}

impl Default for Shell {
    fn default() -> Self {
        if cfg!(windows) {
            Shell::Pwsh
        } else {
            Shell::Bash
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    // One thread: requests reach the handler in the order they arrived (the
    // tools are I/O-bound anyway).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
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

async fn serve(args: Args) -> ExitCode {
    let workspace = match args.workspace.map_or_else(std::env::current_dir, Ok) {
        Ok(dir) => std::path::absolute(&dir).unwrap_or(dir),
        Err(err) => {
            eprintln!("dsh-mcp: cannot read the current directory: {err}");
            return ExitCode::FAILURE;
        }
    };
    if !workspace.is_dir() {
        eprintln!(
            "dsh-mcp: the workspace {} is not a directory",
            workspace.display()
        );
        return ExitCode::FAILURE;
    }
    let max_output_chars = usize::try_from(args.max_output_chars).unwrap_or(usize::MAX);
    let config = ShellConfig {
        dialect: match args.shell {
            Shell::Bash => Dialect::Bash,
            Shell::Sh => Dialect::Sh,
            Shell::Pwsh => Dialect::Pwsh,
        },
        timeout: Duration::from_secs(args.timeout_secs),
        max_output_chars,
        clip: match args.clip {
            Clip::Head => ClipMode::Head,
            Clip::HeadTail => ClipMode::HeadTail,
        },
        ..ShellConfig::new(&workspace)
    };
    let policy = SandboxPolicy {
        mode: match args.sandbox {
            Mode::ReadOnly => SandboxMode::ReadOnly,
            Mode::WorkspaceWrite => SandboxMode::WorkspaceWrite,
            Mode::DangerFullAccess => SandboxMode::DangerFullAccess,
        },
        network: args.network,
        ..SandboxPolicy::default()
    };
    let elicit = (args.approve == Approve::Elicit)
        .then(|| Arc::new(ElicitApprover::new(Duration::from_secs(300))));
    let approver: Option<Arc<dyn Approver>> = match args.approve {
        Approve::Never => None,
        Approve::Always => Some(Arc::new(FixedApprover(Approval::AllowedOnce))),
        Approve::Elicit => elicit.clone().map(|e| e as Arc<dyn Approver>),
    };
    let shell = match SandboxedShell::new(SandboxConfig {
        policy: policy.clone(),
        shell: config,
        mode_change: ModeChange::Reject,
        approver,
        restricted: if args.one_shot {
            Persistence::OneShot
        } else {
            Persistence::Persistent
        },
    }) {
        Ok(shell) => shell,
        Err(err) => {
            eprintln!("dsh-mcp: {err}");
            return ExitCode::FAILURE;
        }
    };
    let editor = match Editor::with_config(
        SandboxFs::new(policy, &workspace),
        EditorConfig {
            max_output_chars,
            ..EditorConfig::default()
        },
    ) {
        Ok(editor) => editor,
        Err(err) => {
            eprintln!("dsh-mcp: {err}");
            return ExitCode::FAILURE;
        }
    };
    let log_dir = args
        .session_log
        .or_else(|| std::env::var_os("DSH_HOME").map(|home| PathBuf::from(home).join("sessions")));
    let log = match log_dir.map(|dir| SessionLog::create(&dir)).transpose() {
        Ok(log) => log,
        Err(err) => {
            eprintln!("dsh-mcp: cannot create the session log: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(log) = &log {
        tracing::info!(path = %log.path().display(), "session log");
    }
    let server = DshServer::new(shell, editor, log, elicit);

    tokio::select! {
        served = run(server.clone()) => {
            if let Err(err) = served {
                tracing::warn!(%err, "the MCP session ended with an error");
            }
        }
        () = terminated() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
    }
    // Every shell's process tree goes with the server.
    server.shell().close_all().await;
    ExitCode::SUCCESS
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

async fn run(server: DshServer) -> Result<(), Box<dyn std::error::Error>> {
    let running = server
        .serve(dsh_mcp::transport::guarded(
            tokio::io::stdin(),
            tokio::io::stdout(),
        ))
        .await?;
    running.waiting().await?;
    Ok(())
}
