//! Telemetry export: OpenTelemetry traces and metrics over OTLP, and the Prometheus exposition.
//!
//! Architecture invariant: this folder is the only code that knows OpenTelemetry's wire format and
//! clients, and only `otlp.rs` touches them. The rest of tokentap hands over finished [`Record`]s.
//!
//! The path of one record, all off the forwarding path:
//!
//! ```text
//! finalize worker ── Telemetry::observe(&record)
//!     ├─ conventions::metric_observations ──► MetricRegistry ──► GET /metrics (prometheus.rs)
//!     │                                                      └─► OTLP metrics, every interval
//!     └─ conventions::request_spans ── try_send (bounded; full → dropped, counted)
//!                                          ▼
//!                               export thread (otlp.rs, own runtime)
//!                               batch → encode → collector │ unreachable → spool.rs → replay
//! ```
//!
//! - `conventions.rs`: record → span and metric descriptions, as plain data; the metric table.
//! - `registry.rs`: cumulative histograms and counters, shared by both exporters.
//! - `prometheus.rs`: the text exposition.
//! - `spool.rs`: encoded OTLP requests kept on disk while the collector is unreachable.
//! - `otlp.rs`: OTLP messages, the HTTP/protobuf and gRPC clients, the export thread.

pub mod conventions;
mod otlp;
pub mod prometheus;
pub mod registry;
pub mod spool;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::{MetricsConfig, OtlpProtocol, OtlpSettings};
use crate::finalize::PipelineStats;
use crate::record::Record;
use conventions::{attr, Labels, MetricId, Objectives, SpanOptions, SpanPlan};
use registry::{MetricRegistry, MetricSnapshot};
use spool::{Signal, Spool};

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
    fn as_str(self) -> &'static str {
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
    fn json(&self) -> serde_json::Value {
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
    last_error: Mutex<Option<String>>,
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

    pub fn set_last_error(&self, reason: &str) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.chars().take(300).collect());
    }
}

/// tokentap's telemetry: the metric registry, and the OTLP export when configured.
pub struct Telemetry {
    registry: MetricRegistry,
    objectives: Objectives,
    span_options: SpanOptions,
    pipeline: Arc<PipelineStats>,
    spans_tx: Option<SyncSender<Vec<SpanPlan>>>,
    /// Where each signal goes (for the health endpoint; never the headers).
    otlp_summary: Option<serde_json::Value>,
    prometheus_enabled: bool,
    pub stats: ExportStats,
    /// Start of the cumulative metrics, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// `service.instance.id` of this process.
    pub instance_id: String,
}

fn target_summary(target: &Option<crate::config::OtlpTarget>) -> serde_json::Value {
    match target {
        Some(t) => serde_json::json!({
            "endpoint": t.endpoint,
            "protocol": match t.protocol { OtlpProtocol::Grpc => "grpc", OtlpProtocol::HttpProtobuf => "http/protobuf" },
        }),
        None => serde_json::Value::Null,
    }
}

impl Telemetry {
    /// Builds the registry and, when `otlp` is set, opens the spool and starts the export thread.
    pub fn start(
        metrics: &MetricsConfig,
        slo: &crate::config::SloConfig,
        otlp: Option<OtlpSettings>,
        capture_content: bool,
        pipeline: Arc<PipelineStats>,
    ) -> Result<Arc<Telemetry>, ExportError> {
        let objectives: Objectives = slo.clone();
        let span_options = SpanOptions {
            max_events_per_span: otlp.as_ref().map_or(64, |o| o.max_events_per_span),
            capture_content: capture_content && otlp.as_ref().is_some_and(|o| o.capture_content),
            ..SpanOptions::default()
        };
        let start_unix_ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        let mut telemetry = Telemetry {
            registry: MetricRegistry::new(metrics.max_series_per_metric),
            objectives,
            span_options,
            pipeline,
            spans_tx: None,
            otlp_summary: None,
            prometheus_enabled: metrics.prometheus,
            stats: ExportStats::default(),
            start_unix_ns,
            instance_id: crate::trace::random_hex(16),
        };
        let Some(settings) = otlp else { return Ok(Arc::new(telemetry)) };

        telemetry.stats.collector_reachable.store(true, Ordering::Relaxed);
        telemetry.otlp_summary = Some(serde_json::json!({
            "traces": target_summary(&settings.traces),
            "metrics": target_summary(&settings.metrics),
            "spool_dir": settings.spool_dir,
        }));
        let spool = if settings.spool_max_bytes > 0 {
            Some(Spool::open(&settings.spool_dir, settings.spool_max_bytes)?)
        } else {
            None
        };
        let (tx, rx) = sync_channel(settings.queue_capacity);
        if settings.traces.is_some() {
            telemetry.spans_tx = Some(tx);
        }
        let telemetry = Arc::new(telemetry);
        let for_thread = telemetry.clone();
        std::thread::Builder::new()
            .name("tokentap-otlp".into())
            .spawn(move || otlp::run(for_thread, settings, spool, rx))
            .map_err(ExportError::Thread)?;
        Ok(telemetry)
    }

