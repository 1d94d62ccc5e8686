//! The probe's report, as sent to `POST /_tokentap/v1/probe`. Every browser time is wall-clock
//! milliseconds in the browser (`performance.timeOrigin + performance.now()`).

use serde::{Deserialize, Serialize};

pub const SCHEMA: &str = "tokentap.probe/1";
pub const MAX_CHUNKS: usize = 5000;
pub const MAX_PAINTS: usize = 5000;
pub const MAX_MARKS: usize = 64;
pub const MAX_LONG_FRAMES: usize = 256;
pub const MAX_AUDIO: usize = 16;

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
}

/// A body chunk as the page's reader received it; `bytes` is cumulative.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserChunk {
    pub t_ms: f64,
    pub bytes: u64,
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
}

/// Why a report was refused; the message goes back to the sender.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ReportError {
    #[error("report is not valid JSON for schema {SCHEMA}: {0}")]
    Malformed(String),
    #[error("unsupported schema {0:?}; expected {SCHEMA:?}")]
    Schema(String),
    #[error("{field} is invalid: {reason}")]
    Invalid { field: &'static str, reason: String },
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ReportError {
    ReportError::Invalid { field, reason: reason.into() }
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && s.bytes().any(|b| b != b'0')
}

fn finite(field: &'static str, v: f64) -> Result<(), ReportError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(invalid(field, format!("{v} is not a non-negative finite time")))
    }
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
        if !is_hex(&self.trace_id, 32) {
            return Err(invalid("trace_id", "must be 32 lower-case hex digits, not all zero"));
        }
        if !is_hex(&self.span_id, 16) {
            return Err(invalid("span_id", "must be 16 lower-case hex digits, not all zero"));
        }
        if let Some(clock) = &self.clock {
            if !clock.offset_ms.is_finite() || !clock.uncertainty_ms.is_finite() || clock.uncertainty_ms < 0.0 {
                return Err(invalid("clock", "offset_ms and uncertainty_ms must be finite, uncertainty ≥ 0"));
            }
        }
        if self.marks.len() > MAX_MARKS {
            return Err(invalid("marks", format!("at most {MAX_MARKS}")));
        }
        for m in &self.marks {
            finite("marks.t_ms", m.t_ms)?;
            if m.name.is_empty() || m.name.len() > 64 {
                return Err(invalid("marks.name", "1 to 64 characters"));
            }
        }
        if let Some(f) = &self.fetch {
            finite("fetch.start_ms", f.start_ms)?;
            if f.chunks.len() > MAX_CHUNKS {
                return Err(invalid("fetch.chunks", format!("at most {MAX_CHUNKS}")));
            }
            let mut last = (f.start_ms, 0u64);
            for c in &f.chunks {
                finite("fetch.chunks.t_ms", c.t_ms)?;
                if c.t_ms < last.0 || c.bytes < last.1 {
                    return Err(invalid("fetch.chunks", "times and cumulative bytes must not decrease"));
                }
                last = (c.t_ms, c.bytes);
            }
        }
        if self.paints.len() > MAX_PAINTS {
            return Err(invalid("paints", format!("at most {MAX_PAINTS}")));
        }
        let mut last = (0.0f64, 0u64);
        for p in &self.paints {
            finite("paints.t_ms", p.t_ms)?;
            if p.t_ms < last.0 || p.chars < last.1 {
                return Err(invalid("paints", "times and cumulative characters must not decrease"));
            }
            last = (p.t_ms, p.chars);
        }
        if self.long_frames.len() > MAX_LONG_FRAMES {
            return Err(invalid("long_frames", format!("at most {MAX_LONG_FRAMES}")));
        }
        if self.audio.len() > MAX_AUDIO {
            return Err(invalid("audio", format!("at most {MAX_AUDIO}")));
        }
        for path in
            [self.page_path.as_deref(), self.request.as_ref().and_then(|r| r.path.as_deref())].into_iter().flatten()
        {
            if path.len() > 2048 || path.contains('?') {
                return Err(invalid("path", "at most 2048 characters and no query string"));
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
                      "chunks": [{"t_ms": 1100.0, "bytes": 10}, {"t_ms": 1200.0, "bytes": 20}], "chunks_dropped": 0},
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
    }
}
