//! How a session's process ended.

use std::fmt;

/// The exit record of a session's process: its exit code, or the signal that
/// ended it, or neither when the platform could tell neither.
///
/// The signal is kept as a number and a conventional name (`"SIGKILL"`), never
/// as `strsignal` text such as `"Killed"`.
///
/// ```
/// use dsh_pty::ExitStatus;
/// let st = ExitStatus::from_code(7);
/// assert_eq!(st.code(), Some(7));
/// assert_eq!(st.to_string(), "exited with code 7");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExitStatus {
    code: Option<i32>,
    signal: Option<i32>,
}

impl ExitStatus {
    /// A normal exit with `code`.
    pub fn from_code(code: i32) -> Self {
        ExitStatus {
            code: Some(code),
            signal: None,
        }
    }

    /// Ended by the signal numbered `signal`.
    pub fn from_signal(signal: i32) -> Self {
        ExitStatus {
            code: None,
            signal: Some(signal),
        }
    }

    /// Ended, but neither the code nor a signal is known.
    pub fn unknown() -> Self {
        ExitStatus {
            code: None,
            signal: None,
        }
    }

    /// The exit code, if the process exited normally.
    pub fn code(&self) -> Option<i32> {
        self.code
    }

    /// The number of the signal that ended the process, if one did.
    pub fn signal(&self) -> Option<i32> {
        self.signal
    }

    /// The conventional name of the signal that ended the process (`"SIGKILL"`),
    /// if one did and it has a name.
    pub fn signal_name(&self) -> Option<&'static str> {
        self.signal.and_then(crate::signal_name)
    }

    /// `true` for a normal exit with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

#[cfg(unix)]
impl From<std::process::ExitStatus> for ExitStatus {
    fn from(st: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (st.signal(), st.code()) {
            (Some(sig), _) => ExitStatus::from_signal(sig),
            (None, Some(code)) => ExitStatus::from_code(code),
            (None, None) => ExitStatus::unknown(),
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.signal, self.code) {
            (Some(sig), _) => match crate::signal_name(sig) {
                Some(name) => write!(f, "killed by signal {name}"),
                None => write!(f, "killed by signal {sig}"),
            },
            (None, Some(code)) => write!(f, "exited with code {code}"),
            (None, None) => f.write_str("exited"),
        }
    }
}
