//! The tool call's arguments as a type.

use serde::Deserialize;
use serde_json::Value;

use crate::ShellError;

/// The arguments of one call: `{"command": "..."}`.
///
/// ```
/// use dsh_shell_persistent::ShellRequest;
/// let request: ShellRequest = serde_json::from_str(r#"{"command": "ls -la"}"#).unwrap();
/// assert_eq!(request.command, "ls -la");
/// assert_eq!(ShellRequest::new("pwd").command, "pwd");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[non_exhaustive]
pub struct ShellRequest {
    /// The command line to run.
    pub command: String,
}

impl ShellRequest {
    /// A request to run `command`.
    pub fn new(command: impl Into<String>) -> Self {
        ShellRequest {
            command: command.into(),
        }
    }

    /// The request in the model's JSON arguments; anything but a non-empty
    /// string `command` is [`ShellError::EmptyCommand`]. Other members are
    /// ignored (hosts add their own, such as the sandbox's).
    pub fn from_json(args: &Value) -> Result<Self, ShellError> {
        command_of(args).map(ShellRequest::new)
    }
}

/// The `command` of the model's JSON arguments, borrowed: a non-empty string
/// or [`ShellError::EmptyCommand`].
pub(crate) fn command_of(args: &Value) -> Result<&str, ShellError> {
    args.get("command")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .ok_or(ShellError::EmptyCommand)
}
