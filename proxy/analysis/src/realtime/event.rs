//! OpenAI Realtime events, client and server, under their GA names and the beta names they
//! replaced (docs/metrics.md, "Realtime voice"). Only what the session analysis needs is read:
//! the event's type, ids, VAD audio positions, the length of base64 audio, the session's audio
//! format and turn detection, a response's status and usage. Text is never kept.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// The event types tokentap tells apart. Beta names map to their GA kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    // Client → server.
    SessionUpdate,
    InputAudioBufferAppend,
    InputAudioBufferCommit,
    InputAudioBufferClear,
    ConversationItemCreate,
    ConversationItemTruncate,
    ConversationItemDelete,
    ResponseCreate,
    ResponseCancel,
    OutputAudioBufferClear,
    // Server → client.
    SessionCreated,
    SessionUpdated,
    SpeechStarted,
    SpeechStopped,
    InputAudioBufferCommitted,
    InputAudioBufferCleared,
    InputAudioBufferTimeoutTriggered,
    ConversationItemAdded,
    ConversationItemDone,
    ConversationItemTruncated,
    ConversationItemDeleted,
    InputAudioTranscriptionDelta,
    InputAudioTranscriptionCompleted,
    InputAudioTranscriptionFailed,
    ResponseCreated,
    ResponseOutputItemAdded,
    ResponseOutputItemDone,
    ResponseContentPartAdded,
    ResponseContentPartDone,
    OutputAudioDelta,
    OutputAudioDone,
    OutputAudioTranscriptDelta,
    OutputAudioTranscriptDone,
    OutputTextDelta,
    OutputTextDone,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    ResponseDone,
    OutputAudioBufferStarted,
    OutputAudioBufferStopped,
    OutputAudioBufferCleared,
    RateLimitsUpdated,
    Error,
}

impl EventKind {
    /// The kind of a `type` value, GA or beta; `None` for types tokentap does not know.
    pub fn from_type(t: &str) -> Option<Self> {
        use EventKind::*;
        Some(match t {
            "session.update" => SessionUpdate,
            "input_audio_buffer.append" => InputAudioBufferAppend,
            "input_audio_buffer.commit" => InputAudioBufferCommit,
            "input_audio_buffer.clear" => InputAudioBufferClear,
            "conversation.item.create" => ConversationItemCreate,
            "conversation.item.truncate" => ConversationItemTruncate,
            "conversation.item.delete" => ConversationItemDelete,
            "response.create" => ResponseCreate,
            "response.cancel" => ResponseCancel,
            "output_audio_buffer.clear" => OutputAudioBufferClear,
            "session.created" => SessionCreated,
            "session.updated" => SessionUpdated,
            "input_audio_buffer.speech_started" => SpeechStarted,
            "input_audio_buffer.speech_stopped" => SpeechStopped,
            "input_audio_buffer.committed" => InputAudioBufferCommitted,
            "input_audio_buffer.cleared" => InputAudioBufferCleared,
            "input_audio_buffer.timeout_triggered" => InputAudioBufferTimeoutTriggered,
            "conversation.item.added" | "conversation.item.created" => ConversationItemAdded,
            "conversation.item.done" => ConversationItemDone,
            "conversation.item.truncated" => ConversationItemTruncated,
            "conversation.item.deleted" => ConversationItemDeleted,
            "conversation.item.input_audio_transcription.delta" => InputAudioTranscriptionDelta,
            "conversation.item.input_audio_transcription.completed" => InputAudioTranscriptionCompleted,
            "conversation.item.input_audio_transcription.failed" => InputAudioTranscriptionFailed,
            "response.created" => ResponseCreated,
            "response.output_item.added" => ResponseOutputItemAdded,
            "response.output_item.done" => ResponseOutputItemDone,
            "response.content_part.added" => ResponseContentPartAdded,
            "response.content_part.done" => ResponseContentPartDone,
            "response.output_audio.delta" | "response.audio.delta" => OutputAudioDelta,
            "response.output_audio.done" | "response.audio.done" => OutputAudioDone,
            "response.output_audio_transcript.delta" | "response.audio_transcript.delta" => OutputAudioTranscriptDelta,
            "response.output_audio_transcript.done" | "response.audio_transcript.done" => OutputAudioTranscriptDone,
            "response.output_text.delta" | "response.text.delta" => OutputTextDelta,
            "response.output_text.done" | "response.text.done" => OutputTextDone,
            "response.function_call_arguments.delta" => FunctionCallArgumentsDelta,
            "response.function_call_arguments.done" => FunctionCallArgumentsDone,
            "response.done" => ResponseDone,
            "output_audio_buffer.started" => OutputAudioBufferStarted,
            "output_audio_buffer.stopped" => OutputAudioBufferStopped,
            "output_audio_buffer.cleared" => OutputAudioBufferCleared,
            "rate_limits.updated" => RateLimitsUpdated,
            "error" => Error,
            _ => return None,
        })
    }

