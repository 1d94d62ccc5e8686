//! [`Telemetry`]: what tokentap's record pipeline talks to. It takes finished records, keeps the
//! metrics and hands spans to the export thread.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

use tokentap_record::{Record, SloConfig};

use crate::conventions::{self, MetricId, SpanOptions};
use crate::metrics::Metrics;
use crate::otlp::ExportItem;
use crate::registry::{MetricRegistry, MetricSnapshot, ObservedSources};
use crate::settings::{BackendProfile, LlmSpan, MetricsConfig, OtlpProtocol, OtlpSettings, OtlpTarget};
use crate::spool::{Signal, Spool};
use crate::stats::{DropReason, ExportError, ExportStats};
use crate::{otlp, prometheus, spans};

pub use crate::stats::{ConnectionRefusals, PipelineCounters};

/// tokentap's telemetry: the metrics, and the OTLP export when configured.
pub struct Telemetry {
    metrics: Arc<Metrics>,
    span_options: SpanOptions,
    /// To the export thread (when OTLP export is on).
    export_tx: Option<SyncSender<ExportItem>>,
    /// Whether spans are exported (traces may be off while metrics go out).
    traces_on: bool,
    /// Where each signal goes (for the health endpoint; never the headers).
    otlp_summary: Option<serde_json::Value>,
    /// The backend profile of the export.
    profile: BackendProfile,
    prometheus_enabled: bool,
}

