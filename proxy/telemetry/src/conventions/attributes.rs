//! Attribute keys on spans and metrics: the GenAI and general conventions' names, then tokentap's.

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
    /// A WebRTC voice turn (the page's view of a peer connection's answer): heard − end of speech.
    pub const WEBRTC_VOICE_TO_EAR_MS: &str = "tokentap.webrtc.voice_to_ear_ms";
    pub const WEBRTC_JITTER_BUFFER_MS: &str = "tokentap.webrtc.jitter_buffer_ms";
    pub const WEBRTC_JITTER_BUFFER_TARGET_MS: &str = "tokentap.webrtc.jitter_buffer_target_ms";
    pub const WEBRTC_PLAYOUT_DELAY_MS: &str = "tokentap.webrtc.playout_delay_ms";
    pub const WEBRTC_ONSET_METHOD: &str = "tokentap.webrtc.onset_method";
    pub const WEBRTC_SPEECH_END_SOURCE: &str = "tokentap.webrtc.speech_end_source";
    pub const WEBRTC_CONCEALED_RATIO: &str = "tokentap.webrtc.concealed_ratio";
    pub const WEBRTC_CHOPPY: &str = "tokentap.webrtc.choppy";
    pub const WEBRTC_BARGE_IN: &str = "tokentap.webrtc.barge_in";
    pub const WEBRTC_STOPPED_AFTER_BARGE_IN_MS: &str = "tokentap.webrtc.stopped_after_barge_in_ms";
    pub const WEBRTC_TURN_INDEX: &str = "tokentap.webrtc.turn_index";
    pub const WEBRTC_EVENT_NAME: &str = "tokentap.webrtc.event";
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

    // OpenTelemetry's MCP conventions.
    pub const MCP_METHOD_NAME: &str = "mcp.method.name";
    pub const MCP_SESSION_ID: &str = "mcp.session.id";
    pub const MCP_PROTOCOL_VERSION: &str = "mcp.protocol.version";
    pub const MCP_RESOURCE_URI: &str = "mcp.resource.uri";
    pub const PROMPT_NAME: &str = "gen_ai.prompt.name";
    pub const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";
    pub const RPC_RESPONSE_STATUS_CODE: &str = "rpc.response.status_code";
    pub const NETWORK_PROTOCOL_NAME: &str = "network.protocol.name";
    pub const NETWORK_TRANSPORT: &str = "network.transport";
    /// First progress notification of an MCP operation, ms after its request.
    pub const MCP_FIRST_PROGRESS_MS: &str = "tokentap.mcp.first_progress_ms";
    pub const MCP_PROGRESS_NOTIFICATIONS: &str = "tokentap.mcp.progress_notifications";
    pub const MCP_REQUEST_BYTES: &str = "tokentap.mcp.request_bytes";
    pub const MCP_RESPONSE_BYTES: &str = "tokentap.mcp.response_bytes";
    /// A tool run joined to the MCP call that executed it: the tool server's time, the harness's
    /// before and after it, and the tokentap request id of the MCP exchange.
    pub const TOOL_SERVER_MS: &str = "tokentap.tool.server_ms";
    pub const TOOL_HARNESS_BEFORE_MS: &str = "tokentap.tool.harness_before_ms";
    pub const TOOL_HARNESS_AFTER_MS: &str = "tokentap.tool.harness_after_ms";
    pub const TOOL_MCP_REQUEST_ID: &str = "tokentap.tool.mcp_request_id";
    /// How an MCP session ended: `deleted`, `not_found`, `idle`, `evicted`, `shutdown`.
    pub const MCP_SESSION_END: &str = "tokentap.mcp.session_end";

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
