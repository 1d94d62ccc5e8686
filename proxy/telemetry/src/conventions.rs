//! The mapping from a [`Record`] to OpenTelemetry's vocabulary, as plain data.
//!
//! This file knows the GenAI semantic conventions (v1.41) and tokentap's own `tokentap.*` names; it
//! does not know the OpenTelemetry SDK or the OTLP wire format (`otlp.rs` does). Tests call it
//! directly: a record in, span descriptions and metric observations out.
//!
//! - [`METRICS`] is the one table of metric names, units, bucket boundaries and Prometheus names.
//!   The GenAI metric names are still in development upstream and may be renamed; change them here.
//! - [`request_spans`] describes the request's CLIENT span and the child spans of its phases.
//! - [`metric_observations`] lists the values a record adds to the metrics.

use tokentap_analysis::{Dialect, EventClass, StreamAnalysis};

use tokentap_record::server_time::ServerCheck;
use tokentap_record::{Outcome, Provider, Record};

pub use crate::settings::{BackendProfile, LlmSpan};

// ---------------------------------------------------------------------------------------------
// Metrics: the table.
// ---------------------------------------------------------------------------------------------

/// Every metric tokentap exports. The discriminant indexes [`METRICS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetricId {
    OperationDuration,
    TimeToFirstChunk,
    TimePerOutputChunk,
    TokenUsage,
    TtftAnswer,
    TtftReasoning,
    TtftTool,
    InterTokenLatency,
    OutputTps,
    Stalls,
    Requests,
    GoodRequests,
    HookTime,
    SchedulingLag,
    RecordsDropped,
    RecordsShed,
    VoiceTimeToFirstAudio,
    VoiceTimeToFirstAudible,
    VoiceTranscriptDone,
    VoiceToVoice,
    ConnectionsRefused,
    TelemetryExported,
    TelemetrySpooled,
    TelemetryDropped,
    RebufferVerdicts,
    InvokeAgentDuration,
    ExecuteToolDuration,
    TurnModelTime,
    TurnToolTime,
    TurnClientTime,
    TurnSteps,
    ServerQueue,
    ServerPrefill,
    ServerDecode,
    NetworkAndProxy,
    RealtimeFirstAudioFromSpeechStopped,
    RealtimeFirstAudioFromSpeechEnd,
}

/// What kind of instrument a metric is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Instrument {
    /// A histogram with explicit bucket boundaries (upper bounds, inclusive).
    Histogram(&'static [f64]),
    /// A monotonic counter of integer counts.
    Counter,
}

/// One row of the metric table.
#[derive(Debug, Clone, Copy)]
pub struct MetricDef {
    pub id: MetricId,
    /// The OpenTelemetry instrument name.
    pub name: &'static str,
    /// UCUM unit, as OpenTelemetry writes it.
    pub unit: &'static str,
    pub description: &'static str,
    pub instrument: Instrument,
    /// The Prometheus family name: the OpenTelemetry name translated the way the Collector's
    /// Prometheus exporter does (dots to underscores, unit suffix, `_total` on counters), so that
    /// one dashboard works against tokentap's `/metrics` and against the Collector.
    pub prometheus_name: &'static str,
}

/// The GenAI conventions' boundaries for client durations, in seconds.
pub const DURATION_BUCKETS: &[f64] =
    &[0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
/// The GenAI conventions' boundaries for token counts.
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
    67108864.0,
];
/// First-token boundaries (the conventions' server time-to-first-token buckets). 0.5 s is a
/// boundary, so the usual "TTFT ≤ 500 ms" objective can be read off the buckets exactly.
pub const TTFT_BUCKETS: &[f64] =
    &[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
/// Gaps between content events: finer than the conventions' time-per-token buckets at the low
/// end, because fast models stream events a few milliseconds apart.
pub const ITL_BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0];
/// Output tokens per second.
pub const TPS_BUCKETS: &[f64] =
    &[1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0];
/// tokentap's own time inside its hooks for one request, in seconds (10 µs … 100 ms).
pub const OVERHEAD_BUCKETS: &[f64] =
    &[0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1];

/// The metric table. Order matches [`MetricId`].
pub const METRICS: &[MetricDef] = &[
    MetricDef {
        id: MetricId::OperationDuration,
        name: "gen_ai.client.operation.duration",
        unit: "s",
        description: "GenAI operation duration: request head received to last response byte handed to the client.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "gen_ai_client_operation_duration_seconds",
    },
    MetricDef {
        id: MetricId::TimeToFirstChunk,
        name: "gen_ai.client.operation.time_to_first_chunk",
        unit: "s",
        description: "Time from the request to the first response chunk of a streaming operation.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "gen_ai_client_operation_time_to_first_chunk_seconds",
    },
    MetricDef {
        id: MetricId::TimePerOutputChunk,
        name: "gen_ai.client.operation.time_per_output_chunk",
        unit: "s",
        description: "Time between consecutive content-bearing events of a streaming operation, one value per event after the first.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "gen_ai_client_operation_time_per_output_chunk_seconds",
    },
    MetricDef {
        id: MetricId::TokenUsage,
        name: "gen_ai.client.token.usage",
        unit: "{token}",
        description: "Input and output tokens as reported by the provider.",
        instrument: Instrument::Histogram(TOKEN_BUCKETS),
        prometheus_name: "gen_ai_client_token_usage",
    },
    MetricDef {
        id: MetricId::TtftAnswer,
        name: "tokentap.ttft.answer",
        unit: "s",
        description: "Time to the first non-empty answer event (the headline TTFT).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_ttft_answer_seconds",
    },
    MetricDef {
        id: MetricId::TtftReasoning,
        name: "tokentap.ttft.reasoning",
        unit: "s",
        description: "Time to the first non-empty reasoning event.",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_ttft_reasoning_seconds",
    },
    MetricDef {
        id: MetricId::TtftTool,
        name: "tokentap.ttft.tool",
        unit: "s",
        description: "Time to the first non-empty tool-call event.",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_ttft_tool_seconds",
    },
    MetricDef {
        id: MetricId::InterTokenLatency,
        name: "tokentap.itl",
        unit: "s",
        description: "Gaps between consecutive content-bearing events, by upstream arrival.",
        instrument: Instrument::Histogram(ITL_BUCKETS),
        prometheus_name: "tokentap_itl_seconds",
    },
    MetricDef {
        id: MetricId::OutputTps,
        name: "tokentap.output_tps",
        unit: "{token}/s",
        description: "Output tokens per second after the first content event, one value per request.",
        instrument: Instrument::Histogram(TPS_BUCKETS),
        prometheus_name: "tokentap_output_tps_per_second",
    },
    MetricDef {
        id: MetricId::Stalls,
        name: "tokentap.stalls",
        unit: "{stall}",
        description: "Gaps between content events at least as long as the stall threshold.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_stalls_total",
    },
    MetricDef {
        id: MetricId::Requests,
        name: "tokentap.requests",
        unit: "{request}",
        description: "Proxied requests by outcome.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_requests_total",
    },
    MetricDef {
        id: MetricId::GoodRequests,
        name: "tokentap.requests.good",
        unit: "{request}",
        description: "Requests that succeeded and met every configured objective (goodput).",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_requests_good_total",
    },
    MetricDef {
        id: MetricId::HookTime,
        name: "tokentap.self_overhead.hook_time",
        unit: "s",
        description: "Time tokentap spent inside its proxy hooks for one request.",
        instrument: Instrument::Histogram(OVERHEAD_BUCKETS),
        prometheus_name: "tokentap_self_overhead_hook_time_seconds",
    },
    MetricDef {
        id: MetricId::SchedulingLag,
        name: "tokentap.self_overhead.scheduling_lag",
        unit: "s",
        description: "How long a task made ready from outside waited before the proxy's runtime polled it (sampled every 25-75 ms).",
        instrument: Instrument::Histogram(OVERHEAD_BUCKETS),
        prometheus_name: "tokentap_self_overhead_scheduling_lag_seconds",
    },
    MetricDef {
        id: MetricId::RecordsDropped,
        name: "tokentap.records.dropped",
        unit: "{record}",
        description: "Records dropped because the finalize queue was full.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_records_dropped_total",
    },
    MetricDef {
        id: MetricId::RecordsShed,
        name: "tokentap.records.shed",
        unit: "{record}",
        description: "Records written without stream analysis because the finalize queue was backed up.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_records_shed_total",
    },
    MetricDef {
        id: MetricId::VoiceTimeToFirstAudio,
        name: "tokentap.voice.time_to_first_audio",
        unit: "s",
        description: "Text to speech: time to the first audio byte of the answer.",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_voice_time_to_first_audio_seconds",
    },
    MetricDef {
        id: MetricId::VoiceTimeToFirstAudible,
        name: "tokentap.voice.time_to_first_audible",
        unit: "s",
        description: "Text to speech: when a player started at the first audio byte reaches the first audible sample.",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_voice_time_to_first_audible_seconds",
    },
    MetricDef {
        id: MetricId::VoiceTranscriptDone,
        name: "tokentap.voice.transcript_done",
        unit: "s",
        description: "Speech to text: time to the complete transcript (transcript.text.done, or the whole answer).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_voice_transcript_done_seconds",
    },
    MetricDef {
        id: MetricId::VoiceToVoice,
        name: "tokentap.voice.voice_to_voice",
        unit: "s",
        description: "Voice turn: the user's end of speech to the answer heard in the browser (browser probe).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_voice_voice_to_voice_seconds",
    },
    MetricDef {
        id: MetricId::ConnectionsRefused,
        name: "tokentap.connections.refused",
        unit: "{connection}",
        description: "Client connections refused over the connection cap or closed for a slow request head.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_connections_refused_total",
    },
    MetricDef {
        id: MetricId::TelemetryExported,
        name: "tokentap.telemetry.exported",
        unit: "{item}",
        description: "Spans and metric exports accepted by the OTLP collector.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_telemetry_exported_total",
    },
    MetricDef {
        id: MetricId::TelemetrySpooled,
        name: "tokentap.telemetry.spooled",
        unit: "{item}",
        description: "Spans and metric exports written to the on-disk spool while the collector was unreachable.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_telemetry_spooled_total",
    },
    MetricDef {
        id: MetricId::TelemetryDropped,
        name: "tokentap.telemetry.dropped",
        unit: "{item}",
        description: "Spans and metric exports given up on (queue full, spool full, rejected by the collector).",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_telemetry_dropped_total",
    },
    MetricDef {
        id: MetricId::RebufferVerdicts,
        name: "tokentap.rebuffer.verdicts",
        unit: "{request}",
        description: "Re-buffering verdicts by kind and hop; scope proxy is judged when the record is built, scope browser again when a probe report joins.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_rebuffer_verdicts_total",
    },
    MetricDef {
        id: MetricId::InvokeAgentDuration,
        name: "gen_ai.invoke_agent.duration",
        unit: "s",
        description: "Agent turn end to end: its first request's head received to the final answer's last content.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "gen_ai_invoke_agent_duration_seconds",
    },
    MetricDef {
        id: MetricId::ExecuteToolDuration,
        name: "gen_ai.execute_tool.duration",
        unit: "s",
        description: "Tool call ready (last argument fragment handed to the client) to the arrival of the request carrying its result; includes the client's own work and network.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "gen_ai_execute_tool_duration_seconds",
    },
    MetricDef {
        id: MetricId::TurnModelTime,
        name: "tokentap.turn.model_time",
        unit: "s",
        description: "Time of a turn inside model calls (the union of its steps).",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "tokentap_turn_model_time_seconds",
    },
    MetricDef {
        id: MetricId::TurnToolTime,
        name: "tokentap.turn.tool_time",
        unit: "s",
        description: "Time of a turn with tool calls out and no model call running.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "tokentap_turn_tool_time_seconds",
    },
    MetricDef {
        id: MetricId::TurnClientTime,
        name: "tokentap.turn.client_time",
        unit: "s",
        description: "Time of a turn neither in a model call nor with a tool call out.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "tokentap_turn_client_time_seconds",
    },
    MetricDef {
        id: MetricId::TurnSteps,
        name: "tokentap.turn.steps",
        unit: "{step}",
        description: "Model calls per turn.",
        instrument: Instrument::Histogram(STEP_BUCKETS),
        prometheus_name: "tokentap_turn_steps",
    },
    MetricDef {
        id: MetricId::ServerQueue,
        name: "tokentap.server.queue",
        unit: "s",
        description: "The server's own report of its queueing time (Groq, Cerebras, TGI).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_server_queue_seconds",
    },
    MetricDef {
        id: MetricId::ServerPrefill,
        name: "tokentap.server.prefill",
        unit: "s",
        description: "The server's own report of its prompt processing time (llama.cpp, Ollama, Groq, Cerebras).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_server_prefill_seconds",
    },
    MetricDef {
        id: MetricId::ServerDecode,
        name: "tokentap.server.decode",
        unit: "s",
        description: "The server's own report of its token generation time (llama.cpp, Ollama, Groq, Cerebras).",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "tokentap_server_decode_seconds",
    },
    MetricDef {
        id: MetricId::NetworkAndProxy,
        name: "tokentap.network_and_proxy",
        unit: "s",
        description: "Wire time minus the server's reported time at the same moment (first token, first byte or response head), when consistent.",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_network_and_proxy_seconds",
    },
    MetricDef {
        id: MetricId::RealtimeFirstAudioFromSpeechStopped,
        name: "tokentap.voice.realtime.time_to_first_audio_from_speech_stopped",
        unit: "s",
        description: "Realtime response: first audio delta after the server's speech_stopped event arrived (its end-of-turn decision).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_voice_realtime_time_to_first_audio_from_speech_stopped_seconds",
    },
    MetricDef {
        id: MetricId::RealtimeFirstAudioFromSpeechEnd,
        name: "tokentap.voice.realtime.time_to_first_audio_from_speech_end",
        unit: "s",
        description: "Realtime response: first audio delta after the estimated true end of the user's speech (VAD end less silence_duration_ms, on the forwarded audio's clock).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_voice_realtime_time_to_first_audio_from_speech_end_seconds",
    },
];

