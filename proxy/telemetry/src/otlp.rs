//! OTLP export: the only place that knows the OpenTelemetry wire format and its clients.
//!
//! One thread, with its own single-threaded Tokio runtime, owns everything here. The finalize
//! worker hands it span descriptions through a bounded channel (`try_send`; full means dropped and
//! counted), and it reads metric snapshots from the registry on its own schedule. Because nothing
//! else runs on that runtime and every network call is awaited with a deadline inside `block_on`,
//! a slow or dead collector only ever delays this thread.
//!
//! Why not the SDK's batch processor and `opentelemetry-otlp`: the SDK hands finished spans to an
//! exporter that either delivers them or drops them; it cannot give back the encoded request to be
//! kept on disk and replayed later, and its HTTP client has been known to stop silently when it
//! found no Tokio reactor. Here each export is an `ExportTraceServiceRequest` or
//! `ExportMetricsServiceRequest` built from the official protobuf definitions (opentelemetry-proto)
//! and encoded once; the same bytes go to the collector, or to the spool and later to the collector.
//!
//! Delivery follows the OTLP specification's retry rules: connection failures, timeouts, HTTP 429,
//! 502, 503, 504 and the gRPC codes it lists as retryable go to the spool and are replayed with
//! exponential backoff; other rejections are counted and dropped.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, status, ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;

use crate::conventions::{AttrValue, Instrument, SpanKind, SpanPlan, SpanStatus};
use crate::metrics::Metrics;
use crate::registry::{MetricSnapshot, SeriesValue};
use crate::settings::{OtlpProtocol, OtlpSettings, OtlpTarget};
use crate::spool::{Signal, Spool};
use crate::stats::DropReason;

const SCOPE_NAME: &str = "tokentap";

fn now_unix_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Plain data → OTLP messages.
// ---------------------------------------------------------------------------------------------

fn any_value(value: &AttrValue) -> AnyValue {
    let value = match value {
        AttrValue::Str(s) => any_value::Value::StringValue(s.clone()),
        AttrValue::Int(i) => any_value::Value::IntValue(*i),
        AttrValue::F64(f) => any_value::Value::DoubleValue(*f),
        AttrValue::Bool(b) => any_value::Value::BoolValue(*b),
        AttrValue::StrArray(items) => any_value::Value::ArrayValue(ArrayValue {
            values: items.iter().map(|s| AnyValue { value: Some(any_value::Value::StringValue(s.clone())) }).collect(),
        }),
    };
    AnyValue { value: Some(value) }
}

fn key_value(key: &str, value: &AttrValue) -> KeyValue {
    KeyValue { key: key.to_string(), value: Some(any_value(value)), ..Default::default() }
}

fn string_kv(key: &str, value: &str) -> KeyValue {
    key_value(key, &AttrValue::Str(value.to_string()))
}

fn scope() -> InstrumentationScope {
    InstrumentationScope { name: SCOPE_NAME.into(), version: env!("CARGO_PKG_VERSION").into(), ..Default::default() }
}

/// The resource every export carries: service name and version, this process's instance id, and
/// the configured resource attributes.
pub(crate) fn resource(settings: &OtlpSettings, instance_id: &str) -> Resource {
    let mut attributes = vec![
        string_kv("service.name", &settings.service_name),
        string_kv("service.version", env!("CARGO_PKG_VERSION")),
        string_kv("service.instance.id", instance_id),
    ];
    for (k, v) in &settings.resource_attributes {
        if !attributes.iter().any(|kv| kv.key == *k) {
            attributes.push(string_kv(k, v));
        }
    }
    Resource { attributes, ..Default::default() }
}

/// Span flags: the sampled bit, and whether the parent came from another process (the client's
/// `traceparent`) — the `SPAN_FLAGS_CONTEXT_*` bits of the protocol.
fn span_flags(plan: &SpanPlan, parent_is_remote: bool) -> u32 {
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    let mut flags = u32::from(plan.sampled) | HAS_IS_REMOTE;
    if parent_is_remote {
        flags |= IS_REMOTE;
    }
    flags
}