    /// Whether a beta name was used (the GA name differs).
    pub fn is_beta_name(t: &str) -> bool {
        matches!(
            t,
            "conversation.item.created"
                | "response.audio.delta"
                | "response.audio.done"
                | "response.audio_transcript.delta"
                | "response.audio_transcript.done"
                | "response.text.delta"
                | "response.text.done"
        )
    }
}

/// Input or output audio encoding of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RealtimeAudioFormat {
    /// 16-bit little-endian PCM, mono, at `rate_hz` (24 kHz unless said otherwise).
    Pcm16 { rate_hz: u32 },
    /// G.711 µ-law, 8 kHz, one byte per sample.
    G711Ulaw,
    /// G.711 A-law, 8 kHz, one byte per sample.
    G711Alaw,
}

impl Default for RealtimeAudioFormat {
    fn default() -> Self {
        Self::Pcm16 { rate_hz: 24_000 }
    }
}

impl RealtimeAudioFormat {
    pub fn sample_rate_hz(self) -> u32 {
        match self {
            Self::Pcm16 { rate_hz } => rate_hz.max(1),
            Self::G711Ulaw | Self::G711Alaw => 8_000,
        }
    }

    pub fn bytes_per_frame(self) -> u32 {
        match self {
            Self::Pcm16 { .. } => 2,
            Self::G711Ulaw | Self::G711Alaw => 1,
        }
    }

    /// Audio milliseconds in `bytes` of this format.
    pub fn ms_of(self, bytes: u64) -> f64 {
        bytes as f64 / f64::from(self.bytes_per_frame()) * 1000.0 / f64::from(self.sample_rate_hz())
    }

    /// Beta string values (`pcm16`, `g711_ulaw`, `g711_alaw`) and GA types (`audio/pcm`,
    /// `audio/pcmu`, `audio/pcma`).
    fn from_name(name: &str, rate: Option<u32>) -> Option<Self> {
        match name {
            "pcm16" | "audio/pcm" => {
                Some(Self::Pcm16 { rate_hz: rate.filter(|r| (1_000..=384_000).contains(r)).unwrap_or(24_000) })
            }
            "g711_ulaw" | "audio/pcmu" => Some(Self::G711Ulaw),
            "g711_alaw" | "audio/pcma" => Some(Self::G711Alaw),
            _ => None,
        }
    }
}

/// Turn detection as configured (server VAD or semantic VAD; `None` type = turned off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnDetection {
    pub kind: TurnDetectionKind,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub silence_duration_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub prefix_padding_ms: Option<f64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnDetectionKind {
    #[default]
    ServerVad,
    SemanticVad,
    /// `turn_detection: null`: the client commits and asks for responses itself.
    Off,
    Other,
}

/// What a session config (`session.update`, `session.created`, `session.updated`) says, each part
/// only when present.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionConfig {
    pub model: Option<String>,
    pub session_id: Option<String>,
    pub input_format: Option<RealtimeAudioFormat>,
    pub output_format: Option<RealtimeAudioFormat>,
    pub turn_detection: Option<TurnDetection>,
}

/// A response's usage as reported in `response.done`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealtimeUsage {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub input_text_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub input_audio_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub input_cached_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output_text_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output_audio_tokens: Option<u64>,
}

/// A response's final status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseStatus {
    Completed,
    Cancelled,
    Incomplete,
    Failed,
    InProgress,
    Other,
}

impl ResponseStatus {
    fn from_name(s: &str) -> Self {
        match s {
            "completed" => Self::Completed,
            "cancelled" => Self::Cancelled,
            "incomplete" => Self::Incomplete,
            "failed" => Self::Failed,
            "in_progress" => Self::InProgress,
            _ => Self::Other,
        }
    }
}

