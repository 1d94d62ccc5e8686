//! A realtime session as spans and observations. The session is one trace: its request span
//! (the WebSocket upgrade, from the head to the session's end) is the root, with one
//! `realtime_inference` span per response (after the OpenTelemetry GenAI voice proposal), from
//! the end of the user's speech that led to it (else `response.created`) to `response.done`, and
//! one `execute_tool` span per function call whose output the client sent, from the call being
//! ready to the client asking for the next response (tool run + client work + network).

use tokentap_analysis::realtime::{RealtimeResponse, RealtimeSession};
use tokentap_record::browser::BrowserTimeline;
use tokentap_record::Record;

use super::{attr, child_span_id, ms_to_ns, AttrValue, Attributes, Labels, MetricId, Observation};
use super::{SpanKind, SpanPlan, SpanStatus};

pub(super) const REALTIME_INFERENCE: &str = "realtime_inference";
const EXECUTE_TOOL: &str = "execute_tool";

fn push_f64(attrs: &mut Attributes, key: &'static str, value: Option<f64>) {
    if let Some(v) = value.filter(|v| v.is_finite()) {
        attrs.push((key, AttrValue::F64(v)));
    }
}

fn push_u64(attrs: &mut Attributes, key: &'static str, value: Option<u64>) {
    if let Some(v) = value {
        attrs.push((key, AttrValue::Int(i64::try_from(v).unwrap_or(i64::MAX))));
    }
}

/// Where a response's span starts: the estimated end of the user's speech, else the
/// `speech_stopped` arrival, else the client's `response.create`, else `response.created`.
fn response_start_ms(r: &RealtimeResponse) -> f64 {
    r.user
        .and_then(|u| u.speech_end_estimated_ms.or(u.speech_stopped_ms))
        .or(r.create_sent_ms)
        .unwrap_or(r.created_ms)
        .min(r.created_ms)
}

fn response_attributes(session: &RealtimeSession, r: &RealtimeResponse, index: usize) -> Attributes {
    let mut a: Attributes = vec![(attr::OPERATION_NAME, AttrValue::Str(REALTIME_INFERENCE.into()))];
    if let Some(m) = &session.model {
        a.push((attr::REQUEST_MODEL, AttrValue::Str(m.clone())));
    }
    if let Some(id) = &r.response_id {
        a.push((attr::RESPONSE_ID, AttrValue::Str(id.clone())));
    }
    if let Some(id) = &session.session_id {
        a.push((attr::CONVERSATION_ID, AttrValue::Str(id.clone())));
    }
    a.push((attr::REALTIME_RESPONSE_INDEX, AttrValue::Int(index as i64)));
    a.push((attr::REALTIME_TRIGGER, AttrValue::Str(serde_label(&r.trigger))));
    if let Some(s) = r.status {
        a.push((attr::RESPONSE_FINISH_REASONS, AttrValue::StrArray(vec![serde_label(&s)])));
    }
    if let Some(u) = r.usage {
        push_u64(&mut a, attr::USAGE_INPUT_TOKENS, u.input_tokens);
        push_u64(&mut a, attr::USAGE_OUTPUT_TOKENS, u.output_tokens);
        push_u64(&mut a, attr::USAGE_CACHE_READ_INPUT_TOKENS, u.input_cached_tokens);
        push_u64(&mut a, attr::REALTIME_INPUT_AUDIO_TOKENS, u.input_audio_tokens);
        push_u64(&mut a, attr::REALTIME_OUTPUT_AUDIO_TOKENS, u.output_audio_tokens);
    }
    a.push((attr::VOICE_AUDIO_FORMAT, AttrValue::Str(format_label(session))));
    push_f64(
        &mut a,
        attr::VOICE_TIME_TO_FIRST_AUDIO_FROM_SPEECH_STOPPED_MS,
        r.time_to_first_audio_from_speech_stopped_ms,
    );
    push_f64(&mut a, attr::VOICE_TIME_TO_FIRST_AUDIO_FROM_SPEECH_END_MS, r.time_to_first_audio_from_speech_end_ms);
    push_f64(&mut a, attr::VOICE_TIME_TO_FIRST_AUDIO_FROM_CREATE_MS, r.time_to_first_audio_from_create_ms);
    push_f64(&mut a, attr::VOICE_AUDIO_MS, Some(r.audio_ms).filter(|_| r.audio_deltas > 0));
    push_f64(&mut a, attr::VOICE_REAL_TIME_FACTOR, r.real_time_factor);
    if let Some(p) = r.predicted {
        a.push((attr::VOICE_PREDICTED_UNDERRUNS, AttrValue::Int(i64::from(p.underruns))));
        a.push((attr::VOICE_PREDICTED_STARVED_MS, AttrValue::F64(p.starved_ms)));
    }
    if !r.interruption.is_empty() {
        a.push((attr::REALTIME_INTERRUPTED, AttrValue::Bool(true)));
    }
    a
}

