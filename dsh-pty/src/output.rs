//! The stream of output chunks a session produces.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::mpsc;

/// The raw output of a session, chunk by chunk, in order.
///
/// It ends (`None`) once the terminal reached end-of-file, or once the program
/// exited and the drain grace passed while another process still held the
/// terminal. Every chunk is also recorded in the session's scrollback; the
/// stream applies backpressure, so a consumer that stops reading eventually
/// stops the program at its next write, as a real terminal would.
///
/// It implements [`futures_core::Stream`]; [`OutputStream::recv`] is the same
/// without any extension trait.
#[derive(Debug)]
pub struct OutputStream {
    rx: mpsc::Receiver<Bytes>,
}

impl OutputStream {
    pub(crate) fn new(rx: mpsc::Receiver<Bytes>) -> Self {
        OutputStream { rx }
    }

    /// The next chunk, or `None` at the end of the output.
    pub async fn recv(&mut self) -> Option<Bytes> {
        self.rx.recv().await
    }

    /// A chunk that is ready now, without waiting.
    pub fn try_recv(&mut self) -> Option<Bytes> {
        self.rx.try_recv().ok()
    }
}

impl futures_core::Stream for OutputStream {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.rx.poll_recv(cx)
    }
}