/// One event, reduced to what the analysis reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RealtimeEvent {
    pub kind: Option<EventKind>,
    pub beta_name: bool,
    pub response_id: Option<String>,
    pub item_id: Option<String>,
    pub call_id: Option<String>,
    /// `name` of a function call (`response.function_call_arguments.done`, or the item).
    pub name: Option<String>,
    pub audio_start_ms: Option<f64>,
    pub audio_end_ms: Option<f64>,
    /// Decoded length of base64 audio (`audio` of an append, `delta` of an audio delta).
    pub audio_bytes: Option<u64>,
    pub session: Option<SessionConfig>,
    pub status: Option<ResponseStatus>,
    pub status_reason: Option<String>,
    pub usage: Option<RealtimeUsage>,
    /// `conversation.item.create` of a `function_call_output` item.
    pub function_call_output: bool,
    /// Function call items in `response.done`'s output (call id, name).
    pub output_calls: Vec<(String, String)>,
    pub error_code: Option<String>,
}

/// Why a message was not read as an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum EventError {
    #[error("not a JSON object with a string `type`")]
    NotAnEvent,
}

#[derive(Deserialize)]
struct Raw<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    response_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    item_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    call_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    audio_start_ms: Option<f64>,
    #[serde(default)]
    audio_end_ms: Option<f64>,
    #[serde(default, borrow)]
    audio: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default)]
    session: Option<serde_json::Value>,
    #[serde(default)]
    response: Option<serde_json::Value>,
    #[serde(default)]
    item: Option<serde_json::Value>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// Decoded length of a base64 string without decoding it (padding and whitespace excluded).
pub fn base64_decoded_len(s: &str) -> u64 {
    let n = s.bytes().filter(|b| !matches!(b, b'=' | b'\r' | b'\n' | b' ')).count() as u64;
    n * 3 / 4
}

impl RealtimeEvent {
    /// Reads one text message. Unknown types come back with `kind: None` (counted by the caller).
    pub fn parse(text: &[u8]) -> Result<Self, EventError> {
        let raw: Raw<'_> = serde_json::from_slice(text).map_err(|_| EventError::NotAnEvent)?;
        let kind = EventKind::from_type(&raw.kind);
        let owned = |c: Option<Cow<'_, str>>| c.map(|c| truncate(&c, 128));
        let mut ev = RealtimeEvent {
            kind,
            beta_name: EventKind::is_beta_name(&raw.kind),
            response_id: owned(raw.response_id),
            item_id: owned(raw.item_id),
            call_id: owned(raw.call_id),
            name: owned(raw.name),
            audio_start_ms: raw.audio_start_ms,
            audio_end_ms: raw.audio_end_ms,
            ..Default::default()
        };
        match kind {
            Some(EventKind::InputAudioBufferAppend) => ev.audio_bytes = raw.audio.as_deref().map(base64_decoded_len),
            Some(EventKind::OutputAudioDelta) => ev.audio_bytes = raw.delta.as_deref().map(base64_decoded_len),
            Some(EventKind::SessionUpdate | EventKind::SessionCreated | EventKind::SessionUpdated) => {
                ev.session = raw.session.as_ref().map(read_session);
            }
            Some(EventKind::ResponseCreated | EventKind::ResponseDone) => {
                if let Some(r) = raw.response.as_ref() {
                    read_response(r, &mut ev);
                }
            }
            Some(
                EventKind::ConversationItemCreate
                | EventKind::ConversationItemAdded
                | EventKind::ResponseOutputItemAdded
                | EventKind::ResponseOutputItemDone,
            ) => {
                if let Some(item) = raw.item.as_ref() {
                    let t = item.get("type").and_then(|v| v.as_str());
                    ev.function_call_output = t == Some("function_call_output");
                    if ev.call_id.is_none() {
                        ev.call_id = str_at(item, "call_id");
                    }
                    if t == Some("function_call") {
                        ev.name = ev.name.or_else(|| str_at(item, "name"));
                    }
                    ev.item_id = ev.item_id.or_else(|| str_at(item, "id"));
                }
            }
            Some(EventKind::Error) => {
                ev.error_code = raw.error.as_ref().and_then(|e| str_at(e, "code").or_else(|| str_at(e, "type")));
            }
            _ => {}
        }
        Ok(ev)
    }
}

fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn str_at(v: &serde_json::Value, key: &str) -> Option<String> {
    v.get(key).and_then(|x| x.as_str()).map(|s| truncate(s, 128))
}

