#![doc = include_str!("../README.md")]
//!
//! # A host
//!
//! One call is one command string; the answer is what the command printed and
//! how it ended, as exact text. A [`Shell`] is one interactive shell in a
//! real pseudo-terminal (through `dsh-pty`), started by its first call; the
//! working directory, exported variables, functions, aliases, an activated
//! virtualenv and background jobs persist between its calls, which run one at
//! a time. A [`ShellPool`] gives each owner (agent) a shell of its own:
//! calls of one owner run in arrival order, owners in parallel. An owner
//! given a directory of its own ([`ShellPool::set_owner_dir`]) starts
//! there, and after every reset starts there again (the reset line's
//! "workspace" is then its directory). A bash shell's state (directory,
//! variables, functions, aliases, options, umask; no process) can be
//! captured and another owner's next shell started from it, to fork or
//! snapshot an agent ([`ShellPool::capture_state`],
//! [`ShellPool::set_start_state`], [`ShellState`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use dsh_shell_persistent::{CallEnd, ShellConfig, ShellPool, contract};
//! use dsh_shell_persistent::serde_json::json;
//!
//! # async fn host() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = ShellPool::new(
//!     ShellConfig::new("/workspace")
//!         .timeout(Duration::from_secs(120))
//!         .max_output_chars(16_000),
//! )?; // fails here, not on the first call, if /workspace is not a directory
//!
//! // The tool definition for the model, in the shape the host's API takes
//! // (`openai()`, `anthropic()`, `mcp()`).
//! let schema = pool.spec().openai();
//! assert_eq!(schema["name"], "bash");
//!
//! // Each tool call of agent "a1", as the model sent it; the result is the
//! // exact text for the model:
//! for args in [json!({"command": "cd src && export MODE=dev"}), json!({"command": "pwd; echo $MODE"})] {
//!     match pool.execute("a1", &args).await {
//!         Ok(text) => println!("tool result: {text}"),
//!         Err(err) => println!("tool error: {}", contract::render_error(&err)),
//!     }
//! }
//!
//! // Or typed: what happened, as data, rendered when the model needs it.
//! // `call` takes a command (or a `ShellRequest` with its own timeout) and
//! // a future that cancels it (`pending()`: never).
//! let outcome = pool.call("a1", "make test", std::future::pending()).await?;
//! match &outcome.end {
//!     CallEnd::Exited { code } => println!("exit {code}, clipped: {}", outcome.output.clip.is_some()),
//!     CallEnd::TimedOut { after } => println!("timed out after {after:?}; shell reset: {}", outcome.shell_reset),
//!     other => println!("the shell was reset: {other:?}"),
//! }
//! let text_for_the_model = contract::render(&outcome);
//! # let _ = text_for_the_model;
//!
//! // Cancel a call from elsewhere (a user pressed stop): the shell is reset.
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let call = pool.call("a1", "sleep 100", async { let _ = stopped.await; });
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
//! | the shell ended | the output (without bash's interactive `exit` echo), then `[shell killed by signal: SIGKILL]`, `[shell exited: code N]` or `[shell exited]`, then the reset line |
//! | timeout (the call's [`ShellRequest::timeout`], else [`ShellConfig::timeout`]) | ``Your command timed out after N seconds or experienced an OOM error. Below is partial output:``, the output if any, the reset line |
//! | cancelled | [`ShellError::Cancelled`]; the shell is reset, the result discarded |
//! | the call after a cancelled one (or one whose future was dropped) | [`AFTER_CANCEL_NOTE`], then the result |
//! | the shell ended between calls (`kill -9` from outside) | the reset line and [`SHELL_RESTARTED_NOTE`], then the result of the command, run in a fresh shell |
//! | longer than `max_output_chars` | the first `max_output_chars` characters and [`OUTPUT_CLIP_NOTE`] (or head + tail with [`ClipMode::HeadTail`]) |
//! | empty `command` | error `command must be a non-empty string` |
//!
//! The reset line is `The persistent bash shell was reset; the next bash call
//! starts from the workspace with a fresh current directory and environment.`
//!
//! # The protocol
//!
//! Each shell gets a random marker prefix and random names for its protocol
//! variables; each call gets fresh random ids (the start, the end, the next
//! start). The command is written as **one physical line** that `eval`s it
//! from an ANSI-C quoted string (control characters escaped, so the line
//! discipline never sees a raw Ctrl-C or Ctrl-D), or — for commands longer
//! than 3000 bytes — from a private file, so the terminal's 4 KiB line limit
//! never cuts it. For bash, the start marker is `PS0` (printed by bash after
//! reading the line, before running it) and the end marker plus `$?` is the
//! next `PS1` prompt, set only after the command ran. The wrapper looks up
//! nothing a command can redefine (its design is written down in
//! `src/bash.rs`):
//! functions, aliases, `enable -n` of anything but `eval`/`set`/`unset`,
//! `set -u`, `IFS`, traps and terminal modes cannot break it. The result of
//! every call is one of:
//!
//! | after the command | result |
//! |---|---|
//! | bash ran the whole line | the contract above |
//! | bash abandoned the line (`SIGINT`, `set -u`, a syntax error) | bash's error text and `[exit code: N]` with bash's status; the shell keeps its state |
//! | the command moved the shell's stdin, stdout or stderr away from the terminal | the result, then a line saying which stream the tool pointed back at the terminal |
//! | the shell stopped itself (`kill -STOP $$`) | the tool continues it and says so ([`CONTINUED_NOTE`]) |
//! | `eval`, `set` or `unset` disabled, a prompt variable or `POSIXLY_CORRECT` read-only, prompt expansion off, another program `exec`'d in the shell's place, the previous prompt back, bash back at its prompt without running any of the line (a syntax error an alias of `{` makes when a trap left POSIX mode between calls; seen within seconds) | the output, a line naming the cause, the reset line |
//! | `set -e` was on and the shell exited | the exit line, [`ERREXIT_NOTE`], the reset line |
//!
//! Job status notices (`[1]+  Done ...`) never appear in a result (the job's
//! start line `[1] 12345` does). `PS0`, `PS1`, `PS2` and `PROMPT_COMMAND`
//! belong to the tool: the user's `PROMPT_COMMAND` is kept and restored
//! around each command, `PS1` reads as the tool's prompt while a command runs.
//! Everything before the start marker (echo, background-job output between
//! calls) is discarded.
//!
//! # Between calls
//!
//! The terminal is read all the time: between calls the session's pump drops
//! the shell's output as it reads it ([`dsh_pty::OutputStream::discard`]; the
//! PTY's scrollback keeps the raw bytes, within its bound), so a job left
//! running with `&` that prints to the terminal (a dev server's request log,
//! a watcher, `tail -f`) never blocks in `write(2)` while the model thinks,
//! and what it printed then is in no call's result. What it prints *while* a
//! call runs is that call's output, as in a terminal. An idle shell costs no
//! task beyond its session's pump, and no wake-up unless there is output.
//!
//! Output is scanned as it streams (for the markers), normalized (`\r\n`
//! → `\n`, escape sequences removed, carriage-return overwrites collapsed,
//! invalid UTF-8 → U+FFFD; [`NormalizeOptions`] keeps escapes or carriage
//! returns) and bounded: a command printing a gigabyte keeps at most
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
//! terminal input for about a second (`cat`, `read x`, a REPL: a `read` of
//! the terminal, or a `poll`, `select` or `epoll_wait` whose set holds it; a
//! server waiting on its socket, `tail -f` or a `sleep` waits for no one
//! and runs to its end or the timeout), the tool
//! sends it end-of-file, up to three times, and the result says so
//! ([`INPUT_EOF_NOTE`]). With [`InputWait::Wait`] it does nothing and a host
//! answers through [`ShellPool::send_input`].
//!
//! A program other than the shell that waits for a *person* — the terminal
//! out of line mode (`less`, `vim`, `nano`, `top`, `htop`: keys one by one)
//! or with echo off (a password prompt: `ssh`, `sudo`) — gets one
//! end-of-file too (a line editor such as Python's REPL leaves at it). If
//! it is seen waiting so for another ~0.75 s, its process group is killed
//! (`SIGKILL`, so no editor makes an emergency save of a buffer the
//! end-of-file touched; bash puts the terminal's modes back), the command
//! line goes on, and the result says which program ([`ENDED_PROGRAM_NOTE`],
//! e.g. `[less needs an interactive terminal, which this tool does not
//! have, so it was ended; use a non-interactive command instead]`, then
//! `[exit code: 137]`); the shell keeps its state. About two seconds from
//! the program's first wait. It needs a backend that reads the terminal's
//! modes ([`dsh_pty::Foreground::input_mode`]: the native one; Docker and
//! SSH sessions keep the end-of-file behaviour only). An editor killed so
//! may leave its swap file (`vim`'s `.name.swp`). An end-of-file the
//! program did not read is discarded from the terminal's input before the
//! shell reads again ([`dsh_pty::PtySession::flush_input`]; native backend),
//! so it never ends the shell.
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
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod bash;
mod config;
pub mod contract;
mod dialect;
mod env;
mod error;
mod home;
mod marker;
mod normalize;
mod notice;
pub mod outcome;
mod output;
mod pool;
mod process;
mod quote;
mod request;
mod shell;
mod state;

