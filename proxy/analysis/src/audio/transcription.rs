//! Speech-to-text (`POST /v1/audio/transcriptions` and `/translations`): the upload (multipart:
//! model, stream, response format, the audio file's size, type and duration when its header
//! tells) and the answer (JSON, `verbose_json`, plain text, or the SSE stream
//! `transcript.text.delta` / `transcript.text.segment` / `transcript.text.done`).

use serde::{Deserialize, Serialize};

use super::format::AudioFormat;
use super::multipart::{field_text, parts};
use super::wav::{parse_header, WavParse};
use crate::analysis::{ms, ProviderUsage};
use crate::conversation::text_hash;
use crate::sse::{SseFramer, SseItem};
use crate::tokens::count_tokens;

/// The uploaded audio file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AudioUpload {
    /// Size of the file part; absent when the capture ended inside it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub file_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub format: Option<AudioFormat>,
    /// Duration, from the WAV header (declared size, or the file size when it is unknown).
    /// Absent for other formats.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub duration_ms: Option<f64>,
}

/// The form fields of a transcription request that tokentap keeps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TranscriptionForm {
    pub model: Option<String>,
    pub stream: Option<bool>,
    pub response_format: Option<String>,
    pub language: Option<String>,
    pub upload: Option<AudioUpload>,
}

/// Reads a multipart transcription request body (or its captured prefix).
pub fn read_transcription_form(
    content_type: &str,
    body: &[u8],
    total_body_bytes: u64,
) -> Result<TranscriptionForm, String> {
    let parts = parts(content_type, body).map_err(|e| e.to_string())?;
    let mut form = TranscriptionForm::default();
    for part in &parts {
        match (part.name.as_deref(), part.filename.is_some()) {
            (Some("file"), _) | (_, true) => form.upload = Some(upload(part, body.len() as u64, total_body_bytes)),
            (Some("model"), false) => form.model = field_text(part),
            (Some("stream"), false) => form.stream = field_text(part).map(|v| v.eq_ignore_ascii_case("true")),
            (Some("response_format"), false) => form.response_format = field_text(part),
            (Some("language"), false) => form.language = field_text(part),
            _ => {}
        }
    }
    Ok(form)
}

fn upload(part: &super::multipart::Part<'_>, captured: u64, total: u64) -> AudioUpload {
    let file_bytes = part.complete.then_some(part.body.len() as u64);
    let format = AudioFormat::sniff(part.body)
        .or_else(|| part.content_type.as_deref().and_then(AudioFormat::from_content_type))
        .or_else(|| {
            let name = part.filename.as_deref()?;
            AudioFormat::from_response_format(name.rsplit('.').next()?)
        });
    let mut duration_ms = None;
    if let WavParse::Header(h) = parse_header(part.body) {
        let byte_rate = h.spec.sample_rate_hz as f64 * h.spec.frame_bytes() as f64;
        // The declared size, else the file's, else (capture ended inside the file) the request's
        // size minus what precedes the samples: a bound from above by the trailing fields' size.
        let data = h.data_len.map(u64::from).or_else(|| file_bytes.map(|n| n.saturating_sub(h.data_offset as u64)));
        let data = data.or_else(|| (total > captured).then(|| total.saturating_sub(h.data_offset as u64)));
        if byte_rate > 0.0 {
            duration_ms = data.map(|d| d as f64 * 1000.0 / byte_rate);
        }
    }
    AudioUpload { file_bytes, content_type: part.content_type.clone(), format, duration_ms }
}

/// The record of one transcription response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TranscriptionAnalysis {
    /// SSE `transcript.text.*` events (as opposed to one JSON or text answer).
    pub streamed: bool,
    /// First `transcript.text.delta` arrival (ms since t0).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_to_first_delta_ms: Option<f64>,
    /// `transcript.text.done` arrival, or the end of a whole answer.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub transcript_done_ms: Option<f64>,
    pub deltas: u64,
    pub segments: u64,
    /// o200k tokens of the transcript text.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub transcript_tokens: Option<u64>,
    /// Audio duration the provider reported (`verbose_json` `duration`, `usage.seconds`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub audio_duration_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub usage: Option<ProviderUsage>,
    #[serde(default)]
    pub errors: Vec<String>,
    /// Keyed hash of the normalised transcript (`conversation::text_hash`), for linking the
    /// transcript to the chat request that sends it; never written.
    #[serde(skip)]
    pub transcript_hash: Option<u64>,
}

/// Longest transcript kept for hashing and counting.
const MAX_TRANSCRIPT_BYTES: usize = 1 << 20;
const MAX_BODY_BYTES: usize = 4 << 20;

/// Analyses a transcription response body as its chunks are replayed.
#[derive(Debug)]
pub struct TranscriptionAnalyzer {
    sse: Option<SseFramer>,
    body: Vec<u8>,
    body_overflow: bool,
    last_ns: Option<u64>,
    out: TranscriptionAnalysis,
    deltas_text: String,
    done_text: Option<String>,
}

