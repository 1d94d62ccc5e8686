//! Synthetic records for tests of the derivations over records (here and in tokentap-report):
//! an OpenAI chat stream of `n` answer events with exact stamps, and a joined browser timeline.

use tokentap_analysis::{AnalysisLimits, RequestTiming, StreamAnalyzer, StreamContext};

use crate::ack::ClientDelivery;
use crate::browser::timeline::{BrowserChunkJoin, BrowserClock, BrowserLongFrame};
use crate::browser::BrowserTimeline;
use crate::schema::Record;
use crate::stamp::ChunkStamp;

/// Inter-token latency of [`stream_record`], in milliseconds.
pub const ITL_MS: f64 = 25.0;

pub fn event(text: &str) -> Vec<u8> {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n").into_bytes()
}

/// Wall-clock t0 of the fixtures' records, ns since the Unix epoch.
pub const T0_UNIX_NS: u64 = 1_800_000_000_000_000_000;

/// An OpenAI chat stream record: one answer event per chunk with the given texts, chunk `i`
/// arriving at `t_up_ms(i)` (ms since t0), handed off `handoff_after_ns` later and, when given,
/// acknowledged `acked_after_ns` later; the stream ends at the last handoff.
pub fn chat_record(
    texts: &[&str],
    t_up_ms: impl Fn(usize) -> f64,
    handoff_after_ns: u64,
    acked_after_ns: Option<u64>,
) -> Record {
    let mut analyzer = StreamAnalyzer::new(
        StreamContext {
            request_path: "/v1/chat/completions".into(),
            provider_hint: None,
            response_content_type: Some("text/event-stream".into()),
            response_status: Some(200),
        },
        AnalysisLimits::default(),
    );
    let mut chunks = Vec::new();
    let mut offset = 0u64;
    for (i, text) in texts.iter().enumerate() {
        let piece = event(text);
        let t_up_ns = (t_up_ms(i) * 1e6) as u64;
        analyzer.push_chunk(&piece, t_up_ns);
        chunks.push(ChunkStamp {
            offset,
            len: piece.len() as u32,
            t_up_ns,
            t_handoff_ns: Some(t_up_ns + handoff_after_ns),
            t_acked_ns: acked_after_ns.map(|a| t_up_ns + a),
            t_ack_after_ns: None,
        });
        offset += piece.len() as u64;
    }
    let analysis = analyzer.finish(RequestTiming {
        t_upstream_headers_ns: Some(50_000_000),
        t_end_ns: chunks.last().and_then(|c| c.t_handoff_ns),
        body_complete: true,
    });
    let mut record: Record = serde_json::from_value(serde_json::json!({
        "record_version": 1, "request_id": "0123456789abcdef01234567", "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "span_id": "b7ad6b7169203331", "started_at": "2027-01-15T08:00:00Z", "route": "/",
        "upstream": "http://x", "method": "POST", "path": "/v1/chat/completions", "status": 200,
        "outcome": "ok", "request_headers": [],
        "conditions": {"request_bytes": 10, "concurrency_at_t0": 0, "warm_up": false, "tokentap_version": "0"},
        "request": {},
        "timeline": {"t0_unix_ns": T0_UNIX_NS, "chunk_count": texts.len(), "body_bytes": offset, "chunks_truncated": false,
                     "analysis_bytes_truncated": false, "chunks": []},
        "self_overhead": {"hook_time_us": 1.0}
    }))
    .expect("fixture record");
    record.timeline.chunks = chunks;
    record.analysis = Some(analysis);
    record
}

/// `n` answer events of 5 characters, one per chunk, arriving every 25 ms from 100 ms; handed off
/// 0.1 ms and acknowledged 0.5 ms later.
pub fn stream_record(n: usize) -> Record {
    let mut record = chat_record(&vec!["abcde"; n], |i| 100.0 + ITL_MS * i as f64, 100_000, Some(500_000));
    record.timeline.client_delivery = Some(ClientDelivery {
        available: true,
        reason: None,
        backlog_max_bytes: 300,
        drained: true,
        samples: n as u64 * 2,
    });
    record
}

pub fn t_up(record: &Record, i: usize) -> f64 {
    record.timeline.chunks[i].t_up_ns as f64 / 1e6
}

/// Joins a browser timeline: chunk i arrives at `arrival(i)` and is painted at `paint(i)` (ms since t0).
pub fn with_browser(
    mut record: Record,
    arrival: &dyn Fn(usize) -> f64,
    paint: &dyn Fn(usize) -> f64,
    uncertainty_ms: f64,
    long_frames: Vec<(f64, f64)>,
) -> Record {
    let n = record.timeline.chunks.len();
    let chunks =
        (0..n).map(|i| BrowserChunkJoin { t_browser_ms: Some(arrival(i)), t_paint_ms: Some(paint(i)) }).collect();
    record.browser = Some(BrowserTimeline {
        probe_span_id: "00f067aa0ba902b7".into(),
        page_path: None,
        clock: Some(BrowserClock { offset_ms: 0.0, uncertainty_ms, samples: 5 }),
        marks: vec![],
        fetch_start_ms: None,
        response_ms: None,
        fetch_end_ms: None,
        first_paint_ms: None,
        last_paint_ms: None,
        time_to_first_paint_ms: None,
        time_to_first_paint_from: None,
        delivery_delay_ms: None,
        render_delay_ms: None,
        chunks,
        long_frames: long_frames
            .into_iter()
            .map(|(start_ms, duration_ms)| BrowserLongFrame { start_ms, duration_ms, blocking_ms: None })
            .collect(),
        audio: vec![],
        browser_bytes: record.timeline.body_bytes,
        bytes_match: true,
        alignment: Default::default(),
        alignment_quality: None,
        byte_arrival: None,
        joined_by: Default::default(),
        app_server: false,
        text_format: None,
        browser_chars: None,
        content_encoding: None,
        via: None,
        server: None,
        transport: None,
        painted_chars: 5 * n as u64,
        answer_chars: 5 * n as u64,
        chunks_dropped: 0,
        paints_dropped: 0,
        marks_dropped: 0,
        long_frames_dropped: 0,
        realtime: vec![],
        webrtc: None,
    });
    record
}

/// A browser that gets each chunk 2 ms after upstream arrival and paints it within the next frame.
pub fn smooth_browser(record: Record) -> Record {
    let ups: Vec<f64> = (0..record.timeline.chunks.len()).map(|i| t_up(&record, i)).collect();
    let ups2 = ups.clone();
    with_browser(record, &|i| ups[i] + 2.0, &|i| ups2[i] + 2.0 + (i % 3) as f64 * 6.0 + 10.0, 0.5, vec![])
}
