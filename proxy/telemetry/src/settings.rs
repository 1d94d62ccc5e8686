//! Validated export settings (tokentap's config builds them from `[otel]`, `[metrics]` and the
//! `OTEL_*` variables).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// `[metrics]`: the metric registry and the Prometheus endpoint on the admin listener.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Serve `GET /metrics` (Prometheus text format) on the admin listener.
    pub prometheus: bool,
    /// Label sets kept per metric; past it, new ones are folded into a series with model `_OTHER`
    /// (model names come from request bodies, so they are not trusted to be few).
    pub max_series_per_metric: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self { prometheus: true, max_series_per_metric: 2000 }
    }
}

tokentap_analysis::named_enum! {
    /// `[otel] profile`: the backend tokentap exports to straight (no collector in between), so that
    /// tokentap adds what that backend needs and leaves out what it refuses.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
    pub enum BackendProfile {
        /// An OpenTelemetry Collector or any OTLP backend: traces and metrics, nothing added.
        #[default]
        Generic = "generic",
        /// Arize Phoenix: the resource attribute `openinference.project.name`; traces only.
        Phoenix = "phoenix",
        /// Langfuse: `langfuse.observation.completion_start_time` on the LLM span; traces only.
        Langfuse = "langfuse",
        /// Datadog LLM Observability's OTLP intake: the `dd-otlp-source: llmobs` header; traces only.
        Datadog = "datadog",
    }
}

impl BackendProfile {
    /// Whether the backend takes OTLP metrics (when `[otel] metrics` is not set explicitly).
    pub fn takes_metrics(self) -> bool {
        self == BackendProfile::Generic
    }
}

/// `[otel] llm_span`: which span of a call backends count as the LLM call (its tokens and cost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LlmSpan {
    /// tokentap's request span is the GenAI client span, also under a caller's span.
    #[default]
    Tokentap,
    /// The app records its own GenAI span for each call: a request that continues the app's
    /// `traceparent` gets a timing span (`tokentap {operation} {model}`, no
    /// `gen_ai.operation.name`, tokens as `tokentap.usage.*`) under the app's span, so backends
    /// count the call once. A request without a caller's `traceparent` keeps its GenAI span.
    App,
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    Grpc,
    HttpProtobuf,
}

/// Header names and values for the collector. `Debug` shows the names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretHeaders(Vec<(String, String)>);

impl SecretHeaders {
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        Self(pairs)
    }

    pub fn iter(&self) -> impl Iterator<Item = &(String, String)> {
        self.0.iter()
    }
}

impl std::fmt::Debug for SecretHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|(k, _)| format!("{k}: [redacted]"))).finish()
    }
}

/// Where one signal goes.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpTarget {
    pub protocol: OtlpProtocol,
    /// HTTP: the full URL requests are posted to. gRPC: the collector's base URL.
    pub endpoint: String,
    pub headers: SecretHeaders,
    pub timeout: Duration,
    /// PEM file of CA certificates trusted for an https:// endpoint, besides the public roots.
    pub ca_file: Option<PathBuf>,
}

/// Validated export settings; present only when export is on.
#[derive(Debug, Clone)]
pub struct OtlpSettings {
    /// `None` when that signal is not exported.
    pub traces: Option<OtlpTarget>,
    pub metrics: Option<OtlpTarget>,
    pub service_name: String,
    pub resource_attributes: Vec<(String, String)>,
    pub queue_capacity: usize,
    pub batch_max_records: usize,
    pub batch_delay: Duration,
    pub metrics_interval: Duration,
    pub max_events_per_span: usize,
    pub capture_content: bool,
    pub spool_dir: PathBuf,
    pub spool_max_bytes: u64,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    pub profile: BackendProfile,
    pub llm_span: LlmSpan,
}

#[cfg(test)]
mod tests {
    use tokentap_analysis::names::deserialized_name_mismatches;

    #[test]
    fn profile_names_are_the_ones_serde_reads() {
        assert!(deserialized_name_mismatches::<super::BackendProfile>().is_empty());
    }
}
