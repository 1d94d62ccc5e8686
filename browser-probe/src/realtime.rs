//! A realtime voice session the page holds over a `WebSocket` (the OpenAI Realtime protocol): when
//! each response's server events reached the page, and the page's playback of its audio.
//!
//! The probe never reads the app's messages for it: it listens to the socket's `message` events
//! beside the app and looks only at the first and last characters of each text message (its `type`, and a delta's
//! `response_id`). Only the rare events that name a response or the session (`response.created`,
//! `response.done`, `session.created`) are parsed whole, by the web layer.
//!
//! Every list is capped and what does not fit is counted.

use crate::playout::{AudioKind, Playout};

/// Responses kept per session.
pub const MAX_RESPONSES: usize = tokentap_probe_protocol::caps::MAX_REALTIME_RESPONSES;
/// Longest response or session id kept (a longer one is not an id tokentap would have).
pub const MAX_ID_BYTES: usize = tokentap_probe_protocol::caps::MAX_ID_LEN;
/// How much of a message's start is read for its type and response id.
pub const HEAD_CHARS: u32 = 512;

/// What a server message is, as far as the probe cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerEventKind {
    SessionCreated,
    ResponseCreated,
    /// `response.output_audio.delta` (GA) or `response.audio.delta` (beta).
    AudioDelta,
    ResponseDone,
    Other,
}

impl ServerEventKind {
    fn of_type(event_type: Option<&str>) -> ServerEventKind {
        match event_type {
            Some("session.created") => ServerEventKind::SessionCreated,
            Some("response.created") => ServerEventKind::ResponseCreated,
            Some("response.output_audio.delta" | "response.audio.delta") => ServerEventKind::AudioDelta,
            Some("response.done") => ServerEventKind::ResponseDone,
            _ => ServerEventKind::Other,
        }
    }

    /// Whether the web layer should parse the whole message for an id.
    pub fn names_an_id(self) -> bool {
        matches!(
            self,
            ServerEventKind::SessionCreated | ServerEventKind::ResponseCreated | ServerEventKind::ResponseDone
        )
    }
}

/// A message's kind, and for an audio delta its `response_id`, from its first [`HEAD_CHARS`]
/// characters and (for a longer message) its last ones. Servers write `type` first (OpenAI) or
/// keys in alphabetical order (then `type` and `response_id` close the object, after the audio):
/// the head is read key by key from the start, the tail for the last `"type":"…"`.
pub fn classify(head: &str, tail: Option<&str>) -> (ServerEventKind, Option<String>) {
    let end = tail.unwrap_or(head);
    let event_type = string_field(head, "type").or_else(|| last_string_field(end, "type"));
    let kind = ServerEventKind::of_type(event_type);
    let response_id = match kind {
        ServerEventKind::AudioDelta => {
            string_field(head, "response_id").or_else(|| last_string_field(end, "response_id")).map(str::to_string)
        }
        _ => None,
    };
    (kind, response_id)
}

/// The value of the first top-level `"name":"value"` pair in `head`, read from the start of a
/// JSON object (no escapes inside the value; ids and event types have none). `None` when absent
/// or cut off. Byte by byte, without panicking slices (the probe's size budget has no room for
/// their formatting code).
pub fn string_field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    let bytes = head.as_bytes();
    let mut depth = 0i32;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth -= 1,
            b'"' => {
                let start = i + 1;
                let mut end = start;
                while end < bytes.len() && bytes[end] != b'"' {
                    end += if bytes[end] == b'\\' { 2 } else { 1 };
                }
                if end >= bytes.len() {
                    return None;
                }
                if depth == 1 && bytes.get(start..end) == Some(name.as_bytes()) {
                    if let Some(value) = skip_space(head.get(end + 1..)?).strip_prefix(':') {
                        return plain_string(value);
                    }
                }
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The value of the last `"name":"value"` in `text`, which may start anywhere in a message.
fn last_string_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let (bytes, key) = (text.as_bytes(), name.as_bytes());
    let mut at = bytes.len().checked_sub(key.len() + 2)?;
    loop {
        if bytes[at] == b'"'
            && bytes.get(at + 1..at + 1 + key.len()) == Some(key)
            && bytes.get(at + 1 + key.len()) == Some(&b'"')
        {
            let after = skip_space(text.get(at + key.len() + 2..)?);
            if let Some(value) = after.strip_prefix(':') {
                return plain_string(value);
            }
        }
        at = at.checked_sub(1)?;
    }
}

/// `s` without its leading JSON whitespace.
fn skip_space(s: &str) -> &str {
    let n = s.bytes().take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')).count();
    s.get(n..).unwrap_or("")
}

