//! The sandboxed shell's typed result and its model-visible text: the shell's
//! own text ([`dsh_shell_persistent::contract::render`]), then the denial
//! line and how to ask for more access.

use dsh_shell_persistent::{CallOutcome, Clip};

use crate::SandboxMode;

/// What one sandboxed call produced.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SandboxOutcome {
    /// The shell call's outcome.
    pub call: CallOutcome,
    /// The mode the command ran in.
    pub mode: SandboxMode,
    /// The mode was granted for this call only by the approver.
    pub escalated: bool,
    /// Set when the command most likely failed on a write the confinement
    /// refused (see [`Denial`] for how that is decided, and what it misses).
    pub likely_denial: Option<Denial>,
}

/// A command that most likely failed on a write the confinement refused: it
/// exited with a non-zero status and its own output carries the error text
/// the confinement gives a refused write (`EROFS` from the read-only view,
/// `EXDEV` from a rename across a confinement boundary; `EACCES` too where
/// Landlock alone confines). It is a reading of the output, not a record of
/// the kernel's refusals: the confined shell's messages are in the C locale
/// (`LC_MESSAGES=C`), so a command that sets its own `LC_ALL` or
/// `LC_MESSAGES`, or prints such an error itself, can make it miss or
/// claim one; in the weaker mode (Landlock alone) a write refused by the
/// file's own permissions reads the same.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Denial {
    /// The wider modes the model may ask for with `sandbox_permissions`
    /// (empty when the host has no approver).
    pub wider: Vec<SandboxMode>,
}

/// The exact text the model sees for `outcome`.
pub fn render(outcome: &SandboxOutcome) -> String {
    let mut text = dsh_shell_persistent::contract::render(&outcome.call);
    if let Some(denial) = &outcome.likely_denial {
        text.push('\n');
        text.push_str(&outcome.mode.denial_line());
        if !denial.wider.is_empty() {
            let wider: Vec<String> = denial
                .wider
                .iter()
                .map(|m| format!("`{}`", m.name()))
                .collect();
            text.push_str(&format!(
                "\nTo run it with more access, call the tool again with the same command, `sandbox_permissions` set to {} and a `justification`.",
                wider.join(" or ")
            ));
        }
    }
    text
}

/// The error texts of writes refused by namespaces and the read-only view
/// (`EROFS`, `EXDEV`).
const VIEW_DENIALS: [&str; 2] = ["Read-only file system", "Invalid cross-device link"];
/// The same where Landlock alone confines (adds `EACCES`, written as a
/// file error writes it: `Permission denied` at the end of a line, or
/// before `: '<path>'` as Python writes it; not `Permission denied (` as ssh
/// reports a refused login).
const LANDLOCK_DENIALS: [&str; 4] = [
    "Read-only file system",
    "Permission denied\n",
    "Permission denied: ",
    "Invalid cross-device link",
];

/// Whether `call` failed on a refused write: it exited non-zero and the
/// command's own output (never the tool's lines) carries a refused write's
/// error text.
pub(crate) fn failed_on_denial(call: &CallOutcome, namespaces: bool) -> bool {
    if call.exit_code().is_none_or(|code| code == 0) {
        return false;
    }
    let tail = match &call.output.clip {
        Some(Clip::HeadTail { tail, .. }) => tail.as_str(),
        _ => "",
    };
    shows_denial(&call.output.text, namespaces) || shows_denial(tail, namespaces)
}

/// Whether `text` carries the error of a refused write.
fn shows_denial(text: &str, namespaces: bool) -> bool {
    let errors: &[&str] = if namespaces {
        &VIEW_DENIALS
    } else {
        &LANDLOCK_DENIALS
    };
    errors.iter().any(|e| text.contains(e)) || (!namespaces && text.ends_with("Permission denied"))
}

#[cfg(test)]
mod tests {
    use super::shows_denial;

    #[test]
    fn only_a_refused_writes_error_counts() {
        let view = [
            (
                "touch: cannot touch '/etc/x': Read-only file system\n",
                true,
            ),
            (
                "mv: cannot move 'a' to '/x/a': Invalid cross-device link",
                true,
            ),
            ("touch: cannot touch '/etc/x': Permission denied\n", false),
        ];
        for (text, want) in view {
            assert_eq!(shows_denial(text, true), want, "{text}");
        }
        let landlock = [
            ("touch: cannot touch '/etc/x': Permission denied\n", true),
            ("bash: /etc/x: Permission denied", true),
            (
                "PermissionError: [Errno 13] Permission denied: '/etc/x'\n",
                true,
            ),
            ("git@github.com: Permission denied (publickey).\n", false),
            (
                "curl: (7) Failed to connect to example.com port 443\n",
                false,
            ),
        ];
        for (text, want) in landlock {
            assert_eq!(shows_denial(text, false), want, "{text}");
        }
    }
}
