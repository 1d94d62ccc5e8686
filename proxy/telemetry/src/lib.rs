//! tokentap-telemetry: OpenTelemetry traces and metrics over OTLP, and the Prometheus exposition.
//!
//! The only crate of tokentap that depends on OpenTelemetry. It takes finished records
//! (`tokentap-record`) and a view of the pipeline's counters, and imports nothing from the server.
//!
//! The path of one record, all off the forwarding path:
//!
//! ```text
//! record pipeline ── Telemetry::observe(&record)
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
//! - `settings.rs`, `stats.rs`, `telemetry.rs`: what the server configures, counts and calls.

pub mod conventions;
pub mod metrics;
mod otlp;
pub mod prometheus;
pub mod registry;
pub mod settings;
pub mod spool;
pub mod stats;
pub mod telemetry;

pub use stats::{DropReason, ExportError, ExportStats};
pub use telemetry::{PipelineCounters, Telemetry};
