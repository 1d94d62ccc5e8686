//! OTLP export: the export thread, which owns the SDK's OTLP exporters, the spool and replay.
//!
//! One thread, with its own single-threaded Tokio runtime, owns everything here. The finalize
//! worker hands it span descriptions through a bounded channel (`try_send`; full means dropped and
//! counted), and it collects the metrics from the meter provider's OTLP reader on its own
//! schedule. Because nothing else runs on that runtime and every network call is awaited with a
//! deadline inside `block_on`, a slow or dead collector only ever delays this thread.
//!
//! Both signals go through the official SDK: each batch of `SpanPlan`s becomes `SpanData`
//! (`spans.rs`) and is exported by `opentelemetry_otlp::SpanExporter`; each metrics collection by
//! `opentelemetry_otlp::MetricExporter` (cumulative). Over HTTP/protobuf they post through our own
//! client (`transport.rs`, which keeps the exact bytes the SDK handed it); over gRPC through a
//! tonic channel built on this thread's runtime. The SDK's retries are off: durability is
//! tokentap's. When the collector is unreachable or answers with a retryable status, the encoded
//! request goes to the spool (`spool.rs`) and is replayed later on the same connection, oldest
//! first, with exponential backoff; other rejections are counted and dropped.
//!
//! Metrics are collected here rather than by the SDK's `PeriodicReader`, whose own thread has no
//! Tokio runtime (our client and tonic need this one) and could not queue behind the spool.
//!
//! `exporters.rs` holds each signal's link to its collector and the SDK's exporters built on it.

mod exporters;

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use opentelemetry::InstrumentationScope;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter as _;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use prost::Message;

use crate::conventions::SpanPlan;
use crate::metrics::Metrics;
use crate::registry;
use crate::settings::OtlpSettings;
use crate::spans;
use crate::spool::{Signal, Spool};
use crate::stats::DropReason;
use crate::transport::{Delivery, SendError};
use exporters::{through_sdk, Link, MetricsExport, Outcome, Traces};

// ---------------------------------------------------------------------------------------------
// The export thread.
// ---------------------------------------------------------------------------------------------

struct Exporter {
    telemetry: Arc<Metrics>,
    settings: OtlpSettings,
    /// The resource of the spans (the metrics' is the meter provider's).
    sdk_resource: opentelemetry_sdk::Resource,
    scope: InstrumentationScope,
    traces: Option<Traces>,
    metrics: Option<MetricsExport>,
    spool: Option<Spool>,
    /// When the spool may be tried again, and the current backoff.
    retry_at: Option<Instant>,
    backoff: Duration,
}

/// Builds one signal's connection, or logs why that signal is not exported.
fn or_off<T>(telemetry: &Metrics, signal: Signal, built: Option<Result<T, String>>) -> Option<T> {
    match built? {
        Ok(t) => Some(t),
        Err(reason) => {
            tracing::error!(signal = signal.as_str(), reason, "OpenTelemetry export cannot start; this signal is off");
            telemetry.stats.set_last_error(&reason);
            None
        }
    }
}

/// What the export thread is handed.
pub(crate) enum ExportItem {
    /// One record's spans.
    Spans(Vec<SpanPlan>),
    /// Export the batch and the metrics now, then signal (shutdown).
    Flush(std::sync::mpsc::SyncSender<()>),
}

