//! tokentap-telemetry: OpenTelemetry traces and metrics over OTLP, and the Prometheus exposition.
//!
//! The only crate of tokentap that depends on OpenTelemetry. It takes finished records
//! (`tokentap-record`) and a view of the pipeline's counters, and imports nothing from the server.
//!
//! The path of one record, all off the forwarding path:
//!
//! ```text
//! record pipeline ── Telemetry::observe(&record)
//!     ├─ conventions::metric_observations ──► MetricRegistry (series cap → SDK instruments)
//!     │        ├─ ManualReader ──► GET /metrics (prometheus.rs)
//!     │        └─ ManualReader ──► export thread, every interval ──► SDK OTLP metric exporter
//!     └─ conventions::request_spans ── try_send (bounded; full → dropped, counted)
//!                                          ▼
//!                               export thread (otlp/, own runtime)
//!                               batch → SpanData → SDK OTLP exporter → collector
//!                                        │ unreachable → spool.rs → replay
//! ```
//!
//! - `conventions.rs` and `conventions/`: record → span and metric descriptions, as plain data:
//!   `metrics.rs` the metric table, `attributes.rs` the attribute keys, `plan.rs` span descriptions,
//!   `request.rs` a request's spans, `browser.rs` the probe's spans, `observations.rs` metric
//!   values, `turn.rs` and `realtime.rs` agent turns and realtime sessions.
//! - `registry.rs`: the SDK meter provider and the table's instruments behind the series cap;
//!   its two cumulative readers (Prometheus, OTLP), so both show the same numbers.
//! - `prometheus.rs`: the text exposition.
//! - `spool.rs`: encoded OTLP requests kept on disk while the collector is unreachable.
//! - `spans.rs`: span descriptions → the SDK's `SpanData`; the resource.
//! - `transport.rs`: the HTTP client (plain or TLS) the SDK's exporter posts through, the gRPC
//!   channel, and which failures are worth spooling.
//! - `otlp/`: the export thread (`mod.rs`: batching, the spool, replay, what each export came to)
//!   and `exporters.rs` (each signal's link to its collector, the SDK's OTLP span and metric
//!   exporters built on it, one SDK export run).
//! - `settings.rs`, `stats.rs`, `telemetry.rs`: what the server configures, counts and calls.

pub mod conventions;
pub mod metrics;
mod otlp;
pub mod prometheus;
pub mod registry;
pub mod settings;
mod spans;
pub mod spool;
pub mod stats;
pub mod telemetry;
mod transport;

pub use stats::{DropReason, ExportError, ExportStats};
pub use telemetry::{ConnectionRefusals, PipelineCounters, Telemetry};
