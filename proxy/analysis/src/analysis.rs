//! The record one analysed response produces. Field names are the words of docs/metrics.md; times
//! are milliseconds (`_ms`) relative to t0, converted from nanoseconds as `ns as f64 / 1e6`.
//! Undefined values are absent rather than zero, so a missing TTFT can never pass for a fast one.

use serde::{Deserialize, Serialize};

use crate::distribution::Distribution;
use crate::event::{EventClass, EventCounts};
use crate::format::{Dialect, StreamFormat};

/// Nanoseconds to the milliseconds the record uses, exactly as `ns as f64 / 1e6`.
pub(crate) fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Everything tokentap learned from one upstream response body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamAnalysis {
    /// How the body was framed and which provider shape it had.
    pub format: StreamFormat,
    /// The dialect classifier used, absent for audio, binary and empty bodies.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub dialect: Option<Dialect>,
    pub event_counts: EventCounts,
    pub metrics: StreamMetrics,
    pub stalls: StallSummary,
    /// What the provider itself reported, absent when it reported nothing.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub usage: Option<ProviderUsage>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub response_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub response_model: Option<String>,
    #[serde(default)]
    pub finish_reasons: Vec<String>,
    #[serde(default)]
    pub tool_calls: Vec<ToolCallSummary>,
    #[serde(default)]
    pub errors: Vec<StreamError>,
    /// The model refused (OpenAI `refusal` text, Gemini prompt blocked).
    #[serde(default)]
    pub refusal: bool,
    /// Content-bearing events and errors in arrival order, capped at `max_events_kept`.
    #[serde(default)]
    pub events: Vec<EventStamp>,
    /// Events that were not kept in `events` because of the cap.
    #[serde(default)]
    pub events_truncated: u64,
    pub flags: AnalysisFlags,
    /// Keyed hashes of the answer text and its sentences (`conversation::TextHashes`), to link a
    /// speech request to the answer it reads out; never written.
    #[serde(skip)]
    pub answer_hashes: Option<crate::conversation::TextHashes>,
    /// `conversation::reply_key` of this response (its tool call ids, else its answer text): a
    /// later step's history holds the same reply. Written only with `[turns] fleet_key`.
    #[serde(
        default,
        with = "crate::conversation::fleet_hex",
        skip_serializing_if = "crate::conversation::fleet_hex::hidden"
    )]
    pub reply_key: Option<u64>,
    /// What the server reported about its own time in the body (llama.cpp `timings`, Ollama
    /// durations, Groq `x_groq.usage`, Cerebras `time_info`). The record carries it as `server`,
    /// joined with the response headers' report, so it is not written here.
    #[serde(skip)]
    pub server_timing: Option<crate::server_timing::ServerTiming>,
}

/// Latency, rate and size metrics (docs/metrics.md, "Latency metrics").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamMetrics {
    /// t_upstream_headers − t0.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ttfb_ms: Option<f64>,
    /// First body chunk of any kind − t0.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_to_first_chunk_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ttft_reasoning_ms: Option<f64>,
    /// The headline TTFT: first non-empty answer event − t0.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ttft_answer_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ttft_tool_ms: Option<f64>,
    /// min(ttft_answer, ttft_tool).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_to_first_output_ms: Option<f64>,
    /// Gaps between consecutive content-bearing events, by upstream arrival.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub itl_ms: Option<Distribution>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output_tokens: Option<OutputTokens>,
    /// o200k tokens of the first content-bearing event (excluded from `output_tps`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub first_content_tokens: Option<u64>,
    /// (output_tokens − first_content_tokens) / (t_last_content − t_first_content).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output_tps: Option<f64>,
    /// 1000 / output_tps: milliseconds per token after the first content event.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tpot_ms: Option<f64>,
    /// Tokens per content-bearing event (tokens attributed to the event whose bytes completed them).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tokens_per_chunk: Option<Distribution>,
    /// t_end − t0.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub e2e_ms: Option<f64>,
    /// t_last_content − t0.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub to_last_content_ms: Option<f64>,
    pub body_bytes: u64,
    /// Non-empty body chunks received from upstream.
    pub chunk_count: u64,
}

