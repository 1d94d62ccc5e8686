//! The page on an app server's origin: the app server calls the model through tokentap and
//! re-encodes the stream for the page, so the page's bytes are not tokentap's. Each scenario
//! builds the probe's report (arrivals with the answer characters the probe decoded, paints),
//! joins it to the record with `join::join` and checks the verdict and its evidence.

use super::*;
use crate::browser::arrival::{ArrivalAlignment, JoinedBy};
use crate::browser::report::{
    BrowserChunk, LongFrame, Paint, ProbeReport, ReportedClock, ReportedFetch, ReportedRequest, TextFormat,
};
use crate::fixtures::{stream_record, t_up, T0_UNIX_NS};
use crate::waits::Segment;

const T0_MS: f64 = T0_UNIX_NS as f64 / 1e6;
const EVENTS: usize = 40;

/// How the page saw one scenario.
struct Scenario {
    name: &'static str,
    /// When event `i` (handed off at `handoffs[i]`, ms since t0) reached the page.
    arrival: fn(usize, &[f64]) -> f64,
    content_encoding: Option<&'static str>,
    via: Option<&'static str>,
    server: Option<&'static str>,
    long_frames: Vec<(f64, f64)>,
    /// Characters the app adds before the answer (a label), which scale the alignment.
    prefix_chars: u64,
    /// The probe decoded answer characters (false: a format it cannot read).
    decoded: bool,
    kind: VerdictKind,
    pattern: Option<ReleasePattern>,
}

fn scenarios() -> Vec<Scenario> {
    // Long frames of 300 ms starting at the handoff of every 10th event.
    let frame_start = |k: usize| 100.0 + ITL * (10 * k) as f64 + 0.1;
    vec![
        Scenario {
            name: "the app writes each event at once",
            arrival: |i, h| h[i] + 3.0 + (i % 3) as f64,
            content_encoding: None,
            via: None,
            server: None,
            long_frames: vec![],
            prefix_chars: 0,
            decoded: true,
            kind: VerdictKind::NoRebuffering,
            pattern: None,
        },
        Scenario {
            name: "the app labels the answer and writes each event at once",
            arrival: |i, h| h[i] + 4.0,
            content_encoding: None,
            via: None,
            server: None,
            long_frames: vec![],
            prefix_chars: 8,
            decoded: true,
            kind: VerdictKind::NoRebuffering,
            pattern: None,
        },
        Scenario {
            name: "gzip middleware holds the whole answer until the end",
            arrival: |_, h| h[EVENTS - 1] + 6.0,
            content_encoding: Some("gzip"),
            via: None,
            server: None,
            long_frames: vec![],
            prefix_chars: 0,
            decoded: true,
            kind: VerdictKind::AppServerCompression,
            pattern: Some(ReleasePattern::AtEnd),
        },
        Scenario {
            name: "the app flushes every 8 events",
            arrival: |i, h| h[(i / 8) * 8 + 7] + 2.0,
            content_encoding: None,
            via: None,
            server: None,
            long_frames: vec![],
            prefix_chars: 0,
            decoded: true,
            kind: VerdictKind::AppServerBuffering,
            pattern: Some(ReleasePattern::Periodic),
        },
        Scenario {
            name: "a reverse proxy in front of the app releases buffer pages",
            arrival: |i, h| h[[11, 12, 30, 39][[11, 12, 30, 39].iter().position(|&e| i <= e).unwrap()]] + 2.0,
            content_encoding: None,
            via: Some("1.1 edge-proxy"),
            server: None,
            long_frames: vec![],
            prefix_chars: 0,
            decoded: true,
            kind: VerdictKind::ReverseProxyBuffering,
            pattern: Some(ReleasePattern::WhenFull),
        },
        Scenario {
            name: "nginx in front of the app (it names itself in Server) holds the stream until its end",
            arrival: |_, h| h[EVENTS - 1] + 3.0,
            content_encoding: None,
            via: None,
            server: Some("nginx/1.22.1"),
            long_frames: vec![],
            prefix_chars: 0,
            decoded: true,
            kind: VerdictKind::ReverseProxyBuffering,
            pattern: Some(ReleasePattern::AtEnd),
        },
        Scenario {
            name: "the page's main thread is blocked 300 ms every 10 events",
            arrival: |i, h| {
                let start = 100.0 + ITL * ((i / 10) * 10) as f64 + 0.1;
                let t = h[i] + 3.0;
                if t < start + 300.0 && (i / 10) % 2 == 0 {
                    start + 300.0
                } else {
                    t
                }
            },
            content_encoding: None,
            via: None,
            server: None,
            long_frames: vec![(frame_start(0), 300.0), (frame_start(2), 300.0)],
            prefix_chars: 0,
            decoded: true,
            kind: VerdictKind::BrowserMainThread,
            pattern: None,
        },
        Scenario {
            name: "a body format the probe cannot read: arrival unobserved, paint still aligned",
            arrival: |i, h| h[i] + 3.0,
            content_encoding: None,
            via: None,
            server: None,
            long_frames: vec![],
            prefix_chars: 0,
            decoded: false,
            kind: VerdictKind::NoRebuffering,
            pattern: None,
        },
        Scenario {
            name: "gzip with a format the probe cannot read: the bytes arrive in one burst at the end",
            arrival: |_, h| h[EVENTS - 1] + 6.0,
            content_encoding: Some("gzip"),
            via: None,
            server: None,
            long_frames: vec![],
            prefix_chars: 0,
            decoded: false,
            kind: VerdictKind::AppServerCompression,
            pattern: Some(ReleasePattern::AtEnd),
        },
        Scenario {
            name: "a format the probe cannot read, bytes streamed, text painted late: unobserved, not the browser",
            // Every event's bytes arrive on time, but the app sends its text only in the last events
            // (paints come late): whether the page had the text earlier is not known.
            arrival: |i, h| h[i] + 3.0,
            content_encoding: Some("gzip"),
            via: None,
            server: None,
            long_frames: vec![],
            prefix_chars: 0,
            decoded: false,
            kind: VerdictKind::Unobserved,
            pattern: None,
        },
    ]
}