/// Steps per turn.
pub const STEP_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0, 128.0];

impl MetricId {
    pub fn def(self) -> &'static MetricDef {
        &METRICS[self as usize]
    }
}

// ---------------------------------------------------------------------------------------------
// Attribute names.
// ---------------------------------------------------------------------------------------------

/// Attribute keys used on spans and metrics. GenAI and general conventions first, then tokentap's.
pub mod attr {
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    pub const REQUEST_STREAM: &str = "gen_ai.request.stream";
    pub const REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
    pub const RESPONSE_ID: &str = "gen_ai.response.id";
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    pub const RESPONSE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.response.time_to_first_chunk";
    pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub const USAGE_REASONING_OUTPUT_TOKENS: &str = "gen_ai.usage.reasoning.output_tokens";
    pub const USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
    pub const USAGE_CACHE_CREATION_INPUT_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
    pub const TOKEN_TYPE: &str = "gen_ai.token.type";
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    pub const SERVER_ADDRESS: &str = "server.address";
    pub const SERVER_PORT: &str = "server.port";
    pub const ERROR_TYPE: &str = "error.type";
    pub const HTTP_STATUS_CODE: &str = "http.response.status_code";

    pub const REQUEST_ID: &str = "tokentap.request_id";
    pub const ROUTE: &str = "tokentap.route";
    pub const OUTCOME: &str = "tokentap.outcome";
    pub const PHASE: &str = "tokentap.phase";
    pub const TTFB_MS: &str = "tokentap.ttfb_ms";
    pub const SERVER_SOURCE: &str = "tokentap.server.source";
    pub const SERVER_QUEUE_MS: &str = "tokentap.server.queue_ms";
    pub const SERVER_PREFILL_MS: &str = "tokentap.server.prefill_ms";
    pub const SERVER_DECODE_MS: &str = "tokentap.server.decode_ms";
    pub const SERVER_TOTAL_MS: &str = "tokentap.server.total_ms";
    pub const SERVER_PROCESSING_MS: &str = "tokentap.server.processing_ms";
    pub const SERVER_NETWORK_AND_PROXY_MS: &str = "tokentap.server.network_and_proxy_ms";
    pub const SERVER_CHECK: &str = "tokentap.server.check";
    pub const PROMPT_CACHE: &str = "tokentap.prompt_cache";
    pub const VOICE_AUDIO_FORMAT: &str = "tokentap.voice.audio_format";
    pub const VOICE_TIME_TO_FIRST_AUDIO_MS: &str = "tokentap.voice.time_to_first_audio_ms";
    pub const VOICE_TIME_TO_FIRST_AUDIBLE_MS: &str = "tokentap.voice.time_to_first_audible_ms";
    pub const VOICE_LEADING_SILENCE_MS: &str = "tokentap.voice.leading_silence_ms";
    pub const VOICE_AUDIO_MS: &str = "tokentap.voice.audio_ms";
    pub const VOICE_REAL_TIME_FACTOR: &str = "tokentap.voice.real_time_factor";
    pub const VOICE_PREDICTED_UNDERRUNS: &str = "tokentap.voice.predicted_underruns";
    pub const VOICE_PREDICTED_STARVED_MS: &str = "tokentap.voice.predicted_starved_ms";
    pub const VOICE_TIME_TO_FIRST_TRANSCRIPT_DELTA_MS: &str = "tokentap.voice.time_to_first_transcript_delta_ms";
    pub const VOICE_TRANSCRIPT_DONE_MS: &str = "tokentap.voice.transcript_done_ms";
    pub const VOICE_UPLOAD_AUDIO_MS: &str = "tokentap.voice.upload_audio_ms";
    pub const VOICE_PLAYOUT_KIND: &str = "tokentap.voice.playout_kind";
    pub const VOICE_OBSERVED_UNDERRUNS: &str = "tokentap.voice.observed_underruns";
    pub const VOICE_OBSERVED_STARVED_MS: &str = "tokentap.voice.observed_starved_ms";
    pub const VOICE_INTERRUPTED: &str = "tokentap.voice.interrupted";
    pub const VOICE_OUTPUT_LATENCY_MS: &str = "tokentap.voice.output_latency_ms";
    /// A realtime response: heard in the page − `speech_stopped` at tokentap.
    pub const VOICE_HEARD_FROM_SPEECH_STOPPED_MS: &str = "tokentap.voice.time_to_heard_from_speech_stopped_ms";
    /// A realtime response: heard in the page − its first audio delta at tokentap.
    pub const VOICE_HEARD_AFTER_FIRST_AUDIO_MS: &str = "tokentap.voice.heard_after_first_audio_ms";
    /// A realtime response: its first audio delta in the page − at tokentap.
    pub const VOICE_FIRST_AUDIO_DELIVERY_MS: &str = "tokentap.voice.first_audio_delivery_ms";
    pub const VOICE_TO_VOICE_MS: &str = "tokentap.voice.voice_to_voice_ms";
    pub const VOICE_TIME_TO_FIRST_AUDIO_FROM_SPEECH_STOPPED_MS: &str =
        "tokentap.voice.time_to_first_audio_from_speech_stopped_ms";
    pub const VOICE_TIME_TO_FIRST_AUDIO_FROM_SPEECH_END_MS: &str =
        "tokentap.voice.time_to_first_audio_from_speech_end_ms";
    pub const VOICE_TIME_TO_FIRST_AUDIO_FROM_CREATE_MS: &str = "tokentap.voice.time_to_first_audio_from_create_ms";
    pub const REALTIME_RESPONSE_INDEX: &str = "tokentap.realtime.response_index";
    pub const REALTIME_TRIGGER: &str = "tokentap.realtime.trigger";
    pub const REALTIME_INTERRUPTED: &str = "tokentap.realtime.interrupted";
    pub const REALTIME_INPUT_AUDIO_TOKENS: &str = "tokentap.realtime.input_audio_tokens";
    pub const REALTIME_OUTPUT_AUDIO_TOKENS: &str = "tokentap.realtime.output_audio_tokens";
    pub const REALTIME_TOOL_OUTPUT_SENT_MS: &str = "tokentap.realtime.tool_output_sent_ms";
    pub const REALTIME_RESPONSES: &str = "tokentap.realtime.responses";
    pub const REALTIME_SESSION_END: &str = "tokentap.realtime.session_end";
    pub const REALTIME_UNKNOWN_EVENTS: &str = "tokentap.realtime.unknown_events";
    pub const TTFT_ANSWER_MS: &str = "tokentap.ttft_answer_ms";
    pub const TTFT_REASONING_MS: &str = "tokentap.ttft_reasoning_ms";
    pub const TTFT_TOOL_MS: &str = "tokentap.ttft_tool_ms";
    pub const OUTPUT_TPS: &str = "tokentap.output_tps";
    pub const TPOT_MS: &str = "tokentap.tpot_ms";
    pub const OUTPUT_TOKENS: &str = "tokentap.output_tokens";
    pub const ITL_P50_MS: &str = "tokentap.itl.p50_ms";
    pub const ITL_P99_MS: &str = "tokentap.itl.p99_ms";
    pub const ITL_MAX_MS: &str = "tokentap.itl.max_ms";
    pub const STALL_COUNT: &str = "tokentap.stalls.count";
    pub const STALL_LONGEST_MS: &str = "tokentap.stalls.longest_ms";
    pub const STALL_HEARTBEAT_ONLY: &str = "tokentap.stalls.heartbeat_only";
    pub const HOOK_TIME_US: &str = "tokentap.self_overhead.hook_time_us";
    pub const HANDOFF_LAG_P99_US: &str = "tokentap.self_overhead.handoff_lag_p99_us";
    pub const HANDOFF_LAG_MAX_US: &str = "tokentap.self_overhead.handoff_lag_max_us";
    pub const REBUFFERED: &str = "tokentap.rebuffered";
    pub const CHUNK_COUNT: &str = "tokentap.chunk_count";
    pub const BODY_BYTES: &str = "tokentap.body_bytes";
    pub const EVENTS_DROPPED: &str = "tokentap.events_dropped";
    pub const TOOL_CALLS: &str = "tokentap.tool_calls";
    /// The tool a `tool_call` phase span streamed the arguments of (the model's time, not the
    /// tool's: only `execute_tool` spans carry the conventions' `gen_ai.tool.*`).
    pub const STREAMED_TOOL_NAME: &str = "tokentap.tool_call.name";
    pub const STREAMED_TOOL_CALL_ID: &str = "tokentap.tool_call.id";
    /// Every tool a `tool_call` phase span streamed, in order (also when there is only one).
    pub const STREAMED_TOOL_NAMES: &str = "tokentap.tool_call.names";
    /// Langfuse's own name for the time the first token arrived (RFC 3339, UTC).
    pub const LANGFUSE_COMPLETION_START_TIME: &str = "langfuse.observation.completion_start_time";
    /// With `llm_span = "app"`, the usage of a call the app's own span already counts.
    pub const APP_USAGE_INPUT_TOKENS: &str = "tokentap.usage.input_tokens";
    pub const APP_USAGE_OUTPUT_TOKENS: &str = "tokentap.usage.output_tokens";
    pub const APP_USAGE_REASONING_OUTPUT_TOKENS: &str = "tokentap.usage.reasoning.output_tokens";
    pub const APP_USAGE_CACHE_READ_INPUT_TOKENS: &str = "tokentap.usage.cache_read.input_tokens";
    pub const APP_USAGE_CACHE_CREATION_INPUT_TOKENS: &str = "tokentap.usage.cache_creation.input_tokens";
    pub const CONTENT_REQUEST_BODY: &str = "tokentap.content.request_body";
    pub const CONTENT_RESPONSE_BODY: &str = "tokentap.content.response_body";