    /// Takes a finished record: adds it to the metrics and queues its spans for export. Never
    /// blocks; when the export queue is full the spans are dropped and counted.
    pub fn observe(&self, record: &Record) {
        self.registry.record(&conventions::metric_observations(record, &self.objectives));
        if let Some(tx) = &self.spans_tx {
            let spans = conventions::request_spans(record, &self.span_options);
            let n = spans.len() as u64;
            if n == 0 {
                return;
            }
            match tx.try_send(spans) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    self.stats.count_dropped(Signal::Traces, n, DropReason::QueueFull);
                }
            }
        }
    }

    /// Takes a record that a browser report has just joined: queues the browser's spans (the
    /// request's own spans and metrics went out when the record was first built).
    pub fn observe_browser(&self, record: &Record) {
        self.registry.record(&conventions::rebuffer_observation(record, "browser").into_iter().collect::<Vec<_>>());
        if let Some(tx) = &self.spans_tx {
            let spans = conventions::browser_spans(record, &self.span_options);
            let n = spans.len() as u64;
            if n > 0 && tx.try_send(spans).is_err() {
                self.stats.count_dropped(Signal::Traces, n, DropReason::QueueFull);
            }
        }
    }

    /// The metrics, with the counters kept elsewhere (finalize queue, export) brought up to date.
    pub fn metrics_snapshot(&self) -> Vec<MetricSnapshot> {
        let dropped = self.pipeline.dropped.load(Ordering::Relaxed);
        self.registry.set_counter(MetricId::RecordsDropped, &Vec::new(), dropped);
        for (signal, counters) in [(Signal::Traces, &self.stats.spans), (Signal::Metrics, &self.stats.metric_points)] {
            let labels: Labels = vec![(attr::SIGNAL, signal.as_str().to_string())];
            self.registry.set_counter(MetricId::TelemetryExported, &labels, counters.exported.load(Ordering::Relaxed));
            self.registry.set_counter(MetricId::TelemetrySpooled, &labels, counters.spooled.load(Ordering::Relaxed));
            for (reason, counter) in [
                (DropReason::QueueFull, &counters.dropped_queue_full),
                (DropReason::SpoolFull, &counters.dropped_spool_full),
                (DropReason::Rejected, &counters.rejected),
            ] {
                let mut labels = labels.clone();
                labels.push((attr::DROP_REASON, reason.as_str().to_string()));
                self.registry.set_counter(MetricId::TelemetryDropped, &labels, counter.load(Ordering::Relaxed));
            }
        }
        self.registry.snapshot()
    }

    /// The Prometheus text exposition, or `None` when `[metrics] prometheus = false`.
    pub fn prometheus_text(&self) -> Option<String> {
        self.prometheus_enabled.then(|| prometheus::render(&self.metrics_snapshot()))
    }

    /// The `telemetry` section of `/_tokentap/api/health`.
    pub fn health_json(&self) -> serde_json::Value {
        let s = &self.stats;
        serde_json::json!({
            "prometheus": self.prometheus_enabled,
            "metric_series_folded": self.registry.folded(),
            "otlp": match &self.otlp_summary {
                None => serde_json::Value::Null,
                Some(summary) => serde_json::json!({
                    "targets": summary,
                    "collector_reachable": s.collector_reachable.load(Ordering::Relaxed),
                    "last_error": s.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                    "spans": s.spans.json(),
                    "metric_points": s.metric_points.json(),
                    "spool": {
                        "entries": s.spool_entries.load(Ordering::Relaxed),
                        "bytes": s.spool_bytes.load(Ordering::Relaxed),
                        "spans": s.spool_spans.load(Ordering::Relaxed),
                        "metric_points": s.spool_points.load(Ordering::Relaxed),
                    },
                }),
            },
        })
    }
}