/// Runs the export loop until the span channel closes (the process is ending).
pub(crate) fn run(telemetry: Arc<Metrics>, settings: OtlpSettings, spool: Option<Spool>, rx: Receiver<ExportItem>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "OpenTelemetry export runtime failed to start; export is off");
            return;
        }
    };
    let pairs = spans::resource_pairs(&settings, &telemetry.instance_id);
    let sdk_resource = spans::sdk_resource(&pairs);
    // The tonic channels are spawned on this runtime, so they are built inside it.
    let (traces, metrics) = {
        let _inside = runtime.enter();
        let traces = settings.traces.as_ref().map(|t| Traces::new(t, &sdk_resource));
        let metrics = settings.metrics.as_ref().map(MetricsExport::new);
        (or_off(&telemetry, Signal::Traces, traces), or_off(&telemetry, Signal::Metrics, metrics))
    };
    let mut exporter = Exporter {
        traces,
        metrics,
        backoff: settings.retry_initial,
        retry_at: spool.as_ref().filter(|s| !s.is_empty()).map(|_| Instant::now()),
        telemetry,
        settings,
        sdk_resource,
        scope: spans::scope(),
        spool,
    };
    exporter.publish_spool_state();

    let mut batch: Vec<SpanPlan> = Vec::new();
    let mut batch_records = 0usize;
    let mut batch_deadline: Option<Instant> = None;
    let mut next_metrics = Instant::now() + exporter.settings.metrics_interval;
    loop {
        let now = Instant::now();
        let mut wake = next_metrics;
        if let Some(d) = batch_deadline {
            wake = wake.min(d);
        }
        if let Some(r) = exporter.retry_at {
            wake = wake.min(r);
        }
        match rx.recv_timeout(wake.saturating_duration_since(now)) {
            Ok(ExportItem::Spans(spans)) => {
                batch.extend(spans);
                batch_records += 1;
                batch_deadline.get_or_insert_with(|| Instant::now() + exporter.settings.batch_delay);
            }
            Ok(ExportItem::Flush(done)) => {
                if !batch.is_empty() {
                    runtime.block_on(exporter.export_spans(std::mem::take(&mut batch)));
                }
                batch_records = 0;
                batch_deadline = None;
                runtime.block_on(exporter.export_metrics());
                next_metrics = Instant::now() + exporter.settings.metrics_interval;
                let _ = done.try_send(());
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                if !batch.is_empty() {
                    runtime.block_on(exporter.export_spans(std::mem::take(&mut batch)));
                }
                return;
            }
        }
        let now = Instant::now();
        if batch_records >= exporter.settings.batch_max_records || batch_deadline.is_some_and(|d| now >= d) {
            runtime.block_on(exporter.export_spans(std::mem::take(&mut batch)));
            batch_records = 0;
            batch_deadline = None;
        }
        if now >= next_metrics {
            runtime.block_on(exporter.export_metrics());
            next_metrics = Instant::now() + exporter.settings.metrics_interval;
        }
        if exporter.retry_at.is_some_and(|r| Instant::now() >= r) {
            runtime.block_on(exporter.replay());
        }
    }
}

impl Exporter {
    fn link(&self, signal: Signal) -> Option<&Link> {
        match signal {
            Signal::Traces => self.traces.as_ref().map(|t| &t.link),
            Signal::Metrics => self.metrics.as_ref().map(|m| &m.link),
        }
    }

    fn has_backlog(&self) -> bool {
        self.spool.as_ref().is_some_and(|s| !s.is_empty())
    }

    /// The OTLP request the SDK's exporter sends for `spans` (the same transform), encoded.
    fn encode_spans(&self, spans: Vec<SpanData>) -> Bytes {
        let resource = ResourceAttributesWithSchema::from(&self.sdk_resource);
        let request = ExportTraceServiceRequest { resource_spans: group_spans_by_resource_and_scope(spans, &resource) };
        Bytes::from(request.encode_to_vec())
    }

