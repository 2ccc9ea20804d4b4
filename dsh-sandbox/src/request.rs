//! The sandboxed shell's arguments as a type.

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
}

impl SandboxRequest {
    /// A request to run `command` in the owner's mode.
    pub fn new(command: impl Into<String>) -> Self {
        SandboxRequest {
            command: command.into(),
            sandbox_permissions: None,
            justification: None,
        }
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
    /// each wrong shape.
    pub fn from_json(args: &Value) -> Result<Self, SandboxError> {
        let command = dsh_shell_persistent::ShellRequest::from_json(args)?.command;
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
        })
    }
}