fn u64_at(v: &serde_json::Value, path: &[&str]) -> Option<u64> {
    let mut cur = v;
    for k in path {
        cur = cur.get(*k)?;
    }
    cur.as_u64()
}

fn read_format(v: Option<&serde_json::Value>) -> Option<RealtimeAudioFormat> {
    let v = v?;
    match v {
        serde_json::Value::String(s) => RealtimeAudioFormat::from_name(s, None),
        serde_json::Value::Object(_) => {
            let name = v.get("type")?.as_str()?;
            let rate = v.get("rate").and_then(|r| r.as_u64()).and_then(|r| u32::try_from(r).ok());
            RealtimeAudioFormat::from_name(name, rate)
        }
        _ => None,
    }
}

fn read_turn_detection(v: &serde_json::Value) -> TurnDetection {
    if v.is_null() {
        return TurnDetection { kind: TurnDetectionKind::Off, ..Default::default() };
    }
    let kind = match v.get("type").and_then(|t| t.as_str()) {
        Some("server_vad") | None => TurnDetectionKind::ServerVad,
        Some("semantic_vad") => TurnDetectionKind::SemanticVad,
        Some(_) => TurnDetectionKind::Other,
    };
    let num = |k: &str| v.get(k).and_then(|x| x.as_f64()).filter(|x| x.is_finite() && *x >= 0.0);
    TurnDetection { kind, silence_duration_ms: num("silence_duration_ms"), prefix_padding_ms: num("prefix_padding_ms") }
}

/// GA: `session.audio.{input,output}.format` and `session.audio.input.turn_detection`; beta:
/// `session.input_audio_format`, `output_audio_format`, `turn_detection`.
fn read_session(s: &serde_json::Value) -> SessionConfig {
    let audio = s.get("audio");
    let input = audio.and_then(|a| a.get("input"));
    let output = audio.and_then(|a| a.get("output"));
    let td = input.and_then(|i| i.get("turn_detection")).or_else(|| s.get("turn_detection"));
    SessionConfig {
        model: str_at(s, "model"),
        session_id: str_at(s, "id"),
        input_format: read_format(input.and_then(|i| i.get("format")))
            .or_else(|| read_format(s.get("input_audio_format"))),
        output_format: read_format(output.and_then(|o| o.get("format")))
            .or_else(|| read_format(s.get("output_audio_format"))),
        turn_detection: td.map(read_turn_detection),
    }
}

fn read_response(r: &serde_json::Value, ev: &mut RealtimeEvent) {
    if ev.response_id.is_none() {
        ev.response_id = str_at(r, "id");
    }
    ev.status = r.get("status").and_then(|s| s.as_str()).map(ResponseStatus::from_name);
    ev.status_reason = r.get("status_details").and_then(|d| str_at(d, "reason").or_else(|| str_at(d, "type")));
    if let Some(u) = r.get("usage").filter(|u| u.is_object()) {
        ev.usage = Some(RealtimeUsage {
            input_tokens: u64_at(u, &["input_tokens"]),
            output_tokens: u64_at(u, &["output_tokens"]),
            input_text_tokens: u64_at(u, &["input_token_details", "text_tokens"]),
            input_audio_tokens: u64_at(u, &["input_token_details", "audio_tokens"]),
            input_cached_tokens: u64_at(u, &["input_token_details", "cached_tokens"]),
            output_text_tokens: u64_at(u, &["output_token_details", "text_tokens"]),
            output_audio_tokens: u64_at(u, &["output_token_details", "audio_tokens"]),
        });
    }
    if let Some(items) = r.get("output").and_then(|o| o.as_array()) {
        for item in items.iter().take(64) {
            if item.get("type").and_then(|t| t.as_str()) == Some("function_call") {
                if let (Some(c), Some(n)) = (str_at(item, "call_id"), str_at(item, "name")) {
                    ev.output_calls.push((c, n));
                }
            }
        }
    }
}

