//! Reading JSON-RPC 2.0 messages as MCP sends them: one object, or an array of them (a batch),
//! as a request body, a JSON response body, or the `data` of one server-sent event.
//!
//! Only the fields MCP operations are recorded by are read (method, id, the tool / prompt name
//! or resource URI, the progress token, `_meta`'s trace context and protocol version, `isError`,
//! the JSON-RPC error); everything else is skipped without being kept. A batch is read one element
//! at a time, and at most `max_messages` elements are read at all: the rest are only counted.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// A JSON-RPC id (or progress token) in canonical form: string and integer spellings of one
/// number are the same id (the Python and TypeScript SDKs treat `"7"` and `7` alike).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CanonicalId(pub(crate) String);

/// The longest text kept from the wire for a method, name, URI or error message.
pub(crate) const MAX_TEXT_CHARS: usize = 256;

pub(crate) fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT_CHARS) {
        Some((cut, _)) => text[..cut].to_string(),
        None => text.to_string(),
    }
}

/// An id as read: its string form (`jsonrpc.request.id`) and its canonical key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WireId {
    pub(crate) text: String,
    pub(crate) key: CanonicalId,
}

impl WireId {
    fn from_raw(raw: &RawValue) -> Option<WireId> {
        let json = raw.get().trim();
        if json == "null" {
            return None;
        }
        if let Ok(s) = serde_json::from_str::<Cow<'_, str>>(json) {
            let text = bounded(&s);
            // "7" and 7 are one id.
            let key = match text.parse::<i64>() {
                Ok(n) => n.to_string(),
                Err(_) => format!("s:{text}"),
            };
            return Some(WireId { key: CanonicalId(key), text });
        }
        let number = serde_json::from_str::<serde_json::Number>(json).ok()?;
        let text = bounded(&number.to_string());
        let key = match number.as_i64() {
            Some(n) => n.to_string(),
            None => match number.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => (f as i64).to_string(),
                _ => format!("n:{text}"),
            },
        };
        Some(WireId { text, key: CanonicalId(key) })
    }
}

#[derive(Deserialize, Default)]
struct Meta<'a> {
    #[serde(rename = "progressToken", borrow, default)]
    progress_token: Option<&'a RawValue>,
    #[serde(default)]
    traceparent: Option<Cow<'a, str>>,
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", default)]
    protocol_version: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct Params<'a> {
    #[serde(default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    uri: Option<Cow<'a, str>>,
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<Meta<'a>>,
    #[serde(rename = "protocolVersion", default)]
    protocol_version: Option<Cow<'a, str>>,
    /// `tools/call`, `prompts/get`.
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    /// `notifications/progress`.
    #[serde(rename = "progressToken", borrow, default)]
    progress_token: Option<&'a RawValue>,
    /// `notifications/cancelled`.
    #[serde(rename = "requestId", borrow, default)]
    request_id: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct ResultFields<'a> {
    #[serde(rename = "isError", default)]
    is_error: Option<bool>,
    #[serde(rename = "protocolVersion", default)]
    protocol_version: Option<Cow<'a, str>>,
    #[serde(rename = "resultType", default)]
    result_type: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ErrorFields<'a> {
    #[serde(default)]
    code: Option<i64>,
    #[serde(default)]
    message: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(default)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<Params<'a>>,
    #[serde(borrow, default)]
    result: Option<ResultFields<'a>>,
    #[serde(borrow, default)]
    error: Option<ErrorFields<'a>>,
}

/// A JSON-RPC error object as recorded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WireError {
    pub(crate) code: Option<i64>,
    pub(crate) message: String,
}

/// One JSON-RPC message, reduced to what operations are recorded by.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Message {
    Request {
        id: WireId,
        method: String,
        /// `params.name` (tools/call, prompts/get).
        name: Option<String>,
        /// `params.uri` (resources/read, resources/subscribe).
        uri: Option<String>,
        progress_token: Option<CanonicalId>,
        traceparent: Option<String>,
        /// `_meta`'s protocol version (2026-07-28), else `params.protocolVersion` (initialize).
        protocol_version: Option<String>,
        /// `tools/call`: `params.arguments` as parsed values, hashed (absent: `{}`).
        arguments_hash: Option<u64>,
        bytes: u64,
    },
    Notification {
        method: String,
        /// `notifications/progress`: the token.
        progress_token: Option<CanonicalId>,
        /// `notifications/cancelled`: the request it cancels.
        cancelled: Option<WireId>,
        protocol_version: Option<String>,
    },
    Response {
        /// `None` for an error answering an unreadable request.
        id: Option<WireId>,
        is_error: bool,
        error: Option<WireError>,
        /// `result.protocolVersion` (initialize).
        protocol_version: Option<String>,
        /// `result.resultType` other than `complete` (2026-07-28: `input_required`).
        result_type: Option<String>,
        bytes: u64,
    },
}

