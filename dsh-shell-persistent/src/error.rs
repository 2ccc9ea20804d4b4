//! Errors of the shell tool. `Display` is the model-visible text (the one
//! place a call's error is rendered).

use crate::Dialect;

/// A call that produced no command result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShellError {
    /// `command` is missing, not a string, or empty.
    #[error("command must be a non-empty string")]
    EmptyCommand,
    /// The model's `timeout` is not a whole number of seconds from 1 to the
    /// bound ([`ShellConfig::timeout_parameter`](crate::ShellConfig::timeout_parameter)).
    #[error("timeout must be a whole number of seconds from 1 to {max_secs}")]
    InvalidTimeout {
        /// The bound, in seconds.
        max_secs: u64,
    },
    /// The call was cancelled; its result was discarded and the shell reset.
    #[error("The command was cancelled and its result discarded.{}", reset_suffix(*.dialect, *.shell_reset))]
    Cancelled {
        /// The shell language.
        dialect: Dialect,
        /// A persistent shell was reset (`false` in one-shot pools).
        shell_reset: bool,
    },
    /// The pool was closed.
    #[error("The shell is closed; no more commands can run.")]
    Closed,
    /// The shell could not be started.
    #[error("The {shell} shell could not be started: {source}")]
    Spawn {
        /// The dialect's name.
        shell: &'static str,
        /// Why.
        #[source]
        source: dsh_pty::PtyError,
    },
    /// The shell ended before it showed its first prompt: what it printed
    /// (the backend's or the shell's own error, such as a missing program)
    /// is in the message.
    #[error("The {shell} shell could not be started: it ended before its first prompt{}", if said.is_empty() { String::from(", printing nothing.") } else { format!(", printing: {said}") })]
    EndedAtStart {
        /// The dialect's name.
        shell: &'static str,
        /// The start of what it printed, on one line.
        said: String,
    },
    /// The shell started but never showed its prompt.
    #[error("The {shell} shell did not become ready within {seconds} seconds.")]
    NotReady {
        /// The dialect's name.
        shell: &'static str,
        /// The bound.
        seconds: u64,
    },
    /// No random marker could be drawn from the operating system.
    #[error("The operating system's random number generator failed: {0}")]
    Random(#[source] std::io::Error),
    /// Talking to the terminal failed.
    #[error("Writing the command to the {shell} shell failed: {source}")]
    Terminal {
        /// The dialect's name.
        shell: &'static str,
        /// Why.
        #[source]
        source: dsh_pty::PtyError,
    },
    /// The command could not be written to its file (long commands).
    #[error("Passing the command to the shell failed: {0}")]
    CommandFile(#[source] std::io::Error),
    /// The owner has no running command to send input to.
    #[error("No command is running for this agent.")]
    NotRunning,
}

fn reset_suffix(dialect: Dialect, shell_reset: bool) -> String {
    if shell_reset {
        format!(" {}", dialect.reset_line())
    } else {
        String::new()
    }
}
