//! Wire events: the bytes of one SSE event / NDJSON line / audio chunk, tagged with how it is timed.

use bytes::Bytes;
use serde_json::Value;

/// How an event is placed on the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// Sent right after the response headers (e.g. Anthropic `message_start`, Responses `response.created`).
    Preamble,
    /// A content event (a text, reasoning or tool-argument delta): takes the next schedule slot.
    Content,
    /// Framing (block start/stop, finish, usage, `[DONE]`): sent together with the next content event,
    /// or at the finish slot when no content follows.
    Control,
}

#[derive(Clone, Debug)]
pub(crate) struct WireEvent {
    pub(crate) kind: EventKind,
    pub(crate) bytes: Bytes,
}

impl WireEvent {
    pub(crate) fn new(kind: EventKind, bytes: Bytes) -> WireEvent {
        WireEvent { kind, bytes }
    }
}

/// `data: {json}\n\n` (OpenAI chat completions).
pub(crate) fn sse_data(json: &Value) -> Bytes {
    Bytes::from(format!("data: {json}\n\n"))
}

/// `event: NAME\ndata: {json}\n\n` (Anthropic, OpenAI Responses).
pub(crate) fn sse_named(name: &str, json: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {json}\n\n"))
}

/// One NDJSON line.
pub(crate) fn ndjson_line(json: &Value) -> Bytes {
    Bytes::from(format!("{json}\n"))
}

/// Adds `field: "xxxx…"` to a JSON object so that it serializes to about `target` bytes.
/// Clients ignore unknown fields; OpenAI itself pads stream events with an `obfuscation` field.
pub(crate) fn pad_to(value: &mut Value, field: &str, target: Option<usize>) {
    let Some(target) = target else { return };
    let Some(object) = value.as_object_mut() else {
        return;
    };
    let current = Value::Object(object.clone()).to_string().len();
    let overhead = field.len() + 6; // ,"field":""
    if target > current + overhead {
        let filler: String = PADDING_ALPHABET.chars().cycle().take(target - current - overhead).collect();
        object.insert(field.to_owned(), Value::String(filler));
    }
}

const PADDING_ALPHABET: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn padding_reaches_about_the_target() {
        let mut v = json!({"a": 1});
        pad_to(&mut v, "obfuscation", Some(1000));
        let len = v.to_string().len();
        assert!((990..=1010).contains(&len), "{len}");
        let mut small = json!({"a": 1});
        pad_to(&mut small, "obfuscation", Some(3));
        assert_eq!(small, json!({"a": 1}));
    }
}
