//! The mapping from a [`Record`] to OpenTelemetry's vocabulary, as plain data.
//!
//! This file knows the GenAI semantic conventions (v1.41) and tokentap's own `tokentap.*` names; it
//! does not know the OpenTelemetry SDK or the OTLP wire format (`otlp/` does). Tests call it
//! directly: a record in, span descriptions and metric observations out.
//!
//! - [`METRICS`] is the one table of metric names, units, bucket boundaries and Prometheus names.
//!   The GenAI metric names are still in development upstream and may be renamed; change them here.
//! - [`request_spans`] describes the request's CLIENT span and the child spans of its phases.
//! - [`metric_observations`] lists the values a record adds to the metrics.

mod attributes;
mod browser;
mod metrics;
mod observations;
mod plan;
mod request;

pub use crate::settings::{BackendProfile, LlmSpan};
pub use attributes::*;
pub use browser::*;
pub use metrics::*;
pub use observations::*;
pub use plan::*;
pub use request::*;

mod mcp;
pub use mcp::{mcp_observations, mcp_session_observation, mcp_spans};
mod realtime;
pub use realtime::realtime_browser_observations;
mod turn;
mod webrtc;
pub use turn::{execute_tool_span_id, turn_observations, turn_spans, voice_turn_observations};
pub use webrtc::webrtc_browser_observations;

#[cfg(test)]
mod tests;