    pub const CHUNK_INDEX: &str = "tokentap.chunk.index";
    pub const CHUNK_OFFSET: &str = "tokentap.chunk.offset";
    pub const CHUNK_BYTES: &str = "tokentap.chunk.bytes";
    pub const CHUNK_HANDOFF_LAG_US: &str = "tokentap.chunk.handoff_lag_us";
    pub const STALL_GAP_MS: &str = "tokentap.stall.gap_ms";
    pub const STALL_HEARTBEATS: &str = "tokentap.stall.heartbeats";
    pub const ERROR_MESSAGE: &str = "tokentap.error.message";

    pub const REBUFFER_KIND: &str = "tokentap.rebuffer.kind";
    pub const REBUFFER_HOP: &str = "tokentap.rebuffer.hop";
    pub const REBUFFER_VERDICT: &str = "tokentap.rebuffer.verdict";
    pub const REBUFFER_SCOPE: &str = "tokentap.rebuffer.scope";
    pub const BROWSER_PAGE_PATH: &str = "tokentap.browser.page_path";
    pub const BROWSER_TIME_TO_FIRST_PAINT_MS: &str = "tokentap.browser.time_to_first_paint_ms";
    pub const BROWSER_DELIVERY_DELAY_P50_MS: &str = "tokentap.browser.delivery_delay.p50_ms";
    pub const BROWSER_DELIVERY_DELAY_P99_MS: &str = "tokentap.browser.delivery_delay.p99_ms";
    pub const BROWSER_RENDER_DELAY_P50_MS: &str = "tokentap.browser.render_delay.p50_ms";
    pub const BROWSER_RENDER_DELAY_P99_MS: &str = "tokentap.browser.render_delay.p99_ms";
    pub const BROWSER_RENDER_DELAY_MAX_MS: &str = "tokentap.browser.render_delay.max_ms";
    pub const BROWSER_CLOCK_UNCERTAINTY_MS: &str = "tokentap.browser.clock_uncertainty_ms";
    pub const BROWSER_LONG_FRAMES: &str = "tokentap.browser.long_frames";
    pub const BROWSER_BYTES_MATCH: &str = "tokentap.browser.bytes_match";
    pub const MARK_NAME: &str = "tokentap.mark.name";

    pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
    pub const TOOL_TYPE: &str = "gen_ai.tool.type";
    pub const TURN_ID: &str = "tokentap.turn.id";
    pub const TURN_STEP: &str = "tokentap.turn.step";
    pub const TURN_LINK: &str = "tokentap.turn.link";
    pub const TURN_STATUS: &str = "tokentap.turn.status";
    pub const TURN_STEPS: &str = "tokentap.turn.steps";
    pub const TURN_TOOL_CALLS: &str = "tokentap.turn.tool_calls";
    pub const TURN_UNANSWERED_TOOL_CALLS: &str = "tokentap.turn.unanswered_tool_calls";
    pub const TURN_E2E_MS: &str = "tokentap.turn.e2e_ms";
    pub const TURN_MODEL_MS: &str = "tokentap.turn.model_ms";
    pub const TURN_TOOL_MS: &str = "tokentap.turn.tool_ms";
    pub const TURN_CLIENT_MS: &str = "tokentap.turn.client_ms";
    /// The turn's tokens over its steps. Not `gen_ai.usage.*`: backends add a parent's usage to
    /// its children's, and the steps' LLM spans already carry theirs.
    pub const TURN_INPUT_TOKENS: &str = "tokentap.turn.input_tokens";
    pub const TURN_OUTPUT_TOKENS: &str = "tokentap.turn.output_tokens";
    pub const TOOL_RESULT_STEP: &str = "tokentap.tool.result_step";

    /// Label of the telemetry counters: `traces` or `metrics`.
    pub const SIGNAL: &str = "tokentap.signal";
    /// Why telemetry was dropped: `queue_full`, `spool_full`, `rejected`.
    pub const DROP_REASON: &str = "tokentap.reason";
}

/// The value of `gen_ai.provider.name` when neither the route nor the stream says.
pub const PROVIDER_OTHER: &str = "_OTHER";

/// The proxy hop counts as re-buffering when it held a chunk at least this long (handoff − arrival).
/// Until per-hop verdicts from the browser probe are part of the exported span, this is what
/// `tokentap.rebuffered` means.
pub const REBUFFER_HANDOFF_LAG_US: f64 = 100_000.0;

// ---------------------------------------------------------------------------------------------
// Spans.
// ---------------------------------------------------------------------------------------------

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    F64(f64),
    Bool(bool),
    StrArray(Vec<String>),
}

impl AttrValue {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }
}

pub type Attributes = Vec<(&'static str, AttrValue)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Client,
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpanStatus {
    Unset,
    Error(String),
}

/// A span event with its absolute time.
#[derive(Debug, Clone, PartialEq)]
pub struct EventPlan {
    pub name: &'static str,
    pub time_unix_ns: u64,
    pub attributes: Attributes,
}

/// One span, fully described: ids, name, times (ns since the Unix epoch), attributes, events.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanPlan {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub sampled: bool,
    pub name: String,
    pub kind: SpanKind,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub attributes: Attributes,
    pub events: Vec<EventPlan>,
    /// Events left out to stay within the budget.
    pub dropped_events: u32,
    pub status: SpanStatus,
}

