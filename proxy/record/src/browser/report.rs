//! The probe's report, as sent to `POST /_tokentap/v1/probe`. Every browser time is wall-clock
//! milliseconds in the browser (`performance.timeOrigin + performance.now()`).

use serde::{Deserialize, Serialize};
use tokentap_probe_protocol::trace;

// The schema name, the caps and the enumerated names are the protocol's, shared with the probe.
pub use tokentap_probe_protocol::caps::{
    MAX_AUDIO, MAX_CHUNKS, MAX_HEADER_VALUE_LEN, MAX_ID_LEN, MAX_LONG_FRAMES, MAX_MARKS, MAX_NAME_LEN, MAX_PAINTS,
    MAX_REALTIME_RESPONSES,
};
pub use tokentap_probe_protocol::{TextFormat, Transport, SCHEMA};

pub use super::webrtc_report::ReportedWebrtc;

use super::checks::{count, duration, header_value, invalid, name, Span};
pub use super::checks::{ReportError, MAX_CLOCK_OFFSET_MS, MAX_COUNT, MAX_PATH_LEN, MAX_SPAN_MS, MAX_TIME_MS};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeReport {
    pub schema: String,
    pub trace_id: String,
    /// The probe's span for the fetch: the parent of tokentap's span for the request.
    pub span_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<ReportedRequest>,
    /// Absent when the clock endpoint did not answer; times are then taken as on tokentap's clock
    /// with an unknown uncertainty.
    #[serde(default)]
    pub clock: Option<ReportedClock>,
    #[serde(default)]
    pub marks: Vec<Mark>,
    #[serde(default)]
    pub marks_dropped: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch: Option<ReportedFetch>,
    #[serde(default)]
    pub paints: Vec<Paint>,
    #[serde(default)]
    pub paints_dropped: u64,
    #[serde(default)]
    pub long_frames: Vec<LongFrame>,
    #[serde(default)]
    pub long_frames_dropped: u64,
    #[serde(default)]
    pub audio: Vec<AudioStart>,
    #[serde(default)]
    pub audio_dropped: u64,
    /// A realtime WebSocket session the page held (then `fetch` is the socket: created, open,
    /// closed): what the page saw of each response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realtime: Option<ReportedRealtime>,
    /// A WebRTC peer connection whose SDP offer this request carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webrtc: Option<ReportedWebrtc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

/// The browser's estimate of `server clock − browser clock`, from round trips to the proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedClock {
    pub offset_ms: f64,
    pub uncertainty_ms: f64,
    #[serde(default)]
    pub samples: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mark {
    pub name: String,
    pub t_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedFetch {
    pub start_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<f64>,
    #[serde(default)]
    pub chunks: Vec<BrowserChunk>,
    #[serde(default)]
    pub chunks_dropped: u64,
    /// How the probe read answer text out of the body (`chunks[].chars`); absent when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_format: Option<TextFormat>,
    /// The probe inferred which parts of the body are answer text (a format it has no reader
    /// for): `chunks[].chars` are an estimate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub text_inferred: bool,
    /// The response's `Content-Encoding` and `Via` as the page saw them (evidence for a verdict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// The response's `Server` (a reverse proxy in front of the app names itself there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// How the page received the stream; absent: `fetch`. An `EventSource` shows the page no
    /// response headers, so `content_encoding`, `via` and `server` are then unobserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
}

/// A body chunk as the page's reader received it; `bytes` is cumulative. `chars` is the answer
/// text, in Unicode scalars, of the complete events among the bytes received so far (cumulative),
/// when the probe could read the body's format.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserChunk {
    pub t_ms: f64,
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chars: Option<u64>,
}

/// A frame that showed the observed element with `chars` characters (cumulative).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Paint {
    pub t_ms: f64,
    pub chars: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presentation_ms: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LongFrame {
    pub start_ms: f64,
    pub duration_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocking_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AudioStart {
    pub kind: String,
    pub audible_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_latency_ms: Option<f64>,
    /// When the playback ended or was stopped (absent: not known when the report was sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<f64>,
    /// Times the playback ran dry in the page, and for how long in total.
    #[serde(default)]
    pub underruns: u64,
    #[serde(default)]
    pub starved_ms: f64,
    /// Stopped before its end (barge-in).
    #[serde(default)]
    pub interrupted: bool,
    /// Audio the app scheduled on an AudioContext (ms of audio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_audio_ms: Option<f64>,
}

impl ProbeReport {
    /// Parses and validates a report body.
    pub fn parse(body: &[u8]) -> Result<Self, ReportError> {
        let report: ProbeReport = serde_json::from_slice(body).map_err(|e| ReportError::Malformed(e.to_string()))?;
        report.validate()?;
        Ok(report)
    }

    fn validate(&self) -> Result<(), ReportError> {
        if self.schema != SCHEMA {
            return Err(ReportError::Schema(self.schema.clone()));
        }
        if !trace::is_id(&self.trace_id, trace::TRACE_ID_HEX_LEN) {
            return Err(invalid("trace_id", "must be 32 lower-case hex digits, not all zero"));
        }
        if !trace::is_id(&self.span_id, trace::SPAN_ID_HEX_LEN) {
            return Err(invalid("span_id", "must be 16 lower-case hex digits, not all zero"));
        }
        if let Some(clock) = &self.clock {
            if !clock.offset_ms.is_finite() || clock.offset_ms.abs() > MAX_CLOCK_OFFSET_MS {
                return Err(invalid("clock.offset_ms", format!("must be finite and within ±{MAX_CLOCK_OFFSET_MS} ms")));
            }
            duration("clock.uncertainty_ms", clock.uncertainty_ms)?;
            count("clock.samples", u64::from(clock.samples))?;
        }
        if let Some(request) = &self.request {
            if let Some(method) = &request.method {
                name("request.method", method)?;
            }
            if request.status.is_some_and(|s| s > 599) {
                return Err(invalid("request.status", "at most 599"));
            }
        }
        for (field, dropped) in [
            ("marks_dropped", self.marks_dropped),
            ("paints_dropped", self.paints_dropped),
            ("long_frames_dropped", self.long_frames_dropped),
            ("audio_dropped", self.audio_dropped),
        ] {
            count(field, dropped)?;
        }
        let mut span = Span::default();
        if self.marks.len() > MAX_MARKS {
            return Err(invalid("marks", format!("at most {MAX_MARKS}")));
        }
        for m in &self.marks {
            span.time("marks.t_ms", m.t_ms)?;
            name("marks.name", &m.name)?;
        }
        if let Some(f) = &self.fetch {
            span.time("fetch.start_ms", f.start_ms)?;
            if let Some(t) = f.response_ms {
                span.time("fetch.response_ms", t)?;
            }
            if let Some(t) = f.end_ms {
                span.time("fetch.end_ms", t)?;
            }
            count("fetch.chunks_dropped", f.chunks_dropped)?;
            if f.chunks.len() > MAX_CHUNKS {
                return Err(invalid("fetch.chunks", format!("at most {MAX_CHUNKS}")));
            }
            let mut last = (f.start_ms, 0u64, 0u64);
            for c in &f.chunks {
                span.time("fetch.chunks.t_ms", c.t_ms)?;
                count("fetch.chunks.bytes", c.bytes)?;
                if let Some(chars) = c.chars {
                    count("fetch.chunks.chars", chars)?;
                    if chars < last.2 {
                        return Err(invalid("fetch.chunks", "cumulative characters must not decrease"));
                    }
                    last.2 = chars;
                }
                if c.t_ms < last.0 || c.bytes < last.1 {
                    return Err(invalid("fetch.chunks", "times and cumulative bytes must not decrease"));
                }
                (last.0, last.1) = (c.t_ms, c.bytes);
            }
            for (field, value) in
                [("fetch.content_encoding", &f.content_encoding), ("fetch.via", &f.via), ("fetch.server", &f.server)]
            {
                if let Some(v) = value {
                    header_value(field, v)?;
                }
            }
        }
        if self.paints.len() > MAX_PAINTS {
            return Err(invalid("paints", format!("at most {MAX_PAINTS}")));
        }
        let mut last = (0.0f64, 0u64);
        for p in &self.paints {
            span.time("paints.t_ms", p.t_ms)?;
            count("paints.chars", p.chars)?;
            if let Some(t) = p.presentation_ms {
                span.time("paints.presentation_ms", t)?;
            }
            if p.t_ms < last.0 || p.chars < last.1 {
                return Err(invalid("paints", "times and cumulative characters must not decrease"));
            }
            last = (p.t_ms, p.chars);
        }
        if self.long_frames.len() > MAX_LONG_FRAMES {
            return Err(invalid("long_frames", format!("at most {MAX_LONG_FRAMES}")));
        }
        for f in &self.long_frames {
            span.time("long_frames.start_ms", f.start_ms)?;
            duration("long_frames.duration_ms", f.duration_ms)?;
            if let Some(b) = f.blocking_ms {
                duration("long_frames.blocking_ms", b)?;
            }
        }
        if self.audio.len() > MAX_AUDIO {
            return Err(invalid("audio", format!("at most {MAX_AUDIO}")));
        }
        for a in &self.audio {
            a.validate(&mut span)?;
        }
        if let Some(realtime) = &self.realtime {
            realtime.validate(&mut span)?;
        }
        if let Some(webrtc) = &self.webrtc {
            webrtc.validate(&mut span)?;
        }
        for path in
            [self.page_path.as_deref(), self.request.as_ref().and_then(|r| r.path.as_deref())].into_iter().flatten()
        {
            if path.len() > MAX_PATH_LEN || path.contains('?') || path.chars().any(char::is_control) {
                return Err(invalid(
                    "path",
                    format!("at most {MAX_PATH_LEN} bytes, no control characters and no query string"),
                ));
            }
        }
        Ok(())
    }
}

impl AudioStart {
    fn validate(&self, span: &mut Span) -> Result<(), ReportError> {
        name("audio.kind", &self.kind)?;
        span.time("audio.audible_ms", self.audible_ms)?;
        if let Some(l) = self.output_latency_ms {
            duration("audio.output_latency_ms", l)?;
        }
        if let Some(end) = self.end_ms {
            span.time("audio.end_ms", end)?;
        }
        count("audio.underruns", self.underruns)?;
        duration("audio.starved_ms", self.starved_ms)?;
        if let Some(d) = self.scheduled_audio_ms {
            duration("audio.scheduled_audio_ms", d)?;
        }
        Ok(())
    }
}

/// What the page saw of a realtime session (the server's events as the page's socket received
/// them, and the playback of each response's audio).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedRealtime {
    /// `session.created`'s `session.id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default)]
    pub responses: Vec<ReportedRealtimeResponse>,
    #[serde(default)]
    pub responses_dropped: u64,
    /// Server messages the page received.
    #[serde(default)]
    pub messages: u64,
}

/// One response as the page saw it; browser times of the messages' arrival in the page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedRealtimeResponse {
    pub response_id: String,
    /// `response.created` arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_ms: Option<f64>,
    /// The first `response.output_audio.delta` (`response.audio.delta`) arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_audio_ms: Option<f64>,
    /// `response.done` arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_ms: Option<f64>,
    #[serde(default)]
    pub audio_deltas: u64,
    /// The page's playback of this response's audio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<AudioStart>,
}

