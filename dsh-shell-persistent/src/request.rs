//! The tool call's arguments as a type.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::ShellError;

/// The arguments of one call: `{"command": "..."}`, and the host's timeout
/// for this call.
///
/// ```
/// use std::time::Duration;
/// use dsh_shell_persistent::ShellRequest;
/// let request: ShellRequest = serde_json::from_str(r#"{"command": "ls -la"}"#).unwrap();
/// assert_eq!(request.command, "ls -la");
/// assert_eq!(ShellRequest::new("pwd").command, "pwd");
/// let build = ShellRequest::new("make").timeout(Duration::from_secs(600));
/// assert_eq!(build.timeout, Some(Duration::from_secs(600)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[non_exhaustive]
pub struct ShellRequest {
    /// The command line to run.
    pub command: String,
    /// How long this call may run before the shell is killed and reset,
    /// instead of [`ShellConfig::timeout`](crate::ShellConfig::timeout)
    /// (`None`, the default: the configured one). It ends the call exactly
    /// as the configured timeout does: [`CallEnd::TimedOut`](crate::CallEnd::TimedOut)
    /// with this duration, the partial output, the reset.
    ///
    /// The host sets it, unbounded. serde neither reads nor writes it: a
    /// model's `timeout` argument is read only by
    /// [`ShellConfig::parse_request`](crate::ShellConfig::parse_request),
    /// within [`ShellConfig::timeout_parameter`](crate::ShellConfig::timeout_parameter).
    #[serde(skip)]
    pub timeout: Option<Duration>,
}

impl From<&str> for ShellRequest {
    fn from(command: &str) -> Self {
        ShellRequest::new(command)
    }
}

impl From<String> for ShellRequest {
    fn from(command: String) -> Self {
        ShellRequest::new(command)
    }
}

impl ShellRequest {
    /// A request to run `command` with the configured timeout.
    pub fn new(command: impl Into<String>) -> Self {
        ShellRequest {
            command: command.into(),
            timeout: None,
        }
    }

    /// Sets [`ShellRequest::timeout`]: this call may run for `timeout`.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The request in the model's JSON arguments; anything but a non-empty
    /// string `command` is [`ShellError::EmptyCommand`]. Other members are
    /// ignored (hosts add their own, such as the sandbox's), `timeout`
    /// included: [`ShellConfig::parse_request`](crate::ShellConfig::parse_request)
    /// reads it when the configuration offers it.
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

/// The model's `timeout` argument under a bound of `max`: absent or `null`
/// is `None`; a whole number of seconds from 1 to `max` is that many; any
/// other value is [`ShellError::InvalidTimeout`].
pub(crate) fn timeout_of(args: &Value, max: Duration) -> Result<Option<Duration>, ShellError> {
    let max_secs = max.as_secs();
    match args.get("timeout") {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .filter(|s| (1..=max_secs).contains(s))
            .map(|s| Some(Duration::from_secs(s)))
            .ok_or(ShellError::InvalidTimeout { max_secs }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_models_timeout_is_whole_seconds_within_the_bound() {
        let max = Duration::from_secs(600);
        let of = |v: Value| timeout_of(&json!({"command": "x", "timeout": v}), max);
        assert_eq!(timeout_of(&json!({"command": "x"}), max).ok(), Some(None));
        assert_eq!(of(Value::Null).ok(), Some(None));
        assert_eq!(of(json!(1)).ok(), Some(Some(Duration::from_secs(1))));
        assert_eq!(of(json!(600)).ok(), Some(Some(max)));
        for bad in [json!(0), json!(601), json!(-5), json!(2.5), json!("10")] {
            let err = of(bad.clone()).err().map(|e| e.to_string());
            assert_eq!(
                err.as_deref(),
                Some("timeout must be a whole number of seconds from 1 to 600"),
                "{bad}"
            );
        }
    }
}
