//! A WebRTC peer connection's voice turns as the page saw them (the record's `browser.webrtc`),
//! under the page's span of the request that carried the offer: per answer a `voice turn` span from
//! the user's end of speech to the first sample heard, with the data channel's events, and its
//! parts as children: `webrtc response` (end of speech → the answer's first audible packet in the
//! page: the server and the network), `jitter buffer` (that packet → its sample handed to
//! playout) and `playout` (→ heard).

use tokentap_record::browser::webrtc_join::BrowserWebrtc;
use tokentap_record::Record;

use super::attributes::attr;
use super::plan::{child_span_id, event, AttrValue, Attributes, EventPlan, SpanKind, SpanPlan, SpanStatus};
use super::{MetricId, Observation};

fn push_f64(attrs: &mut Attributes, key: &'static str, value: Option<f64>) {
    if let Some(v) = value.filter(|v| v.is_finite()) {
        attrs.push((key, AttrValue::F64(v)));
    }
}

fn span(trace_id: [u8; 16], id: [u8; 8], parent: [u8; 8], name: &str, bounds: (u64, u64)) -> SpanPlan {
    SpanPlan {
        trace_id,
        span_id: id,
        parent_span_id: Some(parent),
        sampled: true,
        name: name.into(),
        kind: SpanKind::Internal,
        start_unix_ns: bounds.0,
        end_unix_ns: bounds.1.max(bounds.0),
        attributes: Vec::new(),
        events: Vec::new(),
        dropped_events: 0,
        status: SpanStatus::Unset,
    }
}

/// `tokentap.webrtc.voice_to_ear` per voice turn of a WebRTC session whose end of speech the page
/// knew (a session is reported once, when its connection ends).
pub fn webrtc_browser_observations(record: &Record) -> Vec<Observation> {
    let Some(webrtc) = record.browser.as_ref().and_then(|b| b.webrtc.as_ref()) else { return Vec::new() };
    let labels: super::metrics::SharedLabels = vec![(attr::ROUTE, super::label(&record.route))].into();
    webrtc
        .turns
        .iter()
        .filter_map(|t| t.voice_to_ear_ms)
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| Observation { metric: MetricId::WebrtcVoiceToEar, labels: labels.clone(), value: v / 1e3 })
        .collect()
}

