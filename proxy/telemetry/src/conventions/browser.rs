//! The browser probe's spans: what the page saw of a request, under the request's span.

use tokentap_record::Record;

use super::attributes::attr;
use super::plan::{
    child_span_id, event, hex_bytes, AttrValue, Attributes, EventPlan, SpanKind, SpanOptions, SpanPlan, SpanStatus,
};
use super::request::diagnosis_attrs;
use super::request::within_budget;

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
    // A WebRTC session's page span lasts until the connection closed.
    let webrtc_end = b.webrtc.as_ref().and_then(|w| w.closed_ms.or(w.turns.last().map(|t| t.heard_ms)));
    let end_ms =
        [b.fetch_end_ms, b.last_paint_ms, webrtc_end, Some(start_ms)].into_iter().flatten().fold(start_ms, f64::max);

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
    // A WebRTC session's voice turns, under the page's span of the request that carried the offer.
    if let Some(webrtc) = &b.webrtc {
        spans.extend(super::webrtc::webrtc_turn_spans(webrtc, trace_id, fetch_span, at, options.max_events_per_span));
    }
    // A realtime session's playbacks are per response, each under its `realtime_inference` span.
    spans.extend(super::realtime::realtime_playout_spans(record, b, trace_id, at, playout_attributes));
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
