//! A request's spans: its CLIENT span (GenAI attributes, the server's own account, voice) and the
//! child spans of its phases.

use tokentap_analysis::{Dialect, EventClass, StreamAnalysis};

use tokentap_record::server_time::ServerCheck;
use tokentap_record::{Outcome, Provider, Record};

use super::attributes::{attr, PROVIDER_OTHER, REBUFFER_HANDOFF_LAG_US};
use super::plan::{
    child_span_id, event, hex_bytes, ms_to_ns, phase, AttrValue, Attributes, EventPlan, SpanKind, SpanOptions,
    SpanPlan, SpanStatus,
};
use crate::settings::LlmSpan;

/// `gen_ai.provider.name`: the route's hint, else the dialect the stream was read with.
pub fn provider_name(record: &Record) -> &'static str {
    match record.provider {
        Some(Provider::Openai) => return "openai",
        Some(Provider::Anthropic) => return "anthropic",
        Some(Provider::Gemini) => return "gcp.gemini",
        Some(Provider::Ollama) => return "ollama",
        Some(Provider::Generic | Provider::Mcp) | None => {}
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
pub(super) struct PhaseTimes {
    first_content: Option<u64>,
    first_chunk: Option<u64>,
    reasoning: Option<(u64, u64)>,
    answer: Option<(u64, u64)>,
    tool_call: Option<(u64, u64)>,
}

pub(super) fn class_range(a: &StreamAnalysis, class: EventClass, first_ms: Option<f64>) -> Option<(u64, u64)> {
    let first = ms_to_ns(first_ms?);
    let last = a.events.iter().filter(|e| e.class == class).map(|e| ms_to_ns(e.t_ms)).max().unwrap_or(first);
    Some((first, last.max(first)))
}

pub(super) fn phase_times(record: &Record) -> PhaseTimes {
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
pub(super) fn request_end_ns(record: &Record) -> u64 {
    let t = &record.timeline;
    let latest_chunk = t.chunks.iter().map(|c| c.t_handoff_ns.unwrap_or(c.t_up_ns).max(c.t_up_ns)).max();
    let latest_event = record.analysis.as_ref().and_then(|a| a.events.iter().map(|e| ms_to_ns(e.t_ms)).max());
    [t.t_end_ns, t.t_upstream_sent_ns, t.t_upstream_headers_ns, latest_chunk, latest_event]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0)
}

pub(super) fn push_opt_f64(attrs: &mut Attributes, key: &'static str, value: Option<f64>) {
    if let Some(v) = value.filter(|v| v.is_finite()) {
        attrs.push((key, AttrValue::F64(v)));
    }
}

pub(super) fn push_opt_u64(attrs: &mut Attributes, key: &'static str, value: Option<u64>) {
    if let Some(v) = value {
        attrs.push((key, AttrValue::Int(i64::try_from(v).unwrap_or(i64::MAX))));
    }
}

pub(super) fn truncate_utf8(text: &str, max_bytes: usize) -> String {
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
pub(super) fn within_budget(mut events: Vec<EventPlan>, budget: usize) -> (Vec<EventPlan>, u32) {
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
pub(super) fn voice_attributes(record: &Record, attrs: &mut Attributes) {
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

pub(super) fn request_attributes(record: &Record, options: &SpanOptions) -> Attributes {
    let mut attrs: Attributes = Vec::with_capacity(48);
    let request = &record.request;
    if let Some(session) = &record.realtime {
        attrs.push((attr::REALTIME_RESPONSES, AttrValue::Int(session.responses.len() as i64)));
        attrs.push((attr::REALTIME_SESSION_END, AttrValue::Str(super::realtime::session_end_label(session))));
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
pub(super) fn server_attributes(record: &Record, attrs: &mut Attributes) {
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
pub(super) fn continues_an_app_span(record: &Record, has_parent: bool) -> bool {
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
pub(super) fn as_timing_of_the_apps_call(name: &mut String, attributes: &mut Attributes) {
    *name = format!("tokentap {name}");
    attributes.retain(|(k, _)| *k != attr::OPERATION_NAME);
    for (key, _) in attributes.iter_mut() {
        if let Some(renamed) = app_call_name(key) {
            *key = renamed;
        }
    }
}

/// The `tokentap.*` name of a GenAI attribute on the timing span of an app's own call.
pub(super) fn app_call_name(key: &str) -> Option<&'static str> {
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
pub(super) fn completion_start_time(record: &Record) -> Option<String> {
    let m = &record.analysis.as_ref()?.metrics;
    let first =
        m.ttft_answer_ms.or_else(|| [m.ttft_reasoning_ms, m.ttft_tool_ms].into_iter().flatten().reduce(f64::min))?;
    let at = record.timeline.t0_unix_ns.saturating_add(ms_to_ns(first));
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(at);
    Some(humantime::format_rfc3339_micros(time).to_string())
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
    spans.extend(super::realtime::realtime_spans(record, trace_id, span_id));
    spans.extend(super::mcp::mcp_spans(record, trace_id, span_id, end_rel, server_address(&record.upstream)));
    spans
}

/// Adds the re-buffering verdict's attributes; returns whether some hop re-buffers.
pub(super) fn diagnosis_attrs(record: &Record, attrs: &mut Attributes) -> bool {
    let Some(d) = &record.diagnosis else { return false };
    attrs.push((attr::REBUFFER_VERDICT, AttrValue::Str(d.verdict.clone())));
    if let Some(hop) = d.hop {
        attrs.push((attr::REBUFFER_HOP, AttrValue::Str(hop.as_str().to_string())));
    }
    attrs.push((attr::REBUFFER_KIND, AttrValue::Str(d.kind.as_str().to_string())));
    d.kind != tokentap_record::hops::VerdictKind::NoRebuffering
}
