//! The model-visible text: every string a call's result can hold is written
//! here, from a [`CallOutcome`] ([`render`]), and every error text, from a
//! [`ShellError`] ([`render_error`]). Nothing else in the crate renders a
//! result or an error for the model (an error's `Display` is for
//! developers), and nothing parses one back.

use crate::ShellError;
use crate::outcome::{
    BrokenReason, CallEnd, CallOutcome, Clip, LimitsReached, Output, StreamsRepaired,
};

/// Appended, without a separator, to output cut at `max_output_chars` in
/// [`ClipMode::Head`](crate::ClipMode::Head).
/// It is [`dsh_tool::CLIP_NOTE`], the note both tools use.
pub const OUTPUT_CLIP_NOTE: &str = dsh_tool::CLIP_NOTE;

/// The line added when end-of-file was sent to a command waiting for input.
pub const INPUT_EOF_NOTE: &str = "[the command was waiting for input on the terminal, so end-of-file (Ctrl-D) was sent to it; pass input through a pipe or a here-string instead]";

/// The line added when the shell had stopped itself and the tool continued it.
pub const CONTINUED_NOTE: &str =
    "[the shell was stopped (SIGSTOP) while the command ran; the tool continued it]";

/// The first line of the result of the call after one that was cancelled
/// (the shell was reset then).
pub const AFTER_CANCEL_NOTE: &str = "[the previous call was cancelled, so the shell was reset: this call ran from the workspace with a fresh current directory and environment]";

/// The line after the reset line that leads the result of a call that
/// found its shell ended since the previous call (killed from outside, or
/// it exited between calls).
pub const SHELL_RESTARTED_NOTE: &str =
    "[the shell had ended since the previous call, so this call started a fresh one and ran there]";

/// The line added for a program the tool ended because it waited for a
/// person at the terminal (`{program}` is its name, or `the command`).
pub const ENDED_PROGRAM_NOTE: &str = "[{program} needs an interactive terminal, which this tool does not have, so it was ended; use a non-interactive command instead]";

/// The line added when a shell with `set -e` on exited.
pub const ERREXIT_NOTE: &str = "[`set -e` was on: an interactive shell exits when a command fails]";

/// The exact text the model sees for `outcome`.
pub fn render(outcome: &CallOutcome) -> String {
    let mut parts: Vec<String> = Vec::with_capacity(4);
    if outcome.shell_restarted {
        parts.push(outcome.dialect.reset_line());
        parts.push(SHELL_RESTARTED_NOTE.to_owned());
    }
    if outcome.after_cancel {
        parts.push(AFTER_CANCEL_NOTE.to_owned());
    }
    let output = render_output(&outcome.output);
    if let CallEnd::TimedOut { after } = outcome.end {
        let secs = after.as_secs_f64().round() as u64;
        parts.push(format!(
            "Your command timed out after {secs} seconds or experienced an OOM error. Below is partial output:"
        ));
    }
    if !output.is_empty() {
        parts.push(output);
    }
    parts.extend(limit_lines(outcome.limits_reached));
    match &outcome.end {
        CallEnd::Exited { code } => {
            if outcome.eofs_sent > 0 {
                parts.push(INPUT_EOF_NOTE.to_owned());
            }
            parts.extend(outcome.ended_programs.iter().map(|name| {
                ENDED_PROGRAM_NOTE.replace("{program}", name.as_deref().unwrap_or("the command"))
            }));
            if outcome.continued {
                parts.push(CONTINUED_NOTE.to_owned());
            }
            parts.extend(repairs_line(outcome.streams_repaired));
            if *code != 0 {
                parts.push(format!("[exit code: {code}]"));
            }
        }
        CallEnd::ShellEnded { status, errexit } => {
            parts.push(
                match (status.signal(), status.signal_name(), status.code()) {
                    (Some(_), Some(name), _) => format!("[shell killed by signal: {name}]"),
                    (Some(n), None, _) => format!("[shell killed by signal: {n}]"),
                    (None, _, Some(code)) => format!("[shell exited: code {code}]"),
                    (None, _, None) => "[shell exited]".to_owned(),
                },
            );
            if *errexit {
                parts.push(ERREXIT_NOTE.to_owned());
            }
        }
        CallEnd::ConnectionLost { error } => {
            parts.push(format!(
                "[{}; what the command did there is unknown]",
                dsh_pty::contract::render_error(error)
            ));
        }
        CallEnd::ShellBroken { reason } => {
            parts.push(broken_line(*reason, outcome.dialect.tool_name()));
        }
        CallEnd::TimedOut { .. } => {}
    }
    if outcome.shell_reset {
        parts.push(outcome.dialect.reset_line());
    }
    parts.join("\n")
}

