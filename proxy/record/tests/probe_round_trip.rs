//! The probe ↔ ingest protocol, host-side: reports written by the browser probe's own writer
//! (`tokentap_browser_probe::report::report_json`) over many random turns are accepted by the
//! ingest's parser (`ProbeReport::parse`) and read back field for field.

use proptest::prelude::*;
use tokentap_browser_probe::clock::ClockEstimate;
use tokentap_browser_probe::report::report_json;
use tokentap_browser_probe::turn::{AudioKind, LongFrame, Mark, Paint, RequestInfo, ResponsePath, Turn};
use tokentap_probe_protocol::{TextFormat, Transport};
use tokentap_record::browser::ProbeReport;

/// A time as the probe writes it: thousandths of a millisecond.
fn thousandths(ms: f64) -> i64 {
    (ms * 1000.0).round() as i64
}

fn same_time(written: f64, parsed: f64) -> bool {
    thousandths(written) == thousandths(parsed)
}

fn same_opt_time(written: Option<f64>, parsed: Option<f64>) -> bool {
    match (written, parsed) {
        (Some(w), Some(p)) => same_time(w, p),
        (None, None) => true,
        _ => false,
    }
}

/// Text a page may hold: quotes, backslashes and non-ASCII included (the writer escapes them).
fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[a-zA-Z0-9 /_.\"\\\\é€😀-]{{1,{max}}}")).unwrap()
}

fn header_value() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(proptest::string::string_regex("[ -~]{1,40}").unwrap())
        .prop_map(|v| v.and_then(|v| ResponsePath::header(Some(v))))
}

#[derive(Debug, Clone)]
struct Input {
    ids: [u8; 24],
    page_path: String,
    method: String,
    path: String,
    status: Option<u16>,
    start_ms: f64,
    /// Gaps (ms) and sizes of the chunks; the chars counted after each.
    chunks: Vec<(f64, u64, u64)>,
    count_chars: bool,
    paints: Vec<(f64, u64, Option<f64>)>,
    marks: Vec<(String, f64)>,
    long_frames: Vec<(f64, f64, f64)>,
    audio: Vec<(bool, f64, Option<f64>)>,
    clock: Option<(f64, f64, u32)>,
    content_encoding: Option<String>,
    via: Option<String>,
    server: Option<String>,
    text_format: Option<usize>,
    text_inferred: bool,
    transport: Option<usize>,
}

fn input() -> impl Strategy<Value = Input> {
    (
        (
            any::<[u8; 24]>(),
            text(60).prop_map(|p| format!("/{}", p.replace('?', ""))),
            proptest::string::string_regex("[A-Z]{1,10}").unwrap(),
            text(60).prop_map(|p| format!("/{}", p.replace('?', ""))),
            proptest::option::of(100u16..=599),
            1.6e12f64..1.9e12,
        ),
        (
            proptest::collection::vec((0.0f64..500.0, 1u64..70_000, 0u64..50), 0..40),
            any::<bool>(),
            proptest::collection::vec((0.0f64..500.0, 0u64..100, proptest::option::of(0.0f64..20.0)), 0..40),
            proptest::collection::vec((text(15), 0.0f64..5_000.0), 0..8),
            proptest::collection::vec((0.0f64..5_000.0, 50.0f64..400.0, 0.0f64..300.0), 0..6),
            proptest::collection::vec((any::<bool>(), 0.0f64..5_000.0, proptest::option::of(0.0f64..100.0)), 0..3),
        ),
        (
            proptest::option::of((-1.0e6f64..1.0e6, 0.0f64..500.0, 0u32..10)),
            header_value(),
            header_value(),
            header_value(),
            proptest::option::of(0usize..TextFormat::VARIANTS.len()),
            any::<bool>(),
            proptest::option::of(0usize..Transport::VARIANTS.len()),
        ),
    )
        .prop_filter("ids must not be all zeros", |((ids, ..), _, _)| {
            tokentap_browser_probe::trace::ids_from_random(ids).is_some()
        })
        .prop_map(
            |(
                (ids, page_path, method, path, status, start_ms),
                (chunks, count_chars, paints, marks, long_frames, audio),
                (clock, content_encoding, via, server, text_format, text_inferred, transport),
            )| Input {
                ids,
                page_path,
                method,
                path,
                status,
                start_ms,
                chunks,
                count_chars,
                paints,
                marks,
                long_frames,
                audio,
                clock,
                content_encoding,
                via,
                server,
                text_format,
                text_inferred,
                transport,
            },
        )
}

