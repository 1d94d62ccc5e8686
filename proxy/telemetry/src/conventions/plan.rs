//! Span descriptions as plain data (`SpanPlan`, its events and attribute values), the options
//! they are made with, and the helpers that derive stable ids and times.

use crate::settings::{BackendProfile, LlmSpan};

// ---------------------------------------------------------------------------------------------
// Spans.
// ---------------------------------------------------------------------------------------------

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    F64(f64),
    Bool(bool),
    StrArray(Vec<String>),
}

impl AttrValue {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }
}

pub type Attributes = Vec<(&'static str, AttrValue)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Client,
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpanStatus {
    Unset,
    Error(String),
}

/// A span event with its absolute time.
#[derive(Debug, Clone, PartialEq)]
pub struct EventPlan {
    pub name: &'static str,
    pub time_unix_ns: u64,
    pub attributes: Attributes,
}

/// One span, fully described: ids, name, times (ns since the Unix epoch), attributes, events.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanPlan {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub sampled: bool,
    pub name: String,
    pub kind: SpanKind,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub attributes: Attributes,
    pub events: Vec<EventPlan>,
    /// Events left out to stay within the budget.
    pub dropped_events: u32,
    pub status: SpanStatus,
}

impl SpanPlan {
    pub fn attribute(&self, key: &str) -> Option<&AttrValue> {
        self.attributes.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// Choices that shape the spans.
#[derive(Debug, Clone, Copy)]
pub struct SpanOptions {
    /// Most events on one span. Chunks beyond it are summarised: the first half and the last half
    /// of the budget are kept, the middle is counted in `tokentap.events_dropped`.
    pub max_events_per_span: usize,
    /// Attach the captured bodies (only present when `privacy.capture_content` is on too).
    pub capture_content: bool,
    /// Longest captured body attached, in bytes.
    pub max_content_attribute_bytes: usize,
    /// Add `langfuse.observation.completion_start_time` (the first answer token, RFC 3339 UTC) to
    /// the request span: Langfuse reads the time to first token from it and from nothing else.
    pub completion_start_time: bool,
    /// Which span backends count as the LLM call when the request continues a caller's trace.
    pub llm_span: LlmSpan,
}

impl Default for SpanOptions {
    fn default() -> Self {
        Self {
            max_events_per_span: 64,
            capture_content: false,
            max_content_attribute_bytes: 16 << 10,
            completion_start_time: false,
            llm_span: LlmSpan::Tokentap,
        }
    }
}

impl SpanOptions {
    /// The span choices an export profile makes.
    pub fn for_profile(mut self, profile: BackendProfile, llm_span: LlmSpan) -> Self {
        self.completion_start_time = profile == BackendProfile::Langfuse;
        self.llm_span = llm_span;
        self
    }
}

/// Names of the phase spans (also the value of `tokentap.phase`).
pub mod phase {
    pub const PROVIDER_WAIT: &str = "provider_wait";
    pub const REASONING: &str = "reasoning";
    pub const ANSWER: &str = "answer";
    pub const TOOL_CALL: &str = "tool_call";
    pub const DELIVERY: &str = "delivery";
}

/// Event names.
pub mod event {
    pub const BROWSER_MARK: &str = "tokentap.browser.mark";
    pub const FIRST_PAINT: &str = "tokentap.browser.first_paint";
    pub const LONG_FRAME: &str = "tokentap.browser.long_frame";
    pub const CHUNK: &str = "tokentap.chunk";
    pub const STALL: &str = "tokentap.stall";
    pub const STREAM_ERROR: &str = "tokentap.stream_error";
    pub const WEBRTC_EVENT: &str = "tokentap.webrtc.data_channel_event";
}

pub(super) fn ms_to_ns(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1e6).round() as u64
    } else {
        0
    }
}

pub(super) fn hex_bytes<const N: usize>(hex: &str) -> Option<[u8; N]> {
    if hex.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A child span's id, derived from the request's span id and the phase name, so the same record
/// always yields the same ids (a replayed export is a duplicate, not a second span). FNV-1a.
pub(super) fn child_span_id(parent: [u8; 8], phase: &str) -> [u8; 8] {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parent.iter().chain(phase.as_bytes()) {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    if hash == 0 {
        hash = 1;
    }
    hash.to_be_bytes()
}