/// The exact text the model sees for a call that failed with `err`: a
/// sentence saying what went wrong, with the terminal's or the operating
/// system's error where there is one (the text of a [`dsh_pty::PtyError`] is
/// [`dsh_pty::contract::render_error`]'s).
///
/// ```
/// use dsh_shell_persistent::{ShellError, contract};
/// assert_eq!(
///     contract::render_error(&ShellError::Closed),
///     "The shell is closed; no more commands can run."
/// );
/// ```
pub fn render_error(err: &ShellError) -> String {
    match err {
        ShellError::EmptyCommand => "command must be a non-empty string".to_owned(),
        ShellError::InvalidTimeout { max_secs } => {
            format!("timeout must be a whole number of seconds from 1 to {max_secs}")
        }
        ShellError::Cancelled {
            dialect,
            shell_reset,
        } => {
            let mut text = "The command was cancelled and its result discarded.".to_owned();
            if *shell_reset {
                text.push(' ');
                text.push_str(&dialect.reset_line());
            }
            text
        }
        ShellError::Closed => "The shell is closed; no more commands can run.".to_owned(),
        ShellError::Spawn { shell, source } => format!(
            "The {shell} shell could not be started: {}",
            dsh_pty::contract::render_error(source)
        ),
        ShellError::EndedAtStart { shell, said } => {
            if said.is_empty() {
                format!(
                    "The {shell} shell could not be started: it ended before its first prompt, printing nothing."
                )
            } else {
                format!(
                    "The {shell} shell could not be started: it ended before its first prompt, printing: {said}"
                )
            }
        }
        ShellError::NotReady { shell, seconds } => {
            format!("The {shell} shell did not become ready within {seconds} seconds.")
        }
        ShellError::Random(source) => {
            format!("The operating system's random number generator failed: {source}")
        }
        ShellError::Terminal { shell, source } => format!(
            "Writing the command to the {shell} shell failed: {}",
            dsh_pty::contract::render_error(source)
        ),
        ShellError::CommandFile(source) => {
            format!("Passing the command to the shell failed: {source}")
        }
        ShellError::NotRunning => "No command is running for this agent.".to_owned(),
        ShellError::StateUnsupported { shell } => {
            format!("The {shell} shell's state cannot be saved or restored: only bash's can.")
        }
        ShellError::StateNotCaptured {
            shell,
            why,
            shell_reset,
        } => {
            let mut text = format!("The {shell} shell's state could not be saved: {why}.");
            if *shell_reset {
                text.push(' ');
                text.push_str(&reset_line_of(shell));
            }
            text
        }
        ShellError::StateNotApplied {
            shell,
            said,
            shell_reset,
        } => {
            let mut text = format!(
                "The {shell} shell's saved state could not be fully restored, so the command was not run"
            );
            if said.is_empty() {
                text.push('.');
            } else {
                text.push_str("; the shell said: ");
                text.push_str(said.trim_end_matches('.'));
                text.push('.');
            }
            text.push(' ');
            if *shell_reset {
                text.push_str(&reset_line_of(shell));
            } else {
                text.push_str("The shell keeps the rest of the state; run the command again.");
            }
            text
        }
    }
}

/// The reset line of the dialect named `shell`.
fn reset_line_of(shell: &str) -> String {
    crate::Dialect::ALL
        .into_iter()
        .find(|d| d.tool_name() == shell)
        .unwrap_or_default()
        .reset_line()
}

/// The lines for the limits a call reached:
/// `[killed: memory limit of 256 MiB reached]` when the kernel killed a
/// process of the shell's tree at the memory limit, and
/// `[process limit of 64 reached: new processes were refused]`.
fn limit_lines(reached: LimitsReached) -> impl Iterator<Item = String> {
    let memory = reached.memory.map(|bytes| {
        format!(
            "[killed: memory limit of {} reached]",
            dsh_pty::format_bytes(bytes)
        )
    });
    let pids = reached
        .pids
        .map(|n| format!("[process limit of {n} reached: new processes were refused]"));
    memory.into_iter().chain(pids)
}

