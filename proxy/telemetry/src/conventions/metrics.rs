//! The metric table: every metric tokentap exports, with its name, unit, instrument, bucket
//! boundaries and Prometheus name.

// ---------------------------------------------------------------------------------------------
// Metrics: the table.
// ---------------------------------------------------------------------------------------------

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

/// Declares [`MetricId`] and [`METRICS`] from one list, so that an id and its row cannot drift
/// apart: a variant's discriminant is its row's index by construction.
macro_rules! metric_table {
    ($($id:ident { $($field:ident: $value:expr),+ $(,)? }),+ $(,)?) => {
        /// Every metric tokentap exports. The discriminant indexes [`METRICS`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum MetricId {
            $($id),+
        }

        /// The metric table, in [`MetricId`]'s order.
        pub const METRICS: &[MetricDef] = &[$(MetricDef { id: MetricId::$id, $($field: $value),+ }),+];
    };
}

metric_table! {
    OperationDuration {
        name: "gen_ai.client.operation.duration",
        unit: "s",
        description: "GenAI operation duration: request head received to last response byte handed to the client.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "gen_ai_client_operation_duration_seconds",
    },
    TimeToFirstChunk {
        name: "gen_ai.client.operation.time_to_first_chunk",
        unit: "s",
        description: "Time from the request to the first response chunk of a streaming operation.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "gen_ai_client_operation_time_to_first_chunk_seconds",
    },
    TimePerOutputChunk {
        name: "gen_ai.client.operation.time_per_output_chunk",
        unit: "s",
        description: "Time between consecutive content-bearing events of a streaming operation, one value per event after the first.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "gen_ai_client_operation_time_per_output_chunk_seconds",
    },
    TokenUsage {
        name: "gen_ai.client.token.usage",
        unit: "{token}",
        description: "Input and output tokens as reported by the provider.",
        instrument: Instrument::Histogram(TOKEN_BUCKETS),
        prometheus_name: "gen_ai_client_token_usage",
    },
    TtftAnswer {
        name: "tokentap.ttft.answer",
        unit: "s",
        description: "Time to the first non-empty answer event (the headline TTFT).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_ttft_answer_seconds",
    },
    TtftReasoning {
        name: "tokentap.ttft.reasoning",
        unit: "s",
        description: "Time to the first non-empty reasoning event.",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_ttft_reasoning_seconds",
    },
    TtftTool {
        name: "tokentap.ttft.tool",
        unit: "s",
        description: "Time to the first non-empty tool-call event.",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_ttft_tool_seconds",
    },
    InterTokenLatency {
        name: "tokentap.itl",
        unit: "s",
        description: "Gaps between consecutive content-bearing events, by upstream arrival.",
        instrument: Instrument::Histogram(ITL_BUCKETS),
        prometheus_name: "tokentap_itl_seconds",
    },
    OutputTps {
        name: "tokentap.output_tps",
        unit: "{token}/s",
        description: "Output tokens per second after the first content event, one value per request.",
        instrument: Instrument::Histogram(TPS_BUCKETS),
        prometheus_name: "tokentap_output_tps_per_second",
    },
    Stalls {
        name: "tokentap.stalls",
        unit: "{stall}",
        description: "Gaps between content events at least as long as the stall threshold.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_stalls_total",
    },
    Requests {
        name: "tokentap.requests",
        unit: "{request}",
        description: "Proxied requests by outcome.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_requests_total",
    },
    GoodRequests {
        name: "tokentap.requests.good",
        unit: "{request}",
        description: "Requests that succeeded and met every configured objective (goodput).",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_requests_good_total",
    },
    HookTime {
        name: "tokentap.self_overhead.hook_time",
        unit: "s",
        description: "Time tokentap spent inside its proxy hooks for one request.",
        instrument: Instrument::Histogram(OVERHEAD_BUCKETS),
        prometheus_name: "tokentap_self_overhead_hook_time_seconds",
    },
    SchedulingLag {
        name: "tokentap.self_overhead.scheduling_lag",
        unit: "s",
        description: "How long a task made ready from outside waited before the proxy's runtime polled it (sampled every 25-75 ms).",
        instrument: Instrument::Histogram(OVERHEAD_BUCKETS),
        prometheus_name: "tokentap_self_overhead_scheduling_lag_seconds",
    },
    RecordsDropped {
        name: "tokentap.records.dropped",
        unit: "{record}",
        description: "Records dropped because the finalize queue was full.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_records_dropped_total",
    },
    RecordsShed {
        name: "tokentap.records.shed",
        unit: "{record}",
        description: "Records written without stream analysis because the finalize queue was backed up.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_records_shed_total",
    },
    VoiceTimeToFirstAudio {
        name: "tokentap.voice.time_to_first_audio",
        unit: "s",
        description: "Text to speech: time to the first audio byte of the answer.",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_voice_time_to_first_audio_seconds",
    },
    VoiceTimeToFirstAudible {
        name: "tokentap.voice.time_to_first_audible",
        unit: "s",
        description: "Text to speech: when a player started at the first audio byte reaches the first audible sample.",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_voice_time_to_first_audible_seconds",
    },
    VoiceTranscriptDone {
        name: "tokentap.voice.transcript_done",
        unit: "s",
        description: "Speech to text: time to the complete transcript (transcript.text.done, or the whole answer).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_voice_transcript_done_seconds",
    },
    VoiceToVoice {
        name: "tokentap.voice.voice_to_voice",
        unit: "s",
        description: "Voice turn: the user's end of speech to the answer heard in the browser (browser probe).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_voice_voice_to_voice_seconds",
    },
    WebrtcVoiceToEar {
        name: "tokentap.webrtc.voice_to_ear",
        unit: "s",
        description: "WebRTC voice turn: the user's end of speech to the answer's first sample played, measured in the page (browser probe).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_webrtc_voice_to_ear_seconds",
    },
    ConnectionsRefused {
        name: "tokentap.connections.refused",
        unit: "{connection}",
        description: "Client connections refused over the connection cap or a client's share of it, or closed for a slow request head.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_connections_refused_total",
    },
    TelemetryExported {
        name: "tokentap.telemetry.exported",
        unit: "{item}",
        description: "Spans and metric exports accepted by the OTLP collector.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_telemetry_exported_total",
    },
    TelemetrySpooled {
        name: "tokentap.telemetry.spooled",
        unit: "{item}",
        description: "Spans and metric exports written to the on-disk spool while the collector was unreachable.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_telemetry_spooled_total",
    },
    TelemetryDropped {
        name: "tokentap.telemetry.dropped",
        unit: "{item}",
        description: "Spans and metric exports given up on (queue full, spool full, rejected by the collector).",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_telemetry_dropped_total",
    },
    RebufferVerdicts {
        name: "tokentap.rebuffer.verdicts",
        unit: "{request}",
        description: "Re-buffering verdicts by kind and hop; scope proxy is judged when the record is built, scope browser again when a probe report joins.",
        instrument: Instrument::Counter,
        prometheus_name: "tokentap_rebuffer_verdicts_total",
    },
    InvokeAgentDuration {
        name: "gen_ai.invoke_agent.duration",
        unit: "s",
        description: "Agent turn end to end: its first request's head received to the final answer's last content.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "gen_ai_invoke_agent_duration_seconds",
    },
    ExecuteToolDuration {
        name: "gen_ai.execute_tool.duration",
        unit: "s",
        description: "Tool call ready (last argument fragment handed to the client) to the arrival of the request carrying its result; includes the client's own work and network.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "gen_ai_execute_tool_duration_seconds",
    },
    TurnModelTime {
        name: "tokentap.turn.model_time",
        unit: "s",
        description: "Time of a turn inside model calls (the union of its steps).",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "tokentap_turn_model_time_seconds",
    },
    TurnToolTime {
        name: "tokentap.turn.tool_time",
        unit: "s",
        description: "Time of a turn with tool calls out and no model call running.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "tokentap_turn_tool_time_seconds",
    },
    TurnClientTime {
        name: "tokentap.turn.client_time",
        unit: "s",
        description: "Time of a turn neither in a model call nor with a tool call out.",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "tokentap_turn_client_time_seconds",
    },
    TurnSteps {
        name: "tokentap.turn.steps",
        unit: "{step}",
        description: "Model calls per turn.",
        instrument: Instrument::Histogram(STEP_BUCKETS),
        prometheus_name: "tokentap_turn_steps",
    },
    ServerQueue {
        name: "tokentap.server.queue",
        unit: "s",
        description: "The server's own report of its queueing time (Groq, Cerebras, TGI).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_server_queue_seconds",
    },
    ServerPrefill {
        name: "tokentap.server.prefill",
        unit: "s",
        description: "The server's own report of its prompt processing time (llama.cpp, Ollama, Groq, Cerebras).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_server_prefill_seconds",
    },
    ServerDecode {
        name: "tokentap.server.decode",
        unit: "s",
        description: "The server's own report of its token generation time (llama.cpp, Ollama, Groq, Cerebras).",
        instrument: Instrument::Histogram(DURATION_BUCKETS),
        prometheus_name: "tokentap_server_decode_seconds",
    },
    NetworkAndProxy {
        name: "tokentap.network_and_proxy",
        unit: "s",
        description: "Wire time minus the server's reported time at the same moment (first token, first byte or response head), when consistent.",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_network_and_proxy_seconds",
    },
    McpClientOperationDuration {
        name: "mcp.client.operation.duration",
        unit: "s",
        description: "MCP operation: the request head of the POST carrying the JSON-RPC request received to its JSON-RPC response's arrival from the server.",
        instrument: Instrument::Histogram(MCP_DURATION_BUCKETS),
        prometheus_name: "mcp_client_operation_duration_seconds",
    },
    McpClientSessionDuration {
        name: "mcp.client.session.duration",
        unit: "s",
        description: "MCP session (Mcp-Session-Id): the start of the exchange that set it to the end of its last exchange; ended by DELETE, a 404, 10 minutes of silence, eviction or shutdown.",
        instrument: Instrument::Histogram(MCP_DURATION_BUCKETS),
        prometheus_name: "mcp_client_session_duration_seconds",
    },
    RealtimeFirstAudioFromSpeechStopped {
        name: "tokentap.voice.realtime.time_to_first_audio_from_speech_stopped",
        unit: "s",
        description: "Realtime response: first audio delta after the server's speech_stopped event arrived (its end-of-turn decision).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_voice_realtime_time_to_first_audio_from_speech_stopped_seconds",
    },
    RealtimeFirstAudioFromSpeechEnd {
        name: "tokentap.voice.realtime.time_to_first_audio_from_speech_end",
        unit: "s",
        description: "Realtime response: first audio delta after the estimated true end of the user's speech (VAD end less silence_duration_ms, on the forwarded audio's clock).",
        instrument: Instrument::Histogram(TTFT_BUCKETS),
        prometheus_name: "tokentap_voice_realtime_time_to_first_audio_from_speech_end_seconds",
    },
}

