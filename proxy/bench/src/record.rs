//! One request's result: the per-request JSON line, measured with tokentap's analyzer on the
//! chunks as the client received them, so every number means what docs/metrics.md says.

use serde::{Deserialize, Serialize};
use tokentap_analysis::StreamAnalysis;

tokentap_analysis::named_enum! {
    /// Why a request failed. Nothing is retried: a failure is one sample, counted in its cell.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    pub enum FailureKind {
        /// TCP connect, TLS or the HTTP handshake failed.
        Connect = "connect",
        /// The request could not be written or the response head not read.
        Transport = "transport",
        /// A reused kept-alive connection turned out closed by the server as the request went out.
        StaleConnection = "stale_connection",
        /// The response status was not 2xx.
        HttpStatus = "http_status",
        /// The request had not ended within `--timeout`.
        Timeout = "timeout",
        /// The body ended without the API's end marker (`[DONE]`, `message_stop`), or broke off.
        Truncated = "truncated",
        /// The stream carried an error event.
        StreamError = "stream_error",
        /// A complete 2xx stream with no content at all.
        NoContent = "no_content",
        /// The body exceeded `--max-response-bytes`.
        TooLarge = "too_large",
    }
}

/// A failure with a short detail (never a body or a header value beyond an error message).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub kind: FailureKind,
    pub detail: String,
}

/// One JSON line of `--jsonl`. Times are milliseconds; `*_ms` stamps are since the request's t0
/// (the moment the bench began the request, before taking a connection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// The cell (absent for warm-up requests).
    pub cell: Option<u32>,
    /// The request's index in its cell (or in the warm-up).
    pub index: u32,
    pub warmup: bool,
    /// t0, in milliseconds since the run started.
    pub start_ms: f64,
    /// When the request should have started (open loop), since the run started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled_ms: Option<f64>,
    /// Requests of the bench in flight at t0, this one included.
    pub in_flight_at_start: u32,
    pub prompt_tokens: u64,
    pub max_tokens: u32,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The embedded tokentap's record id (`tokentap explain ID --data-dir …`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokentap_request_id: Option<String>,
    #[serde(default)]
    pub ttfb_ms: Option<f64>,
    #[serde(default)]
    pub time_to_first_chunk_ms: Option<f64>,
    #[serde(default)]
    pub ttft_answer_ms: Option<f64>,
    #[serde(default)]
    pub ttft_reasoning_ms: Option<f64>,
    #[serde(default)]
    pub to_last_content_ms: Option<f64>,
    #[serde(default)]
    pub e2e_ms: Option<f64>,
    /// o200k_base tokens of all content (answer + reasoning + tool calls).
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
    #[serde(default)]
    pub first_content_tokens: Option<u64>,
    /// (output_tokens − first_content_tokens) / (t_last_content − t_first_content).
    #[serde(default)]
    pub output_tps: Option<f64>,
    #[serde(default)]
    pub tpot_ms: Option<f64>,
    /// Gaps between consecutive content-bearing events (client arrival), in order.
    #[serde(default)]
    pub itl_ms: Vec<f64>,
    /// Content-bearing events.
    #[serde(default)]
    pub content_events: u64,
    /// What the provider reported.
    #[serde(default)]
    pub usage_input_tokens: Option<u64>,
    #[serde(default)]
    pub usage_output_tokens: Option<u64>,
    #[serde(default)]
    pub usage_cached_tokens: Option<u64>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// When the request ended (last byte or failure), since the run started.
    pub end_ms: f64,
}

impl RequestRecord {
    /// Copies the metrics of a finished analysis into the record.
    pub(crate) fn fill_from(&mut self, analysis: &StreamAnalysis) {
        let m = &analysis.metrics;
        self.ttfb_ms = m.ttfb_ms;
        self.time_to_first_chunk_ms = m.time_to_first_chunk_ms;
        self.ttft_answer_ms = m.ttft_answer_ms;
        self.ttft_reasoning_ms = m.ttft_reasoning_ms;
        self.to_last_content_ms = m.to_last_content_ms;
        self.e2e_ms = m.e2e_ms;
        self.output_tokens = m.output_tokens.as_ref().map(|t| t.total);
        self.reasoning_tokens = m.output_tokens.as_ref().map(|t| t.reasoning);
        self.first_content_tokens = m.first_content_tokens;
        self.output_tps = m.output_tps;
        self.tpot_ms = m.tpot_ms;
        let content: Vec<f64> = analysis.events.iter().filter(|e| e.class.is_content()).map(|e| e.t_ms).collect();
        self.content_events = content.len() as u64 + analysis.events_truncated;
        self.itl_ms = content.windows(2).map(|w| w[1] - w[0]).collect();
        if let Some(usage) = &analysis.usage {
            self.usage_input_tokens = usage.input_tokens;
            self.usage_output_tokens = usage.output_tokens;
            self.usage_cached_tokens = usage.cached_tokens;
        }
        self.finish_reason = analysis.finish_reasons.last().cloned();
    }

    /// The value of an SLO metric, when defined.
    pub fn slo_value_ms(&self, metric: crate::config::SloMetric) -> Option<f64> {
        use crate::config::SloMetric;
        match metric {
            SloMetric::TtftAnswer => self.ttft_answer_ms,
            SloMetric::TtftReasoning => self.ttft_reasoning_ms,
            SloMetric::Tpot => self.tpot_ms,
            SloMetric::E2e => self.e2e_ms,
        }
    }
}

/// Judges a complete 2xx stream: the failure it represents, if any.
pub(crate) fn stream_failure(analysis: &StreamAnalysis) -> Option<Failure> {
    if let Some(error) = analysis.errors.first() {
        let detail =
            format!("{}: {}", error.error_type.as_deref().unwrap_or("error"), error.message.as_deref().unwrap_or(""));
        return Some(Failure { kind: FailureKind::StreamError, detail: truncate(&detail, 200) });
    }
    if analysis.event_counts.done == 0 {
        return Some(Failure {
            kind: FailureKind::Truncated,
            detail: "the stream ended without its end marker".into(),
        });
    }
    let content = analysis.events.iter().any(|e| e.class.is_content());
    if !content {
        return Some(Failure { kind: FailureKind::NoContent, detail: "no answer, reasoning or tool call".into() });
    }
    None
}

pub(crate) fn truncate(text: &str, max_chars: usize) -> String {
    text.chars().take(max_chars).collect()
}