    /// Exports a batch through the SDK, unless older data waits in the spool (then it joins the
    /// queue behind it, so the collector sees data roughly in order and one probe decides
    /// whether it is back).
    async fn export_spans(&mut self, plans: Vec<SpanPlan>) {
        if plans.is_empty() || self.traces.is_none() {
            return;
        }
        let items = plans.len() as u64;
        if self.telemetry.stats.is_refused(Signal::Traces) {
            return self.telemetry.stats.count_dropped(Signal::Traces, items, DropReason::Rejected);
        }
        let spans: Vec<SpanData> = plans.iter().map(|p| spans::span_data(p, &self.scope)).collect();
        if self.has_backlog() {
            let body = self.encode_spans(spans);
            return self.spool_export(Signal::Traces, items, &body);
        }
        let Some(traces) = self.traces.as_ref() else { return };
        let kept = traces.client.is_none().then(|| spans.clone());
        let outcome = through_sdk(traces.client.as_ref(), traces.exporter.export(spans), || {
            self.encode_spans(kept.unwrap_or_default())
        })
        .await;
        self.settle(Signal::Traces, items, outcome);
    }

    /// Counts an export's outcome; spools it when it is worth another try.
    fn settle(&mut self, signal: Signal, items: u64, outcome: Outcome) {
        match outcome.delivery {
            Delivery::Delivered { rejected } => self.delivered(signal, items, rejected),
            Delivery::Failed(SendError::Permanent(reason)) => self.rejected(signal, items, &reason),
            Delivery::Failed(SendError::Refused(reason)) => self.refused(signal, items, &reason),
            Delivery::Failed(SendError::Retryable(reason)) => {
                self.unreachable(&reason);
                match &outcome.body {
                    Some(body) => self.spool_export(signal, items, body),
                    None => self.telemetry.stats.count_dropped(signal, items, DropReason::SpoolFull),
                }
            }
        }
    }

    /// Collects the metrics (cumulative) and exports them through the SDK, or spools them behind
    /// a backlog.
    async fn export_metrics(&mut self) {
        let Some(metrics) = self.metrics.as_ref() else { return };
        if self.telemetry.stats.is_refused(Signal::Metrics) {
            return;
        }
        let Some(rm) = self.telemetry.registry.collect_otlp() else { return };
        let points = registry::data_points(&rm);
        if points == 0 {
            return;
        }
        let encode = |rm: &ResourceMetrics| Bytes::from(ExportMetricsServiceRequest::from(rm).encode_to_vec());
        if self.has_backlog() {
            let body = encode(&rm);
            return self.spool_export(Signal::Metrics, points, &body);
        }
        let outcome = through_sdk(metrics.client.as_ref(), metrics.exporter.export(&rm), || encode(&rm)).await;
        self.settle(Signal::Metrics, points, outcome);
    }

    /// Replays the spool, oldest first, until it is empty or the collector fails again.
    async fn replay(&mut self) {
        self.retry_at = None;
        loop {
            let Some(spool) = self.spool.as_mut() else { return };
            let (entry, bytes) = match spool.peek() {
                None => break,
                Some(Err(unreadable)) => {
                    self.telemetry.stats.count_dropped(unreadable.signal, unreadable.items, DropReason::SpoolFull);
                    continue;
                }
                Some(Ok(found)) => found,
            };
            let delivery = match self.link(entry.signal) {
                Some(link) => link.deliver(entry.signal, Bytes::from(bytes)).await,
                // The signal was switched off since this was spooled.
                None => Delivery::Failed(SendError::Permanent("signal no longer exported".into())),
            };
            match delivery {
                Delivery::Delivered { rejected } => {
                    if let Some(spool) = self.spool.as_mut() {
                        spool.pop_oldest();
                    }
                    self.delivered(entry.signal, entry.items, rejected);
                }
                Delivery::Failed(SendError::Permanent(reason)) => {
                    if let Some(spool) = self.spool.as_mut() {
                        spool.pop_oldest();
                    }
                    self.rejected(entry.signal, entry.items, &reason);
                }
                Delivery::Failed(SendError::Refused(reason)) => {
                    if let Some(spool) = self.spool.as_mut() {
                        spool.pop_oldest();
                    }
                    self.refused(entry.signal, entry.items, &reason);
                }
                Delivery::Failed(SendError::Retryable(reason)) => {
                    self.unreachable(&reason);
                    break;
                }
            }
            self.publish_spool_state();
        }
        self.publish_spool_state();
    }

