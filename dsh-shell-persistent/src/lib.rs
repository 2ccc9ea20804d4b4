//! The persistent `bash(command)` tool for LLM agents.
//!
//! One call is one command string; the answer is what the command printed and
//! how it ended, as exact text. Each owner (agent) gets its own interactive
//! shell in a real pseudo-terminal (through `dsh-pty`), created on its first
//! call; the working directory, exported variables, functions, aliases, an
//! activated virtualenv and background jobs persist between its calls. Calls
//! of one owner run one at a time in arrival order; owners run in parallel.
//!
//! # A host
//!
//! ```no_run
//! use std::time::Duration;
//! use dsh_shell_persistent::{ShellConfig, ShellPool};
//! use serde_json::json;
//!
//! # async fn host() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = ShellPool::new(ShellConfig {
//!     timeout: Duration::from_secs(120),
//!     max_output_chars: 16_000,
//!     ..ShellConfig::new("/workspace")
//! })?;
//!
//! // The tool definition for the model.
//! let schema = pool.schema();
//! assert_eq!(schema["name"], "bash");
//!
//! // Each tool call of agent "a1", as the model sent it:
//! for args in [json!({"command": "cd src && export MODE=dev"}), json!({"command": "pwd; echo $MODE"})] {
//!     match pool.execute("a1", &args).await {
//!         Ok(text) => println!("tool result: {text}"),
//!         Err(err) => println!("tool error: {err}"),
//!     }
//! }
//!
//! // Cancel a call from elsewhere (a user pressed stop): the shell is reset.
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let call = pool.run_with_cancel("a1", "sleep 100", async { let _ = stopped.await; });
//! let _ = stop.send(());
//! assert!(call.await.is_err());
//!
//! pool.close_all().await; // kills every shell's process tree
//! # Ok(()) }
//! ```
//!
//! # The contract
//!
//! | case | result |
//! |---|---|
//! | exit 0 | the output, minus one final newline (`echo hi` → `hi`) |
//! | exit N ≠ 0 | the output, a newline, `[exit code: N]` (only `[exit code: N]` without output) |
//! | the shell ended | the output, then `[shell killed by signal: SIGKILL]`, `[shell exited: code N]` or `[shell exited]`, then the reset line |
//! | timeout | ``Your command timed out after N seconds or experienced an OOM error. Below is partial output:``, the output if any, the reset line |
//! | cancelled | [`ShellError::Cancelled`]; the shell is reset, the result discarded |
//! | longer than `max_output_chars` | the first `max_output_chars` characters and [`CLIP_NOTE`] (or head + tail with [`ClipMode::HeadTail`]) |
//! | empty `command` | error `command must be a non-empty string` |
//!
//! The reset line is `The persistent bash shell was reset; the next bash call
//! starts from the workspace with a fresh current directory and environment.`
//!
//! # The protocol
//!
//! Each call gets two fresh 128-bit markers from the OS RNG. The command is
//! written as **one physical line** that `eval`s it from an ANSI-C quoted
//! string (control characters escaped, so the line discipline never sees a
//! raw Ctrl-C or Ctrl-D), or — for commands longer than 3000 bytes — from a
//! private file, so the terminal's 4 KiB line limit never cuts it. For bash,
//! the start marker is `PS0` (printed by bash after reading the line, before
//! running it) and the end marker plus `$?` is the next `PS1` prompt, so the
//! wrapper looks up no command by name except `eval` and `jobs`: functions
//! or aliases named `printf`, `echo`, `builtin`, `read` cannot break it. The
//! markers are only ever written in two halves, so terminal echo cannot
//! match them, and a command printing marker-like text (even an earlier
//! call's marker) cannot end a call: only the exact fresh token can.
//! Everything before the start marker (echo, background-job output between
//! calls, job notices) is discarded.
//!
//! Output is scanned as it streams ([`marker::CallScanner`]), normalized
//! ([`normalize`]: `\r\n` → `\n`, escape sequences removed, carriage-return
//! overwrites collapsed, invalid UTF-8 → U+FFFD) and bounded
//! ([`output::Collector`]): a command printing a gigabyte keeps at most
//! `max_output_chars` characters (twice that in head+tail mode) plus the
//! pty's scrollback. The call returns as soon as the end marker is seen;
//! nothing polls.
//!
//! The shell starts without rc files, with `TERM=dumb`, `PAGER=cat`,
//! `GIT_PAGER=cat`, history and history expansion off, terminal echo off and
//! output post-processing off (the tool normalizes line endings itself).
//!
//! # Commands that read the terminal
//!
//! Standard input is the terminal, as in a real shell. While a command runs,
//! the foreground is inspected every 250 ms; once a command has waited for
//! terminal input for about a second (`cat`, `read x`, a REPL), the tool
//! sends it end-of-file, up to three times, and the result says so
//! ([`INPUT_EOF_NOTE`]). With [`InputWait::Wait`] it does nothing and a host
//! answers through [`ShellPool::send_input`].
//!
//! # The process tree
//!
//! Closing an owner, closing the pool, dropping the pool, a timeout and a
//! cancellation kill every process of the shell's terminal session: jobs in
//! their own process groups, jobs that ignore SIGHUP, double-forked
//! children. Only a process that left the session on purpose (`setsid`)
//! survives.
//!
//! # Dialects
//!
//! [`Dialect::Bash`] (bash ≥ 4.4) is tested here. [`Dialect::Sh`] (dash,
//! busybox ash) has the same contract; its start marker is printed with
//! `printf`, so a *function* named `printf` can break it, and multi-line
//! commands are run from a file with `.`. [`Dialect::Pwsh`] runs commands
//! through `Invoke-Expression` of a base64-decoded string with
//! `$ErrorActionPreference = 'Stop'` and a controlled prompt; its quoting is
//! unit-tested everywhere and its live tests run only where `pwsh` exists.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod bash;
mod config;
mod dialect;
mod error;
pub mod marker;
pub mod normalize;
mod notice;
pub mod output;
mod pool;
mod probe;
pub mod quote;
mod shell;

pub use config::{ConfigError, InputWait, ShellConfig};
pub use dialect::Dialect;
pub use error::ShellError;
pub use normalize::NormalizeOptions;
pub use output::{CLIP_NOTE, ClipMode};
pub use pool::{CONTINUED_NOTE, ERREXIT_NOTE, INPUT_EOF_NOTE, ShellPool};