/// o200k_base token counts of content-bearing text; `total` is the sum of the classes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputTokens {
    pub total: u64,
    pub answer: u64,
    pub reasoning: u64,
    pub tool_call: u64,
}

/// Gaps of at least `threshold_ms` between consecutive content-bearing events.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StallSummary {
    pub threshold_ms: f64,
    pub count: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub longest_ms: Option<f64>,
    pub total_ms: f64,
    /// Stalls during which at least one heartbeat arrived: the stream looked alive but produced
    /// nothing.
    pub heartbeat_only: u64,
    /// The first stalls in order (capped; `count` is exact).
    #[serde(default)]
    pub list: Vec<Stall>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// Arrival of the content event before the gap.
    pub start_ms: f64,
    pub gap_ms: f64,
    /// Heartbeat events that arrived inside the gap.
    pub heartbeats: u64,
}

/// Provider-reported usage, with names normalised across providers. `raw` is the last usage object
/// exactly as the provider sent it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderUsage {
    /// prompt_tokens / input_tokens / promptTokenCount / prompt_eval_count.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub input_tokens: Option<u64>,
    /// completion_tokens / output_tokens / candidatesTokenCount / eval_count.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reasoning_tokens: Option<u64>,
    /// Prompt tokens served from cache (cached_tokens / cache_read_input_tokens /
    /// cachedContentTokenCount).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cached_tokens: Option<u64>,
    /// Anthropic cache_creation_input_tokens.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cache_creation_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub total_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub raw: Option<serde_json::Value>,
}

/// One tool call the model made. Arguments themselves are not kept (privacy), only their size and
/// a keyed hash of their parsed value (`conversation::arguments_hash`), which the MCP `tools/call`
/// that executed the call hashes alike.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallSummary {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub name: Option<String>,
    pub argument_bytes: u64,
    /// The arguments as parsed values, hashed (written only when hashes are fleet-keyed).
    #[serde(
        with = "crate::conversation::fleet_hex",
        skip_serializing_if = "crate::conversation::fleet_hex::hidden",
        default
    )]
    pub arguments_hash: Option<u64>,
    /// The argument text while the stream is read (bounded; dropped once hashed).
    #[serde(skip)]
    pub(crate) arguments_text: Option<String>,
    /// Upstream arrival of the last frame that added to or closed this call (its last argument
    /// fragment, or the end of its block or item): from here the client can run the tool.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ready_ms: Option<f64>,
    /// Body byte offset where that frame ended; the record maps it to the chunk handed to the
    /// client.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ready_offset: Option<u64>,
}

/// A mid-stream (or whole-body) error reported by the provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamError {
    pub t_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error_type: Option<String>,
    /// Capped at 300 characters.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message: Option<String>,
}

/// One content-bearing or error event. Later stages align hops by `answer_chars_cum`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventStamp {
    /// Upstream arrival of the chunk that completed the event.
    pub t_ms: f64,
    pub class: EventClass,
    /// Unicode scalar values of this event's text.
    pub chars: u64,
    /// Answer characters received up to and including this event.
    pub answer_chars_cum: u64,
    /// Body byte offset where the event ended.
    pub end_offset: u64,
}

/// Conditions that make the numbers partial or suspicious.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AnalysisFlags {
    /// Events or lines skipped because they exceeded `max_event_bytes`.
    pub oversized_events: u64,
    /// Some text was not valid UTF-8 and was decoded lossily.
    pub invalid_utf8: bool,
    /// The body did not complete (client went away, upstream reset).
    pub body_incomplete: bool,
    /// More content text than `max_token_text_bytes`: token counts cover only the first part.
    pub token_text_truncated: bool,
    /// The client closed its connection after the stream's end marker (`[DONE]`,
    /// `message_stop`…) had reached it, before the body's own end: the answer was complete, the
    /// outcome is `ok`.
    pub client_closed_after_end: bool,
    /// The model returned redacted reasoning (counted as reasoning events with no text).
    pub redacted_reasoning: bool,
    /// The body came with this `Content-Encoding` (gzip, br…). tokentap forwards it as it is and
    /// does not decode it, so its events were not classified: counts and token metrics are absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoded_body: Option<String>,
}
