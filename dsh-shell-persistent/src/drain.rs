//! The shell's output between calls.
//!
//! A call reads the terminal while it runs. Between calls nobody would, and
//! the session's output channel is bounded: a job left running with `&`
//! that writes to the terminal (a dev server's request log, a watcher, a
//! counter) would fill the channel and the terminal's buffer and block in
//! `write(2)` until the next call. So between calls a task reads the stream
//! and drops what it reads. Nothing printed between calls reaches the next
//! call's output (its start marker separates it anyway); the session's
//! scrollback keeps the raw bytes, within its bound.
//!
//! The task wakes only when output arrives: an idle shell whose jobs print
//! nothing costs no wake-up.

use dsh_pty::OutputStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A shell's output stream between calls, drained by a task.
#[derive(Debug)]
pub(crate) enum Reader {
    /// A task drains it until it is asked to give it back.
    Draining {
        stop: oneshot::Sender<()>,
        task: JoinHandle<OutputStream>,
    },
    /// A call holds it (or the shell is starting), or the task that
    /// drained it did not give it back (the runtime is shutting down).
    Gone,
}

impl Reader {
    /// Hands `stream` to a task that reads it and drops what it reads until
    /// [`Reader::hold`] asks for it back, or until it ends.
    pub(crate) fn park(&mut self, mut stream: OutputStream) {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut dropped: u64 = 0;
            loop {
                tokio::select! {
                    biased;
                    _ = &mut stopped => break,
                    chunk = stream.recv() => match chunk {
                        Some(chunk) => dropped += chunk.len() as u64,
                        None => break,
                    },
                }
            }
            if dropped > 0 {
                tracing::debug!(bytes = dropped, "output between calls dropped");
            }
            stream
        });
        *self = Reader::Draining { stop, task };
    }

    /// The stream, for a call: the draining task stopped and its stream
    /// taken back. `None` when it is gone.
    pub(crate) async fn hold(&mut self) -> Option<OutputStream> {
        match std::mem::replace(self, Reader::Gone) {
            Reader::Draining { stop, task } => {
                let _ = stop.send(());
                task.await.ok()
            }
            Reader::Gone => None,
        }
    }
}
