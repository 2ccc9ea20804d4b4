//! Allocating a pseudo-terminal pair and setting its modes.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::path::PathBuf;

use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::pty::{PtyMaster, grantpt, posix_openpt, unlockpt};
use nix::sys::stat::Mode;
use nix::sys::termios::{self, LocalFlags, OutputFlags, SetArg};

use crate::{PtyError, TermSize};

/// A freshly allocated terminal: the master side (non-blocking, close-on-exec)
/// and the slave side (close-on-exec; the child gets duplicates as 0, 1, 2).
/// See [`open`] for when close-on-exec is set.
pub(crate) struct PtyPair {
    pub(crate) master: OwnedFd,
    pub(crate) slave: OwnedFd,
    pub(crate) tty_path: PathBuf,
}

pub(crate) fn open(size: TermSize, echo: bool, opost: bool) -> Result<PtyPair, PtyError> {
    // Close-on-exec from the start on Linux: no child forked by another
    // thread may inherit the master (it would keep the terminal open, hide
    // EOF, and hand one owner's terminal to another's confined shell).
    // Elsewhere `posix_openpt` takes no O_CLOEXEC: it is set on the next
    // line, and a fork by another thread in between could inherit it.
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | CLOEXEC_AT_OPEN)
        .map_err(|e| PtyError::OpenPty(e.into()))?;
    // Where `posix_openpt` takes no O_CLOEXEC, set it at once.
    set_cloexec(&master)?;
    grantpt(&master).map_err(|e| PtyError::OpenPty(e.into()))?;
    unlockpt(&master).map_err(|e| PtyError::OpenPty(e.into()))?;
    let tty_path = slave_name(&master)?;
    let slave: OwnedFd = nix::fcntl::open(
        &tty_path,
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map(|fd| {
        // SAFETY: `open` just returned this descriptor and nothing else owns it.
        unsafe { OwnedFd::from_raw_fd(fd) }
    })
    .map_err(|e| PtyError::OpenPty(e.into()))?;

    let mut modes = termios::tcgetattr(&slave).map_err(|e| PtyError::OpenPty(e.into()))?;
    modes.local_flags.set(LocalFlags::ECHO, echo);
    modes.output_flags.set(OutputFlags::OPOST, opost);
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos"))]
    modes.input_flags.insert(termios::InputFlags::IUTF8);
    termios::tcsetattr(&slave, SetArg::TCSANOW, &modes).map_err(|e| PtyError::OpenPty(e.into()))?;

    // SAFETY: `into_raw_fd` hands over sole ownership of the open descriptor.
    let master = unsafe { OwnedFd::from_raw_fd(master.into_raw_fd()) };
    set_size(&master, size)?;
    let flags =
        fcntl(master.as_raw_fd(), FcntlArg::F_GETFL).map_err(|e| PtyError::OpenPty(e.into()))?;
    fcntl(
        master.as_raw_fd(),
        FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )
    .map_err(|e| PtyError::OpenPty(e.into()))?;
    Ok(PtyPair {
        master,
        slave,
        tty_path,
    })
}

/// Linux's `posix_openpt` passes its flags to `open("/dev/ptmx")`; other
/// systems reject flags they do not know.
#[cfg(any(target_os = "linux", target_os = "android"))]
const CLOEXEC_AT_OPEN: OFlag = OFlag::O_CLOEXEC;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const CLOEXEC_AT_OPEN: OFlag = OFlag::empty();

fn set_cloexec(fd: &PtyMaster) -> Result<(), PtyError> {
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map(drop)
        .map_err(|e| PtyError::OpenPty(e.into()))
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn slave_name(master: &PtyMaster) -> Result<PathBuf, PtyError> {
    nix::pty::ptsname_r(master)
        .map(PathBuf::from)
        .map_err(|e| PtyError::OpenPty(e.into()))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn slave_name(master: &PtyMaster) -> Result<PathBuf, PtyError> {
    static PTSNAME_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = PTSNAME_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: `ptsname` returns a pointer into static storage; spawns are
    // serialised by `PTSNAME_LOCK` so no other thread of this crate races it.
    unsafe { nix::pty::ptsname(master) }
        .map(PathBuf::from)
        .map_err(|e| PtyError::OpenPty(e.into()))
}

/// Sets the window size of the terminal behind `fd` (master or slave).
pub(crate) fn set_size(fd: &impl AsFd, size: TermSize) -> Result<(), PtyError> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` from the pointer, which is valid
    // for the duration of the call; the descriptor is borrowed and open.
    let rc = unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), libc::TIOCSWINSZ, &ws) };
    if rc == -1 {
        return Err(PtyError::io(
            "resizing the terminal",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// The input modes the terminal of master `fd` is in now (on Linux and the
/// BSDs the master reports its terminal's modes): `None` when they cannot
/// be read.
pub(crate) fn input_mode(fd: std::os::fd::BorrowedFd<'_>) -> Option<crate::InputMode> {
    use nix::sys::termios::LocalFlags;
    let modes = nix::sys::termios::tcgetattr(fd).ok()?;
    Some(crate::InputMode::new(
        modes.local_flags.contains(LocalFlags::ICANON),
        modes.local_flags.contains(LocalFlags::ECHO),
    ))
}

/// Discards the input queue of the terminal at `tty` (`tcflush(TCIFLUSH)`):
/// on its slave side, opened for the purpose without becoming anyone's
/// controlling terminal; the master's queue is the other direction.
pub(crate) fn flush_input(tty: &std::path::Path) -> Result<(), PtyError> {
    let what = "discarding the terminal's unread input";
    let fd = nix::fcntl::open(
        tty,
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| PtyError::io(what, e))?;
    // SAFETY: `open` just returned this descriptor and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    termios::tcflush(&fd, termios::FlushArg::TCIFLUSH).map_err(|e| PtyError::io(what, e))
}