/// The text of a command's output: as kept, with the clip note where it was
/// cut.
pub fn render_output(output: &Output) -> String {
    match &output.clip {
        None => output.text.clone(),
        Some(Clip::Head) => format!("{}{OUTPUT_CLIP_NOTE}", output.text),
        Some(Clip::HeadTail {
            omitted_chars,
            tail,
        }) => format!(
            "{}\n<response clipped><NOTE>{omitted_chars} characters were left out here to save on context.</NOTE>\n{tail}",
            output.text
        ),
    }
}

/// The line that says why a shell that is still alive had to be reset.
fn broken_line(why: BrokenReason, shell: &str) -> String {
    match why {
        BrokenReason::BuiltinDisabled => format!(
            "[the {shell} builtins `eval`, `set` and `unset` are needed by the tool, and one was disabled (enable -n)]"
        ),
        BrokenReason::ReadOnlyVariable => "[a variable the tool sets (PS0, PS1, PROMPT_COMMAND or one of its own) was made read-only]".to_owned(),
        BrokenReason::StreamsUnrecoverable => "[the tool could not point the shell back at its terminal after the command]".to_owned(),
        BrokenReason::WrapperDidNotRun => "[the tool's own commands did not run in the shell (a DEBUG trap with extdebug, a disabled builtin or a read-only variable stopped them)]".to_owned(),
        BrokenReason::LineNotRun => format!("[the {shell} shell read the tool's command line and ran none of it (an alias of `{{` or `}}`, expanded because a trap turned POSIX mode off between calls, makes the line a syntax error)]"),
        BrokenReason::PromptExpansionOff => "[prompt expansion was turned off (shopt -u promptvars), which the tool needs]".to_owned(),
        BrokenReason::Replaced => "[another program replaced the shell (exec)]".to_owned(),
    }
}

