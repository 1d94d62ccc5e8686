//! Joins a probe report to its request record. Pure arithmetic, no IO.
//!
//! Browser times are converted to tokentap's timeline: `t_rel = t_browser + clock.offset_ms − t0`,
//! so every browser value sits next to the proxy's stamps in milliseconds since t0 and carries the
//! clock's uncertainty (`clock.uncertainty_ms`).
//!
//! Alignment:
//! - a proxy chunk reached the browser when the page's reader had received its last byte, when
//!   the page read tokentap's response itself; when an app server re-encoded the stream, when the
//!   page had decoded the answer characters the chunk completed (`browser::arrival`);
//! - answer text reached the screen when a paint showed at least as many characters as the answer
//!   had after that event (cumulative Unicode scalars). When the page shows a different number of
//!   characters in the end (markdown, trimming), counts are scaled to the final painted count.

use tokentap_analysis::{Distribution, EventClass};

use crate::browser::arrival::{Arrivals, RecordSide};
use crate::browser::report::{BrowserChunk, Paint, ProbeReport};
use crate::browser::timeline::*;
use crate::browser::webrtc_join::join_webrtc;
use crate::realtime_join::{browser_audio, join_realtime};
use crate::schema::Record;

/// Joins `report` to `record`.
pub fn join(record: &Record, report: &ProbeReport) -> BrowserTimeline {
    let t0_ms = record.timeline.t0_unix_ns as f64 / 1e6;
    let offset = report.clock.as_ref().map(|c| c.offset_ms).unwrap_or(0.0);
    let rel = |t_browser: f64| t_browser + offset - t0_ms;

    let browser_chunks: Vec<BrowserChunk> = report.fetch.as_ref().map(|f| f.chunks.clone()).unwrap_or_default();
    let paints: Vec<Paint> = report.paints.clone();
    let browser_bytes = browser_chunks.last().map(|c| c.bytes).unwrap_or(0);

    let events: Vec<_> = record.analysis.as_ref().map(|a| a.events.as_slice()).unwrap_or(&[]).to_vec();
    let answer_chars =
        events.iter().filter(|e| e.class == EventClass::Answer).map(|e| e.answer_chars_cum).max().unwrap_or(0);
    let side = RecordSide {
        parent_span_id: record.parent_span_id.as_deref(),
        path: &record.path,
        body_bytes: record.timeline.body_bytes,
    };
    let arrivals = Arrivals::new(side, report, answer_chars);
    let arrival = |end: u64, chars: u64, new_text: bool| arrivals.of(end, chars, new_text).map(rel);
    let painted_chars = paints.last().map(|p| p.chars).unwrap_or(0);
    let scale = if answer_chars > 0 && painted_chars > 0 { painted_chars as f64 / answer_chars as f64 } else { 1.0 };
    let paint_of_chars = |chars: u64| -> Option<f64> {
        if chars == 0 {
            return None;
        }
        let wanted = ((chars as f64) * scale).round().max(1.0) as u64;
        paints.iter().find(|p| p.chars >= wanted).map(|p| rel(p.t_ms))
    };

    // Per proxy chunk: browser arrival and the paint of the answer text it completed.
    let mut chunks = Vec::with_capacity(record.timeline.chunks.len());
    let mut delivery = Vec::new();
    let mut answer_done_before = 0u64;
    for chunk in &record.timeline.chunks {
        let end = chunk.offset + u64::from(chunk.len);
        let answer_done = events
            .iter()
            .filter(|e| e.class == EventClass::Answer && e.end_offset <= end)
            .map(|e| e.answer_chars_cum)
            .max()
            .unwrap_or(answer_done_before);
        let new_text = answer_done > answer_done_before;
        let t_browser_ms = arrival(end, answer_done, new_text);
        if let (Some(b), Some(h)) = (t_browser_ms, chunk.t_handoff_ns) {
            delivery.push(b - h as f64 / 1e6);
        }
        let t_paint_ms = if new_text { paint_of_chars(answer_done) } else { None };
        answer_done_before = answer_done;
        chunks.push(BrowserChunkJoin { t_browser_ms, t_paint_ms });
    }

    // Per answer event: paint − browser arrival.
    let render: Vec<f64> = events
        .iter()
        .filter(|e| e.class == EventClass::Answer && e.chars > 0)
        .filter_map(|e| Some(paint_of_chars(e.answer_chars_cum)? - arrival(e.end_offset, e.answer_chars_cum, true)?))
        .collect();

    let marks: Vec<BrowserMark> =
        report.marks.iter().map(|m| BrowserMark { name: m.name.clone(), t_ms: rel(m.t_ms) }).collect();
    let fetch_start_ms = report.fetch.as_ref().map(|f| rel(f.start_ms));
    let first_paint_ms = paints.iter().find(|p| p.chars > 0).map(|p| rel(p.t_ms));
    let (from_name, from_ms) = match marks.iter().find(|m| m.name == "user_send") {
        Some(m) => (Some("user_send".to_string()), Some(m.t_ms)),
        None => (fetch_start_ms.map(|_| "fetch_start".to_string()), fetch_start_ms),
    };
    // A realtime session's page paints (a transcript, a status line) are not an answer's first
    // paint, and its "fetch" is the WebSocket's opening: what counts there is the first audio
    // heard per response (`realtime`), so the session has no time to first paint.
    let time_to_first_paint_ms = match (first_paint_ms, from_ms, &record.realtime) {
        (Some(p), Some(from), None) => Some(p - from),
        _ => None,
    };

    BrowserTimeline {
        probe_span_id: report.span_id.clone(),
        page_path: report.page_path.clone(),
        clock: report.clock.as_ref().map(|c| BrowserClock {
            offset_ms: c.offset_ms,
            uncertainty_ms: c.uncertainty_ms,
            samples: c.samples,
        }),
        marks,
        fetch_start_ms,
        response_ms: report.fetch.as_ref().and_then(|f| f.response_ms).map(rel),
        fetch_end_ms: report.fetch.as_ref().and_then(|f| f.end_ms).map(rel),
        first_paint_ms,
        last_paint_ms: paints.last().map(|p| rel(p.t_ms)),
        time_to_first_paint_ms,
        time_to_first_paint_from: time_to_first_paint_ms.and(from_name),
        delivery_delay_ms: Distribution::from_samples(&delivery),
        render_delay_ms: Distribution::from_samples(&render),
        chunks,
        long_frames: report
            .long_frames
            .iter()
            .map(|f| BrowserLongFrame {
                start_ms: rel(f.start_ms),
                duration_ms: f.duration_ms,
                blocking_ms: f.blocking_ms,
            })
            .collect(),
        audio: report.audio.iter().map(|a| browser_audio(a, rel)).collect(),
        browser_bytes,
        bytes_match: browser_bytes == record.timeline.body_bytes,
        alignment: arrivals.alignment,
        alignment_quality: arrivals.quality,
        byte_arrival: ByteArrival::from_reads(
            &browser_chunks,
            report.fetch.as_ref().map(|f| f.chunks_dropped).unwrap_or(0),
            rel,
        ),
        joined_by: if arrivals.app_server { JoinedBy::Trace } else { JoinedBy::ProbeSpan },
        app_server: arrivals.app_server,
        text_format: report.fetch.as_ref().and_then(|f| f.text_format),
        browser_chars: browser_chunks.iter().rev().find_map(|c| c.chars),
        content_encoding: report.fetch.as_ref().and_then(|f| f.content_encoding.clone()),
        via: report.fetch.as_ref().and_then(|f| f.via.clone()),
        server: report.fetch.as_ref().and_then(|f| f.server.clone()),
        transport: report.fetch.as_ref().and_then(|f| f.transport),
        painted_chars,
        answer_chars,
        chunks_dropped: report.fetch.as_ref().map(|f| f.chunks_dropped).unwrap_or(0),
        paints_dropped: report.paints_dropped,
        marks_dropped: report.marks_dropped,
        long_frames_dropped: report.long_frames_dropped,
        realtime: match (&record.realtime, &report.realtime) {
            (Some(session), Some(page)) => join_realtime(session, page, rel),
            _ => Vec::new(),
        },
        webrtc: report.webrtc.as_ref().map(|w| join_webrtc(w, &report.marks, rel)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::browser::report::{Mark, ReportedClock, ReportedFetch};
    use crate::fixtures::{chat_record, T0_UNIX_NS};

    const T0_MS: f64 = T0_UNIX_NS as f64 / 1e6;

    /// A record whose body is three answer events arriving at 100, 120 and 140 ms and handed off 1 ms later.
    /// The page's fetch went through tokentap: the record's parent span is the probe's.
    fn record() -> Record {
        let mut record = chat_record(&["abc", "de", "fghij"], |i| 100.0 + 20.0 * i as f64, 1_000_000, None);
        record.parent_span_id = Some(PROBE_SPAN.into());
        record
    }

    const PROBE_SPAN: &str = "00f067aa0ba902b7";

    fn report(record: &Record, offset_ms: f64) -> ProbeReport {
        let ends: Vec<u64> = record.timeline.chunks.iter().map(|c| c.offset + u64::from(c.len)).collect();
        // Browser clock runs `offset_ms` behind tokentap's; each chunk arrives 5 ms after handoff and is
        // painted 8 ms later.
        let b = |rel_ms: f64| T0_MS + rel_ms - offset_ms;
        ProbeReport {
            schema: crate::browser::report::SCHEMA.into(),
            trace_id: record.trace_id.clone(),
            span_id: PROBE_SPAN.into(),
            page_path: Some("/chat".into()),
            request: None,
            clock: Some(ReportedClock { offset_ms, uncertainty_ms: 0.4, samples: 5 }),
            marks: vec![Mark { name: "user_send".into(), t_ms: b(-10.0) }],
            fetch: Some(ReportedFetch {
                start_ms: b(-2.0),
                response_ms: Some(b(52.0)),
                end_ms: Some(b(147.0)),
                chunks: ends
                    .iter()
                    .enumerate()
                    .map(|(i, &e)| BrowserChunk { t_ms: b(106.0 + 20.0 * i as f64), bytes: e, chars: None })
                    .collect(),
                chunks_dropped: 0,
                text_format: None,
                text_inferred: false,
                content_encoding: None,
                via: None,
                server: None,
                transport: None,
            }),
            paints: vec![
                Paint { t_ms: b(114.0), chars: 3, presentation_ms: None },
                Paint { t_ms: b(134.0), chars: 5, presentation_ms: None },
                Paint { t_ms: b(154.0), chars: 10, presentation_ms: None },
            ],
            paints_dropped: 0,
            long_frames: vec![],
            audio: vec![],
            marks_dropped: 0,
            long_frames_dropped: 0,
            audio_dropped: 0,
            realtime: None,
            webrtc: None,
        }
    }

    #[test]
    fn joins_bytes_and_characters_across_clocks() {
        let record = record();
        for offset in [0.0, 1234.5, -800.25] {
            let joined = join(&record, &report(&record, offset));
            let close = |a: f64, b: f64| (a - b).abs() < 1e-3;
            assert!(joined.bytes_match);
            assert_eq!(joined.answer_chars, 10);
            assert_eq!(joined.painted_chars, 10);
            let delivery = joined.delivery_delay_ms.as_ref().unwrap();
            assert_eq!(delivery.count, 3);
            assert!(close(delivery.p50, 5.0) && close(delivery.max, 5.0), "{delivery:?}");
            let render = joined.render_delay_ms.as_ref().unwrap();
            assert_eq!(render.count, 3);
            assert!(close(render.p50, 8.0), "{render:?}");
            assert!(close(joined.first_paint_ms.unwrap(), 114.0));
            assert!(close(joined.time_to_first_paint_ms.unwrap(), 124.0));
            assert_eq!(joined.time_to_first_paint_from.as_deref(), Some("user_send"));
            for (i, c) in joined.chunks.iter().enumerate() {
                assert!(close(c.t_browser_ms.unwrap(), 106.0 + 20.0 * i as f64));
                assert!(close(c.t_paint_ms.unwrap(), 114.0 + 20.0 * i as f64));
            }
        }
    }

    #[test]
    fn scales_characters_when_the_page_shows_a_different_count() {
        let record = record();
        let mut r = report(&record, 0.0);
        // The page shows twice as many characters (e.g. markup): alignment scales, it does not stall.
        for p in &mut r.paints {
            p.chars *= 2;
        }
        let joined = join(&record, &r);
        assert!((joined.chunks[2].t_paint_ms.unwrap() - 154.0).abs() < 1e-3);
        assert_eq!(joined.render_delay_ms.unwrap().count, 3);
    }

    #[test]
    fn missing_parts_are_absent_not_zero() {
        let record = record();
        let mut r = report(&record, 0.0);
        r.paints.clear();
        r.marks.clear();
        let joined = join(&record, &r);
        assert!(joined.first_paint_ms.is_none());
        assert!(joined.render_delay_ms.is_none());
        assert!(joined.time_to_first_paint_ms.is_none());
        assert!(joined.delivery_delay_ms.is_some());
    }

    #[test]
    fn a_realtime_session_has_no_time_to_first_paint() {
        let mut record = record();
        let session = tokentap_analysis::realtime::RealtimeAnalyzer::new(Default::default()).finish(100_000_000);
        record.realtime = Some(session);
        let joined = join(&record, &report(&record, 0.0));
        assert!(joined.first_paint_ms.is_some(), "the page painted");
        assert!(joined.time_to_first_paint_ms.is_none(), "but the session's answer is audio: {joined:?}");
    }
}