fn target_summary(target: &Option<OtlpTarget>) -> serde_json::Value {
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
        metrics_config: &MetricsConfig,
        slo: &SloConfig,
        otlp: Option<OtlpSettings>,
        capture_content: bool,
        pipeline: Arc<dyn PipelineCounters>,
    ) -> Result<Arc<Telemetry>, ExportError> {
        let span_options = SpanOptions {
            max_events_per_span: otlp.as_ref().map_or(64, |o| o.max_events_per_span),
            capture_content: capture_content && otlp.as_ref().is_some_and(|o| o.capture_content),
            ..SpanOptions::default()
        }
        .for_profile(
            otlp.as_ref().map_or(BackendProfile::Generic, |o| o.profile),
            otlp.as_ref().map_or(LlmSpan::Tokentap, |o| o.llm_span),
        );
        let instance_id = tokentap_record::trace::random_hex(16);
        let stats = Arc::new(ExportStats::default());
        let otlp_resource = otlp
            .as_ref()
            .filter(|o| o.metrics.is_some())
            .map(|o| spans::sdk_resource(&spans::resource_pairs(o, &instance_id)));
        let metrics = Arc::new(Metrics {
            registry: MetricRegistry::new(
                metrics_config.max_series_per_metric,
                otlp_resource,
                ObservedSources { pipeline, stats: stats.clone() },
            ),
            objectives: slo.clone(),
            stats,
            instance_id,
        });
        let mut telemetry = Telemetry {
            metrics: metrics.clone(),
            span_options,
            export_tx: None,
            traces_on: false,
            otlp_summary: None,
            profile: otlp.as_ref().map_or(BackendProfile::Generic, |o| o.profile),
            prometheus_enabled: metrics_config.prometheus,
        };
        let Some(settings) = otlp else { return Ok(Arc::new(telemetry)) };

        metrics.stats.collector_reachable.store(true, Ordering::Relaxed);
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
        // The sender lives as long as `Telemetry`, so the export thread runs for metrics-only
        // export too.
        let (tx, rx) = sync_channel(settings.queue_capacity);
        telemetry.traces_on = settings.traces.is_some();
        telemetry.export_tx = Some(tx);
        std::thread::Builder::new()
            .name("tokentap-otlp".into())
            .spawn(move || otlp::run(metrics, settings, spool, rx))
            .map_err(ExportError::Thread)?;
        Ok(Arc::new(telemetry))
    }

    fn spans_tx(&self) -> Option<&SyncSender<ExportItem>> {
        self.export_tx.as_ref().filter(|_| self.traces_on)
    }

    /// Exports what is queued now (spans waiting for their batch, the metrics) and waits for it,
    /// at most `timeout`. For shutdown; a dead collector makes it spool, never hang.
    pub fn flush(&self, timeout: std::time::Duration) {
        let Some(tx) = &self.export_tx else { return };
        let (done_tx, done_rx) = sync_channel(1);
        if tx.try_send(ExportItem::Flush(done_tx)).is_err() {
            tracing::warn!("telemetry queue full at shutdown: what is queued may not be exported");
            return;
        }
        if done_rx.recv_timeout(timeout).is_err() {
            tracing::warn!(?timeout, "telemetry not flushed in time");
        }
    }

    /// Export counters.
    pub fn stats(&self) -> &ExportStats {
        &self.metrics.stats
    }

    /// Takes a finished record: adds it to the metrics and queues its spans for export. Never
    /// blocks; when the export queue is full the spans are dropped and counted.
    pub fn observe(&self, record: &Record) {
        self.metrics.registry.record(&conventions::metric_observations(record, &self.metrics.objectives));
        if let Some(tx) = self.spans_tx() {
            let spans = conventions::request_spans(record, &self.span_options);
            let n = spans.len() as u64;
            if n == 0 {
                return;
            }
            match tx.try_send(ExportItem::Spans(spans)) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    self.metrics.stats.count_dropped(Signal::Traces, n, DropReason::QueueFull);
                }
            }
        }
    }

    /// Takes a closed MCP session: `mcp.client.session.duration`.
    pub fn observe_mcp_session(&self, session: &tokentap_record::mcp_session::ClosedSession) {
        self.metrics.registry.record(&[conventions::mcp_session_observation(session)]);
    }

    /// Takes a closed turn: its metrics, and its agent and tool spans queued for export.
    pub fn observe_turn(&self, turn: &tokentap_record::turn::TurnRecord) {
        self.metrics.registry.record(&conventions::turn_observations(turn));
        if let Some(tx) = self.spans_tx() {
            let spans = conventions::turn_spans(turn);
            let n = spans.len() as u64;
            if n > 0 && tx.try_send(ExportItem::Spans(spans)).is_err() {
                self.metrics.stats.count_dropped(Signal::Traces, n, DropReason::QueueFull);
            }
        }
    }

    /// A voice turn that just got its end-of-speech to heard time from the browser.
    pub fn observe_voice_turn(&self, turn: &tokentap_record::turn::TurnRecord) {
        self.metrics.registry.record(&conventions::voice_turn_observations(turn));
    }

    /// Takes a record that a browser report has just joined: queues the browser's spans (the
    /// request's own spans and metrics went out when the record was first built).
    pub fn observe_browser(&self, record: &Record) {
        self.metrics
            .registry
            .record(&conventions::rebuffer_observation(record, "browser").into_iter().collect::<Vec<_>>());
        // A realtime session's responses heard in the page (a session is reported once, when it ends).
        self.metrics.registry.record(&conventions::realtime_browser_observations(record));
        // A WebRTC session's voice turns, end of speech to heard (reported once, when it ends).
        self.metrics.registry.record(&conventions::webrtc_browser_observations(record));
        if let Some(tx) = self.spans_tx() {
            let spans = conventions::browser_spans(record, &self.span_options);
            let n = spans.len() as u64;
            if n > 0 && tx.try_send(ExportItem::Spans(spans)).is_err() {
                self.metrics.stats.count_dropped(Signal::Traces, n, DropReason::QueueFull);
            }
        }
    }

    /// One sample of the proxy runtime's scheduling lag (the probe's thread, never the proxy's).
    pub fn observe_scheduling_lag(&self, lag: std::time::Duration) {
        self.metrics.registry.add(MetricId::SchedulingLag, &Vec::new(), lag.as_secs_f64());
    }

    /// The metrics, with the counters kept elsewhere (record pipeline, export) brought up to date.
    pub fn metrics_snapshot(&self) -> Vec<MetricSnapshot> {
        self.metrics.snapshot()
    }

    /// The Prometheus text exposition, or `None` when `[metrics] prometheus = false`.
    pub fn prometheus_text(&self) -> Option<String> {
        self.prometheus_enabled.then(|| prometheus::render(&self.metrics_snapshot()))
    }

    /// The `telemetry` section of `/_tokentap/api/health`.
    pub fn health_json(&self) -> serde_json::Value {
        let s = &self.metrics.stats;
        serde_json::json!({
            "prometheus": self.prometheus_enabled,
            "metric_series_folded": self.metrics.registry.folded(),
            "otlp": match &self.otlp_summary {
                None => serde_json::Value::Null,
                Some(summary) => serde_json::json!({
                    "profile": self.profile.as_str(),
                    "targets": summary,
                    "collector_reachable": s.collector_reachable.load(Ordering::Relaxed),
                    "last_error": s.last_error.lock().clone(),
                    "refused": s.refused_json(),
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