impl SpanPlan {
    pub fn attribute(&self, key: &str) -> Option<&AttrValue> {
        self.attributes.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// Choices that shape the spans.
#[derive(Debug, Clone, Copy)]
pub struct SpanOptions {
    /// Most events on one span. Chunks beyond it are summarised: the first half and the last half
    /// of the budget are kept, the middle is counted in `tokentap.events_dropped`.
    pub max_events_per_span: usize,
    /// Attach the captured bodies (only present when `privacy.capture_content` is on too).
    pub capture_content: bool,
    /// Longest captured body attached, in bytes.
    pub max_content_attribute_bytes: usize,
    /// Add `langfuse.observation.completion_start_time` (the first answer token, RFC 3339 UTC) to
    /// the request span: Langfuse reads the time to first token from it and from nothing else.
    pub completion_start_time: bool,
    /// Which span backends count as the LLM call when the request continues a caller's trace.
    pub llm_span: LlmSpan,
}

impl Default for SpanOptions {
    fn default() -> Self {
        Self {
            max_events_per_span: 64,
            capture_content: false,
            max_content_attribute_bytes: 16 << 10,
            completion_start_time: false,
            llm_span: LlmSpan::Tokentap,
        }
    }
}

impl SpanOptions {
    /// The span choices an export profile makes.
    pub fn for_profile(mut self, profile: BackendProfile, llm_span: LlmSpan) -> Self {
        self.completion_start_time = profile == BackendProfile::Langfuse;
        self.llm_span = llm_span;
        self
    }
}

/// Names of the phase spans (also the value of `tokentap.phase`).
pub mod phase {
    pub const PROVIDER_WAIT: &str = "provider_wait";
    pub const REASONING: &str = "reasoning";
    pub const ANSWER: &str = "answer";
    pub const TOOL_CALL: &str = "tool_call";
    pub const DELIVERY: &str = "delivery";
}

/// Event names.
pub mod event {
    pub const BROWSER_MARK: &str = "tokentap.browser.mark";
    pub const FIRST_PAINT: &str = "tokentap.browser.first_paint";
    pub const LONG_FRAME: &str = "tokentap.browser.long_frame";
    pub const CHUNK: &str = "tokentap.chunk";
    pub const STALL: &str = "tokentap.stall";
    pub const STREAM_ERROR: &str = "tokentap.stream_error";
}

fn ms_to_ns(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1e6).round() as u64
    } else {
        0
    }
}

fn hex_bytes<const N: usize>(hex: &str) -> Option<[u8; N]> {
    if hex.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A child span's id, derived from the request's span id and the phase name, so the same record
/// always yields the same ids (a replayed export is a duplicate, not a second span). FNV-1a.
fn child_span_id(parent: [u8; 8], phase: &str) -> [u8; 8] {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parent.iter().chain(phase.as_bytes()) {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    if hash == 0 {
        hash = 1;
    }
    hash.to_be_bytes()
}

/// `gen_ai.provider.name`: the route's hint, else the dialect the stream was read with.
pub fn provider_name(record: &Record) -> &'static str {
    match record.provider {
        Some(Provider::Openai) => return "openai",
        Some(Provider::Anthropic) => return "anthropic",
        Some(Provider::Gemini) => return "gcp.gemini",
        Some(Provider::Ollama) => return "ollama",
        Some(Provider::Generic) | None => {}
    }
    match record.analysis.as_ref().and_then(|a| a.dialect) {
        Some(Dialect::OpenaiChat | Dialect::OpenaiResponses) => "openai",
        Some(Dialect::AnthropicMessages) => "anthropic",
        Some(Dialect::Gemini) => "gcp.gemini",
        Some(Dialect::Ollama) => "ollama",
        _ => PROVIDER_OTHER,
    }
}

/// `error.type` for a request that did not succeed: the HTTP status for provider errors, the error
/// kind for transport failures, the provider's error type for a stream that reported an error.
pub fn error_type(record: &Record) -> Option<String> {
    match record.outcome {
        Outcome::Ok => record
            .analysis
            .as_ref()
            .and_then(|a| a.errors.first())
            .map(|e| e.error_type.clone().unwrap_or_else(|| "stream_error".to_string())),
        Outcome::HttpError => Some(record.status.map(|s| s.to_string()).unwrap_or_else(|| "http_error".into())),
        other => Some(record.error.as_ref().map(|e| e.kind.clone()).unwrap_or_else(|| other.as_str().to_string())),
    }
}

/// `server.address` and `server.port` of the upstream base URL.
pub fn server_address(upstream: &str) -> Option<(String, u16)> {
    let (scheme, rest) = upstream.split_once("://")?;
    let authority = rest.split('/').next()?;
    let default_port = if scheme == "https" { 443 } else { 80 };
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok()).unwrap_or(default_port);
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_string(), port.parse().ok()?)),
        None if !authority.is_empty() => Some((authority.to_string(), default_port)),
        None => None,
    }
}

/// The span name: `{gen_ai.operation.name} {gen_ai.request.model}` when both are known.
pub fn span_name(record: &Record) -> String {
    match (record.request.operation.as_deref(), record.request.model.as_deref()) {
        (Some(op), Some(model)) if !model.is_empty() => format!("{op} {model}"),
        (Some(op), _) => op.to_string(),
        // Not a GenAI call tokentap recognises: name it like an HTTP client span.
        (None, _) => record.method.clone(),
    }
}

/// Times of the phases, in ns since t0, from the analysis.
struct PhaseTimes {
    first_content: Option<u64>,
    first_chunk: Option<u64>,
    reasoning: Option<(u64, u64)>,
    answer: Option<(u64, u64)>,
    tool_call: Option<(u64, u64)>,
}

fn class_range(a: &StreamAnalysis, class: EventClass, first_ms: Option<f64>) -> Option<(u64, u64)> {
    let first = ms_to_ns(first_ms?);
    let last = a.events.iter().filter(|e| e.class == class).map(|e| ms_to_ns(e.t_ms)).max().unwrap_or(first);
    Some((first, last.max(first)))
}

fn phase_times(record: &Record) -> PhaseTimes {
    let first_chunk = record.timeline.chunks.first().map(|c| c.t_up_ns);
    let Some(a) = record.analysis.as_ref() else {
        return PhaseTimes { first_content: None, first_chunk, reasoning: None, answer: None, tool_call: None };
    };
    let m = &a.metrics;
    let first_content =
        [m.ttft_reasoning_ms, m.ttft_answer_ms, m.ttft_tool_ms].into_iter().flatten().map(ms_to_ns).min();
    PhaseTimes {
        first_content,
        first_chunk: first_chunk.or(m.time_to_first_chunk_ms.map(ms_to_ns)),
        reasoning: class_range(a, EventClass::Reasoning, m.ttft_reasoning_ms),
        answer: class_range(a, EventClass::Answer, m.ttft_answer_ms),
        tool_call: class_range(a, EventClass::ToolCall, m.ttft_tool_ms),
    }
}

/// The request's end in ns since t0: the last byte handed to the client, else the latest stamp.
fn request_end_ns(record: &Record) -> u64 {
    let t = &record.timeline;
    let latest_chunk = t.chunks.iter().map(|c| c.t_handoff_ns.unwrap_or(c.t_up_ns).max(c.t_up_ns)).max();
    let latest_event = record.analysis.as_ref().and_then(|a| a.events.iter().map(|e| ms_to_ns(e.t_ms)).max());
    [t.t_end_ns, t.t_upstream_sent_ns, t.t_upstream_headers_ns, latest_chunk, latest_event]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0)
}

fn push_opt_f64(attrs: &mut Attributes, key: &'static str, value: Option<f64>) {
    if let Some(v) = value.filter(|v| v.is_finite()) {
        attrs.push((key, AttrValue::F64(v)));
    }
}

fn push_opt_u64(attrs: &mut Attributes, key: &'static str, value: Option<u64>) {
    if let Some(v) = value {
        attrs.push((key, AttrValue::Int(i64::try_from(v).unwrap_or(i64::MAX))));
    }
}

fn truncate_utf8(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text[..cut].to_string()
}

/// Keeps at most `budget` of `events` (already in time order): the first half and the last half
/// of the budget. Returns the events kept and how many were left out.
fn within_budget(mut events: Vec<EventPlan>, budget: usize) -> (Vec<EventPlan>, u32) {
    if events.len() <= budget {
        return (events, 0);
    }
    let dropped = events.len() - budget;
    let head = budget.div_ceil(2);
    let tail = budget - head;
    let mut kept: Vec<EventPlan> = events.drain(..head).collect();
    let tail_start = events.len() - tail;
    kept.extend(events.drain(tail_start..));
    (kept, u32::try_from(dropped).unwrap_or(u32::MAX))
}

