//! The request record: the versioned JSON document tokentap writes for every proxied request.
//! docs/records.md describes every field; bump [`RECORD_VERSION`] when a field changes meaning.

use serde::{Deserialize, Serialize};
use tokentap_analysis::{RequestInfo, StreamAnalysis};

use crate::stamp::{ChunkStamp, UpstreamConnection};

pub const RECORD_VERSION: u32 = 1;

tokentap_analysis::named_enum! {
    /// Where a route sits in a multi-hop chain: browser → tokentap (ingress) → app → tokentap
    /// (egress) → provider. Records of an ingress and an egress route in one trace are joined.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum RouteRole {
        Ingress = "ingress",
        Egress = "egress",
    }
}

tokentap_analysis::named_enum! {
    /// How a request ended.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum Outcome {
        /// The upstream answered with a 1xx–3xx status and the body reached the client completely.
        Ok = "ok",
        /// The upstream answered with a 4xx or 5xx status, passed through unchanged.
        HttpError = "http_error",
        /// The client went away before the response was complete; the upstream request was cancelled.
        ClientCancelled = "client_cancelled",
        /// The upstream failed after the response started (reset, malformed framing, read error).
        UpstreamError = "upstream_error",
        /// tokentap could not connect to the upstream (DNS, TCP, TLS); the client got a 502.
        UpstreamConnectError = "upstream_connect_error",
        /// The upstream stayed silent longer than the read timeout.
        UpstreamTimeout = "upstream_timeout",
        /// No route matches the request path; the client got a 404.
        NoRoute = "no_route",
        /// Anything else that went wrong inside tokentap.
        ProxyError = "proxy_error",
        /// tokentap stopped while the request was in flight: its stream was cut at the end of the
        /// shutdown grace period.
        Shutdown = "shutdown",
    }
}

tokentap_analysis::named_enum! {
    /// The provider a route names (`[[route]] provider`); without one, the stream's format decides.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum Provider {
        Openai = "openai",
        Anthropic = "anthropic",
        Gemini = "gemini",
        Ollama = "ollama",
        /// Any other OpenAI-compatible server.
        Generic = "generic",
        /// An MCP server (Streamable HTTP): exchanges are read as JSON-RPC (`Record::mcp`).
        Mcp = "mcp",
    }
}

tokentap_analysis::named_enum! {
    /// Which side of tokentap a failure came from.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum ErrorSide {
        /// The client (it went away, sent something malformed).
        Client = "client",
        /// The upstream (connect, TLS, read, reset, timeout).
        Upstream = "upstream",
        /// tokentap itself.
        Internal = "internal",
    }
}

/// A failure as recorded: which side, what kind, a message free of secrets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorInfo {
    pub side: ErrorSide,
    pub kind: String,
    pub message: String,
}

/// The conditions a report must state next to any number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stream: Option<bool>,
    pub request_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub prompt_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cached_prompt_tokens: Option<u64>,
    /// cached_prompt_tokens / the prompt's tokens as the provider or server counted them.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cached_prompt_ratio: Option<f64>,
    /// `cold` or `warm` (`server_time::prompt_cache`), when the cached count is known.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub prompt_cache: Option<crate::server_time::PromptCache>,
    /// Other requests in flight on the same route at t0.
    pub concurrency_at_t0: u64,
    /// True when the upstream connection was reused from the pool.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub upstream_connection_reused: Option<bool>,
    /// True for the first `analysis.warmup_requests` requests of the route after start.
    pub warm_up: bool,
    pub tokentap_version: String,
}

/// The request's timeline, in nanoseconds since t0 (the request head arriving at tokentap).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineRecord {
    /// Wall-clock time of t0, nanoseconds since the Unix epoch.
    pub t0_unix_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub t_upstream_sent_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub t_upstream_headers_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub t_end_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub connection: Option<UpstreamConnection>,
    pub chunk_count: u64,
    pub body_bytes: u64,
    /// True when more chunks arrived than `timeline.max_chunks` entries could hold.
    pub chunks_truncated: bool,
    /// True when analysis saw only a prefix of the body (`timeline.max_analysis_bytes`).
    pub analysis_bytes_truncated: bool,
    /// Delivery to the client measured from its TCP ACKs (absent without a body).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub client_delivery: Option<crate::ack::ClientDelivery>,
    /// Spans in which tokentap held the provider: its upstream receive window was closed, with the
    /// provider's bytes waiting unread, because its write to a slow client waited. Left out of the
    /// provider's gaps (ITL, stalls, output rate).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub upstream_held: Vec<HeldSpan>,
    pub chunks: Vec<ChunkStamp>,
}

/// A span of the timeline, in nanoseconds since t0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldSpan {
    pub start_ns: u64,
    pub end_ns: u64,
}

