//! A harness driving many sessions on several `dsh-mcp --listen` servers
//! over MCP Streamable HTTP, with the official Rust SDK's client (rmcp):
//! each session runs a short agent-like script of `bash` and
//! `str_replace_editor` calls; every call has a timeout; a session the
//! server lost (404) or whose connection broke is replaced by a new one on
//! the same server and the call tried again (the new shell starts afresh:
//! the report says so), a bounded number of times. Prints calls ok and
//! failed per server, and exits non-zero when a session failed.
//!
//! Start the servers as `docs/http.md` says, with one token, then:
//!
//! ```text
//! head -c 32 /dev/urandom | base64 > /tmp/dsh-token && chmod 600 /tmp/dsh-token
//! dsh-mcp --listen 127.0.0.1:7777 --token-file /tmp/dsh-token --workspace /tmp &
//! dsh-mcp --listen 127.0.0.1:7778 --token-file /tmp/dsh-token --workspace /tmp &
//! cargo run -p dsh-mcp --example harness -- \
//!     --server http://127.0.0.1:7777/mcp --server http://127.0.0.1:7778/mcp \
//!     --token-file /tmp/dsh-token --sessions 40
//! ```
//!
//! (`--think-ms` pauses between calls; with a server started with a shorter
//! `--session-idle-secs`, this shows the reconnect.) Each session works in
//! a `mktemp -d` directory of its server's and removes it at its end.
//! Linux only, as the workspace's TLS provider for tests is.
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[cfg(target_os = "linux")]
mod fleet;

#[cfg(target_os = "linux")]
mod harness {
    use std::path::PathBuf;
    use std::process::ExitCode;
    use std::time::Duration;

    use clap::Parser;

    use crate::fleet::{FleetConfig, run};

    /// Drives N sessions over M `dsh-mcp --listen` servers.
    #[derive(Parser, Debug)]
    struct Args {
        /// A server's MCP endpoint (`http://HOST:PORT/mcp`), repeatable;
        /// sessions go to them in turn.
        #[arg(long = "server", value_name = "URL", required = true)]
        servers: Vec<String>,
        /// The file holding the servers' bearer token (or `DSH_TOKEN`).
        #[arg(long, env = "DSH_TOKEN_FILE", value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// How many sessions, all at the same time.
        #[arg(long, default_value_t = 8)]
        sessions: usize,
        /// The longest wait for one call's answer (or a session's opening).
        #[arg(long, default_value_t = 60)]
        call_timeout_secs: u64,
        /// New sessions one call may open after its session was lost.
        #[arg(long, default_value_t = 2)]
        reconnects: usize,
        /// A pause before each call after the first, in milliseconds.
        #[arg(long, default_value_t = 0)]
        think_ms: u64,
    }

    fn token(args: &Args) -> Result<String, String> {
        let token = match &args.token_file {
            Some(file) => std::fs::read_to_string(file)
                .map_err(|e| format!("--token-file {}: {e}", file.display()))?,
            None => std::env::var("DSH_TOKEN")
                .map_err(|_| "no token: --token-file FILE or DSH_TOKEN".to_owned())?,
        };
        Ok(token.trim().to_owned())
    }

    pub(crate) async fn main() -> ExitCode {
        let args = Args::parse();
        let token = match token(&args) {
            Ok(token) => token,
            Err(e) => {
                eprintln!("harness: {e}");
                return ExitCode::FAILURE;
            }
        };
        let config = FleetConfig {
            servers: args.servers.clone(),
            token,
            sessions: args.sessions,
            call_timeout: Duration::from_secs(args.call_timeout_secs),
            reconnects: args.reconnects,
            think: Duration::from_millis(args.think_ms),
            checkpoint: None,
            progress: None,
        };
        let started = std::time::Instant::now();
        let report = match run(config).await {
            Ok(report) => report,
            Err(e) => {
                eprintln!("harness: {e}");
                return ExitCode::FAILURE;
            }
        };
        print!("{}", report.summary(&args.servers, 10));
        println!(
            "{} sessions in {:.1?}",
            report.sessions.len(),
            started.elapsed()
        );
        if report.all_completed() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}

#[cfg(target_os = "linux")]
#[tokio::main]
async fn main() -> std::process::ExitCode {
    harness::main().await
}

#[cfg(not(target_os = "linux"))]
fn main() -> std::process::ExitCode {
    eprintln!("harness: Linux only (its TLS provider, ring, is a Linux-only dev-dependency)");
    std::process::ExitCode::FAILURE
}