pub(crate) fn span_message(plan: &SpanPlan) -> Span {
    let parent_is_remote = plan.kind == SpanKind::Client && plan.parent_span_id.is_some();
    Span {
        trace_id: plan.trace_id.to_vec(),
        span_id: plan.span_id.to_vec(),
        parent_span_id: plan.parent_span_id.map(|p| p.to_vec()).unwrap_or_default(),
        flags: span_flags(plan, parent_is_remote),
        name: plan.name.clone(),
        kind: match plan.kind {
            SpanKind::Client => span::SpanKind::Client as i32,
            SpanKind::Internal => span::SpanKind::Internal as i32,
        },
        start_time_unix_nano: plan.start_unix_ns,
        end_time_unix_nano: plan.end_unix_ns.max(plan.start_unix_ns),
        attributes: plan.attributes.iter().map(|(k, v)| key_value(k, v)).collect(),
        events: plan
            .events
            .iter()
            .map(|e| span::Event {
                time_unix_nano: e.time_unix_ns,
                name: e.name.to_string(),
                attributes: e.attributes.iter().map(|(k, v)| key_value(k, v)).collect(),
                dropped_attributes_count: 0,
            })
            .collect(),
        dropped_events_count: plan.dropped_events,
        status: Some(match &plan.status {
            SpanStatus::Unset => Status { code: status::StatusCode::Unset as i32, message: String::new() },
            SpanStatus::Error(message) => Status { code: status::StatusCode::Error as i32, message: message.clone() },
        }),
        ..Default::default()
    }
}

pub(crate) fn trace_request(resource: &Resource, spans: &[SpanPlan]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource.clone()),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope()),
                spans: spans.iter().map(span_message).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A cumulative metrics export of a registry snapshot; also returns the number of data points.
pub(crate) fn metrics_request(
    resource: &Resource,
    snapshot: &[MetricSnapshot],
    start_unix_ns: u64,
    now_unix_ns: u64,
) -> (ExportMetricsServiceRequest, u64) {
    let mut points = 0u64;
    let mut metrics = Vec::new();
    for m in snapshot.iter().filter(|m| !m.series.is_empty()) {
        let def = m.def;
        let attributes =
            |labels: &[(&'static str, String)]| labels.iter().map(|(k, v)| string_kv(k, v)).collect::<Vec<_>>();
        let data = match def.instrument {
            Instrument::Counter => metric::Data::Sum(Sum {
                data_points: m
                    .series
                    .iter()
                    .filter_map(|s| match &s.value {
                        SeriesValue::Counter(c) => Some(NumberDataPoint {
                            attributes: attributes(&s.labels),
                            start_time_unix_nano: start_unix_ns,
                            time_unix_nano: now_unix_ns,
                            value: Some(number_data_point::Value::AsInt(i64::try_from(*c).unwrap_or(i64::MAX))),
                            ..Default::default()
                        }),
                        SeriesValue::Histogram { .. } => None,
                    })
                    .collect(),
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                is_monotonic: true,
            }),
            Instrument::Histogram(bounds) => metric::Data::Histogram(Histogram {
                data_points: m
                    .series
                    .iter()
                    .filter_map(|s| match &s.value {
                        SeriesValue::Histogram { bucket_counts, sum, count, min, max } => Some(HistogramDataPoint {
                            attributes: attributes(&s.labels),
                            start_time_unix_nano: start_unix_ns,
                            time_unix_nano: now_unix_ns,
                            count: *count,
                            sum: Some(*sum),
                            bucket_counts: bucket_counts.clone(),
                            explicit_bounds: bounds.to_vec(),
                            min: (*count > 0).then_some(*min),
                            max: (*count > 0).then_some(*max),
                            ..Default::default()
                        }),
                        SeriesValue::Counter(_) => None,
                    })
                    .collect(),
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            }),
        };
        points += m.series.len() as u64;
        metrics.push(Metric {
            name: def.name.to_string(),
            description: def.description.to_string(),
            unit: def.unit.to_string(),
            data: Some(data),
            ..Default::default()
        });
    }
    let request = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource.clone()),
            scope_metrics: vec![ScopeMetrics { scope: Some(scope()), metrics, ..Default::default() }],
            ..Default::default()
        }],
    };
    (request, points)
}

// ---------------------------------------------------------------------------------------------
// Transport.
// ---------------------------------------------------------------------------------------------

/// Why a send failed.
#[derive(Debug)]
enum SendError {
    /// Worth trying again later (unreachable, overloaded, timed out): spool it.
    Retryable(String),
    /// The collector refused the data itself: trying again would fail the same way.
    Permanent(String),
}

/// One signal's connection to its collector endpoint.
struct Sender {
    signal: Signal,
    target: OtlpTarget,
    /// Created lazily inside the runtime; reconnects by itself.
    grpc: Option<tonic::transport::Channel>,
}

impl Sender {
    fn new(signal: Signal, target: OtlpTarget) -> Self {
        Sender { signal, target, grpc: None }
    }

