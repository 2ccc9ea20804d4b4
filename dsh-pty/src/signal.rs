//! Signals a session can deliver, and the names of signals that end a process.

use std::fmt;

/// A signal that can be sent to the terminal's foreground process group.
///
/// The set is what a terminal user can produce (Ctrl-C, Ctrl-Z, hang-up) plus
/// the two termination signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Signal {
    /// `SIGINT`, what Ctrl-C sends.
    Interrupt,
    /// `SIGTERM`, a polite request to end.
    Terminate,
    /// `SIGKILL`, which cannot be caught.
    Kill,
    /// `SIGHUP`, the terminal hung up.
    Hangup,
    /// `SIGTSTP`, what Ctrl-Z sends.
    TerminalStop,
    /// `SIGCONT`: a stopped process goes on.
    Continue,
}

impl Signal {
    /// The conventional name, e.g. `"SIGINT"`.
    ///
    /// ```
    /// assert_eq!(dsh_pty::Signal::Kill.name(), "SIGKILL");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
            Signal::Kill => "SIGKILL",
            Signal::Hangup => "SIGHUP",
            Signal::TerminalStop => "SIGTSTP",
            Signal::Continue => "SIGCONT",
        }
    }

    /// The platform's signal number.
    #[cfg(unix)]
    pub fn number(self) -> i32 {
        match self {
            Signal::Interrupt => libc::SIGINT,
            Signal::Terminate => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
            Signal::Hangup => libc::SIGHUP,
            Signal::TerminalStop => libc::SIGTSTP,
            Signal::Continue => libc::SIGCONT,
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The conventional name (`"SIGKILL"`, `"SIGSEGV"`, ...) of a signal number on
/// this platform, or `None` for a number without a standard name.
///
/// ```
/// # #[cfg(unix)] {
/// assert_eq!(dsh_pty::signal_name(9), Some("SIGKILL"));
/// assert_eq!(dsh_pty::signal_name(15), Some("SIGTERM"));
/// # }
/// ```
#[cfg(unix)]
pub fn signal_name(number: i32) -> Option<&'static str> {
    use nix::sys::signal::Signal as NixSignal;
    NixSignal::try_from(number).ok().map(NixSignal::as_str)
}

/// The conventional name of a signal number; no platform without Unix signals has any.
#[cfg(not(unix))]
pub fn signal_name(_number: i32) -> Option<&'static str> {
    None
}
