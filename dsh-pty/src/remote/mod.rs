//! What backends whose programs run elsewhere (a container, another host)
//! need to reach a session's processes there: a POSIX `sh` script, run next
//! to them with the session's user, that finds and signals them through
//! that side's `/proc`.
//!
//! Every process of a session carries [`TAG_VAR`]`=<random tag>` in its
//! environment: the backend sets it on the program it starts, and
//! everything the program starts inherits it, including processes that
//! `setsid` or double-fork away from the terminal's session. The script
//! finds the session leader (the tagged process that leads its terminal
//! session and whose parent is not tagged), then treats as members every live process that is
//! tagged *or* belongs to the leader's terminal session. A process that both
//! leaves the session and clears its environment escapes it.
//!
//! A backend starts the program with [`command_line`], the one prologue
//! (directory, environment, tag) every remote backend shares.
//!
//! [`RemoteSession`] is such a session, written once: an engine supplies a
//! [`RemoteLink`] (run a script to completion, start a helper with piped
//! input and output, write to and resize the terminal, close it) and the
//! terminal's [`TerminalOutput`] (its bytes, then how the program ended or
//! why the transport broke); the session does the rest with the scripts
//! here.

mod link;
mod probe;
mod prologue;
mod ran;
mod scripts;
mod session;

pub use link::{Ended, Helper, LocalView, RemoteLink, TerminalOutput};
pub use prologue::command_line;
pub use ran::Ran;
pub use scripts::{FOREGROUND_SCRIPT, SCRATCH_SCRIPT, TREE_SCRIPT, scratch_dir};
pub use session::RemoteSession;

/// The environment variable that tags a session's processes.
pub const TAG_VAR: &str = "DSH_TREE";

/// A new random session tag: 16 hexadecimal digits.
pub fn new_tag() -> Result<String, crate::PtyError> {
    crate::random::random_hex(16).map_err(|source| crate::PtyError::Io {
        what: "drawing a random session tag",
        source,
    })
}
