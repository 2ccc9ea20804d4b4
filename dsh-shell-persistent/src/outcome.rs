//! What one call produced, as data: the output, how the call ended, and what
//! the tool did along the way. [`crate::contract::render`] turns it into the
//! model-visible text; hosts that need to know *whether* something happened
//! (a timeout, a reset, clipped output) read these fields instead.

use std::sync::Arc;
use std::time::Duration;

use dsh_pty::{ExitStatus, PtyError};

use crate::Dialect;

/// The result of one call that ran (a cancelled call is
/// [`ShellError::Cancelled`](crate::ShellError::Cancelled) instead).
///
/// ```
/// use dsh_shell_persistent::{CallEnd, ShellConfig, ShellPool, contract};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = ShellPool::new(ShellConfig::new(std::env::temp_dir()))?;
/// let outcome = pool.call("agent-1", "echo hi; exit 3", std::future::pending()).await?;
/// assert_eq!(outcome.output.text, "hi");
/// assert!(matches!(outcome.end, CallEnd::ShellEnded { .. }));
/// assert!(outcome.shell_reset);
/// // The exact text the model sees: the output, the diagnostic, the reset line.
/// assert_eq!(
///     contract::render(&outcome),
///     "hi\n[shell exited: code 3]\n\
///      The persistent bash shell was reset; the next bash call starts from the \
///      workspace with a fresh current directory and environment."
/// );
/// # pool.close_all().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CallOutcome {
    /// The shell language that ran the call.
    pub dialect: Dialect,
    /// What the command printed (normalized, within the bound).
    pub output: Output,
    /// How the call ended.
    pub end: CallEnd,
    /// How many times end-of-file was sent to a command waiting for terminal
    /// input ([`InputWait::SendEof`](crate::InputWait::SendEof)).
    pub eofs_sent: u32,
    /// The shell stopped itself (`kill -STOP $$`) and the tool continued it.
    pub continued: bool,
    /// The shell's standard streams the tool pointed back at the terminal.
    pub streams_repaired: StreamsRepaired,
    /// The owner's persistent shell is gone: its next call starts a fresh
    /// shell in the workspace. Always `false` for one-shot pools (there is
    /// no state to lose).
    pub shell_reset: bool,
    /// Limits of the shell's process tree that the call reached.
    pub limits_reached: LimitsReached,
    /// Programs the tool ended because they waited for a person at the
    /// terminal (a pager, an editor, `top`, a password prompt: keys read
    /// one by one, or a secret typed without echo) and end-of-file did not
    /// end them, by name (`None` where it was not seen). The shell and its
    /// state are kept; see [`InputWait::SendEof`](crate::InputWait::SendEof).
    pub ended_programs: Vec<Option<String>>,
    /// The previous call of this shell was cancelled (or its future
    /// dropped), so the shell was reset before this call: it runs from the
    /// workspace with a fresh current directory and environment.
    pub after_cancel: bool,
    /// The shell had ended since the previous call (killed from outside,
    /// or it exited between calls), so this call started a fresh one and
    /// ran there: from the workspace, with a fresh current directory and
    /// environment.
    pub shell_restarted: bool,
}

/// Limits of [`ShellConfig::limits`](crate::ShellConfig::limits) that a
/// call reached, read from the shell's cgroup (so only where it has one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitsReached {
    /// The memory limit in bytes, when the kernel killed a process of the
    /// tree at it during the call.
    pub memory: Option<u64>,
    /// The process limit, when new processes were refused at it during the
    /// call.
    pub pids: Option<u64>,
}

impl LimitsReached {
    /// `true` when the call reached no limit.
    pub fn is_empty(&self) -> bool {
        self.memory.is_none() && self.pids.is_none()
    }
}

impl CallOutcome {
    /// The command's exit code, when it ran to its end ([`CallEnd::Exited`]).
    pub fn exit_code(&self) -> Option<i32> {
        match self.end {
            CallEnd::Exited { code } => Some(code),
            _ => None,
        }
    }

    /// `true` when the command ran to its end with status 0.
    pub fn succeeded(&self) -> bool {
        self.exit_code() == Some(0)
    }
}

/// How a call ended.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CallEnd {
    /// The command ran to its end with this status; a persistent shell kept
    /// its state. In a one-shot pool, a shell that ends is the command
    /// ending: its exit code, or `128 + signal`.
    Exited {
        /// The status (`$?`).
        code: i32,
    },
    /// The persistent shell's process ended (an `exit`, a signal, an
    /// `exec`'d program that finished).
    ShellEnded {
        /// How it ended.
        status: ExitStatus,
        /// `set -e` was on (an interactive shell exits when a command fails).
        errexit: bool,
    },
    /// The connection to a shell running elsewhere (Docker, SSH) broke; what
    /// the command did there is unknown.
    ConnectionLost {
        /// The transport's error.
        error: Arc<PtyError>,
    },
    /// The shell is alive but can no longer run the tool's protocol, so it
    /// was reset.
    ShellBroken {
        /// Why.
        reason: BrokenReason,
    },
    /// The call ran longer than the pool's timeout; the shell's process tree
    /// was killed.
    TimedOut {
        /// The timeout.
        after: Duration,
    },
}

/// Why a shell that is still alive had to be reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BrokenReason {
    /// `eval`, `set` or `unset` was disabled (`enable -n`).
    BuiltinDisabled,
    /// A variable the tool sets was made read-only.
    ReadOnlyVariable,
    /// The shell's streams could not be pointed back at its terminal.
    StreamsUnrecoverable,
    /// None of the tool's wrapper ran: the previous prompt came back.
    WrapperDidNotRun,
    /// The shell read the tool's command line and ran none of it: it waits
    /// at its prompt again and never printed the call's start marker (a
    /// syntax error in the line, as an alias of `{` makes when a trap turned
    /// POSIX mode off between calls).
    LineNotRun,
    /// Prompt expansion was turned off (`shopt -u promptvars`).
    PromptExpansionOff,
    /// Another program replaced the shell (`exec`).
    Replaced,
}

/// Which of the shell's standard streams the command had moved away from
/// the terminal, and the tool pointed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StreamsRepaired {
    /// Standard input.
    pub stdin: bool,
    /// Standard output.
    pub stdout: bool,
    /// Standard error.
    pub stderr: bool,
}

impl StreamsRepaired {
    /// `true` when a stream was repaired.
    pub fn any(self) -> bool {
        self.stdin || self.stdout || self.stderr
    }
}

/// A command's output within the pool's bound.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Output {
    /// The text kept: the whole output minus one final newline, or — when
    /// [`Output::clip`] is set — its first part.
    pub text: String,
    /// Set when the output was longer than `max_output_chars`.
    pub clip: Option<Clip>,
}

/// How output longer than `max_output_chars` was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Clip {
    /// [`ClipMode::Head`](crate::ClipMode::Head): [`Output::text`] holds the
    /// first `max_output_chars` characters. The rest was not read into the
    /// result (normalizing it would cost what the bound saves), so it is not
    /// counted.
    Head,
    /// [`ClipMode::HeadTail`](crate::ClipMode::HeadTail): [`Output::text`]
    /// holds the first half and `tail` the last half.
    HeadTail {
        /// How many characters were left out between them.
        omitted_chars: u64,
        /// The end of the output, minus one final newline.
        tail: String,
    },
}
