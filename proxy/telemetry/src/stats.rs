//! Export counters, shown in `/_tokentap/api/health` and as `tokentap.telemetry.*` metrics.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::spool::{self, Signal};

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Spool(#[from] spool::SpoolError),
    #[error("cannot start the export thread: {0}")]
    Thread(std::io::Error),
}

/// Why telemetry was given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The queue to the export thread was full.
    QueueFull,
    /// The collector was unreachable and the spool was full, disabled or not writable.
    SpoolFull,
    /// The collector refused the data.
    Rejected,
}

impl DropReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::SpoolFull => "spool_full",
            DropReason::Rejected => "rejected",
        }
    }
}

/// Counters of one signal (spans for traces, data points for metrics).
#[derive(Debug, Default)]
pub struct SignalCounters {
    pub exported: AtomicU64,
    pub spooled: AtomicU64,
    pub dropped_queue_full: AtomicU64,
    pub dropped_spool_full: AtomicU64,
    pub rejected: AtomicU64,
}

impl SignalCounters {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "exported": self.exported.load(Ordering::Relaxed),
            "spooled": self.spooled.load(Ordering::Relaxed),
            "dropped": {
                "queue_full": self.dropped_queue_full.load(Ordering::Relaxed),
                "spool_full": self.dropped_spool_full.load(Ordering::Relaxed),
                "rejected": self.rejected.load(Ordering::Relaxed),
            },
        })
    }
}

/// Export counters, shown in `/_tokentap/api/health` and as `tokentap.telemetry.*` metrics.
#[derive(Debug, Default)]
pub struct ExportStats {
    pub spans: SignalCounters,
    pub metric_points: SignalCounters,
    pub spool_entries: AtomicU64,
    pub spool_bytes: AtomicU64,
    pub spool_spans: AtomicU64,
    pub spool_points: AtomicU64,
    pub collector_reachable: AtomicBool,
    pub last_error: Mutex<Option<String>>,
    /// Signals whose endpoint does not take them (HTTP 404/405/415, gRPC Unimplemented), with the
    /// answer: tokentap stopped exporting them.
    pub refused: Mutex<Vec<(Signal, String)>>,
}

impl ExportStats {
    fn counters(&self, signal: Signal) -> &SignalCounters {
        match signal {
            Signal::Traces => &self.spans,
            Signal::Metrics => &self.metric_points,
        }
    }

    pub fn count_exported(&self, signal: Signal, items: u64) {
        self.counters(signal).exported.fetch_add(items, Ordering::Relaxed);
    }

    pub fn count_spooled(&self, signal: Signal, items: u64) {
        self.counters(signal).spooled.fetch_add(items, Ordering::Relaxed);
    }

    pub fn count_dropped(&self, signal: Signal, items: u64, reason: DropReason) {
        let c = self.counters(signal);
        let counter = match reason {
            DropReason::QueueFull => &c.dropped_queue_full,
            DropReason::SpoolFull => &c.dropped_spool_full,
            DropReason::Rejected => &c.rejected,
        };
        counter.fetch_add(items, Ordering::Relaxed);
    }

    /// Marks `signal` as refused by its endpoint; true the first time.
    pub fn mark_refused(&self, signal: Signal, reason: &str) -> bool {
        let mut refused = self.refused.lock();
        if refused.iter().any(|(s, _)| *s == signal) {
            return false;
        }
        refused.push((signal, reason.chars().take(300).collect()));
        true
    }

    pub fn is_refused(&self, signal: Signal) -> bool {
        self.refused.lock().iter().any(|(s, _)| *s == signal)
    }

    /// The refused signals, for the health endpoint: `{"metrics": "collector answered 405 …"}`.
    pub fn refused_json(&self) -> serde_json::Value {
        let refused = self.refused.lock();
        serde_json::Value::Object(
            refused
                .iter()
                .map(|(s, reason)| (s.as_str().to_string(), serde_json::Value::from(reason.clone())))
                .collect(),
        )
    }

    pub fn set_last_error(&self, reason: &str) {
        *self.last_error.lock() = Some(reason.chars().take(300).collect());
    }
}

/// Counters kept by the record pipeline that the metrics report (`tokentap.records.dropped`).
pub trait PipelineCounters: Send + Sync {
    /// Records dropped because the pipeline's queue was full.
    fn records_dropped(&self) -> u64;
    /// Records written without their stream analysis because the queue was backed up.
    fn records_shed(&self) -> u64;
    /// Client connections refused over the connection cap, and closed because their first
    /// request head was too slow (`tokentap.connections.refused`).
    fn connections_refused(&self) -> ConnectionRefusals {
        ConnectionRefusals::default()
    }
}

/// Client connections tokentap refused, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionRefusals {
    pub over_capacity: u64,
    /// Over the client address's share (`[connections] max_open_per_client`).
    pub over_client_share: u64,
    pub head_timeout: u64,
}