/// A JSON string at the start of `value` (after spaces), without escapes.
fn plain_string(value: &str) -> Option<&str> {
    let value = skip_space(value).strip_prefix('"')?;
    let end = value.bytes().position(|b| b == b'"')?;
    let value = value.get(..end)?;
    (!value.bytes().any(|b| b == b'\\')).then_some(value)
}

/// An id as kept: non-empty, at most [`MAX_ID_BYTES`], no control characters.
fn usable_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_BYTES && !id.bytes().any(|b| b < 0x20 || b == 0x7f)
}

/// One response as the page saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseSeen {
    pub response_id: String,
    pub created_ms: Option<f64>,
    pub first_audio_ms: Option<f64>,
    pub done_ms: Option<f64>,
    pub audio_deltas: u64,
    pub playout: Option<Playout>,
}

impl ResponseSeen {
    fn new(response_id: &str) -> ResponseSeen {
        ResponseSeen {
            response_id: response_id.to_string(),
            created_ms: None,
            first_audio_ms: None,
            done_ms: None,
            audio_deltas: 0,
            playout: None,
        }
    }
}

/// The session: its id and responses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RealtimeSeen {
    pub session_id: Option<String>,
    pub responses: Vec<ResponseSeen>,
    pub responses_dropped: u64,
    /// Server messages the page received (text and binary).
    pub messages: u64,
}

impl RealtimeSeen {
    /// A server message of `kind` arrived at `t_ms`; `id` is the response (or session) it names.
    pub fn message(&mut self, t_ms: f64, kind: ServerEventKind, id: Option<&str>) {
        self.messages += 1;
        let id = id.filter(|id| usable_id(id));
        match kind {
            ServerEventKind::SessionCreated => {
                if self.session_id.is_none() {
                    self.session_id = id.map(str::to_string);
                }
            }
            ServerEventKind::ResponseCreated => {
                if let Some(r) = id.and_then(|id| self.response(id)) {
                    r.created_ms.get_or_insert(t_ms);
                }
            }
            ServerEventKind::AudioDelta => {
                let response = match id {
                    Some(id) => self.response(id),
                    // A delta that does not say (or says it late in a long message): the newest.
                    None => self.responses.last_mut(),
                };
                if let Some(r) = response {
                    r.first_audio_ms.get_or_insert(t_ms);
                    r.audio_deltas += 1;
                }
            }
            ServerEventKind::ResponseDone => {
                if let Some(r) = id.and_then(|id| self.response(id)) {
                    r.done_ms.get_or_insert(t_ms);
                }
            }
            ServerEventKind::Other => {}
        }
    }

    /// The response with this id, added when new (none past the cap: counted).
    fn response(&mut self, id: &str) -> Option<&mut ResponseSeen> {
        if let Some(i) = self.responses.iter().position(|r| r.response_id == id) {
            return self.responses.get_mut(i);
        }
        if self.responses.len() >= MAX_RESPONSES {
            self.responses_dropped += 1;
            return None;
        }
        self.responses.push(ResponseSeen::new(id));
        self.responses.last_mut()
    }

    /// Which response audio the app schedules now belongs to: the one it names, else the newest
    /// response that has audio, else the newest.
    pub fn response_index(&self, id: Option<&str>) -> Option<usize> {
        match id {
            Some(id) => self.responses.iter().position(|r| r.response_id == id),
            None => self
                .responses
                .iter()
                .rposition(|r| r.first_audio_ms.is_some())
                .or_else(|| self.responses.len().checked_sub(1)),
        }
    }

    /// The playback of response `index` (started when new).
    pub fn playout(&mut self, index: usize, kind: AudioKind) -> Option<&mut Playout> {
        let response = self.responses.get_mut(index)?;
        Some(response.playout.get_or_insert_with(|| Playout::new(kind)))
    }

    pub fn playouts(&self) -> impl Iterator<Item = &Playout> {
        self.responses.iter().filter_map(|r| r.playout.as_ref())
    }