/// What reading one body or event found.
#[derive(Debug, Default)]
pub(crate) struct Read {
    pub(crate) messages: Vec<Message>,
    /// Not JSON, not JSON-RPC 2.0, or neither request, notification nor response.
    pub(crate) malformed: u64,
    /// Batch elements past `max_messages`: counted, not read.
    pub(crate) not_read: u64,
    /// The body or event was an array.
    pub(crate) batch: bool,
}

fn message(raw: &RawValue) -> Option<Message> {
    let wire: Wire<'_> = serde_json::from_str(raw.get()).ok()?;
    if wire.jsonrpc.as_deref() != Some("2.0") {
        return None;
    }
    let bytes = raw.get().len() as u64;
    let params = wire.params.unwrap_or_default();
    let meta = params.meta.unwrap_or_default();
    let meta_version = meta.protocol_version.as_deref().map(bounded);
    match (wire.method, wire.id.and_then(WireId::from_raw)) {
        (Some(method), Some(id)) => Some(Message::Request {
            id,
            method: bounded(&method),
            name: params.name.as_deref().map(bounded),
            uri: params.uri.as_deref().map(bounded),
            progress_token: meta.progress_token.and_then(WireId::from_raw).map(|t| t.key),
            traceparent: meta.traceparent.as_deref().filter(|t| t.len() <= 64).map(str::to_string),
            protocol_version: meta_version.or_else(|| params.protocol_version.as_deref().map(bounded)),
            arguments_hash: (method == "tools/call")
                .then(|| crate::conversation::arguments_hash(params.arguments.map_or("", |a| a.get())))
                .flatten(),
            bytes,
        }),
        (Some(method), None) if wire.id.is_none() => Some(Message::Notification {
            method: bounded(&method),
            progress_token: params.progress_token.and_then(WireId::from_raw).map(|t| t.key),
            cancelled: params.request_id.and_then(WireId::from_raw),
            protocol_version: meta_version,
        }),
        (None, id) if wire.result.is_some() || wire.error.is_some() => {
            let result = wire.result.unwrap_or_default();
            Some(Message::Response {
                id,
                is_error: result.is_error == Some(true),
                error: wire.error.map(|e| WireError {
                    code: e.code,
                    message: e.message.as_deref().map(bounded).unwrap_or_default(),
                }),
                protocol_version: result.protocol_version.as_deref().map(bounded),
                result_type: result.result_type.as_deref().filter(|t| *t != "complete").map(bounded),
                bytes,
            })
        }
        _ => None,
    }
}

/// Reads the elements of a batch one by one: the first `max` as messages, the rest only counted.
struct Batch<'r> {
    read: &'r mut Read,
    max: usize,
}

impl<'de> Visitor<'de> for Batch<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC batch")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            if self.read.messages.len() < self.max {
                let Some(raw) = seq.next_element::<&'de RawValue>()? else { break };
                match message(raw) {
                    Some(m) => self.read.messages.push(m),
                    None => self.read.malformed += 1,
                }
            } else {
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    break;
                }
                self.read.not_read += 1;
            }
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Batch<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

/// Reads one body or event: a message, or a batch of at most `max_messages` read messages. An
/// empty input reads nothing; anything unreadable counts one malformed message.
pub(crate) fn read(bytes: &[u8], max_messages: usize) -> Read {
    let mut read = Read::default();
    let Some(first) = bytes.iter().position(|b| !b.is_ascii_whitespace()) else {
        return read;
    };
    if bytes[first] == b'[' {
        read.batch = true;
        let mut de = serde_json::Deserializer::from_slice(&bytes[first..]);
        let ok = Batch { read: &mut read, max: max_messages }.deserialize(&mut de).is_ok() && de.end().is_ok();
        if !ok {
            read.malformed += 1;
        }
        return read;
    }
    match serde_json::from_slice::<&RawValue>(&bytes[first..]).ok().and_then(message) {
        Some(m) if max_messages > 0 => read.messages.push(m),
        Some(_) => read.not_read += 1,
        None => read.malformed += 1,
    }
    read
}