/// `tokentap.voice.*`: what the speech and transcription analyses found.
fn voice_attributes(record: &Record, attrs: &mut Attributes) {
    if let Some(s) = &record.speech {
        let format = serde_json::to_value(s.format).ok().and_then(|v| v.as_str().map(str::to_owned));
        if let Some(format) = format {
            attrs.push((attr::VOICE_AUDIO_FORMAT, AttrValue::Str(format)));
        }
        push_opt_f64(attrs, attr::VOICE_TIME_TO_FIRST_AUDIO_MS, s.time_to_first_audio_ms);
        push_opt_f64(attrs, attr::VOICE_TIME_TO_FIRST_AUDIBLE_MS, s.time_to_first_audible_ms);
        push_opt_f64(attrs, attr::VOICE_LEADING_SILENCE_MS, s.leading_silence_ms);
        push_opt_f64(attrs, attr::VOICE_AUDIO_MS, s.audio_ms);
        push_opt_f64(attrs, attr::VOICE_REAL_TIME_FACTOR, s.real_time_factor);
        if let Some(p) = &s.predicted {
            push_opt_u64(attrs, attr::VOICE_PREDICTED_UNDERRUNS, Some(u64::from(p.underruns)));
            push_opt_f64(attrs, attr::VOICE_PREDICTED_STARVED_MS, Some(p.starved_ms));
        }
        if let Some(u) = &s.usage {
            push_opt_u64(attrs, attr::USAGE_INPUT_TOKENS, u.input_tokens);
            push_opt_u64(attrs, attr::USAGE_OUTPUT_TOKENS, u.output_tokens);
        }
    }
    if let Some(t) = &record.transcription {
        push_opt_f64(attrs, attr::VOICE_TIME_TO_FIRST_TRANSCRIPT_DELTA_MS, t.time_to_first_delta_ms);
        push_opt_f64(attrs, attr::VOICE_TRANSCRIPT_DONE_MS, t.transcript_done_ms);
        if let Some(u) = &t.usage {
            push_opt_u64(attrs, attr::USAGE_INPUT_TOKENS, u.input_tokens);
            push_opt_u64(attrs, attr::USAGE_OUTPUT_TOKENS, u.output_tokens);
        }
    }
    let upload = record.request.transcription.as_ref().and_then(|t| t.upload.as_ref());
    push_opt_f64(attrs, attr::VOICE_UPLOAD_AUDIO_MS, upload.and_then(|u| u.duration_ms));
}

fn request_attributes(record: &Record, options: &SpanOptions) -> Attributes {
    let mut attrs: Attributes = Vec::with_capacity(48);
    let request = &record.request;
    if let Some(session) = &record.realtime {
        attrs.push((attr::REALTIME_RESPONSES, AttrValue::Int(session.responses.len() as i64)));
        attrs.push((attr::REALTIME_SESSION_END, AttrValue::Str(realtime::session_end_label(session))));
        let unknown = session.client.unknown_events + session.server.unknown_events;
        attrs.push((attr::REALTIME_UNKNOWN_EVENTS, AttrValue::Int(i64::try_from(unknown).unwrap_or(i64::MAX))));
        if let Some(id) = &session.session_id {
            attrs.push((attr::CONVERSATION_ID, AttrValue::Str(id.clone())));
        }
    }
    if let Some(op) = &request.operation {
        attrs.push((attr::OPERATION_NAME, AttrValue::Str(op.clone())));
    }
    attrs.push((attr::PROVIDER_NAME, AttrValue::Str(provider_name(record).to_string())));
    if let Some(model) = request.model.as_ref().filter(|m| !m.is_empty()) {
        attrs.push((attr::REQUEST_MODEL, AttrValue::Str(model.clone())));
    }
    if let Some(stream) = request.stream {
        attrs.push((attr::REQUEST_STREAM, AttrValue::Bool(stream)));
    }
    push_opt_u64(&mut attrs, attr::REQUEST_MAX_TOKENS, request.max_tokens);
    if let Some((host, port)) = server_address(&record.upstream) {
        attrs.push((attr::SERVER_ADDRESS, AttrValue::Str(host)));
        attrs.push((attr::SERVER_PORT, AttrValue::Int(i64::from(port))));
    }
    push_opt_u64(&mut attrs, attr::HTTP_STATUS_CODE, record.status.map(u64::from));
    if let Some(turn) = &record.turn {
        attrs.push((attr::CONVERSATION_ID, AttrValue::Str(turn.conversation_id.clone())));
        attrs.push((attr::TURN_ID, AttrValue::Str(turn.turn_id.clone())));
        attrs.push((attr::TURN_STEP, AttrValue::Int(i64::from(turn.step))));
        attrs.push((attr::TURN_LINK, AttrValue::Str(turn.link.as_str().to_owned())));
    }
    if let Some(error) = error_type(record) {
        attrs.push((attr::ERROR_TYPE, AttrValue::Str(error)));
    }
    if let Some(a) = &record.analysis {
        if let Some(id) = &a.response_id {
            attrs.push((attr::RESPONSE_ID, AttrValue::Str(id.clone())));
        }
        if let Some(model) = &a.response_model {
            attrs.push((attr::RESPONSE_MODEL, AttrValue::Str(model.clone())));
        }
        if !a.finish_reasons.is_empty() {
            attrs.push((attr::RESPONSE_FINISH_REASONS, AttrValue::StrArray(a.finish_reasons.clone())));
        }
        if request.stream == Some(true) {
            push_opt_f64(
                &mut attrs,
                attr::RESPONSE_TIME_TO_FIRST_CHUNK,
                a.metrics.time_to_first_chunk_ms.map(|ms| ms / 1e3),
            );
        }
        if let Some(u) = &a.usage {
            push_opt_u64(&mut attrs, attr::USAGE_INPUT_TOKENS, u.input_tokens);
            push_opt_u64(&mut attrs, attr::USAGE_OUTPUT_TOKENS, u.output_tokens);
            push_opt_u64(&mut attrs, attr::USAGE_REASONING_OUTPUT_TOKENS, u.reasoning_tokens);
            push_opt_u64(&mut attrs, attr::USAGE_CACHE_CREATION_INPUT_TOKENS, u.cache_creation_tokens);
        }
    }
    if options.completion_start_time {
        if let Some(time) = completion_start_time(record) {
            attrs.push((attr::LANGFUSE_COMPLETION_START_TIME, AttrValue::Str(time)));
        }
    }
    // The provider's cached prompt tokens, else the server's own count (llama.cpp `cache_n`).
    let cached = record.analysis.as_ref().and_then(|a| a.usage.as_ref()).and_then(|u| u.cached_tokens);
    push_opt_u64(&mut attrs, attr::USAGE_CACHE_READ_INPUT_TOKENS, cached.or(record.conditions.cached_prompt_tokens));

    attrs.push((attr::REQUEST_ID, AttrValue::Str(record.request_id.clone())));
    attrs.push((attr::ROUTE, AttrValue::Str(record.route.clone())));
    attrs.push((attr::OUTCOME, AttrValue::Str(record.outcome.as_str().to_string())));
    if let Some(a) = &record.analysis {
        let m = &a.metrics;
        push_opt_f64(&mut attrs, attr::TTFB_MS, m.ttfb_ms);
        push_opt_f64(&mut attrs, attr::TTFT_ANSWER_MS, m.ttft_answer_ms);
        push_opt_f64(&mut attrs, attr::TTFT_REASONING_MS, m.ttft_reasoning_ms);
        push_opt_f64(&mut attrs, attr::TTFT_TOOL_MS, m.ttft_tool_ms);
        push_opt_f64(&mut attrs, attr::OUTPUT_TPS, m.output_tps);
        push_opt_f64(&mut attrs, attr::TPOT_MS, m.tpot_ms);
        push_opt_u64(&mut attrs, attr::OUTPUT_TOKENS, m.output_tokens.as_ref().map(|t| t.total));
        if let Some(itl) = &m.itl_ms {
            push_opt_f64(&mut attrs, attr::ITL_P50_MS, Some(itl.p50));
            push_opt_f64(&mut attrs, attr::ITL_P99_MS, Some(itl.p99));
            push_opt_f64(&mut attrs, attr::ITL_MAX_MS, Some(itl.max));
        }
        push_opt_u64(&mut attrs, attr::STALL_COUNT, Some(a.stalls.count));
        push_opt_f64(&mut attrs, attr::STALL_LONGEST_MS, a.stalls.longest_ms);
        push_opt_u64(&mut attrs, attr::STALL_HEARTBEAT_ONLY, Some(a.stalls.heartbeat_only));
    }
    voice_attributes(record, &mut attrs);
    server_attributes(record, &mut attrs);
    let o = &record.self_overhead;
    push_opt_f64(&mut attrs, attr::HOOK_TIME_US, Some(o.hook_time_us));
    push_opt_f64(&mut attrs, attr::HANDOFF_LAG_P99_US, o.handoff_lag_p99_us);
    push_opt_f64(&mut attrs, attr::HANDOFF_LAG_MAX_US, o.handoff_lag_max_us);
    let rebuffered = match &record.diagnosis {
        Some(_) => diagnosis_attrs(record, &mut attrs),
        None => o.handoff_lag_max_us.is_some_and(|lag| lag >= REBUFFER_HANDOFF_LAG_US),
    };
    attrs.push((attr::REBUFFERED, AttrValue::Bool(rebuffered)));

    if options.capture_content {
        if let Some(content) = &record.content {
            let cap = options.max_content_attribute_bytes;
            attrs.push((attr::CONTENT_REQUEST_BODY, AttrValue::Str(truncate_utf8(&content.request_body, cap))));
            attrs.push((attr::CONTENT_RESPONSE_BODY, AttrValue::Str(truncate_utf8(&content.response_body, cap))));
        }
    }
    attrs
}