/// The turn the probe would hold after seeing `input`, through its own recording methods.
fn turn(input: &Input) -> Turn {
    let (trace_id, span_id) = tokentap_browser_probe::trace::ids_from_random(&input.ids).unwrap();
    let request = RequestInfo {
        trace_id,
        span_id,
        page_path: input.page_path.clone(),
        method: input.method.clone(),
        path: input.path.clone(),
    };
    let mut turn = Turn::new(1, request, input.start_ms);
    if let Some(status) = input.status {
        turn.record_response(input.start_ms + 1.0, status);
    }
    let mut t = input.start_ms + 1.0;
    let mut counts = Vec::new();
    let (mut bytes, mut chars) = (0, 0);
    for &(gap, len, more_chars) in &input.chunks {
        t += gap;
        turn.record_chunk(t, len);
        bytes += len;
        chars += more_chars;
        counts.push((bytes, chars));
    }
    if input.count_chars {
        turn.set_chars(&counts);
    }
    turn.record_end(t + 1.0);
    let mut p = input.start_ms;
    let mut painted = 0;
    for &(gap, more, presentation) in &input.paints {
        p += gap;
        painted += more;
        turn.record_paint(Paint { t_ms: p, chars: painted, presentation_ms: presentation.map(|d| p + d) });
    }
    for (name, at) in &input.marks {
        turn.record_mark(Mark { name: name.clone(), t_ms: input.start_ms + at });
    }
    for &(at, duration_ms, blocking_ms) in &input.long_frames {
        turn.record_long_frame(LongFrame { start_ms: input.start_ms + at, duration_ms, blocking_ms });
    }
    for &(context, at, latency) in &input.audio {
        let kind = if context { AudioKind::AudioContext } else { AudioKind::MediaElement };
        if let Some(playout) = turn.playout(kind) {
            playout.heard(input.start_ms + at, latency);
        }
    }
    turn.response_path = ResponsePath {
        content_encoding: input.content_encoding.clone(),
        via: input.via.clone(),
        server: input.server.clone(),
        text_format: input.text_format.map(|i| TextFormat::VARIANTS[i]),
        text_inferred: input.text_inferred,
        transport: input.transport.map(|i| Transport::VARIANTS[i]),
    };
    turn
}