pub use config::{InputWait, OwnerDirError, SHELL_SCROLLBACK, ShellConfig, ShellConfigError};
pub use contract::{
    AFTER_CANCEL_NOTE, CONTINUED_NOTE, ENDED_PROGRAM_NOTE, ERREXIT_NOTE, INPUT_EOF_NOTE,
    OUTPUT_CLIP_NOTE, SHELL_RESTARTED_NOTE,
};
pub use dialect::Dialect;
pub use env::{NOT_SECRET_NAMES, SECRET_NAME_PARTS, SECRET_NAMES, looks_like_secret};
pub use error::ShellError;
pub use normalize::NormalizeOptions;
pub use outcome::{
    BrokenReason, CallEnd, CallOutcome, Clip, LimitsReached, Output, StreamsRepaired,
};
pub use output::ClipMode;
pub use pool::{OwnerKind, OwnerTurn, PlainShells, Seat, ShellPool};
pub use request::ShellRequest;
pub use shell::{Shell, ShellHandle};
pub use state::ShellState;

/// The crates this one's signatures use, re-exported so a host needs no
/// matching versions of its own: [`dsh_pty`] (backends, terminal sizes, exit
/// statuses) and [`serde_json`] (the tool's JSON arguments and schema).
pub use dsh_pty;
/// The tool definition type of [`ShellConfig::spec`].
pub use dsh_tool::{self, ToolSpec};
pub use serde_json;

/// What the crate's fuzz targets and benches drive directly: the marker
/// scanner and bash quoting. **Not part of the API**: no stability promise,
/// and it may change or go in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::marker::{CallScanner, Markers, Progress, Prompt};
    pub use crate::quote::bash_ansi_c;
}
