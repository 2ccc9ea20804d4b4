//! Errors of the shell tool. `Display` is for developers (terse, without the
//! source, which the error chain carries); the model's text for an error is
//! [`contract::render_error`](crate::contract::render_error)'s, the one place
//! a call's error is rendered.

use crate::Dialect;

/// A call that produced no command result.
///
/// `Display` says what failed, for a log or an error reporter; a tool shows
/// the model [`contract::render_error`](crate::contract::render_error).
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
    #[error("the call was cancelled{}", if *.shell_reset { " and the shell reset" } else { "" })]
    Cancelled {
        /// The shell language.
        dialect: Dialect,
        /// A persistent shell was reset (`false` in one-shot pools).
        shell_reset: bool,
    },
    /// The pool was closed.
    #[error("the shell is closed")]
    Closed,
    /// The shell could not be started.
    #[error("the {shell} shell could not be started")]
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
    #[error("the {shell} shell ended before its first prompt{}", if said.is_empty() { String::new() } else { format!(", printing: {said}") })]
    EndedAtStart {
        /// The dialect's name.
        shell: &'static str,
        /// The start of what it printed, on one line.
        said: String,
    },
    /// The shell started but never showed its prompt.
    #[error("the {shell} shell did not become ready within {seconds} seconds")]
    NotReady {
        /// The dialect's name.
        shell: &'static str,
        /// The bound.
        seconds: u64,
    },
    /// No random marker could be drawn from the operating system.
    #[error("the operating system's random number generator failed")]
    Random(#[source] std::io::Error),
    /// Talking to the terminal failed.
    #[error("writing the command to the {shell} shell failed")]
    Terminal {
        /// The dialect's name.
        shell: &'static str,
        /// Why.
        #[source]
        source: dsh_pty::PtyError,
    },
    /// The command could not be written to its file (long commands).
    #[error("writing the command to its file failed")]
    CommandFile(#[source] std::io::Error),
    /// The owner has no running command to send input to.
    #[error("no command is running for this owner")]
    NotRunning,
    /// Only a bash shell's state can be captured or applied
    /// ([`ShellState`](crate::ShellState)).
    #[error("the {shell} shell's state cannot be captured or restored: only bash's can")]
    StateUnsupported {
        /// The dialect's name.
        shell: &'static str,
    },
    /// The shell's state could not be read
    /// ([`Shell::capture_state`](crate::Shell::capture_state)).
    #[error("the {shell} shell's state could not be captured: {why}")]
    StateNotCaptured {
        /// The dialect's name.
        shell: &'static str,
        /// Why, as a sentence.
        why: String,
        /// The shell was reset meanwhile (a timeout, a shell that ended):
        /// its state is lost.
        shell_reset: bool,
    },
    /// A state could not be applied in full
    /// ([`Shell::apply_state`](crate::Shell::apply_state), or a start
    /// state a pool's call applied before its command, which then did not
    /// run): what bash said.
    #[error("the {shell} shell's saved state could not be fully restored{}", if said.is_empty() { String::new() } else { format!(": {said}") })]
    StateNotApplied {
        /// The dialect's name.
        shell: &'static str,
        /// What bash printed while applying it (its error messages), on
        /// one line, or how the shell ended.
        said: String,
        /// The shell was reset (a timeout, a shell that ended): the next
        /// call starts a fresh one. Otherwise the shell runs, with every
        /// part of the state bash accepted.
        shell_reset: bool,
    },
}