/// The spans of `webrtc`'s voice turns, children of `parent` (the page's span of the offer).
pub(super) fn webrtc_turn_spans(
    webrtc: &BrowserWebrtc,
    trace_id: [u8; 16],
    parent: [u8; 8],
    at: impl Fn(f64) -> u64,
    max_events: usize,
) -> Vec<SpanPlan> {
    let mut spans = Vec::new();
    for (i, t) in webrtc.turns.iter().enumerate() {
        let turn_id = child_span_id(parent, &format!("webrtc-turn:{i}"));
        let start_ms = t.speech_end_ms.or(t.events.first().map(|e| e.t_ms)).unwrap_or(t.delivered_ms);
        let mut turn = span(trace_id, turn_id, parent, "voice turn", (at(start_ms), at(t.heard_ms)));
        let a = &mut turn.attributes;
        a.push((attr::WEBRTC_TURN_INDEX, AttrValue::Int(i as i64)));
        a.push((attr::WEBRTC_ONSET_METHOD, AttrValue::Str(t.onset_method.as_str().into())));
        if let Some(source) = t.speech_end_source {
            a.push((attr::WEBRTC_SPEECH_END_SOURCE, AttrValue::Str(source.as_str().into())));
        }
        push_f64(a, attr::WEBRTC_VOICE_TO_EAR_MS, t.voice_to_ear_ms);
        push_f64(a, attr::WEBRTC_JITTER_BUFFER_MS, t.delays.jitter_buffer_ms);
        push_f64(a, attr::WEBRTC_JITTER_BUFFER_TARGET_MS, t.delays.jitter_buffer_target_ms);
        push_f64(a, attr::WEBRTC_PLAYOUT_DELAY_MS, t.delays.playout_delay_ms);
        push_f64(a, attr::WEBRTC_CONCEALED_RATIO, t.concealed_ratio);
        a.push((attr::WEBRTC_CHOPPY, AttrValue::Bool(t.choppy)));
        a.push((attr::WEBRTC_BARGE_IN, AttrValue::Bool(t.barge_in_ms.is_some())));
        push_f64(a, attr::WEBRTC_STOPPED_AFTER_BARGE_IN_MS, t.stopped_after_barge_in_ms);
        let events: Vec<EventPlan> = t
            .events
            .iter()
            .take(max_events)
            .map(|e| EventPlan {
                name: event::WEBRTC_EVENT,
                time_unix_ns: at(e.t_ms),
                attributes: vec![(attr::WEBRTC_EVENT_NAME, AttrValue::Str(e.name.clone()))],
            })
            .collect();
        turn.dropped_events = (t.events.len() - events.len()) as u32;
        turn.events = events;
        spans.push(turn);
        let packet_ms = t.first_packet_ms.unwrap_or(t.delivered_ms);
        let parts = [
            ("webrtc response", "response", t.speech_end_ms.map(|s| (s, packet_ms))),
            ("jitter buffer", "jitter_buffer", t.first_packet_ms.map(|p| (p, t.delivered_ms))),
            ("playout", "playout", Some((t.delivered_ms, t.heard_ms))),
        ];
        for (name, phase, bounds) in parts {
            let Some((from, to)) = bounds else { continue };
            let mut part = span(trace_id, child_span_id(turn_id, phase), turn_id, name, (at(from), at(to)));
            part.attributes.push((attr::PHASE, AttrValue::Str(phase.into())));
            spans.push(part);
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_is_a_span_with_its_parts_as_children() {
        let webrtc: BrowserWebrtc = serde_json::from_value(serde_json::json!({
            "turns": [
                {"speech_end_ms": 100.0, "speech_end_source": "vad",
                 "events": [{"name": "response.created", "t_ms": 400.0}],
                 "first_packet_ms": 700.0, "delivered_ms": 760.0, "heard_ms": 790.0, "onset_method": "ssrc",
                 "jitter_buffer_ms": 60.0, "playout_delay_ms": 30.0, "voice_to_ear_ms": 690.0},
                {"delivered_ms": 2000.0, "heard_ms": 2000.0, "onset_method": "stats"}
            ]
        }))
        .unwrap();
        let spans = webrtc_turn_spans(&webrtc, [1; 16], [2; 8], |ms| (ms * 1e6) as u64, 64);
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        // The second turn knows neither its end of speech nor its first packet: playout only.
        assert_eq!(names, ["voice turn", "webrtc response", "jitter buffer", "playout", "voice turn", "playout"]);
        let turn = &spans[0];
        assert_eq!(turn.parent_span_id, Some([2; 8]));
        assert_eq!((turn.start_unix_ns, turn.end_unix_ns), (100_000_000, 790_000_000));
        assert_eq!(turn.events.len(), 1);
        assert!(spans[1..4].iter().all(|s| s.parent_span_id == Some(turn.span_id)));
        assert_eq!((spans[2].start_unix_ns, spans[2].end_unix_ns), (700_000_000, 760_000_000));
        assert!(turn.attributes.iter().any(|(k, v)| *k == attr::WEBRTC_VOICE_TO_EAR_MS && *v == AttrValue::F64(690.0)));
    }

    #[test]
    fn each_turn_with_an_end_of_speech_is_a_voice_to_ear_observation() {
        let mut json = super::super::tests::record_json();
        json["browser"] = serde_json::json!({
            "probe_span_id": "00f067aa0ba902b7", "page_path": "/voice",
            "clock": {"offset_ms": 0.1, "uncertainty_ms": 0.4, "samples": 5},
            "marks": [], "chunks": [], "long_frames": [], "audio": [],
            "browser_bytes": 0, "bytes_match": true, "painted_chars": 0, "answer_chars": 0,
            "chunks_dropped": 0, "paints_dropped": 0,
            "webrtc": {"turns": [
                {"speech_end_ms": 100.0, "delivered_ms": 760.0, "heard_ms": 790.0, "onset_method": "ssrc",
                 "voice_to_ear_ms": 690.0},
                {"delivered_ms": 2000.0, "heard_ms": 2000.0, "onset_method": "stats"}
            ]}
        });
        let record: Record = serde_json::from_value(json).unwrap();
        let observations = webrtc_browser_observations(&record);
        assert_eq!(observations.len(), 1, "the turn without an end of speech has no voice to ear");
        assert_eq!(observations[0].metric, MetricId::WebrtcVoiceToEar);
        assert!((observations[0].value - 0.69).abs() < 1e-9);
        assert!(observations[0].labels.iter().any(|(k, _)| *k == attr::ROUTE));
        assert_eq!(MetricId::WebrtcVoiceToEar.def().prometheus_name, "tokentap_webrtc_voice_to_ear_seconds");
    }
}