/// The server's own report of its time and its split against the wire (`tokentap.server.*`).
fn server_attributes(record: &Record, attrs: &mut Attributes) {
    if let Some(cache) = record.conditions.prompt_cache {
        attrs.push((attr::PROMPT_CACHE, AttrValue::Str(cache.as_str().to_owned())));
    }
    let Some(s) = &record.server else { return };
    attrs.push((attr::SERVER_SOURCE, AttrValue::Str(s.source.as_str().to_owned())));
    push_opt_f64(attrs, attr::SERVER_QUEUE_MS, s.queue_ms);
    push_opt_f64(attrs, attr::SERVER_PREFILL_MS, s.prefill_ms);
    push_opt_f64(attrs, attr::SERVER_DECODE_MS, s.decode_ms);
    push_opt_f64(attrs, attr::SERVER_TOTAL_MS, s.total_ms);
    push_opt_f64(attrs, attr::SERVER_PROCESSING_MS, s.processing_ms);
    if let Some(split) = &record.server_split {
        push_opt_f64(attrs, attr::SERVER_NETWORK_AND_PROXY_MS, Some(split.network_and_proxy_ms));
        let check = match split.check {
            ServerCheck::Consistent => "consistent",
            ServerCheck::ServerExceedsWire => "server_exceeds_wire",
        };
        attrs.push((attr::SERVER_CHECK, AttrValue::Str(check.to_owned())));
    }
}

/// Whether the request span hangs under a span of the calling app: a caller's `traceparent`, not a
/// turn's agent span (tokentap's own) and not an ingress hop's span (tokentap's own too).
fn continues_an_app_span(record: &Record, has_parent: bool) -> bool {
    has_parent
        && record.parent_span_id.is_some()
        && record.turn.as_ref().is_none_or(|t| t.agent_span_id.is_none())
        && record.route_role != Some(tokentap_record::RouteRole::Egress)
}

/// `llm_span = "app"`: the request span becomes tokentap's timing of the app's own LLM call. The
/// app's span carries the call for the backends (kind LLM, tokens, cost); this one keeps the
/// same facts under `tokentap.*` names (`gen_ai.X` → `tokentap.X`), because backends classify a
/// span as an LLM call from its `gen_ai.operation.name` or its model (Phoenix does from
/// `gen_ai.request.model` alone) and add up its `gen_ai.usage.*`.
/// The conversation id stays: it only groups spans into a session.
fn as_timing_of_the_apps_call(name: &mut String, attributes: &mut Attributes) {
    *name = format!("tokentap {name}");
    attributes.retain(|(k, _)| *k != attr::OPERATION_NAME);
    for (key, _) in attributes.iter_mut() {
        if let Some(renamed) = app_call_name(key) {
            *key = renamed;
        }
    }
}

/// The `tokentap.*` name of a GenAI attribute on the timing span of an app's own call.
fn app_call_name(key: &str) -> Option<&'static str> {
    Some(match key {
        attr::PROVIDER_NAME => "tokentap.provider.name",
        attr::REQUEST_MODEL => "tokentap.request.model",
        attr::REQUEST_STREAM => "tokentap.request.stream",
        attr::REQUEST_MAX_TOKENS => "tokentap.request.max_tokens",
        attr::RESPONSE_ID => "tokentap.response.id",
        attr::RESPONSE_MODEL => "tokentap.response.model",
        attr::RESPONSE_FINISH_REASONS => "tokentap.response.finish_reasons",
        attr::RESPONSE_TIME_TO_FIRST_CHUNK => "tokentap.response.time_to_first_chunk",
        attr::USAGE_INPUT_TOKENS => attr::APP_USAGE_INPUT_TOKENS,
        attr::USAGE_OUTPUT_TOKENS => attr::APP_USAGE_OUTPUT_TOKENS,
        attr::USAGE_REASONING_OUTPUT_TOKENS => attr::APP_USAGE_REASONING_OUTPUT_TOKENS,
        attr::USAGE_CACHE_READ_INPUT_TOKENS => attr::APP_USAGE_CACHE_READ_INPUT_TOKENS,
        attr::USAGE_CACHE_CREATION_INPUT_TOKENS => attr::APP_USAGE_CACHE_CREATION_INPUT_TOKENS,
        _ => return None,
    })
}

/// When the first answer token arrived (else the first content of any kind), RFC 3339 UTC with
/// microseconds: Langfuse's `completion_start_time`.
fn completion_start_time(record: &Record) -> Option<String> {
    let m = &record.analysis.as_ref()?.metrics;
    let first =
        m.ttft_answer_ms.or_else(|| [m.ttft_reasoning_ms, m.ttft_tool_ms].into_iter().flatten().reduce(f64::min))?;
    let at = record.timeline.t0_unix_ns.saturating_add(ms_to_ns(first));
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(at);
    Some(humantime::format_rfc3339_micros(time).to_string())
}

/// Spans of the browser's part of a request, once a probe report joined the record: the page's
/// `fetch` (span id = the probe's span, which is the parent of tokentap's request span) with its
/// marks and first paint as events, and a `render` child from the first to the last paint. Browser
/// times carry the clock uncertainty, recorded as an attribute.
pub fn browser_spans(record: &Record, options: &SpanOptions) -> Vec<SpanPlan> {
    let Some(b) = &record.browser else { return Vec::new() };
    let (Some(trace_id), Some(fetch_span)) = (hex_bytes::<16>(&record.trace_id), hex_bytes::<8>(&b.probe_span_id))
    else {
        return Vec::new();
    };
    let t0 = i128::from(record.timeline.t0_unix_ns);
    // Browser times are ms relative to t0 and may be negative (the page starts before tokentap sees
    // it). Integer arithmetic: epoch nanoseconds do not fit an f64 exactly.
    let at = |rel_ms: f64| u64::try_from((t0 + (rel_ms * 1e6).round() as i128).max(0)).unwrap_or(u64::MAX);
    let Some(start_ms) = b.fetch_start_ms.or_else(|| b.marks.iter().map(|m| m.t_ms).reduce(f64::min)) else {
        return Vec::new();
    };
    let end_ms = [b.fetch_end_ms, b.last_paint_ms, Some(start_ms)].into_iter().flatten().fold(start_ms, f64::max);

    let mut attributes: Attributes = vec![(attr::REQUEST_ID, AttrValue::Str(record.request_id.clone()))];
    if let Some(path) = &b.page_path {
        attributes.push((attr::BROWSER_PAGE_PATH, AttrValue::Str(path.clone())));
    }
    if let Some(v) = b.time_to_first_paint_ms {
        attributes.push((attr::BROWSER_TIME_TO_FIRST_PAINT_MS, AttrValue::F64(v)));
    }
    if let Some(d) = &b.delivery_delay_ms {
        attributes.push((attr::BROWSER_DELIVERY_DELAY_P50_MS, AttrValue::F64(d.p50)));
        attributes.push((attr::BROWSER_DELIVERY_DELAY_P99_MS, AttrValue::F64(d.p99)));
    }
    if let Some(c) = &b.clock {
        attributes.push((attr::BROWSER_CLOCK_UNCERTAINTY_MS, AttrValue::F64(c.uncertainty_ms)));
    }
    attributes.push((attr::BROWSER_BYTES_MATCH, AttrValue::Bool(b.bytes_match)));
    if record.diagnosis.is_some() {
        let rebuffered = diagnosis_attrs(record, &mut attributes);
        attributes.push((attr::REBUFFERED, AttrValue::Bool(rebuffered)));
    }
    attributes.push((attr::BROWSER_LONG_FRAMES, AttrValue::Int(b.long_frames.len() as i64)));

    let mut events: Vec<EventPlan> = b
        .marks
        .iter()
        .map(|m| EventPlan {
            name: event::BROWSER_MARK,
            time_unix_ns: at(m.t_ms),
            attributes: vec![(attr::MARK_NAME, AttrValue::Str(m.name.clone()))],
        })
        .collect();
    if let Some(p) = b.first_paint_ms {
        events.push(EventPlan { name: event::FIRST_PAINT, time_unix_ns: at(p), attributes: Vec::new() });
    }
    for f in &b.long_frames {
        events.push(EventPlan {
            name: event::LONG_FRAME,
            time_unix_ns: at(f.start_ms),
            attributes: vec![(attr::STALL_GAP_MS, AttrValue::F64(f.duration_ms))],
        });
    }
    events.sort_by_key(|e| e.time_unix_ns);
    let (events, dropped_events) = within_budget(events, options.max_events_per_span);
    let start = at(start_ms);
    let end = at(end_ms).max(start);
    let mut spans = vec![SpanPlan {
        trace_id,
        span_id: fetch_span,
        parent_span_id: None,
        sampled: true,
        name: format!(
            "browser {} {}",
            if record.realtime.is_some() { "websocket" } else { "fetch" },
            record.path.split('?').next().unwrap_or("")
        ),
        kind: SpanKind::Client,
        start_unix_ns: start,
        end_unix_ns: end,
        attributes,
        events,
        dropped_events,
        status: SpanStatus::Unset,
    }];
    if let (Some(first), Some(last)) = (b.first_paint_ms, b.last_paint_ms) {
        let mut attributes: Attributes = vec![(attr::PHASE, AttrValue::Str("render".into()))];
        if let Some(d) = &b.render_delay_ms {
            attributes.push((attr::BROWSER_RENDER_DELAY_P50_MS, AttrValue::F64(d.p50)));
            attributes.push((attr::BROWSER_RENDER_DELAY_P99_MS, AttrValue::F64(d.p99)));
            attributes.push((attr::BROWSER_RENDER_DELAY_MAX_MS, AttrValue::F64(d.max)));
        }
        let render_start = at(first).clamp(start, end);
        let render_id = hex_bytes::<8>(&tokentap_record::trace::random_hex(8)).unwrap_or([1; 8]);
        spans.push(SpanPlan {
            trace_id,
            span_id: render_id,
            parent_span_id: Some(fetch_span),
            sampled: true,
            name: "browser render".into(),
            kind: SpanKind::Internal,
            start_unix_ns: render_start,
            end_unix_ns: at(last).clamp(render_start, end),
            attributes,
            events: Vec::new(),
            dropped_events: 0,
            status: SpanStatus::Unset,
        });
    }
    // One `playout` span per playback the page heard: from its first sound to its end (or its
    // first sound, when the page did not know the end when it reported).
    let playout_attributes = |a: &tokentap_record::browser::timeline::BrowserAudio| {
        let mut attributes: Attributes = vec![
            (attr::PHASE, AttrValue::Str("playout".into())),
            (attr::VOICE_PLAYOUT_KIND, AttrValue::Str(a.kind.clone())),
            (attr::VOICE_OBSERVED_UNDERRUNS, AttrValue::Int(i64::try_from(a.underruns).unwrap_or(i64::MAX))),
            (attr::VOICE_OBSERVED_STARVED_MS, AttrValue::F64(a.starved_ms)),
            (attr::VOICE_INTERRUPTED, AttrValue::Bool(a.interrupted)),
        ];
        if let Some(l) = a.output_latency_ms {
            attributes.push((attr::VOICE_OUTPUT_LATENCY_MS, AttrValue::F64(l)));
        }
        if let Some(c) = &b.clock {
            attributes.push((attr::BROWSER_CLOCK_UNCERTAINTY_MS, AttrValue::F64(c.uncertainty_ms)));
        }
        attributes
    };
    // A realtime session's playbacks are per response, each under its `realtime_inference` span.
    spans.extend(realtime::realtime_playout_spans(record, b, trace_id, at, playout_attributes));
    for (i, a) in b.audio.iter().enumerate() {
        let attributes = playout_attributes(a);
        let heard = at(a.audible_ms);
        let playout_end = a.end_ms.map_or(heard, at).max(heard);
        spans.push(SpanPlan {
            trace_id,
            span_id: child_span_id(fetch_span, &format!("playout:{i}")),
            parent_span_id: Some(fetch_span),
            sampled: true,
            name: "playout".into(),
            kind: SpanKind::Internal,
            start_unix_ns: heard,
            end_unix_ns: playout_end,
            attributes,
            events: Vec::new(),
            dropped_events: 0,
            status: SpanStatus::Unset,
        });
    }
    spans
}

