//! Sharing process-table readings while many sessions end at once.

/// While a guard is alive, the graceful signals that end a session's tree
/// may use a reading of the process table that ended up to 10 ms ago
/// instead of reading `/proc` again, so ending a thousand sessions at once (a
/// pool closing) reads it every few milliseconds rather than a thousand
/// times. Take one around a batch of `PtySession::end` calls and drops;
/// without one (and always for the final `SIGKILL` and for deciding that a
/// session is empty) a call only uses a reading begun after it asked. A
/// no-op where there is no `/proc`.
///
/// ```
/// let guard = dsh_pty::SharedScans::new();
/// // ... end many sessions concurrently ...
/// drop(guard);
/// ```
#[derive(Debug)]
#[must_use = "sharing lasts as long as the guard"]
pub struct SharedScans(());

impl SharedScans {
    /// Starts sharing readings until the guard is dropped.
    pub fn new() -> SharedScans {
        #[cfg(unix)]
        crate::unix::procfs::SHARING.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        SharedScans(())
    }
}

impl Default for SharedScans {
    fn default() -> Self {
        SharedScans::new()
    }
}

impl Drop for SharedScans {
    fn drop(&mut self) {
        #[cfg(unix)]
        crate::unix::procfs::SHARING.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}