fn check(turn: &Turn, clock: Option<&ClockEstimate>, report: &ProbeReport) -> Result<(), TestCaseError> {
    prop_assert_eq!(report.schema.as_str(), tokentap_probe_protocol::SCHEMA);
    prop_assert_eq!(&report.trace_id, &turn.request.trace_id);
    prop_assert_eq!(&report.span_id, &turn.request.span_id);
    prop_assert_eq!(report.page_path.as_deref(), Some(turn.request.page_path.as_str()));
    let request = report.request.as_ref().expect("request");
    prop_assert_eq!(request.method.as_deref(), Some(turn.request.method.as_str()));
    prop_assert_eq!(request.path.as_deref(), Some(turn.request.path.as_str()));
    prop_assert_eq!(request.status, turn.status);
    match (clock, &report.clock) {
        (Some(c), Some(r)) => {
            prop_assert!(same_time(c.offset_ms, r.offset_ms) && same_time(c.uncertainty_ms, r.uncertainty_ms));
            prop_assert_eq!(c.samples, r.samples);
        }
        (None, None) => {}
        (c, r) => prop_assert!(false, "clock {:?} read back as {:?}", c, r),
    }
    prop_assert_eq!(report.marks.len(), turn.marks.len());
    for (m, r) in turn.marks.iter().zip(&report.marks) {
        prop_assert!(m.name == r.name && same_time(m.t_ms, r.t_ms), "{:?} vs {:?}", m, r);
    }
    prop_assert_eq!(report.marks_dropped, turn.marks_dropped);
    let fetch = report.fetch.as_ref().expect("fetch");
    prop_assert!(same_time(fetch.start_ms, turn.start_ms));
    prop_assert!(same_opt_time(turn.response_ms, fetch.response_ms));
    prop_assert!(same_opt_time(turn.end_ms, fetch.end_ms));
    prop_assert_eq!(fetch.chunks.len(), turn.chunks.len());
    for (c, r) in turn.chunks.iter().zip(&fetch.chunks) {
        prop_assert!(same_time(c.t_ms, r.t_ms) && c.bytes == r.bytes && c.chars == r.chars, "{:?} vs {:?}", c, r);
    }
    prop_assert_eq!(fetch.chunks_dropped, turn.chunks_dropped);
    prop_assert_eq!(fetch.text_format, turn.response_path.text_format);
    prop_assert_eq!(&fetch.content_encoding, &turn.response_path.content_encoding);
    prop_assert_eq!(&fetch.via, &turn.response_path.via);
    prop_assert_eq!(&fetch.server, &turn.response_path.server);
    prop_assert_eq!(fetch.text_inferred, turn.response_path.text_inferred);
    prop_assert_eq!(fetch.transport, turn.response_path.transport);
    prop_assert_eq!(report.paints.len(), turn.paints.len());
    for (p, r) in turn.paints.iter().zip(&report.paints) {
        prop_assert!(p.chars == r.chars && same_time(p.t_ms, r.t_ms), "{:?} vs {:?}", p, r);
        prop_assert!(same_opt_time(p.presentation_ms, r.presentation_ms));
    }
    prop_assert_eq!(report.paints_dropped, turn.paints_dropped);
    prop_assert_eq!(report.long_frames.len(), turn.long_frames.len());
    for (f, r) in turn.long_frames.iter().zip(&report.long_frames) {
        prop_assert!(same_time(f.start_ms, r.start_ms) && same_time(f.duration_ms, r.duration_ms));
        prop_assert!(same_opt_time(Some(f.blocking_ms), r.blocking_ms));
    }
    prop_assert_eq!(report.long_frames_dropped, turn.long_frames_dropped);
    let heard: Vec<_> = turn.audio.iter().filter(|a| a.audible_ms.is_some()).collect();
    prop_assert_eq!(report.audio.len(), heard.len());
    for (a, r) in heard.iter().zip(&report.audio) {
        prop_assert_eq!(r.kind.as_str(), a.kind.as_str());
        prop_assert!(same_opt_time(a.audible_ms, Some(r.audible_ms)));
        prop_assert!(same_opt_time(a.output_latency_ms, r.output_latency_ms));
        prop_assert_eq!(r.underruns, u64::from(a.underruns));
        prop_assert_eq!(r.interrupted, a.interrupted_ms.is_some());
    }
    prop_assert_eq!(report.audio_dropped, turn.audio_dropped);
    prop_assert!(report.realtime.is_none());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_ingest_reads_what_the_probe_writes(input in input()) {
        let turn = turn(&input);
        let clock = input.clock.map(|(offset_ms, uncertainty_ms, samples)| ClockEstimate { offset_ms, uncertainty_ms, samples });
        let json = report_json(&turn, clock.as_ref(), input.start_ms + 10_000.0);
        let report = ProbeReport::parse(json.as_bytes());
        prop_assert!(report.is_ok(), "{:?}\n{}", report, json);
        check(&turn, clock.as_ref(), &report.unwrap())?;
    }
}

/// The caps the probe keeps to are the ones the ingest enforces: a turn filled past every cap
/// still makes a report the ingest accepts, with the lists at their caps.
#[test]
fn a_turn_filled_past_every_cap_is_accepted() {
    use tokentap_probe_protocol::caps;
    let input = Input {
        ids: [7; 24],
        page_path: "/chat".into(),
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
        status: Some(200),
        start_ms: 1.7e12,
        chunks: vec![(0.1, 10, 1); caps::MAX_CHUNKS + 10],
        count_chars: true,
        paints: vec![(0.1, 1, None); caps::MAX_PAINTS + 10],
        marks: vec![("user_send".into(), 1.0); caps::MAX_MARKS + 10],
        long_frames: vec![(1.0, 60.0, 10.0); caps::MAX_LONG_FRAMES + 10],
        audio: vec![],
        clock: None,
        content_encoding: None,
        via: None,
        server: None,
        text_format: Some(0),
        text_inferred: false,
        transport: None,
    };
    let turn = turn(&input);
    let json = report_json(&turn, None, input.start_ms);
    assert!(json.len() <= caps::MAX_REPORT_BYTES, "{} bytes", json.len());
    let report = ProbeReport::parse(json.as_bytes()).unwrap();
    // The longest lists are thinned to fit the body cap; what went is counted.
    let fetch = report.fetch.as_ref().unwrap();
    assert!(fetch.chunks.len() <= caps::MAX_CHUNKS && report.paints.len() <= caps::MAX_PAINTS);
    assert_eq!(fetch.chunks.len() as u64 + fetch.chunks_dropped, input.chunks.len() as u64);
    assert_eq!(report.paints.len() as u64 + report.paints_dropped, input.paints.len() as u64);
    assert_eq!(report.marks.len(), caps::MAX_MARKS);
    assert_eq!(report.long_frames.len(), caps::MAX_LONG_FRAMES);
}