    fn delivered(&mut self, signal: Signal, items: u64, rejected: u64) {
        let stats = &self.telemetry.stats;
        stats.count_exported(signal, items.saturating_sub(rejected));
        if rejected > 0 {
            stats.count_dropped(signal, rejected, DropReason::Rejected);
        }
        if !stats.collector_reachable.swap(true, Ordering::Relaxed) {
            tracing::info!("OpenTelemetry collector reachable again");
        }
        self.backoff = self.settings.retry_initial;
    }

    fn rejected(&mut self, signal: Signal, items: u64, reason: &str) {
        self.telemetry.stats.count_dropped(signal, items, DropReason::Rejected);
        self.telemetry.stats.set_last_error(reason);
        tracing::warn!(signal = signal.as_str(), reason, "the collector rejected an export; dropped");
    }

    /// The endpoint does not take `signal` (a traces-only backend answers 405 on `/v1/metrics`):
    /// said once in the log and in health, counted, and that signal is not sent again.
    fn refused(&mut self, signal: Signal, items: u64, reason: &str) {
        let stats = &self.telemetry.stats;
        stats.count_dropped(signal, items, DropReason::Rejected);
        if stats.mark_refused(signal, reason) {
            let target = match signal {
                Signal::Traces => self.settings.traces.as_ref(),
                Signal::Metrics => self.settings.metrics.as_ref(),
            };
            let endpoint = target.map_or("", |t| t.endpoint.as_str());
            let fix = match signal {
                Signal::Traces => "[otel] traces = false",
                Signal::Metrics => "[otel] metrics = false (or a profile for this backend)",
            };
            tracing::warn!(
                signal = signal.as_str(),
                endpoint,
                reason,
                "this OTLP endpoint does not take {}; tokentap stops exporting them (set {fix} to say so)",
                signal.as_str()
            );
            stats.set_last_error(&format!("{endpoint} does not take {}: {reason}", signal.as_str()));
        }
    }

    fn unreachable(&mut self, reason: &str) {
        let stats = &self.telemetry.stats;
        stats.set_last_error(reason);
        if stats.collector_reachable.swap(false, Ordering::Relaxed) {
            tracing::warn!(reason, "OpenTelemetry collector unreachable; spooling to disk");
        }
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(self.settings.retry_max);
    }

    fn spool_export(&mut self, signal: Signal, items: u64, body: &[u8]) {
        let stats = &self.telemetry.stats;
        let Some(spool) = self.spool.as_mut() else {
            stats.count_dropped(signal, items, DropReason::SpoolFull);
            return;
        };
        match spool.push(signal, items, body) {
            Ok(evicted) => {
                for (old_signal, old_items) in evicted.entries {
                    stats.count_dropped(old_signal, old_items, DropReason::SpoolFull);
                }
                if evicted.rejected {
                    stats.count_dropped(signal, items, DropReason::SpoolFull);
                } else {
                    stats.count_spooled(signal, items);
                }
            }
            Err(e) => {
                stats.count_dropped(signal, items, DropReason::SpoolFull);
                stats.set_last_error(&e.to_string());
                tracing::warn!(error = %e, "could not spool telemetry; dropped");
            }
        }
        if self.retry_at.is_none() {
            self.retry_at = Some(Instant::now() + self.backoff);
        }
        self.publish_spool_state();
    }

    fn publish_spool_state(&self) {
        let stats = &self.telemetry.stats;
        let (entries, bytes, (spans, points)) =
            self.spool.as_ref().map_or((0, 0, (0, 0)), |s| (s.len() as u64, s.total_bytes(), s.items()));
        stats.spool_entries.store(entries, Ordering::Relaxed);
        stats.spool_bytes.store(bytes, Ordering::Relaxed);
        stats.spool_spans.store(spans, Ordering::Relaxed);
        stats.spool_points.store(points, Ordering::Relaxed);
    }
}