fn serde_label<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

pub(super) fn session_end_label(session: &RealtimeSession) -> String {
    serde_label(&session.end)
}

fn format_label(session: &RealtimeSession) -> String {
    use tokentap_analysis::realtime::RealtimeAudioFormat::*;
    match session.output_format {
        Pcm16 { rate_hz } => format!("pcm16_{rate_hz}"),
        G711Ulaw => "g711_ulaw".into(),
        G711Alaw => "g711_alaw".into(),
    }
}

/// The session's response and tool spans, children of the record's span.
pub(super) fn realtime_spans(record: &Record, trace_id: [u8; 16], session_span: [u8; 8]) -> Vec<SpanPlan> {
    let Some(session) = &record.realtime else { return Vec::new() };
    let t0 = record.timeline.t0_unix_ns;
    let at = |ms: f64| t0.saturating_add(ms_to_ns(ms));
    let end_ms = session.duration_ms;
    let mut spans = Vec::new();
    for (index, r) in session.responses.iter().enumerate() {
        let span_id = child_span_id(session_span, &format!("{REALTIME_INFERENCE}/{index}"));
        let start = at(response_start_ms(r));
        let end = at(r.done_ms.unwrap_or(end_ms)).max(start);
        let status = match r.status {
            Some(tokentap_analysis::realtime::ResponseStatus::Failed) => SpanStatus::Error("response failed".into()),
            _ => SpanStatus::Unset,
        };
        let name = match &session.model {
            Some(m) => format!("{REALTIME_INFERENCE} {m}"),
            None => REALTIME_INFERENCE.to_string(),
        };
        spans.push(SpanPlan {
            trace_id,
            span_id,
            parent_span_id: Some(session_span),
            sampled: true,
            name,
            kind: SpanKind::Internal,
            start_unix_ns: start,
            end_unix_ns: end,
            attributes: response_attributes(session, r, index),
            events: Vec::new(),
            dropped_events: 0,
            status,
        });
        for call in &r.tool_calls {
            let Some(until) = call.next_response_requested_ms.or(call.output_sent_ms) else { continue };
            let mut attributes: Attributes = vec![
                (attr::OPERATION_NAME, AttrValue::Str(EXECUTE_TOOL.into())),
                (attr::TOOL_CALL_ID, AttrValue::Str(call.call_id.clone())),
                (attr::TOOL_TYPE, AttrValue::Str("function".into())),
            ];
            if let Some(n) = &call.name {
                attributes.insert(1, (attr::TOOL_NAME, AttrValue::Str(n.clone())));
            }
            push_f64(
                &mut attributes,
                attr::REALTIME_TOOL_OUTPUT_SENT_MS,
                call.output_sent_ms.map(|o| o - call.ready_ms),
            );
            spans.push(SpanPlan {
                trace_id,
                span_id: child_span_id(session_span, &format!("{EXECUTE_TOOL}/{}", call.call_id)),
                parent_span_id: Some(span_id),
                sampled: true,
                name: match &call.name {
                    Some(n) => format!("{EXECUTE_TOOL} {n}"),
                    None => EXECUTE_TOOL.to_string(),
                },
                kind: SpanKind::Internal,
                start_unix_ns: at(call.ready_ms),
                end_unix_ns: at(until).max(at(call.ready_ms)),
                attributes,
                events: Vec::new(),
                dropped_events: 0,
                status: SpanStatus::Unset,
            });
        }
    }
    spans
}

