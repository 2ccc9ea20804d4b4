//! The sandboxed shell's arguments as a type.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::{SandboxError, SandboxMode};

/// The arguments of one call: `{"command", "sandbox_permissions"?, "justification"?}`.
///
/// ```
/// use dsh_sandbox::{SandboxMode, SandboxRequest};
/// let request: SandboxRequest = serde_json::from_str(
///     r#"{"command": "pip install .", "sandbox_permissions": "danger-full-access",
///         "justification": "installs into the system site-packages"}"#,
/// ).unwrap();
/// assert_eq!(request.sandbox_permissions, Some(SandboxMode::DangerFullAccess));
/// assert_eq!(SandboxRequest::new("ls").sandbox_permissions, None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct SandboxRequest {
    /// The command line to run.
    pub command: String,
    /// A wider mode for this call only (needs an approver and a justification).
    #[serde(default)]
    pub sandbox_permissions: Option<SandboxMode>,
    /// Why the command needs the wider mode.
    #[serde(default)]
    pub justification: Option<String>,
    /// How long this call may run, instead of the shell config's timeout
    /// (see [`ShellRequest::timeout`](dsh_shell_persistent::ShellRequest::timeout):
    /// set by the host, unbounded, never read by serde; a model's
    /// `timeout` is read by [`SandboxedShell::parse_request`](crate::SandboxedShell::parse_request)
    /// within [`ShellConfig::timeout_parameter`](dsh_shell_persistent::ShellConfig::timeout_parameter)).
    #[serde(skip)]
    pub timeout: Option<Duration>,
}

impl From<&str> for SandboxRequest {
    fn from(command: &str) -> Self {
        SandboxRequest::new(command)
    }
}

impl From<String> for SandboxRequest {
    fn from(command: String) -> Self {
        SandboxRequest::new(command)
    }
}

impl SandboxRequest {
    /// A request to run `command` in the owner's mode.
    pub fn new(command: impl Into<String>) -> Self {
        SandboxRequest {
            command: command.into(),
            sandbox_permissions: None,
            justification: None,
            timeout: None,
        }
    }

    /// Sets [`SandboxRequest::timeout`]: this call may run for `timeout`.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// A request to run `command` with `mode` for this call, because of
    /// `justification`.
    pub fn escalated(
        command: impl Into<String>,
        mode: SandboxMode,
        justification: impl Into<String>,
    ) -> Self {
        SandboxRequest {
            sandbox_permissions: Some(mode),
            justification: Some(justification.into()),
            ..SandboxRequest::new(command)
        }
    }

    /// The request in the model's JSON arguments, with the tool's error for
    /// each wrong shape. A `timeout` member is ignored, as by
    /// [`ShellRequest::from_json`](dsh_shell_persistent::ShellRequest::from_json).
    pub fn from_json(args: &Value) -> Result<Self, SandboxError> {
        Self::from_shell(dsh_shell_persistent::ShellRequest::from_json(args)?, args)
    }

    /// The request in the model's JSON arguments as `shell`'s schema offers
    /// them: [`SandboxRequest::from_json`], and `timeout` when
    /// [`ShellConfig::timeout_parameter`](dsh_shell_persistent::ShellConfig::timeout_parameter)
    /// offers it ([`ShellConfig::parse_request`](dsh_shell_persistent::ShellConfig::parse_request)).
    pub(crate) fn from_json_for(
        shell: &dsh_shell_persistent::ShellConfig,
        args: &Value,
    ) -> Result<Self, SandboxError> {
        Self::from_shell(shell.parse_request(args)?, args)
    }

    fn from_shell(
        shell: dsh_shell_persistent::ShellRequest,
        args: &Value,
    ) -> Result<Self, SandboxError> {
        let command = shell.command;
        let present = |name| args.get(name).filter(|v| !v.is_null());
        let sandbox_permissions = match present("sandbox_permissions") {
            None => None,
            Some(p) => Some(
                p.as_str()
                    .and_then(SandboxMode::from_name)
                    .ok_or(SandboxError::InvalidPermissions)?,
            ),
        };
        // A justification that is not a string is no justification; kept
        // as empty so the error says what is missing.
        let justification =
            present("justification").map(|j| j.as_str().unwrap_or_default().to_owned());
        Ok(SandboxRequest {
            command,
            sandbox_permissions,
            justification,
            timeout: shell.timeout,
        })
    }
}