    /// Sends one encoded request; `Ok` carries how many items the collector rejected in a partial
    /// success.
    async fn send(&mut self, body: &Bytes) -> Result<u64, SendError> {
        let deadline = self.target.timeout;
        let result = match self.target.protocol {
            OtlpProtocol::HttpProtobuf => tokio::time::timeout(deadline, self.send_http(body)).await,
            OtlpProtocol::Grpc => tokio::time::timeout(deadline, self.send_grpc(body)).await,
        };
        result.unwrap_or_else(|_| Err(SendError::Retryable(format!("no answer within {deadline:?}"))))
    }

    async fn send_http(&self, body: &Bytes) -> Result<u64, SendError> {
        let uri: http::Uri =
            self.target.endpoint.parse().map_err(|e| SendError::Permanent(format!("bad endpoint: {e}")))?;
        let host = uri.host().unwrap_or("localhost").trim_start_matches('[').trim_end_matches(']').to_string();
        let port = uri.port_u16().unwrap_or(80);
        let stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| SendError::Retryable(format!("connect to {host}:{port}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let (mut request_sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| SendError::Retryable(format!("HTTP handshake: {e}")))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let authority = uri.authority().map(|a| a.as_str().to_string()).unwrap_or_else(|| format!("{host}:{port}"));
        let mut builder = http::Request::post(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
            .header(http::header::HOST, authority)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .header(http::header::USER_AGENT, concat!("tokentap/", env!("CARGO_PKG_VERSION")));
        for (name, value) in self.target.headers.iter() {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let request =
            builder.body(Full::new(body.clone())).map_err(|e| SendError::Permanent(format!("request: {e}")))?;
        let response =
            request_sender.send_request(request).await.map_err(|e| SendError::Retryable(format!("HTTP: {e}")))?;
        let status = response.status();
        let response_body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .map_err(|e| SendError::Retryable(format!("reading the answer: {e}")))?;
        match status.as_u16() {
            200..=299 => Ok(self.rejected_in(&response_body)),
            429 | 502 | 503 | 504 => Err(SendError::Retryable(format!("collector answered {status}"))),
            _ => Err(SendError::Permanent(format!("collector answered {status}"))),
        }
    }

    /// Items the collector reported as rejected in a partial success (protobuf answer body).
    fn rejected_in(&self, body: &[u8]) -> u64 {
        match self.signal {
            Signal::Traces => ExportTraceServiceResponse::decode(body)
                .ok()
                .and_then(|r| r.partial_success)
                .map_or(0, |p| p.rejected_spans.max(0) as u64),
            Signal::Metrics => ExportMetricsServiceResponse::decode(body)
                .ok()
                .and_then(|r| r.partial_success)
                .map_or(0, |p| p.rejected_data_points.max(0) as u64),
        }
    }

    fn channel(&mut self) -> Result<tonic::transport::Channel, SendError> {
        if let Some(channel) = &self.grpc {
            return Ok(channel.clone());
        }
        let endpoint = tonic::transport::Endpoint::from_shared(self.target.endpoint.clone())
            .map_err(|e| SendError::Permanent(format!("bad endpoint: {e}")))?
            .connect_timeout(self.target.timeout)
            .timeout(self.target.timeout);
        let channel = endpoint.connect_lazy();
        self.grpc = Some(channel.clone());
        Ok(channel)
    }

    fn grpc_request<T>(&self, message: T) -> Result<tonic::Request<T>, SendError> {
        let mut request = tonic::Request::new(message);
        for (name, value) in self.target.headers.iter() {
            let key = tonic::metadata::MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes())
                .map_err(|e| SendError::Permanent(format!("header name: {e}")))?;
            let value = value.parse().map_err(|e| SendError::Permanent(format!("header value: {e}")))?;
            request.metadata_mut().insert(key, value);
        }
        Ok(request)
    }

    async fn send_grpc(&mut self, body: &Bytes) -> Result<u64, SendError> {
        let channel = self.channel()?;
        let result = match self.signal {
            Signal::Traces => {
                let message = ExportTraceServiceRequest::decode(body.as_ref())
                    .map_err(|e| SendError::Permanent(format!("spooled request: {e}")))?;
                TraceServiceClient::new(channel)
                    .export(self.grpc_request(message)?)
                    .await
                    .map(|r| r.into_inner().partial_success.map_or(0, |p| p.rejected_spans.max(0) as u64))
            }
            Signal::Metrics => {
                let message = ExportMetricsServiceRequest::decode(body.as_ref())
                    .map_err(|e| SendError::Permanent(format!("spooled request: {e}")))?;
                MetricsServiceClient::new(channel)
                    .export(self.grpc_request(message)?)
                    .await
                    .map(|r| r.into_inner().partial_success.map_or(0, |p| p.rejected_data_points.max(0) as u64))
            }
        };
        result.map_err(|status| {
            use tonic::Code;
            let text = format!("gRPC {:?}: {}", status.code(), status.message());
            match status.code() {
                Code::Cancelled
                | Code::DeadlineExceeded
                | Code::ResourceExhausted
                | Code::Aborted
                | Code::OutOfRange
                | Code::Unavailable
                | Code::DataLoss => SendError::Retryable(text),
                // The generated client reports a channel that could not connect this way.
                Code::Unknown if status.message().starts_with("Service was not ready") => SendError::Retryable(text),
                _ => SendError::Permanent(text),
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The export thread.
// ---------------------------------------------------------------------------------------------

struct Exporter {
    telemetry: Arc<Metrics>,
    settings: OtlpSettings,
    resource: Resource,
    traces: Option<Sender>,
    metrics: Option<Sender>,
    spool: Option<Spool>,
    /// When the spool may be tried again, and the current backoff.
    retry_at: Option<Instant>,
    backoff: Duration,
}

/// Runs the export loop until the span channel closes (the process is ending).
pub(crate) fn run(telemetry: Arc<Metrics>, settings: OtlpSettings, spool: Option<Spool>, rx: Receiver<Vec<SpanPlan>>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "OpenTelemetry export runtime failed to start; export is off");
            return;
        }
    };
    let resource = resource(&settings, &telemetry.instance_id);
    let mut exporter = Exporter {
        traces: settings.traces.clone().map(|t| Sender::new(Signal::Traces, t)),
        metrics: settings.metrics.clone().map(|t| Sender::new(Signal::Metrics, t)),
        backoff: settings.retry_initial,
        retry_at: spool.as_ref().filter(|s| !s.is_empty()).map(|_| Instant::now()),
        telemetry,
        settings,
        resource,
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
            Ok(spans) => {
                batch.extend(spans);
                batch_records += 1;
                batch_deadline.get_or_insert_with(|| Instant::now() + exporter.settings.batch_delay);
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
    fn sender(&mut self, signal: Signal) -> Option<&mut Sender> {
        match signal {
            Signal::Traces => self.traces.as_mut(),
            Signal::Metrics => self.metrics.as_mut(),
        }
    }

    async fn export_spans(&mut self, spans: Vec<SpanPlan>) {
        if spans.is_empty() || self.traces.is_none() {
            return;
        }
        let items = spans.len() as u64;
        let body = Bytes::from(trace_request(&self.resource, &spans).encode_to_vec());
        self.deliver(Signal::Traces, items, body).await;
    }

    async fn export_metrics(&mut self) {
        if self.metrics.is_none() {
            return;
        }
        let snapshot = self.telemetry.snapshot();
        let (request, points) = metrics_request(&self.resource, &snapshot, self.telemetry.start_unix_ns, now_unix_ns());
        if points == 0 {
            return;
        }
        self.deliver(Signal::Metrics, points, Bytes::from(request.encode_to_vec())).await;
    }

    /// Sends now, unless older data waits in the spool (then this joins the queue behind it, so
    /// the collector sees data roughly in order and one probe decides whether it is back).
    async fn deliver(&mut self, signal: Signal, items: u64, body: Bytes) {
        let backlog = self.spool.as_ref().is_some_and(|s| !s.is_empty());
        if !backlog {
            let Some(sender) = self.sender(signal) else { return };
            match sender.send(&body).await {
                Ok(rejected) => return self.delivered(signal, items, rejected),
                Err(SendError::Permanent(reason)) => return self.rejected(signal, items, &reason),
                Err(SendError::Retryable(reason)) => self.unreachable(&reason),
            }
        }
        self.spool_export(signal, items, &body);
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
            let body = Bytes::from(bytes);
            let result = match self.sender(entry.signal) {
                Some(sender) => sender.send(&body).await,
                // The signal was switched off since this was spooled.
                None => Err(SendError::Permanent("signal no longer exported".into())),
            };
            match result {
                Ok(rejected) => {
                    if let Some(spool) = self.spool.as_mut() {
                        spool.pop_oldest();
                    }
                    self.delivered(entry.signal, entry.items, rejected);
                }
                Err(SendError::Permanent(reason)) => {
                    if let Some(spool) = self.spool.as_mut() {
                        spool.pop_oldest();
                    }
                    self.rejected(entry.signal, entry.items, &reason);
                }
                Err(SendError::Retryable(reason)) => {
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