const ITL: f64 = crate::fixtures::ITL_MS;
const APP_SPAN: &str = "1111111111111111";
const PROBE_SPAN: &str = "2222222222222222";

/// The model call the app made through tokentap: its parent span is the app's, not the probe's.
fn record() -> Record {
    let mut r = stream_record(EVENTS);
    r.parent_span_id = Some(APP_SPAN.into());
    r
}

fn report(record: &Record, s: &Scenario) -> ProbeReport {
    let handoffs: Vec<f64> = record.timeline.chunks.iter().map(|c| c.t_handoff_ns.unwrap() as f64 / 1e6).collect();
    let b = |rel: f64| T0_MS + rel;
    let mut chunks = Vec::new();
    let mut paints = Vec::new();
    for i in 0..EVENTS {
        let t = (s.arrival)(i, &handoffs);
        let chars = s.prefix_chars + 5 * (i as u64 + 1);
        // The app's own encoding: 70 bytes per event, unrelated to tokentap's.
        chunks.push(BrowserChunk { t_ms: b(t), bytes: 70 * (i as u64 + 1), chars: s.decoded.then_some(chars) });
        // The last scenario paints everything once the stream ended.
        let painted = if s.kind == VerdictKind::Unobserved { handoffs[EVENTS - 1] + 20.0 } else { t + 9.0 };
        paints.push(Paint { t_ms: b(painted), chars, presentation_ms: None });
    }
    ProbeReport {
        schema: crate::browser::report::SCHEMA.into(),
        trace_id: record.trace_id.clone(),
        span_id: PROBE_SPAN.into(),
        page_path: Some("/".into()),
        request: Some(ReportedRequest {
            method: Some("POST".into()),
            path: Some("/api/chat".into()),
            status: Some(200),
        }),
        clock: Some(ReportedClock { offset_ms: 0.0, uncertainty_ms: 0.5, samples: 5 }),
        marks: vec![],
        marks_dropped: 0,
        fetch: Some(ReportedFetch {
            start_ms: b(0.0),
            response_ms: Some(b(50.0)),
            end_ms: Some(b(1500.0)),
            chunks,
            chunks_dropped: 0,
            text_format: s.decoded.then_some(TextFormat::Sse),
            text_inferred: false,
            content_encoding: s.content_encoding.map(Into::into),
            via: s.via.map(Into::into),
            server: s.server.map(Into::into),
            transport: None,
        }),
        paints,
        paints_dropped: 0,
        long_frames: s
            .long_frames
            .iter()
            .map(|&(start, duration)| LongFrame { start_ms: b(start), duration_ms: duration, blocking_ms: None })
            .collect(),
        long_frames_dropped: 0,
        audio: vec![],
        audio_dropped: 0,
        realtime: None,
        webrtc: None,
    }
}