fn id(field: &'static str, v: &str) -> Result<(), ReportError> {
    if v.is_empty() || v.len() > MAX_ID_LEN || v.chars().any(char::is_control) {
        Err(invalid(field, format!("1 to {MAX_ID_LEN} bytes without control characters")))
    } else {
        Ok(())
    }
}

impl ReportedRealtime {
    fn validate(&self, span: &mut Span) -> Result<(), ReportError> {
        if let Some(session_id) = &self.session_id {
            id("realtime.session_id", session_id)?;
        }
        count("realtime.responses_dropped", self.responses_dropped)?;
        count("realtime.messages", self.messages)?;
        if self.responses.len() > MAX_REALTIME_RESPONSES {
            return Err(invalid("realtime.responses", format!("at most {MAX_REALTIME_RESPONSES}")));
        }
        for r in &self.responses {
            id("realtime.responses.response_id", &r.response_id)?;
            for (field, t) in [
                ("realtime.responses.created_ms", r.created_ms),
                ("realtime.responses.first_audio_ms", r.first_audio_ms),
                ("realtime.responses.done_ms", r.done_ms),
            ] {
                if let Some(t) = t {
                    span.time(field, t)?;
                }
            }
            count("realtime.responses.audio_deltas", r.audio_deltas)?;
            if let Some(a) = &r.audio {
                a.validate(span)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> serde_json::Value {
        serde_json::json!({
            "schema": SCHEMA, "trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331",
            "page_path": "/chat", "request": {"method": "POST", "path": "/v1/chat/completions", "status": 200},
            "clock": {"offset_ms": 0.2, "uncertainty_ms": 0.3, "samples": 5},
            "marks": [{"name": "user_send", "t_ms": 1000.0}],
            "fetch": {"start_ms": 1001.0, "response_ms": 1003.0, "end_ms": 1500.0,
                      "chunks": [{"t_ms": 1100.0, "bytes": 10, "chars": 4}, {"t_ms": 1200.0, "bytes": 20, "chars": 9}],
                      "chunks_dropped": 0, "text_format": "sse", "content_encoding": "gzip"},
            "paints": [{"t_ms": 1110.0, "chars": 3}, {"t_ms": 1210.0, "chars": 6}],
            "long_frames": [], "audio": []
        })
    }

    #[test]
    fn accepts_a_valid_report() {
        let r = ProbeReport::parse(valid().to_string().as_bytes()).unwrap();
        assert_eq!(r.fetch.unwrap().chunks.len(), 2);
        // Without a clock estimate, and with drop counts.
        let mut v = valid();
        v["clock"] = serde_json::Value::Null;
        v["marks_dropped"] = 2.into();
        v["long_frames_dropped"] = 1.into();
        v["audio_dropped"] = 0.into();
        let r = ProbeReport::parse(v.to_string().as_bytes()).unwrap();
        assert!(r.clock.is_none());
        assert_eq!(r.marks_dropped, 2);
    }

    #[test]
    fn rejects_bad_reports_with_reasons() {
        let cases: Vec<(serde_json::Value, &str)> = vec![
            (
                {
                    let mut v = valid();
                    v["schema"] = "x/2".into();
                    v
                },
                "schema",
            ),
            (
                {
                    let mut v = valid();
                    v["trace_id"] = "XYZ".into();
                    v
                },
                "trace_id",
            ),
            (
                {
                    let mut v = valid();
                    v["trace_id"] = "00000000000000000000000000000000".into();
                    v
                },
                "trace_id",
            ),
            (
                {
                    let mut v = valid();
                    v["span_id"] = "abc".into();
                    v
                },
                "span_id",
            ),
            (
                {
                    let mut v = valid();
                    v["extra"] = 1.into();
                    v
                },
                "unknown field",
            ),
            (
                {
                    let mut v = valid();
                    v["paints"][1]["chars"] = 1.into();
                    v
                },
                "paints",
            ),
            (
                {
                    let mut v = valid();
                    v["fetch"]["chunks"][1]["t_ms"] = 1050.0.into();
                    v
                },
                "fetch.chunks",
            ),
            (
                {
                    let mut v = valid();
                    v["page_path"] = "/chat?secret=1".into();
                    v
                },
                "path",
            ),
            (
                {
                    let mut v = valid();
                    v["marks"][0]["t_ms"] = (-1.0).into();
                    v
                },
                "marks.t_ms",
            ),
        ];
        for (value, expect) in cases {
            let err = ProbeReport::parse(value.to_string().as_bytes()).unwrap_err().to_string();
            assert!(err.contains(expect), "{expect}: {err}");
        }
        assert!(matches!(ProbeReport::parse(b"{not json"), Err(ReportError::Malformed(_))));
        let mut v = valid();
        v["fetch"]["text_format"] = "html".into();
        assert!(matches!(ProbeReport::parse(v.to_string().as_bytes()), Err(ReportError::Malformed(_))));
    }

    /// Sets `pointer` (a JSON pointer) in a valid report to `value`.
    fn with(pointer: &str, value: serde_json::Value) -> serde_json::Value {
        let mut v = valid();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let target = if parent.is_empty() { &mut v } else { v.pointer_mut(parent).unwrap() };
        match target {
            serde_json::Value::Array(items) => items[key.parse::<usize>().unwrap()] = value,
            other => other[key] = value,
        }
        v
    }

    #[test]
    fn rejects_implausible_numbers_strings_and_counts() {
        use serde_json::json;
        let long = "x".repeat(200_000);
        let cases: Vec<(&str, serde_json::Value, &str)> = vec![
            ("/clock/offset_ms", json!(1e308), "clock.offset_ms"),
            ("/clock/offset_ms", json!(-1e308), "clock.offset_ms"),
            ("/clock/uncertainty_ms", json!(1e308), "clock.uncertainty_ms"),
            ("/clock/uncertainty_ms", json!(-1.0), "clock.uncertainty_ms"),
            ("/marks/0/t_ms", json!(1e308), "marks.t_ms"),
            ("/marks/0/name", json!(long), "marks.name"),
            ("/marks/0/name", json!("a\nb"), "marks.name"),
            ("/fetch/start_ms", json!(1e308), "fetch.start_ms"),
            ("/fetch/response_ms", json!(1e308), "fetch.response_ms"),
            ("/fetch/response_ms", json!(-5.0), "fetch.response_ms"),
            ("/fetch/end_ms", json!(1001.0 + 2.0 * MAX_SPAN_MS), "fetch.end_ms"),
            ("/fetch/chunks_dropped", json!(u64::MAX), "fetch.chunks_dropped"),
            ("/fetch/chunks/1/bytes", json!(u64::MAX), "fetch.chunks.bytes"),
            ("/paints/0/t_ms", json!(1e12), "paints.t_ms"),
            ("/paints/1/chars", json!(u64::MAX), "paints.chars"),
            ("/paints/1/presentation_ms", json!(1e308), "paints.presentation_ms"),
            ("/marks_dropped", json!(u64::MAX), "marks_dropped"),
            ("/paints_dropped", json!(u64::MAX), "paints_dropped"),
            ("/long_frames_dropped", json!(u64::MAX), "long_frames_dropped"),
            ("/audio_dropped", json!(u64::MAX), "audio_dropped"),
            ("/long_frames", json!([{"start_ms": 1e308, "duration_ms": 50.0}]), "long_frames.start_ms"),
            ("/long_frames", json!([{"start_ms": 1100.0, "duration_ms": 1e308}]), "long_frames.duration_ms"),
            (
                "/long_frames",
                json!([{"start_ms": 1100.0, "duration_ms": 60.0, "blocking_ms": -1.0}]),
                "long_frames.blocking_ms",
            ),
            ("/audio", json!([{"kind": long, "audible_ms": 1100.0}]), "audio.kind"),
            ("/audio", json!([{"kind": "audio_context", "audible_ms": 1e308}]), "audio.audible_ms"),
            (
                "/audio",
                json!([{"kind": "audio_context", "audible_ms": 1100.0, "output_latency_ms": 1e308}]),
                "audio.output_latency_ms",
            ),
            ("/request/method", json!(long), "request.method"),
            ("/request/status", json!(60000), "request.status"),
            ("/page_path", json!("/a\r\nb"), "path"),
            ("/fetch/chunks/1/chars", json!(u64::MAX), "fetch.chunks.chars"),
            ("/fetch/chunks/1/chars", json!(2), "fetch.chunks"),
            ("/fetch/content_encoding", json!(long), "fetch.content_encoding"),
            ("/fetch/content_encoding", json!("gzip\u{7f}"), "fetch.content_encoding"),
            ("/fetch/via", json!(""), "fetch.via"),
        ];
        for (pointer, value, field) in cases {
            let report = with(pointer, value);
            let err = ProbeReport::parse(report.to_string().as_bytes()).unwrap_err();
            match &err {
                ReportError::Invalid { field: f, .. } => assert_eq!(*f, field, "{pointer}: {err}"),
                other => panic!("{pointer}: expected {field} to be invalid, got {other}"),
            }
        }
        // Non-finite numbers are not JSON; the parser refuses them before validation.
        let text = valid().to_string().replace("\"offset_ms\":0.2", "\"offset_ms\":NaN");
        assert!(matches!(ProbeReport::parse(text.as_bytes()), Err(ReportError::Malformed(_))));
        // Real probe times (ms since the epoch) and durations within bounds pass.
        let mut v = valid();
        v["long_frames"] = json!([{"start_ms": 1100.0, "duration_ms": 80.0, "blocking_ms": 30.0}]);
        v["audio"] = json!([{"kind": "audio_context", "audible_ms": 1300.0, "output_latency_ms": 12.5}]);
        ProbeReport::parse(v.to_string().as_bytes()).unwrap();
        let shift = 1_795_938_039_825.0;
        let mut v = valid();
        for p in ["/marks/0/t_ms", "/fetch/start_ms", "/fetch/response_ms", "/fetch/end_ms"] {
            let t = v.pointer(p).unwrap().as_f64().unwrap();
            *v.pointer_mut(p).unwrap() = json!(t + shift);
        }
        for i in 0..2 {
            for arr in ["/fetch/chunks", "/paints"] {
                let p = format!("{arr}/{i}/t_ms");
                let t = v.pointer(&p).unwrap().as_f64().unwrap();
                *v.pointer_mut(&p).unwrap() = json!(t + shift);
            }
        }
        ProbeReport::parse(v.to_string().as_bytes()).unwrap();
    }
}
