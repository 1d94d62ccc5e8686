//! Deciding how a response body is framed and which provider dialect it speaks, from (in order of
//! trust) the route's provider hint, the request path, the response content type, and finally the
//! bytes themselves.

use serde::{Deserialize, Serialize};

/// The body's format as recorded: the dialect for SSE streams, otherwise the framing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamFormat {
    OpenaiChat,
    OpenaiResponses,
    AnthropicMessages,
    Gemini,
    /// Newline-delimited JSON (Ollama); the dialect field says whose.
    Ndjson,
    /// SSE whose events match no known provider: timing only.
    GenericSse,
    /// A whole (non-streaming) JSON body; the dialect field says whose.
    Json,
    Audio,
    Binary,
    Empty,
}

/// Which provider's event vocabulary was used to classify events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    OpenaiChat,
    OpenaiResponses,
    AnthropicMessages,
    Gemini,
    Ollama,
    /// Unknown JSON shape: events are counted as `control`, content metrics are absent.
    Generic,
}

/// How the body is cut into frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    Sse,
    Ndjson,
    Json,
    Audio,
    Binary,
}

/// The dialect implied by the route hint or the request path, if any.
pub(crate) fn dialect_from_route(hint: Option<&str>, path: &str) -> Option<Dialect> {
    let path = path.split('?').next().unwrap_or(path);
    let from_path = if path.ends_with("/chat/completions") || path.ends_with("/completions") {
        Some(Dialect::OpenaiChat)
    } else if path.ends_with("/responses") || path.contains("/responses/") {
        Some(Dialect::OpenaiResponses)
    } else if path.ends_with("/messages") {
        Some(Dialect::AnthropicMessages)
    } else if path.contains(":streamGenerateContent") || path.contains(":generateContent") {
        Some(Dialect::Gemini)
    } else if path.starts_with("/api/chat") || path.starts_with("/api/generate") {
        Some(Dialect::Ollama)
    } else {
        None
    };
    match hint.map(str::to_ascii_lowercase).as_deref() {
        // One OpenAI route serves both the Chat Completions and the Responses API.
        Some("openai") => Some(match from_path {
            Some(Dialect::OpenaiResponses) => Dialect::OpenaiResponses,
            _ => Dialect::OpenaiChat,
        }),
        Some("anthropic") => Some(Dialect::AnthropicMessages),
        Some("gemini" | "google") => Some(Dialect::Gemini),
        Some("ollama") => Some(Dialect::Ollama),
        _ => from_path,
    }
}

/// The framing implied by the response content type, if it is decisive (read without a copy: the
/// forwarding path asks it of every answer's head, [`is_event_stream_type`]).
pub(crate) fn framing_from_content_type(content_type: Option<&str>) -> Option<Framing> {
    let mime = content_type?.split(';').next()?.trim().as_bytes();
    let is = |t: &str| mime.eq_ignore_ascii_case(t.as_bytes());
    let starts = |p: &str| mime.len() >= p.len() && mime[..p.len()].eq_ignore_ascii_case(p.as_bytes());
    let ends = |p: &str| mime.len() >= p.len() && mime[mime.len() - p.len()..].eq_ignore_ascii_case(p.as_bytes());
    if is("text/event-stream") {
        Some(Framing::Sse)
    } else if [
        "application/x-ndjson",
        "application/ndjson",
        "application/jsonl",
        "application/x-jsonlines",
        "application/jsonlines",
    ]
    .into_iter()
    .any(is)
    {
        Some(Framing::Ndjson)
    } else if is("application/json") || (starts("application/") && ends("+json")) {
        Some(Framing::Json)
    } else if starts("audio/") {
        Some(Framing::Audio)
    } else if is("application/octet-stream") || starts("image/") || starts("video/") {
        Some(Framing::Binary)
    } else {
        None
    }
}

/// Whether a response of this content type is a stream of events (server-sent events or JSON
/// lines), by the types [`framing_from_content_type`] knows.
pub fn is_event_stream_type(content_type: Option<&str>) -> bool {
    matches!(framing_from_content_type(content_type), Some(Framing::Sse | Framing::Ndjson))
}

/// Result of looking at the first body bytes when headers did not settle the framing.
pub(crate) enum Sniff {
    Decided(Framing),
    NeedMoreBytes,
}

/// Guesses the framing from the body prefix (`prefix` may be the whole body when `at_end`).
pub(crate) fn sniff_framing(prefix: &[u8], dialect: Option<Dialect>, at_end: bool) -> Sniff {
    const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];
    if !at_end && prefix.len() < BOM.len() && BOM.starts_with(prefix) {
        // Possibly a BOM cut by the network: wait for the rest before judging the first byte.
        return Sniff::NeedMoreBytes;
    }
    let bytes = prefix.strip_prefix(&BOM[..]).unwrap_or(prefix);
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace());
    let Some(start) = start else {
        return if at_end || bytes.len() > 64 * 1024 { Sniff::Decided(Framing::Binary) } else { Sniff::NeedMoreBytes };
    };
    let rest = &bytes[start..];
    match rest[0] {
        b':' => return Sniff::Decided(Framing::Sse),
        b'{' if dialect == Some(Dialect::Ollama) => return Sniff::Decided(Framing::Ndjson),
        b'{' | b'[' => return Sniff::Decided(Framing::Json),
        _ => {}
    }
    for field in [&b"data:"[..], b"event:", b"id:", b"retry:"] {
        if rest.starts_with(field) {
            return Sniff::Decided(Framing::Sse);
        }
        if field.starts_with(&rest[..rest.len().min(field.len())]) && !at_end {
            return Sniff::NeedMoreBytes;
        }
    }
    Sniff::Decided(Framing::Binary)
}