/// The spans of one request: its CLIENT span first, then one INTERNAL child span per phase that
/// happened. Every time is the record's wall-clock anchor plus a monotonic offset, so the spans sit
/// at the true times although they are built after the stream ended; a child lies within its
/// parent and no span ends before it starts. Returns nothing when the record's ids are not W3C ids.
pub fn request_spans(record: &Record, options: &SpanOptions) -> Vec<SpanPlan> {
    // A step of a turn goes in the turn's trace, under its agent span once it has one.
    let trace_hex = record.turn.as_ref().map_or(&record.trace_id, |t| &t.trace_id);
    let (Some(trace_id), Some(span_id)) = (hex_bytes::<16>(trace_hex), hex_bytes::<8>(&record.span_id)) else {
        return Vec::new();
    };
    let parent_span_id = match record.turn.as_ref().and_then(|t| t.agent_span_id.as_deref()) {
        Some(agent) => hex_bytes::<8>(agent),
        None if trace_hex == &record.trace_id => record.parent_span_id.as_deref().and_then(hex_bytes::<8>),
        None => None,
    };
    let t0 = record.timeline.t0_unix_ns;
    let end_rel = request_end_ns(record);
    let at = |rel_ns: u64| t0.saturating_add(rel_ns.min(end_rel));
    let budget = options.max_events_per_span;

    let status = match error_type(record) {
        Some(kind) => SpanStatus::Error(match &record.error {
            Some(e) => format!("{}: {}", e.kind, e.message),
            None => kind,
        }),
        None => SpanStatus::Unset,
    };

    // Request-span events: stalls and errors reported inside the stream.
    let mut request_events = Vec::new();
    if let Some(a) = &record.analysis {
        for stall in &a.stalls.list {
            request_events.push(EventPlan {
                name: event::STALL,
                time_unix_ns: at(ms_to_ns(stall.start_ms)),
                attributes: vec![
                    (attr::STALL_GAP_MS, AttrValue::F64(stall.gap_ms)),
                    (attr::STALL_HEARTBEATS, AttrValue::Int(i64::try_from(stall.heartbeats).unwrap_or(i64::MAX))),
                ],
            });
        }
        for error in &a.errors {
            let mut attributes = vec![(
                attr::ERROR_TYPE,
                AttrValue::Str(error.error_type.clone().unwrap_or_else(|| "stream_error".into())),
            )];
            if let Some(message) = &error.message {
                attributes.push((attr::ERROR_MESSAGE, AttrValue::Str(message.clone())));
            }
            request_events.push(EventPlan {
                name: event::STREAM_ERROR,
                time_unix_ns: at(ms_to_ns(error.t_ms)),
                attributes,
            });
        }
    }
    request_events.sort_by_key(|e| e.time_unix_ns);
    let stalls_listed_short =
        record.analysis.as_ref().map_or(0, |a| a.stalls.count.saturating_sub(a.stalls.list.len() as u64));
    let (request_events, dropped) = within_budget(request_events, budget);
    let dropped = dropped.saturating_add(u32::try_from(stalls_listed_short).unwrap_or(u32::MAX));
    let mut attributes = request_attributes(record, options);
    if dropped > 0 {
        attributes.push((attr::EVENTS_DROPPED, AttrValue::Int(i64::from(dropped))));
    }
    let mut name = span_name(record);
    if options.llm_span == LlmSpan::App && continues_an_app_span(record, parent_span_id.is_some()) {
        as_timing_of_the_apps_call(&mut name, &mut attributes);
    }

    let mut spans = vec![SpanPlan {
        trace_id,
        span_id,
        parent_span_id,
        sampled: true,
        name,
        kind: SpanKind::Client,
        start_unix_ns: t0,
        end_unix_ns: t0.saturating_add(end_rel),
        attributes,
        events: request_events,
        dropped_events: dropped,
        status,
    }];

    let child = |phase: &'static str, start_rel: u64, end_rel_child: u64, mut attributes: Attributes| {
        let start = at(start_rel);
        let end = at(end_rel_child).max(start);
        attributes.insert(0, (attr::PHASE, AttrValue::Str(phase.to_string())));
        SpanPlan {
            trace_id,
            span_id: child_span_id(span_id, phase),
            parent_span_id: Some(span_id),
            sampled: true,
            name: phase.to_string(),
            kind: SpanKind::Internal,
            start_unix_ns: start,
            end_unix_ns: end,
            attributes,
            events: Vec::new(),
            dropped_events: 0,
            status: SpanStatus::Unset,
        }
    };

    let times = phase_times(record);
    let sent = record.timeline.t_upstream_sent_ns;
    if let Some(sent) = sent {
        // Waiting for the provider: request sent → first content (else first chunk, else headers).
        let wait_end = times.first_content.or(times.first_chunk).or(record.timeline.t_upstream_headers_ns);
        if let Some(wait_end) = wait_end {
            spans.push(child(phase::PROVIDER_WAIT, sent, wait_end, Vec::new()));
        }
    }
    if let Some((first, last)) = times.reasoning {
        let tokens = record.analysis.as_ref().and_then(|a| a.metrics.output_tokens.as_ref()).map(|t| t.reasoning);
        let mut attrs = Vec::new();
        push_opt_u64(&mut attrs, attr::OUTPUT_TOKENS, tokens);
        spans.push(child(phase::REASONING, first, last, attrs));
    }
    if let Some((first, last)) = times.answer {
        let tokens = record.analysis.as_ref().and_then(|a| a.metrics.output_tokens.as_ref()).map(|t| t.answer);
        let mut attrs = Vec::new();
        push_opt_u64(&mut attrs, attr::OUTPUT_TOKENS, tokens);
        spans.push(child(phase::ANSWER, first, last, attrs));
    }
    if let Some((first, last)) = times.tool_call {
        let mut attrs = Vec::new();
        if let Some(a) = &record.analysis {
            attrs.push((attr::TOOL_CALLS, AttrValue::Int(a.tool_calls.len() as i64)));
            // The model streaming a call's arguments is model time: tokentap's names, never the
            // conventions' `gen_ai.tool.*`, which make backends show the span as a tool run.
            if let [only] = a.tool_calls.as_slice() {
                if let Some(name) = &only.name {
                    attrs.push((attr::STREAMED_TOOL_NAME, AttrValue::Str(name.clone())));
                }
                if let Some(id) = &only.id {
                    attrs.push((attr::STREAMED_TOOL_CALL_ID, AttrValue::Str(id.clone())));
                }
            }
            let names: Vec<String> = a.tool_calls.iter().filter_map(|c| c.name.clone()).collect();
            if !names.is_empty() {
                attrs.push((attr::STREAMED_TOOL_NAMES, AttrValue::StrArray(names)));
            }
        }
        spans.push(child(phase::TOOL_CALL, first, last, attrs));
    }
    if let Some(first) = record.timeline.chunks.first() {
        // Delivery: first body chunk from upstream → last byte handed to the client. One event per
        // chunk (at its arrival), within the budget.
        let chunk_events: Vec<EventPlan> = record
            .timeline
            .chunks
            .iter()
            .enumerate()
            .map(|(index, c)| {
                let mut attributes = vec![
                    (attr::CHUNK_INDEX, AttrValue::Int(index as i64)),
                    (attr::CHUNK_OFFSET, AttrValue::Int(i64::try_from(c.offset).unwrap_or(i64::MAX))),
                    (attr::CHUNK_BYTES, AttrValue::Int(i64::from(c.len))),
                ];
                if let Some(h) = c.t_handoff_ns {
                    attributes
                        .push((attr::CHUNK_HANDOFF_LAG_US, AttrValue::F64(h.saturating_sub(c.t_up_ns) as f64 / 1e3)));
                }
                EventPlan { name: event::CHUNK, time_unix_ns: at(c.t_up_ns), attributes }
            })
            .collect();
        let chunks_not_listed = record.timeline.chunk_count.saturating_sub(record.timeline.chunks.len() as u64);
        let (events, dropped) = within_budget(chunk_events, budget);
        let dropped = dropped.saturating_add(u32::try_from(chunks_not_listed).unwrap_or(u32::MAX));
        let mut attrs = vec![
            (attr::CHUNK_COUNT, AttrValue::Int(i64::try_from(record.timeline.chunk_count).unwrap_or(i64::MAX))),
            (attr::BODY_BYTES, AttrValue::Int(i64::try_from(record.timeline.body_bytes).unwrap_or(i64::MAX))),
        ];
        push_opt_f64(&mut attrs, attr::HANDOFF_LAG_P99_US, record.self_overhead.handoff_lag_p99_us);
        push_opt_f64(&mut attrs, attr::HANDOFF_LAG_MAX_US, record.self_overhead.handoff_lag_max_us);
        if dropped > 0 {
            attrs.push((attr::EVENTS_DROPPED, AttrValue::Int(i64::from(dropped))));
        }
        let mut span = child(phase::DELIVERY, first.t_up_ns, end_rel, attrs);
        span.events = events;
        span.dropped_events = dropped;
        spans.push(span);
    }
    spans.extend(realtime::realtime_spans(record, trace_id, span_id));
    spans
}

