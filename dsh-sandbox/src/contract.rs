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
    /// Set when the command failed on a write the confinement refused.
    pub denial: Option<Denial>,
}

/// A command that failed on a write the confinement refused: it exited with
/// a non-zero status and its output carries the error the confinement gives
/// a refused write (`EROFS` from the read-only view, `EXDEV` from a rename
/// across a confinement boundary; `EACCES` too where Landlock alone
/// confines).
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
    if let Some(denial) = &outcome.denial {
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
/// The same where Landlock alone confines (adds `EACCES`).
const LANDLOCK_DENIALS: [&str; 3] = [
    "Read-only file system",
    "Permission denied",
    "Invalid cross-device link",
];

/// Whether `call` failed on a refused write: it exited non-zero and the
/// command's own output (never the tool's lines) carries a refused write's
/// error text.
pub(crate) fn failed_on_denial(call: &CallOutcome, namespaces: bool) -> bool {
    if call.exit_code().is_none_or(|code| code == 0) {
        return false;
    }
    let errors: &[&str] = if namespaces {
        &VIEW_DENIALS
    } else {
        &LANDLOCK_DENIALS
    };
    let tail = match &call.output.clip {
        Some(Clip::HeadTail { tail, .. }) => tail.as_str(),
        _ => "",
    };
    errors
        .iter()
        .any(|e| call.output.text.contains(e) || tail.contains(e))
}