/// Guesses the dialect from the first JSON object of the body.
pub(crate) fn dialect_from_shape(value: &serde_json::Value) -> Dialect {
    let object = match value {
        serde_json::Value::Array(items) => match items.first() {
            Some(first) => return dialect_from_shape(first),
            None => return Dialect::Generic,
        },
        serde_json::Value::Object(map) => map,
        _ => return Dialect::Generic,
    };
    let kind = object.get("type").and_then(|t| t.as_str()).unwrap_or("");
    let obj = object.get("object").and_then(|t| t.as_str()).unwrap_or("");
    if obj.starts_with("chat.completion") || obj == "text_completion" || object.contains_key("choices") {
        Dialect::OpenaiChat
    } else if kind.starts_with("response.") || obj == "response" {
        Dialect::OpenaiResponses
    } else if matches!(
        kind,
        "message_start"
            | "content_block_start"
            | "content_block_delta"
            | "content_block_stop"
            | "message_delta"
            | "message_stop"
            | "ping"
            | "message"
    ) {
        Dialect::AnthropicMessages
    } else if object.contains_key("candidates") || object.contains_key("usageMetadata") {
        Dialect::Gemini
    } else if object.contains_key("done") && (object.contains_key("message") || object.contains_key("response")) {
        Dialect::Ollama
    } else {
        Dialect::Generic
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_hints_and_paths() {
        assert_eq!(dialect_from_route(None, "/v1/chat/completions"), Some(Dialect::OpenaiChat));
        assert_eq!(dialect_from_route(Some("openai"), "/v1/responses"), Some(Dialect::OpenaiResponses));
        assert_eq!(dialect_from_route(None, "/v1/messages?beta=true"), Some(Dialect::AnthropicMessages));
        assert_eq!(
            dialect_from_route(None, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
            Some(Dialect::Gemini)
        );
        assert_eq!(dialect_from_route(None, "/api/chat"), Some(Dialect::Ollama));
        assert_eq!(dialect_from_route(Some("anthropic"), "/proxy/x"), Some(Dialect::AnthropicMessages));
        assert_eq!(dialect_from_route(Some("generic"), "/whatever"), None);
    }

    #[test]
    fn content_types() {
        assert_eq!(framing_from_content_type(Some("text/event-stream; charset=utf-8")), Some(Framing::Sse));
        assert_eq!(framing_from_content_type(Some("application/x-ndjson")), Some(Framing::Ndjson));
        assert_eq!(framing_from_content_type(Some("audio/mpeg")), Some(Framing::Audio));
        assert_eq!(framing_from_content_type(Some("text/plain")), None);
        assert_eq!(framing_from_content_type(Some("Text/Event-Stream")), Some(Framing::Sse));
        assert_eq!(framing_from_content_type(Some(" application/JSONL ; x=1")), Some(Framing::Ndjson));
        assert_eq!(framing_from_content_type(Some("application/vnd.api+JSON")), Some(Framing::Json));
        assert_eq!(framing_from_content_type(Some("application/+json")), Some(Framing::Json));
        assert_eq!(framing_from_content_type(Some("Image/png")), Some(Framing::Binary));
        assert_eq!(framing_from_content_type(Some("application/jso")), None);
        assert_eq!(framing_from_content_type(Some("é/json")), None);
        assert_eq!(framing_from_content_type(None), None);
        assert!(is_event_stream_type(Some("text/event-stream; charset=utf-8")));
        assert!(is_event_stream_type(Some("application/x-ndjson")));
        assert!(!is_event_stream_type(Some("application/json")));
        assert!(!is_event_stream_type(None));
    }

    #[test]
    fn sniffing() {
        assert!(matches!(sniff_framing(b"da", None, false), Sniff::NeedMoreBytes));
        assert!(matches!(sniff_framing(b"data: {}", None, false), Sniff::Decided(Framing::Sse)));
        assert!(matches!(sniff_framing(b"{\"a\"", Some(Dialect::Ollama), false), Sniff::Decided(Framing::Ndjson)));
        assert!(matches!(sniff_framing(b"\x00\x01", None, false), Sniff::Decided(Framing::Binary)));
        // A BOM cut by the network is not binary (found by the fuzzer).
        assert!(matches!(sniff_framing(b"\xEF", None, false), Sniff::NeedMoreBytes));
        assert!(matches!(sniff_framing(b"\xEF\xBB", None, false), Sniff::NeedMoreBytes));
        assert!(matches!(sniff_framing(b"\xEF\xBB\xBF: hb", None, false), Sniff::Decided(Framing::Sse)));
    }
}