/// For a message cut at the cap: its type from the prefix (`"type":"…"` among the first bytes),
/// when that is all there is to go on.
pub fn sniff_type(prefix: &[u8]) -> Option<EventKind> {
    let text = std::str::from_utf8(&prefix[..prefix.len().min(512)]).ok().or_else(|| {
        // A cut in the middle of a UTF-8 sequence: read up to the last whole character.
        let p = &prefix[..prefix.len().min(512)];
        (1..4).find_map(|k| p.len().checked_sub(k).and_then(|n| std::str::from_utf8(&p[..n]).ok()))
    })?;
    let at = text.find("\"type\"")?;
    let rest = text[at + 6..].trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let end = rest.find('"')?;
    EventKind::from_type(&rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ga_and_beta_names_map_to_one_kind() {
        for (ga, beta) in [
            ("response.output_audio.delta", "response.audio.delta"),
            ("response.output_audio_transcript.delta", "response.audio_transcript.delta"),
            ("response.output_text.delta", "response.text.delta"),
            ("conversation.item.added", "conversation.item.created"),
        ] {
            assert_eq!(EventKind::from_type(ga), EventKind::from_type(beta));
            assert!(EventKind::from_type(ga).is_some());
            assert!(EventKind::is_beta_name(beta) && !EventKind::is_beta_name(ga));
        }
        assert_eq!(EventKind::from_type("response.something_new"), None);
    }

    #[test]
    fn session_config_ga_and_beta() {
        let ga = br#"{"type":"session.update","session":{"type":"realtime","model":"gpt-realtime","audio":{"input":{"format":{"type":"audio/pcm","rate":16000},"turn_detection":{"type":"server_vad","silence_duration_ms":500,"prefix_padding_ms":300}},"output":{"format":{"type":"audio/pcmu"}}}}}"#;
        let s = RealtimeEvent::parse(ga).unwrap().session.unwrap();
        assert_eq!(s.input_format, Some(RealtimeAudioFormat::Pcm16 { rate_hz: 16_000 }));
        assert_eq!(s.output_format, Some(RealtimeAudioFormat::G711Ulaw));
        let td = s.turn_detection.unwrap();
        assert_eq!(
            (td.kind, td.silence_duration_ms, td.prefix_padding_ms),
            (TurnDetectionKind::ServerVad, Some(500.0), Some(300.0))
        );
        let beta = br#"{"type":"session.updated","session":{"id":"sess_1","input_audio_format":"g711_alaw","turn_detection":null}}"#;
        let s = RealtimeEvent::parse(beta).unwrap().session.unwrap();
        assert_eq!(s.input_format, Some(RealtimeAudioFormat::G711Alaw));
        assert_eq!(s.session_id.as_deref(), Some("sess_1"));
        assert_eq!(s.turn_detection.unwrap().kind, TurnDetectionKind::Off);
    }

    #[test]
    fn audio_lengths_and_done() {
        let e = RealtimeEvent::parse(br#"{"type":"input_audio_buffer.append","audio":"AAAAAA=="}"#).unwrap();
        assert_eq!(e.audio_bytes, Some(4));
        let e = RealtimeEvent::parse(br#"{"type":"response.audio.delta","response_id":"r1","delta":"AAAA"}"#).unwrap();
        assert_eq!(
            (e.kind, e.beta_name, e.audio_bytes, e.response_id.as_deref()),
            (Some(EventKind::OutputAudioDelta), true, Some(3), Some("r1"))
        );
        let done = br#"{"type":"response.done","response":{"id":"r1","status":"cancelled","status_details":{"type":"cancelled","reason":"turn_detected"},"output":[{"type":"function_call","call_id":"c1","name":"get_weather"}],"usage":{"input_tokens":10,"output_tokens":20,"input_token_details":{"text_tokens":4,"audio_tokens":6,"cached_tokens":2},"output_token_details":{"text_tokens":5,"audio_tokens":15}}}}"#;
        let e = RealtimeEvent::parse(done).unwrap();
        assert_eq!(e.status, Some(ResponseStatus::Cancelled));
        assert_eq!(e.status_reason.as_deref(), Some("turn_detected"));
        assert_eq!(e.output_calls, vec![("c1".into(), "get_weather".into())]);
        let u = e.usage.unwrap();
        assert_eq!((u.input_cached_tokens, u.output_audio_tokens), (Some(2), Some(15)));
    }

    #[test]
    fn bad_json_is_an_error_and_a_cut_prefix_still_names_its_type() {
        assert!(RealtimeEvent::parse(b"{\"type\":").is_err());
        assert!(RealtimeEvent::parse(b"[1]").is_err());
        assert_eq!(
            sniff_type(br#"{"event_id":"e1", "type" : "input_audio_buffer.append","audio":"AAAA"#),
            Some(EventKind::InputAudioBufferAppend)
        );
        assert_eq!(sniff_type(b"{\"audio\":\"AAAA"), None);
    }
}
