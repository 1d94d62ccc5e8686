//! The tail watch: after a response's last write, the client socket is read every `ACK_POLL`
//! until the client has acknowledged the response's last byte (or closed, or
//! `timeline.ack_drain_ms` passed), and only then is the request handed to the pipeline.
//!
//! On a kept-alive connection the watch must not hold the connection, so it is handed to one
//! [`TailWatcher`] task that reads every watched socket on one timer: a response costs a channel
//! send and its readings, not a task, a timer and a wake-up of its own per reading. On a
//! connection that closes after the response, `logging` watches it itself ([`watch_here`]):
//! closing the socket would end the watch before the client acknowledged the tail.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use pingora::protocols::SocketDigest;
use tokentap_record::ack::ACK_POLL;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::body::sample_socket;
use crate::pipeline::{CompletedRequest, FinalizeQueue};

/// One response whose tail is being watched.
pub(crate) struct TailWatch {
    /// The client socket, identified by its cookie (`SO_COOKIE`): once the connection is closed
    /// and its file descriptor reused, the cookie differs and reading stops, so no other socket's
    /// counters are ever read into this record.
    pub socket: Arc<SocketDigest>,
    pub cookie: u64,
    /// Boxed: the watcher's queue moves watches around, and a request's data is about 1 KB.
    pub completed: Box<CompletedRequest>,
    pub deadline: Instant,
    /// The acknowledged count of the last reading.
    last_acked: Option<u64>,
    /// When to read next.
    due: Instant,
    /// Arrival order, to keep the heap's order total.
    seq: u64,
}

impl TailWatch {
    pub(crate) fn new(
        socket: Arc<SocketDigest>,
        cookie: u64,
        completed: Box<CompletedRequest>,
        deadline: Instant,
    ) -> Self {
        let last_acked = completed.data.ack.tail.last().map(|s| s.acked);
        Self { socket, cookie, completed, deadline, last_acked, due: Instant::now() + ACK_POLL, seq: 0 }
    }

    /// Reads the socket once; true when the watch is over (acknowledged, closed, unreadable,
    /// another socket, or past the deadline).
    fn read(&mut self) -> bool {
        let data = &mut self.completed.data;
        let reading = sample_socket(&self.socket, data.anchor.elapsed_ns(), data.chunks.handed_off_bytes);
        // A reading that changes nothing (still open, the same acknowledged count) needs no
        // proof of whose counters it read; one that does is checked (a second getsockopt).
        if let Ok(r) = &reading {
            if r.open && Some(r.sample.acked) == self.last_acked && Instant::now() < self.deadline {
                return false;
            }
        }
        // Read the cookie after the counters: if it still matches, they were this socket's.
        if self.socket.socket_cookie().ok() != Some(self.cookie) {
            return true;
        }
        let open = match reading {
            Ok(reading) => {
                data.ack.push_tail(reading.sample);
                self.last_acked = Some(reading.sample.acked);
                reading.open
            }
            Err(reason) => {
                data.ack.unavailable = Some(reason.to_string());
                return true;
            }
        };
        data.ack.drained || !open || Instant::now() >= self.deadline
    }
}

impl PartialEq for TailWatch {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}

impl Eq for TailWatch {}

impl PartialOrd for TailWatch {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TailWatch {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// Watches a closing connection's tail in the calling task, then submits the request.
pub(crate) async fn watch_here(mut watch: TailWatch, finalize: &FinalizeQueue) {
    loop {
        tokio::time::sleep(ACK_POLL).await;
        if watch.read() {
            break;
        }
    }
    finalize.submit_boxed(watch.completed);
}

/// The task that watches the tails of kept-alive connections, started on first use in the
/// proxy's runtime.
pub(crate) struct TailWatcher {
    finalize: FinalizeQueue,
    tx: OnceLock<UnboundedSender<TailWatch>>,
}

impl TailWatcher {
    pub(crate) fn new(finalize: FinalizeQueue) -> Self {
        Self { finalize, tx: OnceLock::new() }
    }

    /// Hands a watch to the task (starting it in the current runtime the first time). When the
    /// task is gone (the runtime is shutting down), the request is submitted as it is.
    pub(crate) fn watch(&self, watch: TailWatch) {
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = unbounded_channel();
            tokio::spawn(run(rx, self.finalize.clone()));
            tx
        });
        if let Err(returned) = tx.send(watch) {
            self.finalize.submit_boxed(returned.0.completed);
        }
    }
}

/// Reads each watched socket when it is due, on one timer. Every watch is read `ACK_POLL` after
/// it arrived or was last read, so a watch that arrives while the task sleeps is never due
/// before the timer already set: the task sleeps until the earliest due watch and takes new
/// ones when it wakes, and waits on the channel only when it watches nothing.
async fn run(mut rx: UnboundedReceiver<TailWatch>, finalize: FinalizeQueue) {
    let mut watching: BinaryHeap<Reverse<TailWatch>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut take = |watching: &mut BinaryHeap<Reverse<TailWatch>>, mut watch: TailWatch| {
        seq += 1;
        watch.seq = seq;
        watching.push(Reverse(watch));
    };
    loop {
        match watching.peek().map(|w| w.0.due) {
            Some(due) => tokio::time::sleep_until(due.into()).await,
            None => match rx.recv().await {
                Some(watch) => take(&mut watching, watch),
                None => return,
            },
        }
        while let Ok(watch) = rx.try_recv() {
            take(&mut watching, watch);
        }
        let now = Instant::now();
        while watching.peek().is_some_and(|w| w.0.due <= now) {
            let Some(Reverse(mut watch)) = watching.pop() else { break };
            if watch.read() {
                finalize.submit_boxed(watch.completed);
            } else {
                watch.due = now + ACK_POLL;
                watching.push(Reverse(watch));
            }
        }
    }
}
