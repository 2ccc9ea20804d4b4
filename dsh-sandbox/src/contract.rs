//! The sandboxed shell's typed result and its model-visible text: the shell's
//! own text ([`dsh_shell_persistent::contract::render`]), then the denial
//! line and how to ask for more access ([`render`]); and the text of a call
//! that failed ([`render_error`]: a [`SandboxError`]'s `Display` is for
//! developers).

use dsh_shell_persistent::{CallOutcome, Clip};

use crate::{SandboxError, SandboxMode};

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

/// The line that reports a write refused under `mode` to the model (after
/// a command's output, and as the message of a write [`crate::SandboxFs`]
/// refuses).
///
/// ```
/// use dsh_sandbox::{SandboxMode, contract};
/// assert_eq!(
///     contract::denial_line(SandboxMode::ReadOnly),
///     "[sandbox: file access denied under read-only mode]"
/// );
/// ```
pub fn denial_line(mode: SandboxMode) -> String {
    format!("[sandbox: file access denied under {} mode]", mode.name())
}

/// The exact text the model sees for `outcome`.
pub fn render(outcome: &SandboxOutcome) -> String {
    let mut text = dsh_shell_persistent::contract::render(&outcome.call);
    if let Some(denial) = &outcome.likely_denial {
        text.push('\n');
        text.push_str(&denial_line(outcome.mode));
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

/// The exact text the model sees for a call that failed with `err`. The
/// shell's own errors read as
/// [`dsh_shell_persistent::contract::render_error`] writes them.
///
/// ```
/// use dsh_sandbox::{SandboxError, SandboxMode, contract};
/// let err = SandboxError::Denied { requested: SandboxMode::WorkspaceWrite };
/// assert_eq!(
///     contract::render_error(&err),
///     "The request to run this command with workspace-write access was denied. The command was not run."
/// );
/// ```
pub fn render_error(err: &SandboxError) -> String {
    match err {
        SandboxError::NoApprover { current } => format!(
            "Escalation is not available: this host has no approver for `sandbox_permissions`. The command was not run; run it within {current} mode."
        ),
        SandboxError::Denied { requested } => format!(
            "The request to run this command with {requested} access was denied. The command was not run."
        ),
        SandboxError::ApprovalTimedOut { requested } => format!(
            "The request to run this command with {requested} access timed out without an answer. The command was not run."
        ),
        SandboxError::NotWider { current, requested } => format!(
            "`sandbox_permissions` must ask for more than the current {current} mode; `{requested}` does not. The command was not run."
        ),
        SandboxError::MissingJustification => "`justification` must be a non-empty string explaining why the command needs `sandbox_permissions`. The command was not run.".to_owned(),
        SandboxError::JustificationWithoutPermissions => "`justification` was given without `sandbox_permissions`; give both to ask for more access, or neither. The command was not run.".to_owned(),
        SandboxError::InvalidPermissions => "`sandbox_permissions` must be `workspace-write` or `danger-full-access`. The command was not run.".to_owned(),
        SandboxError::ShellOpen { owner, from, to } => format!(
            "Cannot change {owner}'s sandbox mode from {from} to {to} while its persistent shell is open; close the shell first."
        ),
        SandboxError::NotEnforceable { missing } => format!(
            "The sandbox cannot be enforced on this system (missing: {missing}); the command was not run."
        ),
        SandboxError::Limits(limits) => format!(
            "{}; the command was not run.",
            dsh_pty::contract::render_limits_error(limits)
        ),
        SandboxError::LimitsNotHeld {
            limits,
            tmp,
            why,
            starting,
        } => {
            let list = crate::error::limit_list(limits, tmp);
            match starting {
                Some(shell) => {
                    format!("The {shell} shell could not be started: {list} cannot be enforced: {why}")
                }
                None => format!("{list} cannot be enforced: {why}; the command was not run."),
            }
        }
        SandboxError::Unsupported { mode } => format!(
            "The {mode} sandbox mode is not supported on this platform; the command was not run."
        ),
        SandboxError::Setup { what, source } => match source {
            Some(source) => format!("Setting up the sandbox failed: {what}: {source}"),
            None => format!("Setting up the sandbox failed: {what}"),
        },
        SandboxError::CopyOnWriteBubblewrap => "This host's copy-on-write workspace confines commands with the sandbox's own namespaces, not bubblewrap; the command was not run.".to_owned(),
        SandboxError::InvalidAllowDomain { entry, why } => format!(
            "The allowed domain {entry:?} is not HOST[:PORT] or *.DOMAIN[:PORT] ({why}); the command was not run."
        ),
        SandboxError::EgressConflict { why } => format!(
            "Allowed domains cannot be enforced: {why}; the command was not run."
        ),
        SandboxError::NoCopyOnWrite => {
            "This host has no copy-on-write workspace.".to_owned()
        }
        SandboxError::CopyOnWriteUnavailable { reason } => format!(
            "The copy-on-write view of the workspace could not be made: {reason}. The command was not run."
        ),
        SandboxError::Workspace(e) => format!("The copy-on-write workspace failed: {}", chain(e)),
        // `ShellConfigError` has no source, and its `Display` says which
        // setting is wrong.
        SandboxError::ShellConfig(config) => format!("Setting up the sandbox failed: {config}"),
        SandboxError::Shell(shell) => dsh_shell_persistent::contract::render_error(shell),
    }
}

/// The body of the egress proxy's 403: `host:port` is not allowed.
///
/// ```
/// let body = dsh_sandbox::contract::egress_refusal("evil.test", 443);
/// assert!(body.starts_with("evil.test:443 is not in --allow-domain"));
/// ```
pub fn egress_refusal(host: &str, port: u16) -> String {
    let shown = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    format!(
        "{shown} is not in --allow-domain: the sandbox's proxy reaches only the hosts and ports the \
         server was started with. Connections around the proxy (--noproxy, raw sockets, DNS) reach \
         nothing; ask the operator to allow {shown} if the task needs it.\n"
    )
}

/// The body of the egress proxy's 400: not a proxy request.
#[cfg(all(feature = "egress", target_os = "linux"))]
pub(crate) fn egress_not_proxy_request() -> String {
    "The sandbox's proxy takes absolute-form http:// requests and CONNECT HOST:PORT only.\n"
        .to_owned()
}

/// The body of the egress proxy's 502: an allowed host did not answer.
#[cfg(all(feature = "egress", target_os = "linux"))]
pub(crate) fn egress_unreachable(host: &str, port: u16, err: &std::io::Error) -> String {
    format!("{host}:{port} is allowed, but the sandbox's proxy could not reach it: {err}\n")
}

/// `error` and its sources, joined.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
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
    use super::{render_error, shows_denial};
    use crate::{SandboxError, SandboxMode};

    /// `err` reads `want` for the model, as it did when `Display` was the
    /// model's text; `Display` never repeats the source.
    fn golden(err: SandboxError, want: &str) {
        assert_eq!(render_error(&err), want, "{err:?}");
        let display = err.to_string();
        assert!(!display.ends_with('.'), "{display}");
        assert!(
            display.starts_with(|c: char| !c.is_uppercase()),
            "{display}"
        );
        if let Some(source) = std::error::Error::source(&err) {
            assert!(!display.contains(&source.to_string()), "{display}");
        }
    }

    #[test]
    fn display_is_for_developers() {
        let err = SandboxError::setup_from("Landlock", std::io::Error::other("ENOSYS"));
        assert_eq!(err.to_string(), "setting up the sandbox failed: Landlock");
        assert_eq!(
            std::error::Error::source(&err).map(ToString::to_string),
            Some("ENOSYS".to_owned())
        );
        let err = SandboxError::Denied {
            requested: SandboxMode::WorkspaceWrite,
        };
        assert_eq!(
            err.to_string(),
            "the approver denied workspace-write access"
        );
    }

    #[test]
    fn every_error_reads_as_it_always_did() {
        use SandboxMode::{DangerFullAccess, ReadOnly, WorkspaceWrite};
        golden(
            SandboxError::NoApprover { current: ReadOnly },
            "Escalation is not available: this host has no approver for `sandbox_permissions`. The command was not run; run it within read-only mode.",
        );
        golden(
            SandboxError::Denied {
                requested: WorkspaceWrite,
            },
            "The request to run this command with workspace-write access was denied. The command was not run.",
        );
        golden(
            SandboxError::ApprovalTimedOut {
                requested: DangerFullAccess,
            },
            "The request to run this command with danger-full-access access timed out without an answer. The command was not run.",
        );
        golden(
            SandboxError::NotWider {
                current: WorkspaceWrite,
                requested: ReadOnly,
            },
            "`sandbox_permissions` must ask for more than the current workspace-write mode; `read-only` does not. The command was not run.",
        );
        golden(
            SandboxError::MissingJustification,
            "`justification` must be a non-empty string explaining why the command needs `sandbox_permissions`. The command was not run.",
        );
        golden(
            SandboxError::JustificationWithoutPermissions,
            "`justification` was given without `sandbox_permissions`; give both to ask for more access, or neither. The command was not run.",
        );
        golden(
            SandboxError::InvalidPermissions,
            "`sandbox_permissions` must be `workspace-write` or `danger-full-access`. The command was not run.",
        );
        golden(
            SandboxError::ShellOpen {
                owner: "agent".into(),
                from: DangerFullAccess,
                to: ReadOnly,
            },
            "Cannot change agent's sandbox mode from danger-full-access to read-only while its persistent shell is open; close the shell first.",
        );
        golden(
            SandboxError::NotEnforceable {
                missing: "namespaces".into(),
            },
            "The sandbox cannot be enforced on this system (missing: namespaces); the command was not run.",
        );
        golden(
            SandboxError::Limits(dsh_pty::LimitsError::NotHeld {
                limits: vec![dsh_pty::Limit::Memory],
                why: "no cgroup parent was given".into(),
            }),
            "the memory limit cannot be enforced: no cgroup parent was given; the command was not run.",
        );
        golden(
            SandboxError::LimitsNotHeld {
                limits: vec![dsh_pty::Limit::OpenFiles, dsh_pty::Limit::Pids],
                tmp: vec![crate::TmpLimit::Size],
                why: "no private /tmp".into(),
                starting: None,
            },
            "the process limit, the /tmp size limit and the open-file limit cannot be enforced: no private /tmp; the command was not run.",
        );
        golden(
            SandboxError::LimitsNotHeld {
                limits: Vec::new(),
                tmp: vec![crate::TmpLimit::Inodes],
                why: "no private /tmp".into(),
                starting: Some("bash"),
            },
            "The bash shell could not be started: the /tmp inode limit cannot be enforced: no private /tmp",
        );
        golden(
            SandboxError::Limits(dsh_pty::LimitsError::Cgroup {
                what: "making the cgroup",
                path: "/sys/fs/cgroup/dsh/s1".into(),
                source: std::io::Error::other("EACCES"),
            }),
            "making the cgroup /sys/fs/cgroup/dsh/s1 failed: EACCES; the command was not run.",
        );
        golden(
            SandboxError::Unsupported { mode: ReadOnly },
            "The read-only sandbox mode is not supported on this platform; the command was not run.",
        );
        golden(
            SandboxError::setup("uid map"),
            "Setting up the sandbox failed: uid map",
        );
        golden(
            SandboxError::setup_from("Landlock", std::io::Error::other("ENOSYS")),
            "Setting up the sandbox failed: Landlock: ENOSYS",
        );
        golden(
            SandboxError::ShellConfig(dsh_shell_persistent::ShellConfigError::NotPositive(
                "timeout",
            )),
            "Setting up the sandbox failed: shell config: `timeout` must be a positive integer",
        );
        golden(
            SandboxError::Shell(dsh_shell_persistent::ShellError::Closed),
            "The shell is closed; no more commands can run.",
        );
        golden(
            SandboxError::Shell(dsh_shell_persistent::ShellError::Spawn {
                shell: "bash",
                source: dsh_pty::PtyError::Confine(std::io::Error::other("EPERM")),
            }),
            "The bash shell could not be started: confining the child before exec failed: EPERM",
        );
    }

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