/// The line saying which of the shell's standard streams were pointed back
/// at the terminal after the command.
fn repairs_line(repairs: StreamsRepaired) -> Option<String> {
    let names: Vec<&str> = [
        (repairs.stdin, "standard input"),
        (repairs.stdout, "standard output"),
        (repairs.stderr, "standard error"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    let (list, them) = match names.as_slice() {
        [] => return None,
        [one] => ((*one).to_owned(), "it"),
        [a, b] => (format!("{a} and {b}"), "them"),
        [a, b, c, ..] => (format!("{a}, {b} and {c}"), "them"),
    };
    Some(format!(
        "[the command moved the shell's {list} away from the terminal; the tool pointed {them} back at the terminal]"
    ))
}

#[cfg(test)]
mod tests {
    use std::io;

    use dsh_pty::PtyError;

    use super::render_error;
    use crate::{Dialect, ShellError};

    /// `err` reads `want` for the model, as it did when `Display` was the
    /// model's text; `Display` never repeats the source.
    fn golden(err: ShellError, want: &str) {
        assert_eq!(render_error(&err), want, "{err:?}");
        let display = err.to_string();
        assert!(!display.ends_with('.'), "{display}");
        assert!(display.starts_with(|c: char| c.is_lowercase()), "{display}");
        if let Some(source) = std::error::Error::source(&err) {
            assert!(!display.contains(&source.to_string()), "{display}");
        }
    }

    #[test]
    fn display_is_for_developers() {
        let err = ShellError::Spawn {
            shell: "bash",
            source: PtyError::Spawn {
                program: "bash".into(),
                source: io::Error::other("no such file"),
            },
        };
        assert_eq!(err.to_string(), "the bash shell could not be started");
        let mut chain = vec![err.to_string()];
        let mut source = std::error::Error::source(&err);
        while let Some(next) = source {
            chain.push(next.to_string());
            source = next.source();
        }
        assert_eq!(
            chain.join(": "),
            "the bash shell could not be started: spawning `bash` failed: no such file"
        );
        let err = ShellError::Cancelled {
            dialect: Dialect::Bash,
            shell_reset: true,
        };
        assert_eq!(
            err.to_string(),
            "the call was cancelled and the shell reset"
        );
    }

    #[test]
    fn every_error_reads_as_it_always_did() {
        golden(
            ShellError::EmptyCommand,
            "command must be a non-empty string",
        );
        golden(
            ShellError::InvalidTimeout { max_secs: 600 },
            "timeout must be a whole number of seconds from 1 to 600",
        );
        golden(
            ShellError::Cancelled {
                dialect: Dialect::Bash,
                shell_reset: true,
            },
            "The command was cancelled and its result discarded. The persistent bash shell was reset; the next bash call starts from the workspace with a fresh current directory and environment.",
        );
        golden(
            ShellError::Cancelled {
                dialect: Dialect::Sh,
                shell_reset: false,
            },
            "The command was cancelled and its result discarded.",
        );
        golden(
            ShellError::Closed,
            "The shell is closed; no more commands can run.",
        );
        golden(
            ShellError::Spawn {
                shell: "bash",
                source: PtyError::Spawn {
                    program: "bash".into(),
                    source: io::Error::other("no such file"),
                },
            },
            "The bash shell could not be started: spawning `bash` failed: no such file",
        );
        golden(
            ShellError::Spawn {
                shell: "bash",
                source: PtyError::Limits(dsh_pty::LimitsError::Cgroup {
                    what: "making the cgroup",
                    path: "/sys/fs/cgroup/dsh/s1".into(),
                    source: io::Error::other("EACCES"),
                }),
            },
            "The bash shell could not be started: making the cgroup /sys/fs/cgroup/dsh/s1 failed: EACCES",
        );
        golden(
            ShellError::Spawn {
                shell: "sh",
                source: PtyError::CwdMissing {
                    path: "/no/dir".into(),
                },
            },
            "The sh shell could not be started: working directory does not exist: /no/dir",
        );
        golden(
            ShellError::EndedAtStart {
                shell: "bash",
                said: String::new(),
            },
            "The bash shell could not be started: it ended before its first prompt, printing nothing.",
        );
        golden(
            ShellError::EndedAtStart {
                shell: "bash",
                said: "docker: no such container".into(),
            },
            "The bash shell could not be started: it ended before its first prompt, printing: docker: no such container",
        );
        golden(
            ShellError::NotReady {
                shell: "pwsh",
                seconds: 30,
            },
            "The pwsh shell did not become ready within 30 seconds.",
        );
        golden(
            ShellError::Random(io::Error::other("no entropy")),
            "The operating system's random number generator failed: no entropy",
        );
        golden(
            ShellError::Terminal {
                shell: "bash",
                source: PtyError::Io {
                    what: "writing to the terminal",
                    source: io::Error::other("EIO"),
                },
            },
            "Writing the command to the bash shell failed: writing to the terminal failed: EIO",
        );
        golden(
            ShellError::Terminal {
                shell: "bash",
                source: PtyError::WriteAfterExit,
            },
            "Writing the command to the bash shell failed: cannot write to the terminal: the session's process has exited",
        );
        golden(
            ShellError::CommandFile(io::Error::other("disk full")),
            "Passing the command to the shell failed: disk full",
        );
        golden(
            ShellError::NotRunning,
            "No command is running for this agent.",
        );
    }

    /// The transport's error inside a result reads as it always did.
    #[test]
    fn a_lost_connection_reads_as_it_always_did() {
        let error = PtyError::Disconnected {
            backend: "SSH host",
            source: "the channel closed".into(),
        };
        let outcome = crate::CallOutcome {
            dialect: Dialect::Bash,
            output: crate::Output {
                text: "partial".into(),
                clip: None,
            },
            end: crate::CallEnd::ConnectionLost {
                error: std::sync::Arc::new(error),
            },
            eofs_sent: 0,
            continued: false,
            streams_repaired: crate::StreamsRepaired::default(),
            shell_reset: true,
            limits_reached: crate::LimitsReached::default(),
            ended_programs: Vec::new(),
            after_cancel: false,
            shell_restarted: false,
        };
        let want = "partial\n[the connection to the SSH host was lost: the channel closed; what the command did there is unknown]\nThe persistent bash shell was reset; the next bash call starts from the workspace with a fresh current directory and environment.";
        assert_eq!(super::render(&outcome), want);
    }
}