#[test]
fn verdicts_name_where_the_app_path_held_the_text() {
    for s in scenarios() {
        let mut r = record();
        let joined = crate::join::join(&r, &report(&r, &s));
        assert!(joined.app_server, "{}", s.name);
        assert_eq!(joined.joined_by, JoinedBy::Trace, "{}", s.name);
        assert!(!joined.bytes_match, "{}", s.name);
        let expected = if s.decoded { ArrivalAlignment::AnswerChars } else { ArrivalAlignment::None };
        assert_eq!(joined.alignment, expected, "{}", s.name);
        // Every answer chunk got its arrival (when decoded) and its paint.
        let arrivals = joined.chunks.iter().filter(|c| c.t_browser_ms.is_some()).count();
        assert_eq!(arrivals, if s.decoded { EVENTS } else { 0 }, "{}", s.name);
        assert_eq!(joined.chunks.iter().filter(|c| c.t_paint_ms.is_some()).count(), EVENTS, "{}", s.name);
        r.browser = Some(joined);
        let d = diagnose(&r).unwrap();
        assert_eq!(d.kind, s.kind, "{}: {}\n{:#?}", s.name, d.verdict, d.hops);
        if !s.decoded {
            assert!(d.unobserved.iter().any(|u| u.hop == Hop::BrowserArrival), "{}", s.name);
        }
        let arrival = d.hops.iter().find(|h| h.hop == Hop::BrowserArrival);
        if let Some(pattern) = s.pattern {
            if s.decoded {
                assert_eq!(arrival.unwrap().pattern, Some(pattern), "{}: {:#?}", s.name, arrival);
            }
            let evidence = d.evidence.as_ref().expect("evidence");
            assert!(evidence.app_server);
            assert_eq!(evidence.pattern, Some(pattern), "{}", s.name);
            assert_eq!(evidence.arrived_in_one_burst, !s.decoded, "{}", s.name);
            assert_eq!(evidence.content_encoding.as_deref(), s.content_encoding);
            assert_eq!(evidence.via.as_deref(), s.via);
            assert_eq!(d.hop, Some(Hop::BrowserArrival), "{}", s.name);
        }
        // The browser is blamed only with its own evidence.
        assert_ne!(d.kind, VerdictKind::BrowserPaint, "{}: {}", s.name, d.verdict);
        if !s.decoded {
            let waits = d.waits.as_ref().unwrap();
            assert!(waits.waited.is_empty(), "{}: no arrival, no wait placed: {:?}", s.name, waits.waited);
            let bytes = joined_bytes(&r);
            assert_eq!(bytes.reads, EVENTS as u64, "{}", s.name);
            continue;
        }
        // Where each chunk's text waited agrees with the verdict.
        let waits = d.waits.as_ref().expect("waits with a browser report");
        assert_eq!(waits.after_handoff, Segment::AppServer);
        let held_in = |seg: Segment| waits.waited.iter().find(|w| w.segment == seg).map_or(0, |w| w.chars);
        match s.kind {
            VerdictKind::NoRebuffering => assert!(waits.waited.is_empty(), "{}: {:?}", s.name, waits.waited),
            VerdictKind::BrowserMainThread => assert!(held_in(Segment::AppServer) > 0, "{}", s.name),
            _ => {
                let total: u64 = waits.waited.iter().map(|w| w.chars).sum();
                assert_eq!(held_in(Segment::AppServer), total, "{}: {:?}", s.name, waits.waited);
                assert!(total >= (0.2 * 5.0 * EVENTS as f64) as u64, "{}", s.name);
            }
        }
    }
}

fn joined_bytes(r: &Record) -> &crate::browser::ByteArrival {
    r.browser.as_ref().unwrap().byte_arrival.as_ref().expect("byte arrival")
}

#[test]
fn verdict_sentences_give_the_evidence() {
    let all = scenarios();
    let by_name = |n: &str| all.iter().find(|s| s.name.starts_with(n)).unwrap();
    let verdict = |s: &Scenario| {
        let mut r = record();
        r.browser = Some(crate::join::join(&r, &report(&r, s)));
        diagnose(&r).unwrap().verdict
    };
    let gzip = verdict(by_name("gzip"));
    assert!(gzip.starts_with("in the app server's response"), "{gzip}");
    assert!(gzip.contains("content-encoding: gzip") && gzip.contains("released at the end of the stream"), "{gzip}");
    let every = verdict(by_name("the app flushes"));
    assert!(every.contains("the app server") && every.contains("released every ~200 ms"), "{every}");
    let burst = verdict(by_name("gzip with a format"));
    assert!(
        burst.starts_with("in the app server's response")
            && burst.contains("content-encoding: gzip")
            && burst.contains("whole response arrived in one burst at the end"),
        "{burst}"
    );
    let unobserved = verdict(by_name("a format the probe cannot read, bytes streamed"));
    assert!(unobserved.contains("unobserved") && !unobserved.contains("paint delayed"), "{unobserved}");
    let nginx = verdict(by_name("nginx in front"));
    assert!(nginx.contains("a reverse proxy (server: nginx/1.22.1)"), "{nginx}");
    let proxy = verdict(by_name("a reverse proxy"));
    assert!(
        proxy.starts_with("between the app server and the browser") && proxy.contains("via: 1.1 edge-proxy"),
        "{proxy}"
    );
}

