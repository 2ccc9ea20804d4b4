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
//! a directory of its own under its server's `$TMPDIR` (or `/tmp`), named
//! by the harness, and removes it at its end; a session that did not get
//! there (lost, failed) has it removed by a new session on that server.
//!
//! With `--group N`, a GRPO-style group on the first server instead, which
//! must run with `--copy-on-write` (`group.rs`): one session prepared
//! (`--prepare`), forked N times, each fork an attempt (`--attempt`, with
//! `ATTEMPT` set to its number), each attempt's diff printed:
//!
//! ```text
//! mkdir -p /tmp/task && cd /tmp/task && printf 'def add(a, b):\n    return a - b\n' > calc.py
//! DSH_TOKEN=$(cat /tmp/dsh-token) dsh-mcp --listen 127.0.0.1:7777 --workspace /tmp/task --copy-on-write &
//! cargo run -p dsh-mcp --example harness -- --server http://127.0.0.1:7777/mcp \
//!     --token-file /tmp/dsh-token --group 8
//! ```
//!
//! Linux only, as the workspace's TLS provider for tests is.
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[cfg(target_os = "linux")]
mod fleet;
#[cfg(target_os = "linux")]
mod group;

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
        /// Instead of the fleet: fork one prepared session N times on the
        /// first server (run with `--copy-on-write`), an attempt in each,
        /// and print each attempt's diff.
        #[arg(long, value_name = "N")]
        group: Option<usize>,
        /// `--group`: the command that prepares the session the forks
        /// start from (its files and shell state are theirs).
        #[arg(long, default_value = "export TASK=add && ls")]
        prepare: String,
        /// `--group`: each fork's command (`ATTEMPT` is its number).
        #[arg(
            long,
            default_value = r##"if [ $((ATTEMPT % 2)) = 0 ]; then sed -i 's/a - b/a + b/' calc.py; else echo "# attempt $ATTEMPT at $TASK: no idea" >> calc.py; fi; cat calc.py"##
        )]
        attempt: String,
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

    /// `--group N` on the first server.
    async fn group(args: &Args, token: &str, n: usize) -> ExitCode {
        let http = match crate::fleet::http_client() {
            Ok(http) => http,
            Err(e) => {
                eprintln!("harness: {e}");
                return ExitCode::FAILURE;
            }
        };
        let started = std::time::Instant::now();
        let timeout = Duration::from_secs(args.call_timeout_secs);
        let attempts = crate::group::run(
            &http,
            &args.servers[0],
            token,
            n,
            &args.prepare,
            &args.attempt,
            timeout,
        )
        .await;
        match attempts {
            Ok(attempts) => {
                for a in &attempts {
                    println!("== attempt {} (session {}) ==", a.index, a.session);
                    println!("{}", a.output);
                    println!("-- its diff --");
                    print!("{}", a.diff);
                }
                println!("{n} attempts in {:.1?}", started.elapsed());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("harness: {e}");
                ExitCode::FAILURE
            }
        }
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
        if let Some(n) = args.group {
            return group(&args, &token, n).await;
        }
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