// ---------------------------------------------------------------------------------------------
// Metric observations.
// ---------------------------------------------------------------------------------------------

/// Label set of one observation: attribute key → value, in a fixed order.
pub type Labels = Vec<(&'static str, String)>;

/// One value to add to a metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub metric: MetricId,
    pub labels: Labels,
    pub value: f64,
}

/// Service-level objectives that make a request "good": the `[slo]` section (docs/metrics.md,
/// goodput). The one goodput rule lives in `report::goodput`; metrics use it too.
pub type Objectives = tokentap_record::SloConfig;

/// Longest label value kept (model names come from request bodies, so they are capped).
pub const MAX_LABEL_CHARS: usize = 128;

fn label(value: &str) -> String {
    match value.char_indices().nth(MAX_LABEL_CHARS) {
        Some((cut, _)) => value[..cut].to_string(),
        None => value.to_string(),
    }
}

/// The labels every request metric carries: operation, provider, model, route, outcome. Values
/// that are unknown are left out (Prometheus treats a missing label as empty).
pub fn request_labels(record: &Record) -> Labels {
    let mut labels = Vec::with_capacity(5);
    if let Some(op) = &record.request.operation {
        labels.push((attr::OPERATION_NAME, label(op)));
    }
    labels.push((attr::PROVIDER_NAME, provider_name(record).to_string()));
    if let Some(model) = record.request.model.as_ref().filter(|m| !m.is_empty()) {
        labels.push((attr::REQUEST_MODEL, label(model)));
    }
    labels.push((attr::ROUTE, label(&record.route)));
    labels.push((attr::OUTCOME, record.outcome.as_str().to_string()));
    labels
}

/// The snake_case name serde gives a verdict kind or hop.
fn serde_name<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// Adds the re-buffering verdict's attributes; returns whether some hop re-buffers.
fn diagnosis_attrs(record: &Record, attrs: &mut Attributes) -> bool {
    let Some(d) = &record.diagnosis else { return false };
    let kind = serde_name(&d.kind);
    attrs.push((attr::REBUFFER_VERDICT, AttrValue::Str(d.verdict.clone())));
    if let Some(hop) = &d.hop {
        attrs.push((attr::REBUFFER_HOP, AttrValue::Str(serde_name(hop))));
    }
    let rebuffered = kind != "no_rebuffering";
    attrs.push((attr::REBUFFER_KIND, AttrValue::Str(kind)));
    rebuffered
}

/// The verdict counter's observation for `record`, judged in `scope` ("proxy" or "browser").
pub fn rebuffer_observation(record: &Record, scope: &str) -> Option<Observation> {
    let d = record.diagnosis.as_ref()?;
    let mut labels: Labels = vec![(attr::ROUTE, label(&record.route)), (attr::REBUFFER_KIND, serde_name(&d.kind))];
    if let Some(hop) = &d.hop {
        labels.push((attr::REBUFFER_HOP, serde_name(hop)));
    }
    labels.push((attr::REBUFFER_SCOPE, scope.to_string()));
    Some(Observation { metric: MetricId::RebufferVerdicts, labels, value: 1.0 })
}

/// Whether a request counts towards goodput (the same verdict the dashboard and reports show).
pub fn is_good(record: &Record, objectives: &Objectives) -> bool {
    tokentap_record::goodput::verdict(record, objectives).good
}

/// Everything one record adds to the metrics.
pub fn metric_observations(record: &Record, objectives: &Objectives) -> Vec<Observation> {
    let labels = request_labels(record);
    let mut out = Vec::new();
    let mut push = |metric: MetricId, labels: &Labels, value: f64| {
        if value.is_finite() && value >= 0.0 {
            out.push(Observation { metric, labels: labels.clone(), value });
        }
    };
    push(MetricId::Requests, &labels, 1.0);
    push(MetricId::HookTime, &labels, record.self_overhead.hook_time_us / 1e6);
    if is_good(record, objectives) {
        push(MetricId::GoodRequests, &labels, 1.0);
    }

    // The gen_ai.* metrics describe GenAI operations only.
    let genai = record.request.operation.is_some();
    if genai {
        let mut duration_labels = labels.clone();
        if let Some(error) = error_type(record) {
            duration_labels.push((attr::ERROR_TYPE, label(&error)));
        }
        let end_ns = record.timeline.t_end_ns.unwrap_or_else(|| request_end_ns(record));
        push(MetricId::OperationDuration, &duration_labels, end_ns as f64 / 1e9);
    }
    if let Some(s) = &record.speech {
        if let Some(v) = s.time_to_first_audio_ms {
            push(MetricId::VoiceTimeToFirstAudio, &labels, v / 1e3);
        }
        if let Some(v) = s.time_to_first_audible_ms {
            push(MetricId::VoiceTimeToFirstAudible, &labels, v / 1e3);
        }
    }
    if let Some(v) = record.transcription.as_ref().and_then(|t| t.transcript_done_ms) {
        push(MetricId::VoiceTranscriptDone, &labels, v / 1e3);
    }
    let Some(a) = &record.analysis else {
        realtime::realtime_observations(record, &labels, &mut out);
        return out;
    };
    let m = &a.metrics;
    let streaming = record.request.stream == Some(true);
    if genai && streaming {
        if let Some(ttfc) = m.time_to_first_chunk_ms {
            push(MetricId::TimeToFirstChunk, &labels, ttfc / 1e3);
        }
    }
    // Gaps between consecutive content-bearing events (the events an SDK hands out as chunks; a
    // network read is not a chunk). Events past the analysis cap are not listed, so on a stream
    // longer than the cap these metrics see its first part.
    let mut previous: Option<f64> = None;
    for e in a.events.iter().filter(|e| e.class.is_content()) {
        if let Some(p) = previous {
            let gap = (e.t_ms - p).max(0.0) / 1e3;
            if genai && streaming {
                push(MetricId::TimePerOutputChunk, &labels, gap);
            }
            push(MetricId::InterTokenLatency, &labels, gap);
        }
        previous = Some(e.t_ms);
    }
    if genai {
        if let Some(u) = &a.usage {
            for (kind, tokens) in [("input", u.input_tokens), ("output", u.output_tokens)] {
                if let Some(tokens) = tokens {
                    let mut token_labels = labels.clone();
                    token_labels.push((attr::TOKEN_TYPE, kind.to_string()));
                    push(MetricId::TokenUsage, &token_labels, tokens as f64);
                }
            }
        }
    }
    if let Some(v) = m.ttft_answer_ms {
        push(MetricId::TtftAnswer, &labels, v / 1e3);
    }
    if let Some(v) = m.ttft_reasoning_ms {
        push(MetricId::TtftReasoning, &labels, v / 1e3);
    }
    if let Some(v) = m.ttft_tool_ms {
        push(MetricId::TtftTool, &labels, v / 1e3);
    }
    if let Some(v) = m.output_tps {
        push(MetricId::OutputTps, &labels, v);
    }
    if a.stalls.count > 0 {
        push(MetricId::Stalls, &labels, a.stalls.count as f64);
    }
    if let Some(s) = &record.server {
        for (metric, ms) in [
            (MetricId::ServerQueue, s.queue_ms),
            (MetricId::ServerPrefill, s.prefill_ms),
            (MetricId::ServerDecode, s.decode_ms),
        ] {
            if let Some(ms) = ms {
                push(metric, &labels, ms / 1e3);
            }
        }
    }
    // Only a consistent split: a negative or untrusted difference says nothing about the network.
    if let Some(split) = record.server_split.as_ref().filter(|s| s.check == ServerCheck::Consistent) {
        push(MetricId::NetworkAndProxy, &labels, split.network_and_proxy_ms.max(0.0) / 1e3);
    }
    out.extend(rebuffer_observation(record, "proxy"));
    out
}

mod realtime;
pub use realtime::realtime_browser_observations;
mod turn;
pub use turn::{turn_observations, turn_spans, voice_turn_observations};

#[cfg(test)]
mod tests;
