//! What the tool knows about the shell process itself, from the backend's
//! [`Foreground`]: its process group, and the program it ran when it first
//! sat at its prompt, so that a later look tells whether another program
//! replaced it (`exec`) or it is stopped.

use std::path::PathBuf;

use dsh_pty::Foreground;

/// The shell's own process group and program, learned while the shell sat
/// at its first prompt.
#[derive(Debug, Clone)]
pub(crate) struct Home {
    pgid: i32,
    program: Option<PathBuf>,
}

impl Home {
    /// The shell as `fg`, a look taken at its first prompt, shows it.
    pub(crate) fn new(fg: &Foreground) -> Home {
        Home {
            pgid: fg.pgid,
            program: fg.leader.as_ref().and_then(|l| l.program.clone()),
        }
    }

    /// Whether the shell itself is in front in `fg`.
    pub(crate) fn in_front(&self, fg: &Foreground) -> bool {
        fg.pgid == self.pgid
    }

    /// `true` when the shell's process now runs another program; `false`
    /// where the backend cannot tell.
    pub(crate) fn replaced(&self, fg: &Foreground) -> bool {
        let now = fg.leader.as_ref().and_then(|l| l.program.as_ref());
        matches!((&self.program, now), (Some(then), Some(now)) if then != now)
    }
}

/// `true` when `fg` shows the shell's program stopped (`kill -STOP $$`).
pub(crate) fn stopped(fg: &Foreground) -> bool {
    fg.leader.as_ref().is_some_and(|l| l.stopped)
}

/// Whether the group in front of `fg` may be reading the terminal: it is,
/// or the backend cannot tell (then a prompt seen is trusted).
pub(crate) fn may_read(fg: &Foreground) -> bool {
    fg.waiting_for_input.unwrap_or(true)
}
