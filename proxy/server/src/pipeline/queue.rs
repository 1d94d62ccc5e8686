//! The bounded queue between the forwarding path and the record worker: what a finished request
//! hands over, and the handle that submits it without ever blocking.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use crate::request_data::{OpenRequest, RequestData};
use tokentap_record::browser::ProbeReport;
use tokentap_record::{ErrorInfo, Outcome, Record};

use super::stats::PipelineStats;

/// A request that ended: its data, moved whole out of the request context, and how it ended.
pub(crate) struct CompletedRequest {
    pub data: RequestData,
    pub outcome: Outcome,
    pub error: Option<ErrorInfo>,
    /// Written without stream analysis (overload).
    pub shed: bool,
}

/// A callback that sees every finished record (the demo prints a summary line with it).
pub(crate) type RecordObserver = Box<dyn Fn(&Record) + Send + 'static>;

/// What the worker is handed.
pub(crate) enum WorkItem {
    /// A proxied request that ended.
    Request(Box<CompletedRequest>),
    /// A browser probe report to join to its request's record.
    BrowserReport(Box<ProbeReport>),
    /// Close every open turn (shutdown) and say when done.
    CloseTurns(SyncSender<()>),
}

/// Why a probe report was refused at ingest (counted in the pipeline's stats).
#[derive(Debug, Clone, Copy)]
pub(crate) enum RefusedReport {
    TraceFull,
    OverBudget,
}

/// The sending side of the finalize queue, owned by the proxy.
#[derive(Clone)]
pub(crate) struct FinalizeQueue {
    pub(super) tx: SyncSender<WorkItem>,
    pub(super) stats: Arc<PipelineStats>,
    /// Queue depth from which detail is shed (half the capacity).
    pub(super) shed_from: u64,
}

impl FinalizeQueue {
    /// Counts a request retried on a fresh connection after a stale pooled one.
    pub(crate) fn count_stale_connection_retry(&self) {
        self.stats.stale_connection_retries.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an upstream newly found to close kept-alive connections right after answering.
    pub(crate) fn count_peer_closing_after_answer(&self) {
        self.stats.peers_closing_after_answer.fetch_add(1, Ordering::Relaxed);
    }

    /// The budget of bytes all requests keep for analysis.
    pub(crate) fn kept_budget(&self) -> Arc<crate::timeline::KeptBudget> {
        self.stats.kept.clone()
    }

    /// Counts a routed request as open until its record is stored.
    /// Whether SIGTERM started the drain.
    pub(crate) fn shutting_down(&self) -> bool {
        self.stats.shutting_down.load(Ordering::Acquire)
    }

    pub(crate) fn open_request(&self) -> OpenRequest {
        OpenRequest::new(&self.stats.open_requests)
    }

    /// Hands a completed request to the worker without waiting. Boxed: the tail watcher keeps
    /// them boxed, so that its queue moves pointers, not kilobytes.
    pub(crate) fn submit_boxed(&self, mut completed: Box<CompletedRequest>) {
        self.stats.submitted.fetch_add(1, Ordering::Relaxed);
        if self.backed_up() {
            // Release the kept bytes now: memory under overload is the stamps, not the bodies.
            completed.shed = true;
            completed.data.chunks.body.shed();
            completed.data.request_body.shed();
        }
        // Counted as queued before it is sent: the worker counts it out as soon as it receives
        // it, and must never see the count below zero (it would read as a huge backlog and shed).
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        if self.tx.try_send(WorkItem::Request(completed)).is_err() {
            self.stats.queued.fetch_sub(1, Ordering::Relaxed);
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn backed_up(&self) -> bool {
        self.stats.queued.load(Ordering::Relaxed) >= self.shed_from
    }

    /// Counts a probe report refused at ingest by its trace's cap or the budget of all clients.
    pub(crate) fn count_refused_report(&self, why: RefusedReport) {
        match why {
            RefusedReport::TraceFull => &self.stats.browser_trace_full,
            RefusedReport::OverBudget => &self.stats.browser_over_budget,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// Asks the worker to close every open turn and waits for it, at most `timeout` (shutdown).
    pub(crate) fn close_turns(&self, timeout: Duration) {
        let (done_tx, done_rx) = sync_channel(1);
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        if self.tx.try_send(WorkItem::CloseTurns(done_tx)).is_err() {
            self.stats.queued.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!("record queue full at shutdown: open turns are not written");
            return;
        }
        if done_rx.recv_timeout(timeout).is_err() {
            tracing::warn!(?timeout, "open turns not closed in time");
        }
    }

    /// Hands a validated probe report to the worker without waiting; false when the queue is full.
    pub(crate) fn submit_report(&self, report: ProbeReport) -> bool {
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        match self.tx.try_send(WorkItem::BrowserReport(Box::new(report))) {
            Ok(()) => {
                self.stats.browser_reports.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.stats.queued.fetch_sub(1, Ordering::Relaxed);
                false
            }
        }
    }
}
