//! The stream of output chunks a session produces.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::mpsc;

/// The raw output of a session, chunk by chunk, in order.
///
/// It ends (`None`) once the terminal reached end-of-file, or once the program
/// exited and the drain grace passed while another process still held the
/// terminal. Every chunk is also recorded in the session's scrollback; the
/// stream applies backpressure, so a consumer that stops reading eventually
/// stops the program at its next write, as a real terminal would, unless it
/// said so first with [`OutputStream::discard`].
///
/// It implements [`futures_core::Stream`]; [`OutputStream::recv`] is the same
/// without any extension trait.
#[derive(Debug)]
pub struct OutputStream {
    rx: mpsc::Receiver<Bytes>,
    gate: Arc<Gate>,
}

/// Whether the session queues its output for the stream or drops it, shared
/// by the stream and the session's pump.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    discarding: AtomicBool,
    /// Bytes dropped since the stream last asked.
    dropped: AtomicU64,
}

impl Gate {
    /// Whether the pump should drop `chunk` rather than queue it; counts it
    /// if so.
    pub(crate) fn drops(&self, chunk: &Bytes) -> bool {
        let drop = self.discarding.load(Ordering::SeqCst);
        if drop {
            self.count(chunk);
        }
        drop
    }

    /// Counts `chunk` as dropped.
    fn count(&self, chunk: &Bytes) {
        self.dropped
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
}

impl OutputStream {
    /// The stream and the gate its pump consults.
    pub(crate) fn new(rx: mpsc::Receiver<Bytes>) -> (Self, Arc<Gate>) {
        let gate = Arc::new(Gate::default());
        (
            OutputStream {
                rx,
                gate: Arc::clone(&gate),
            },
            gate,
        )
    }

    /// The next chunk, or `None` at the end of the output.
    pub async fn recv(&mut self) -> Option<Bytes> {
        self.rx.recv().await
    }

    /// A chunk that is ready now, without waiting.
    pub fn try_recv(&mut self) -> Option<Bytes> {
        self.rx.try_recv().ok()
    }

    /// Stops queueing output for this stream: until
    /// [`OutputStream::deliver`], what the program prints is recorded in the
    /// scrollback and dropped, so a program that keeps printing while nobody
    /// reads never blocks in `write(2)`. What is queued now is dropped too.
    ///
    /// For a consumer that reads only at times (between an agent's tool
    /// calls): no task has to read the stream in between.
    pub fn discard(&mut self) {
        self.gate.discarding.store(true, Ordering::SeqCst);
        // Frees the queue, so a chunk the pump is waiting to queue gets its
        // place and the pump goes on to drop the next ones.
        self.drop_queued();
    }

    /// Queues output for this stream again (after [`OutputStream::discard`]),
    /// from the next chunk the program prints; what is still queued from
    /// before is dropped. Returns how many bytes were dropped since the last
    /// `deliver`.
    pub fn deliver(&mut self) -> u64 {
        self.gate.discarding.store(false, Ordering::SeqCst);
        self.drop_queued();
        self.gate.dropped.swap(0, Ordering::Relaxed)
    }

    fn drop_queued(&mut self) {
        while let Ok(chunk) = self.rx.try_recv() {
            self.gate.count(&chunk);
        }
    }
}

impl futures_core::Stream for OutputStream {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.rx.poll_recv(cx)
    }
}