/// tokentap's own cost for this request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfOverhead {
    /// Total time spent inside tokentap's hooks for this request.
    pub hook_time_us: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub handoff_lag_p50_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub handoff_lag_p99_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub handoff_lag_max_us: Option<f64>,
}

/// Bodies, only when content capture is switched on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapturedContent {
    pub request_body: String,
    pub request_body_truncated: bool,
    pub response_body: String,
    pub response_body_truncated: bool,
}

/// One proxied request, as written to records.jsonl and served by the admin API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub record_version: u32,
    pub request_id: String,
    pub trace_id: String,
    pub span_id: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub parent_span_id: Option<String>,
    /// RFC 3339 wall-clock time of t0.
    pub started_at: String,
    pub route: String,
    /// The route's `role` in a multi-hop chain ("ingress" or "egress"), when configured.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub route_role: Option<RouteRole>,
    pub upstream: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub provider: Option<Provider>,
    pub method: String,
    /// Request path with secret-looking query values redacted.
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub status: Option<u16>,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<ErrorInfo>,
    /// Request headers; credential values are replaced by "[redacted]".
    pub request_headers: Vec<(String, String)>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub response_content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub response_content_encoding: Option<String>,
    pub conditions: Conditions,
    pub request: RequestInfo,
    pub timeline: TimelineRecord,
    /// The stream analysis (absent for requests that never reached an upstream, and when shed).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub analysis: Option<StreamAnalysis>,
    /// True when tokentap was overloaded (its finalize queue more than half full) and wrote this
    /// record from the stamps alone: no stream analysis, no kept bytes (`tokentap.records.shed`).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub analysis_shed: bool,
    pub self_overhead: SelfOverhead,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub content: Option<CapturedContent>,
    /// The browser's timeline, once a probe report for this request was joined. The record is then
    /// written again; the last line for a request id is the complete one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub browser: Option<crate::browser::BrowserTimeline>,
    /// Where answer text waited on its way to the user (`hops.rs`): per-hop delays and a verdict.
    /// Computed for the proxy hops when the record is built, again when a browser report joins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<crate::hops::Diagnosis>,
    /// Ingress records only: the egress record of the same user turn, once joined (same trace, its
    /// parent span is this record's span). `diagnosis` then runs from the provider to the browser.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<crate::hops::Chain>,
    /// The user turn this request is a step of (`turn`), for model calls of a conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnRef>,
    /// Text-to-speech responses: the audio's format, first audible sample, audio received over
    /// time, real-time factor and predicted underruns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speech: Option<tokentap_analysis::audio::SpeechAnalysis>,
    /// Speech-to-text responses: first transcript delta, transcript done, usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcription: Option<tokentap_analysis::audio::TranscriptionAnalysis>,
    /// What the server reported about its own time (body or timing headers), as reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<tokentap_analysis::ServerTiming>,
    /// The server's time joined to the wire: `network_and_proxy_ms` and the consistency check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_split: Option<crate::server_time::ServerSplit>,
    /// A WebSocket session (an upgrade answered `101`): the realtime voice session with its
    /// responses (docs/metrics.md, "Realtime voice"). Has its own `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realtime: Option<tokentap_analysis::realtime::RealtimeSession>,
    /// An exchange with an MCP server (a route with `provider = "mcp"`, or detected by its MCP
    /// headers, or by a JSON-RPC body on a path ending in `/mcp`): its operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<tokentap_analysis::mcp::McpExchange>,
}

tokentap_analysis::named_enum! {
    /// How a request was linked to the step before it (strongest rule first).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum TurnLink {
        /// The first step of its turn, in a new conversation.
        First = "first",
        /// The first step of a later turn of a known conversation (a new user message).
        NextTurn = "next_turn",
        /// The same W3C trace id, sent by the client.
        TraceId = "trace_id",
        /// The same explicit turn or conversation header (`[turns] turn_header`,
        /// `conversation_header`).
        Header = "header",
        /// It carries the result of a tool call the previous step's response made.
        ToolResult = "tool_result",
        /// OpenAI Responses `previous_response_id`.
        PreviousResponse = "previous_response",
        /// Its messages extend the previous step's messages (keyed prefix hashes).
        Prefix = "prefix",
        /// A speech-to-text or text-to-speech request of the turn (`voice` in the turn record says
        /// how it was joined).
        Voice = "voice",
    }
}

/// Where a request record sits in its turn (`Record::turn`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRef {
    pub turn_id: String,
    /// `gen_ai.conversation.id`.
    pub conversation_id: String,
    /// 1-based.
    pub step: u32,
    pub link: TurnLink,
    /// The turn's trace: every exported span of the turn carries it, also when this request's own
    /// `trace_id` (the one sent upstream) differs.
    pub trace_id: String,
    /// The turn's `invoke_agent` span, parent of this request's span; set once the turn has made a
    /// tool call (a turn of one plain answer exports no agent span).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_span_id: Option<String>,
}