/// The session's histogram values: per response with audio, the two times to first audio.
pub(super) fn realtime_observations(
    record: &Record,
    labels: &super::metrics::SharedLabels,
    out: &mut Vec<Observation>,
) {
    let Some(session) = &record.realtime else { return };
    for r in &session.responses {
        if let Some(v) = r.time_to_first_audio_from_speech_stopped_ms {
            out.push(Observation {
                metric: MetricId::RealtimeFirstAudioFromSpeechStopped,
                labels: labels.clone(),
                value: v / 1e3,
            });
        }
        if let Some(v) = r.time_to_first_audio_from_speech_end_ms {
            out.push(Observation {
                metric: MetricId::RealtimeFirstAudioFromSpeechEnd,
                labels: labels.clone(),
                value: v / 1e3,
            });
        }
        for c in &r.tool_calls {
            if let (Some(gap), Some(name)) = (c.tool_gap_ms, &c.name) {
                let mut l = Labels::clone(labels);
                l.push((attr::TOOL_NAME, super::label(name)));
                out.push(Observation { metric: MetricId::ExecuteToolDuration, labels: l.into(), value: gap / 1e3 });
            }
        }
    }
}

/// The span id of response `index`'s `realtime_inference` span.
fn response_span_id(session_span: [u8; 8], index: usize) -> [u8; 8] {
    child_span_id(session_span, &format!("{REALTIME_INFERENCE}/{index}"))
}

/// One `playout` span per response the page played, under that response's `realtime_inference`
/// span: from its first sound heard to its end (or its first sound, when the page did not know
/// the end), with the response's heard latencies. `attributes` gives the playback's own.
pub(super) fn realtime_playout_spans(
    record: &Record,
    browser: &BrowserTimeline,
    trace_id: [u8; 16],
    at: impl Fn(f64) -> u64,
    attributes: impl Fn(&tokentap_record::browser::timeline::BrowserAudio) -> Attributes,
) -> Vec<SpanPlan> {
    let Some(session_span) = super::hex_bytes::<8>(&record.span_id) else { return Vec::new() };
    let mut spans = Vec::new();
    for r in &browser.realtime {
        let (Some(playout), Some(heard_ms)) = (&r.playout, r.heard_ms) else { continue };
        let parent = response_span_id(session_span, r.index);
        let mut attrs = attributes(playout);
        attrs.push((attr::RESPONSE_ID, AttrValue::Str(r.response_id.clone())));
        push_f64(&mut attrs, attr::VOICE_TO_VOICE_MS, r.voice_to_voice_ms);
        push_f64(&mut attrs, attr::VOICE_HEARD_FROM_SPEECH_STOPPED_MS, r.time_to_heard_from_speech_stopped_ms);
        push_f64(&mut attrs, attr::VOICE_HEARD_AFTER_FIRST_AUDIO_MS, r.heard_after_first_audio_ms);
        push_f64(&mut attrs, attr::VOICE_FIRST_AUDIO_DELIVERY_MS, r.first_audio_delivery_ms);
        let start = at(heard_ms);
        let end = playout.end_ms.map_or(start, &at).max(start);
        spans.push(SpanPlan {
            trace_id,
            span_id: child_span_id(parent, "playout"),
            parent_span_id: Some(parent),
            sampled: true,
            name: "playout".into(),
            kind: SpanKind::Internal,
            start_unix_ns: start,
            end_unix_ns: end,
            attributes: attrs,
            events: Vec::new(),
            dropped_events: 0,
            status: SpanStatus::Unset,
        });
    }
    spans
}

/// `tokentap.voice.voice_to_voice` per realtime response the page heard (end of speech → heard).
pub fn realtime_browser_observations(record: &Record) -> Vec<Observation> {
    let Some(browser) = &record.browser else { return Vec::new() };
    let labels: super::metrics::SharedLabels = vec![(attr::ROUTE, super::label(&record.route))].into();
    browser
        .realtime
        .iter()
        .filter_map(|r| r.voice_to_voice_ms)
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| Observation { metric: MetricId::VoiceToVoice, labels: labels.clone(), value: v / 1e3 })
        .collect()
}