/// Compression held the answer, but the page read it through an `EventSource`, which shows no
/// response headers: the hold is placed before the browser, compression or a proxy is said to be
/// unobserved, and neither the browser nor a compressor is named.
#[test]
fn an_event_source_held_stream_says_its_headers_are_unobserved() {
    let all = scenarios();
    let gzip = all.iter().find(|s| s.name.starts_with("gzip")).unwrap();
    let mut r = record();
    let mut rep = report(&r, gzip);
    let fetch = rep.fetch.as_mut().unwrap();
    fetch.content_encoding = None;
    fetch.transport = Some(crate::browser::report::Transport::EventSource);
    r.browser = Some(crate::join::join(&r, &rep));
    assert_eq!(r.browser.as_ref().unwrap().transport, Some(crate::browser::report::Transport::EventSource));
    let d = diagnose(&r).unwrap();
    assert_eq!(d.kind, VerdictKind::AppServerBuffering, "{}", d.verdict);
    assert_eq!(d.hop, Some(Hop::BrowserArrival));
    assert!(d.verdict.contains("EventSource") && d.verdict.contains("unobserved"), "{}", d.verdict);
    assert!(d.evidence.as_ref().is_some_and(|e| e.content_encoding.is_none()));
}

#[test]
fn the_page_reading_tokentap_itself_still_aligns_by_bytes() {
    // The probe's span is the record's parent and the bytes agree: bytes, even with characters.
    let mut r = record();
    r.parent_span_id = Some(PROBE_SPAN.into());
    let s = &scenarios()[0];
    let mut rep = report(&r, s);
    let fetch = rep.fetch.as_mut().unwrap();
    for (c, stamp) in fetch.chunks.iter_mut().zip(&r.timeline.chunks) {
        c.bytes = stamp.offset + u64::from(stamp.len);
    }
    rep.request.as_mut().unwrap().path = Some(r.path.clone());
    let joined = crate::join::join(&r, &rep);
    assert_eq!(joined.alignment, ArrivalAlignment::Bytes);
    assert_eq!(joined.joined_by, JoinedBy::ProbeSpan);
    assert!(!joined.app_server && joined.bytes_match);
    let first = (s.arrival)(0, &[t_up(&r, 0) + 0.1]);
    assert!((joined.chunks[0].t_browser_ms.unwrap() - first).abs() < 1e-3);
}

#[test]
fn inferred_characters_align_as_inferred_with_their_quality() {
    // The probe inferred the answer's fields (a shape it has no reader for); the app also labels
    // the answer (8 characters more than the record's 200): inferred, quality 200/208, and the
    // verdict as with a known shape.
    let all = scenarios();
    let s = all.iter().find(|s| s.name.starts_with("the app labels")).unwrap();
    let mut r = record();
    let mut rep = report(&r, s);
    rep.fetch.as_mut().unwrap().text_inferred = true;
    let joined = crate::join::join(&r, &rep);
    assert_eq!(joined.alignment, ArrivalAlignment::Inferred);
    let quality = joined.alignment_quality.unwrap();
    assert!((quality - 200.0 / 208.0).abs() < 1e-9, "{quality}");
    assert_eq!(joined.chunks.iter().filter(|c| c.t_browser_ms.is_some()).count(), EVENTS);
    r.browser = Some(joined);
    assert_eq!(diagnose(&r).unwrap().kind, VerdictKind::NoRebuffering);
    // Known shapes and bytes state their quality too; no alignment has none.
    let known = crate::join::join(&r, &report(&r, s));
    assert_eq!(known.alignment, ArrivalAlignment::AnswerChars);
    assert!((known.alignment_quality.unwrap() - 200.0 / 208.0).abs() < 1e-9);
    let undecoded = all.iter().find(|s| !s.decoded).unwrap();
    assert_eq!(crate::join::join(&r, &report(&r, undecoded)).alignment_quality, None);
}
