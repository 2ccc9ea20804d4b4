//! The per-session output pump shared by every backend: it moves chunks from
//! the terminal into the scrollback and the output stream (or drops them
//! while the stream discards), and ends the stream at end-of-file or a
//! bounded grace after the program exited.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};

use crate::output::Gate;
use crate::{ExitStatus, OutputStream, ScrollbackHandle, SpawnSpec};

/// Capacity of a session's output channel, in chunks.
pub(crate) const OUTPUT_CHANNEL_CHUNKS: usize = 64;

/// Where a backend's raw output comes from.
pub(crate) trait ChunkSource: Send {
    /// The next chunk, or `None` at end-of-file or on a read error.
    fn next_chunk(&mut self) -> impl Future<Output = Option<Bytes>> + Send;
}

/// Chunks handed over by a reader thread or task.
pub(crate) struct ChannelSource(pub(crate) mpsc::Receiver<Bytes>);

impl ChunkSource for ChannelSource {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        self.0.recv().await
    }
}

/// What a session keeps of its pump: the exit record's two ends (the
/// backend's waiter publishes through `status_tx`), the closing signal, the
/// output stream and the scrollback.
pub(crate) struct PumpEnds {
    pub(crate) status_tx: watch::Sender<Option<ExitStatus>>,
    pub(crate) status: watch::Receiver<Option<ExitStatus>>,
    pub(crate) closed: watch::Sender<bool>,
    pub(crate) output: OutputStream,
    pub(crate) scrollback: ScrollbackHandle,
}

/// Starts the pump of a session whose raw output comes from `source` (a
/// tokio task: call it inside a runtime), with the scrollback limits and
/// drain grace of `spec`.
pub(crate) fn start<S: ChunkSource + 'static>(source: S, spec: &SpawnSpec) -> PumpEnds {
    let (status_tx, status) = watch::channel(None);
    let (closed, closed_rx) = watch::channel(false);
    let (out_tx, out_rx) = mpsc::channel(OUTPUT_CHANNEL_CHUNKS);
    let scrollback = ScrollbackHandle::new(spec.get_scrollback());
    let (output, gate) = OutputStream::new(out_rx);
    tokio::spawn(run(
        source,
        PumpWiring {
            tx: out_tx,
            gate,
            scrollback: scrollback.clone(),
            status: status.clone(),
            closed: closed_rx,
            drain_grace: spec.get_drain_grace(),
        },
    ));
    PumpEnds {
        status_tx,
        status,
        closed,
        output,
        scrollback,
    }
}

/// The pump's wiring.
struct PumpWiring {
    tx: mpsc::Sender<Bytes>,
    /// Whether the stream's consumer asked to drop output for now.
    gate: Arc<Gate>,
    scrollback: ScrollbackHandle,
    status: watch::Receiver<Option<ExitStatus>>,
    closed: watch::Receiver<bool>,
    drain_grace: Duration,
}

/// Runs until end-of-file, until `drain_grace` after the program exited, or
/// until the session is closed.
///
/// The two ends are futures made once, not per chunk: each
/// `watch::Receiver::changed` registers and unregisters a waiter, and a
/// call's few chunks would pay that every time.
async fn run<S: ChunkSource>(mut source: S, wiring: PumpWiring) {
    let PumpWiring {
        tx,
        gate,
        scrollback,
        mut status,
        mut closed,
        drain_grace,
    } = wiring;
    let mut tx = Some(tx);
    // Either change of `closed` (a close, or its sender gone) ends the pump.
    let closed = closed.changed();
    // The program's exit (or its waiter gone), then the grace: output
    // still readable is read first.
    let drained = async {
        // The record's guard is dropped at once: it is not `Send`.
        drop(status.wait_for(Option::is_some).await);
        tokio::time::sleep(drain_grace).await;
    };
    tokio::pin!(closed, drained);
    loop {
        let chunk = tokio::select! {
            biased;
            _ = &mut closed => break,
            chunk = source.next_chunk() => chunk,
            () = &mut drained => break,
        };
        let Some(chunk) = chunk else { break };
        if gate.drops(&chunk) {
            scrollback.push_bytes(chunk);
            continue;
        }
        scrollback.push_bytes(chunk.clone());
        if let Some(sender) = &tx {
            tokio::select! {
                biased;
                _ = &mut closed => break,
                sent = sender.send(chunk) => {
                    if sent.is_err() {
                        // Nobody listens any more; keep recording the scrollback.
                        tx = None;
                    }
                }
            }
        }
    }
    tracing::trace!("output pump finished");
}

/// Waits until the exit record is published (an unknown exit if the waiter
/// went away without one).
pub(crate) async fn wait_exit(status: &watch::Receiver<Option<ExitStatus>>) -> ExitStatus {
    let mut status = status.clone();
    let reaped = status.wait_for(Option::is_some).await.ok().and_then(|s| *s);
    reaped.unwrap_or_else(ExitStatus::unknown)
}