/// The MCP conventions' boundaries for operation and session durations, in seconds.
pub const MCP_DURATION_BUCKETS: &[f64] =
    &[0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// Steps per turn.
pub const STEP_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0, 128.0];

impl MetricId {
    pub fn def(self) -> &'static MetricDef {
        &METRICS[self as usize]
    }
}

/// Label set of one observation: attribute key → value, in a fixed order.
pub type Labels = Vec<(&'static str, String)>;

/// A label set shared by the observations of one record (a stream's gaps all carry the same one):
/// cloned by reference, and resolved to the SDK's attributes once per record, not per value.
pub type SharedLabels = std::sync::Arc<Labels>;

/// One value to add to a metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub metric: MetricId,
    pub labels: SharedLabels,
    pub value: f64,
}

/// Service-level objectives that make a request "good": the `[slo]` section (docs/metrics.md,
/// goodput). The one goodput rule lives in `report::goodput`; metrics use it too.
pub type Objectives = tokentap_record::SloConfig;

/// Longest label value kept (model names come from request bodies, so they are capped).
pub const MAX_LABEL_CHARS: usize = 128;

pub(super) fn label(value: &str) -> String {
    match value.char_indices().nth(MAX_LABEL_CHARS) {
        Some((cut, _)) => value[..cut].to_string(),
        None => value.to_string(),
    }
}