/// A WebRTC session filled past its caps (answers, speech, timed and counted events) makes a
/// report the ingest accepts and reads back.
#[test]
fn a_webrtc_session_past_its_caps_is_read_back() {
    use tokentap_browser_probe::webrtc::{Inbound, WebRtcSeen};
    use tokentap_probe_protocol::caps;
    let request = RequestInfo {
        trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
        span_id: "b7ad6b7169203331".into(),
        page_path: "/voice".into(),
        method: "POST".into(),
        path: "/v1/realtime/calls".into(),
    };
    let t0 = 1.7e12;
    let mut turn = Turn::new(1, request, t0);
    turn.record_response(t0 + 50.0, 201);
    turn.record_end(t0 + 60.0);
    let mut seen = WebRtcSeen::default();
    seen.connected_ms = Some(t0 + 100.0);
    let mut energy = 0.0;
    let mut local = 0.0;
    for i in 0..(caps::MAX_WEBRTC_ANSWERS + 5) * 20 {
        let t = t0 + 200.0 + i as f64 * 50.0;
        // Alternating 500 ms of answer audio and 500 ms of silence; speech in the silences.
        let answer = (i / 10) % 2 == 0;
        energy += if answer { 0.01 * 0.05 } else { 0.0 };
        local += if answer { 0.0 } else { 0.01 * 0.05 };
        let samples = i as f64 * 2400.0;
        let inbound = Inbound {
            packets_received: i as f64 * 2.5,
            packets_lost: 1.0,
            samples_received: samples,
            concealed_samples: samples / 100.0,
            jitter_buffer_emitted: samples,
            jitter_buffer_delay_s: samples * 0.05,
            energy,
            energy_duration_s: i as f64 * 0.05,
            ..Inbound::default()
        };
        seen.inbound(t, inbound, Some(0.003));
        seen.local(t, local, i as f64 * 0.05);
        seen.event(t, if answer { "response.created" } else { "input_audio_buffer.speech_stopped" });
        seen.event(t, &format!("other.{}", i % (caps::MAX_WEBRTC_EVENT_NAMES + 3)));
    }
    seen.close(t0 + 600_000.0);
    turn.webrtc = Some(seen.clone());
    let json = report_json(&turn, None, t0 + 600_001.0);
    assert!(json.len() <= caps::MAX_REPORT_BYTES, "{} bytes", json.len());
    let report = ProbeReport::parse(json.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let webrtc = report.webrtc.expect("a webrtc section");
    assert_eq!(webrtc.answers.len(), caps::MAX_WEBRTC_ANSWERS);
    assert!(webrtc.answers_dropped > 0);
    assert_eq!(webrtc.events.len(), caps::MAX_WEBRTC_EVENTS);
    assert_eq!(webrtc.event_counts.len(), caps::MAX_WEBRTC_EVENT_NAMES);
    assert!(webrtc.events_dropped > 0);
    for (written, read) in seen.answers.iter().zip(&webrtc.answers) {
        assert!(same_time(written.delivered_ms, read.delivered_ms));
        assert!(same_opt_time(written.end_ms, read.end_ms));
        assert!(same_opt_time(written.delays.jitter_buffer_ms, read.jitter_buffer_ms));
    }
    assert!(same_opt_time(seen.closed_ms, webrtc.closed_ms));
    assert!((webrtc.jitter_buffer_ms.unwrap() - 50.0).abs() < 1e-3);
    assert_eq!(webrtc.rtt_ms, Some(3.0));
}