    pub fn playouts_mut(&mut self) -> impl Iterator<Item = &mut Playout> {
        self.responses.iter_mut().filter_map(|r| r.playout.as_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head and tail the web layer reads of a message.
    fn split(message: &str) -> (&str, Option<&str>) {
        let chars: Vec<(usize, char)> = message.char_indices().collect();
        let n = HEAD_CHARS as usize;
        if chars.len() <= n {
            return (message, None);
        }
        (&message[..chars[n].0], Some(&message[chars[chars.len() - n].0..]))
    }

    #[test]
    fn event_kinds_and_ids_of_messages() {
        let audio = "A".repeat(4000);
        let openai = format!(
            r#"{{"type":"response.output_audio.delta","event_id":"e2","response_id":"resp_1","delta":"{audio}"}}"#
        );
        // serde_json's default map writes keys in alphabetical order: type and response_id last.
        let sorted = format!(
            r#"{{"content_index":0,"delta":"{audio}","event_id":"e3","item_id":"i1","output_index":0,"response_id":"resp_2","type":"response.output_audio.delta"}}"#
        );
        let created_sorted =
            r#"{"event_id":"e1","response":{"id":"resp_3","output":[{"type":"message"}]},"type":"response.created"}"#;
        let cases: Vec<(String, ServerEventKind, Option<&str>)> = vec![
            (
                r#"{"type":"session.created","event_id":"e1","session":{"id":"sess_1"}}"#.into(),
                ServerEventKind::SessionCreated,
                None,
            ),
            (openai, ServerEventKind::AudioDelta, Some("resp_1")),
            (sorted, ServerEventKind::AudioDelta, Some("resp_2")),
            (created_sorted.into(), ServerEventKind::ResponseCreated, None),
            (
                r#"{"event_id":"e3", "type" : "response.audio.delta", "response_id" : "resp_2"}"#.into(),
                ServerEventKind::AudioDelta,
                Some("resp_2"),
            ),
            (r#"{"type":"response.done","response":{"id":"resp_1"}}"#.into(), ServerEventKind::ResponseDone, None),
            // A value that looks like a key is not one.
            (r#"{"note":"type","type":"response.created"}"#.into(), ServerEventKind::ResponseCreated, None),
            (r#"{"type":"input_audio_buffer.speech_stopped"}"#.into(), ServerEventKind::Other, None),
            (r#"{"type":"resp"#.into(), ServerEventKind::Other, None),
            ("not json".into(), ServerEventKind::Other, None),
            (String::new(), ServerEventKind::Other, None),
            (r#"{"type":"ré\"sponse.done"}"#.into(), ServerEventKind::Other, None),
        ];
        for (message, kind, response_id) in &cases {
            let (head, tail) = split(message);
            let (k, id) = classify(head, tail);
            assert_eq!((k, id.as_deref()), (*kind, *response_id), "{message:.80}");
        }
        // Cut at every byte (a message can end anywhere): never a panic, never a wrong id.
        let full = r#"{"type":"response.output_audio.delta","response_id":"resp_é1","delta":"AA"}"#;
        for cut in 0..=full.len() {
            let Some(head) = full.get(..cut) else { continue };
            let (_, id) = classify(head, None);
            assert!(id.is_none() || id.as_deref() == Some("resp_é1"), "{head}");
        }
    }

    #[test]
    fn deltas_go_to_their_response_and_ids_are_bounded() {
        let mut s = RealtimeSeen::default();
        s.message(1.0, ServerEventKind::SessionCreated, Some("sess_1"));
        s.message(2.0, ServerEventKind::ResponseCreated, Some("resp_a"));
        s.message(3.0, ServerEventKind::AudioDelta, Some("resp_a"));
        s.message(4.0, ServerEventKind::AudioDelta, None);
        s.message(5.0, ServerEventKind::ResponseDone, Some("resp_a"));
        s.message(6.0, ServerEventKind::ResponseCreated, Some("resp_b"));
        assert_eq!(s.response_index(None), Some(0), "resp_b has no audio yet");
        s.message(7.0, ServerEventKind::AudioDelta, Some("resp_b"));
        assert_eq!(s.response_index(None), Some(1));
        assert_eq!(s.response_index(Some("resp_a")), Some(0));
        assert_eq!(s.response_index(Some("resp_z")), None);
        s.message(8.0, ServerEventKind::ResponseCreated, Some(&"x".repeat(MAX_ID_BYTES + 1)));
        s.message(9.0, ServerEventKind::SessionCreated, Some("sess_2"));
        assert_eq!(s.session_id.as_deref(), Some("sess_1"));
        assert_eq!(s.messages, 9);
        let a = &s.responses[0];
        assert_eq!((a.created_ms, a.first_audio_ms, a.done_ms, a.audio_deltas), (Some(2.0), Some(3.0), Some(5.0), 2));
        assert_eq!(s.responses.len(), 2);
        s.playout(1, AudioKind::AudioContext).unwrap().heard(10.0, None);
        assert_eq!(s.playouts().count(), 1);
    }

    #[test]
    fn responses_past_the_cap_are_counted() {
        let mut s = RealtimeSeen::default();
        for i in 0..MAX_RESPONSES + 3 {
            s.message(i as f64, ServerEventKind::ResponseCreated, Some(&format!("resp_{i}")));
        }
        assert_eq!(s.responses.len(), MAX_RESPONSES);
        assert_eq!(s.responses_dropped, 3);
        // A delta of a dropped response is not charged to another.
        s.message(1e6, ServerEventKind::AudioDelta, Some("resp_257"));
        assert!(s.responses.iter().all(|r| r.audio_deltas == 0));
    }
}
