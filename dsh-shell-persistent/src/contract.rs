//! The model-visible text: every string a call's result can hold is written
//! here, from a [`CallOutcome`]. Nothing else in the crate renders a result,
//! and nothing parses one back.

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

/// The line added for a program the tool ended because it waited for a
/// person at the terminal (`{program}` is its name, or `the command`).
pub const ENDED_PROGRAM_NOTE: &str = "[{program} needs an interactive terminal, which this tool does not have, so it was ended; use a non-interactive command instead]";

/// The line added when a shell with `set -e` on exited.
pub const ERREXIT_NOTE: &str = "[`set -e` was on: an interactive shell exits when a command fails]";

/// The exact text the model sees for `outcome`.
pub fn render(outcome: &CallOutcome) -> String {
    let mut parts: Vec<String> = Vec::with_capacity(4);
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
            parts.push(format!("[{error}; what the command did there is unknown]"));
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