impl TranscriptionAnalyzer {
    pub fn new(response_content_type: Option<&str>) -> Self {
        let sse = response_content_type
            .and_then(|ct| ct.split(';').next())
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream"));
        Self {
            sse: sse.then(|| SseFramer::new(MAX_BODY_BYTES)),
            body: Vec::new(),
            body_overflow: false,
            last_ns: None,
            out: TranscriptionAnalysis { streamed: sse, ..Default::default() },
            deltas_text: String::new(),
            done_text: None,
        }
    }

    pub fn push_chunk(&mut self, bytes: &[u8], t_ns: u64) {
        if bytes.is_empty() {
            return;
        }
        self.last_ns = Some(t_ns);
        let Some(mut framer) = self.sse.take() else {
            if self.body.len() + bytes.len() <= MAX_BODY_BYTES {
                self.body.extend_from_slice(bytes);
            } else {
                self.body_overflow = true;
            }
            return;
        };
        let mut events = Vec::new();
        framer.push(bytes, &mut |item| {
            if let SseItem::Event(e) = item {
                events.push(e.data.to_vec());
            }
        });
        self.sse = Some(framer);
        for data in events {
            self.event(&data, t_ns);
        }
    }

    fn event(&mut self, data: &[u8], t_ns: u64) {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else { return };
        match v.get("type").and_then(|t| t.as_str()) {
            Some("transcript.text.delta") => {
                self.out.deltas += 1;
                self.out.time_to_first_delta_ms.get_or_insert(ms(t_ns));
                if let Some(d) = v.get("delta").and_then(|d| d.as_str()) {
                    if self.deltas_text.len() + d.len() <= MAX_TRANSCRIPT_BYTES {
                        self.deltas_text.push_str(d);
                    }
                }
            }
            Some("transcript.text.segment") => self.out.segments += 1,
            Some("transcript.text.done") => {
                self.out.transcript_done_ms.get_or_insert(ms(t_ns));
                self.done_text = v.get("text").and_then(|t| t.as_str()).map(|t| truncate(t).to_owned());
                self.usage(&v);
            }
            _ if v.get("error").is_some() || v.get("type").and_then(|t| t.as_str()) == Some("error") => self.error(&v),
            _ => {}
        }
    }

    fn usage(&mut self, v: &serde_json::Value) {
        let Some(u) = v.get("usage") else { return };
        let n = |k: &str| u.get(k).and_then(|x| x.as_u64());
        if let Some(seconds) = u.get("seconds").and_then(|s| s.as_f64()) {
            self.out.audio_duration_ms.get_or_insert(seconds * 1000.0);
        }
        if n("input_tokens").is_some() || n("output_tokens").is_some() || n("total_tokens").is_some() {
            self.out.usage = Some(ProviderUsage {
                input_tokens: n("input_tokens"),
                output_tokens: n("output_tokens"),
                total_tokens: n("total_tokens"),
                ..ProviderUsage::default()
            });
        }
    }

    fn error(&mut self, v: &serde_json::Value) {
        if self.out.errors.len() < 8 {
            let e = v.get("error").unwrap_or(v);
            let m = e.get("message").and_then(|m| m.as_str()).unwrap_or("error");
            self.out.errors.push(m.chars().take(300).collect());
        }
    }

    /// `status`: the response status (error bodies are not transcripts).
    pub fn finish(mut self, status: Option<u16>) -> TranscriptionAnalysis {
        let ok = status.is_none_or(|s| (200..300).contains(&s));
        let text = if self.out.streamed {
            self.done_text
                .take()
                .or_else(|| (!self.deltas_text.is_empty()).then(|| std::mem::take(&mut self.deltas_text)))
        } else if self.body_overflow || self.body.is_empty() {
            None
        } else {
            self.out.transcript_done_ms = self.last_ns.map(ms);
            let body = std::mem::take(&mut self.body);
            match serde_json::from_slice::<serde_json::Value>(&body) {
                Ok(v) => {
                    if !ok || v.get("error").is_some() {
                        self.error(&v);
                        None
                    } else {
                        self.usage(&v);
                        if let Some(d) = v.get("duration").and_then(|d| d.as_f64()) {
                            self.out.audio_duration_ms = Some(d * 1000.0);
                        }
                        if let Some(s) = v.get("segments").and_then(|s| s.as_array()) {
                            self.out.segments = s.len() as u64;
                        }
                        v.get("text").and_then(|t| t.as_str()).map(|t| truncate(t).to_owned())
                    }
                }
                // `text`, `srt` and `vtt` answers are the text itself.
                Err(_) if ok => Some(truncate(&String::from_utf8_lossy(&body)).to_owned()),
                Err(_) => None,
            }
        };
        if let Some(text) = text.filter(|t| !t.trim().is_empty()) {
            self.out.transcript_tokens = count_tokens(&text);
            self.out.transcript_hash = Some(text_hash(&text));
        }
        self.out
    }
}

fn truncate(text: &str) -> &str {
    if text.len() <= MAX_TRANSCRIPT_BYTES {
        return text;
    }
    let mut end = MAX_TRANSCRIPT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
