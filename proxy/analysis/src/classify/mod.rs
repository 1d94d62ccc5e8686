//! Dialect classifiers: each maps one frame (SSE event, NDJSON line or whole JSON body) of its
//! provider onto event classes and findings. Shapes follow the providers' official SDK types; unknown
//! event types are tolerated as `control` so that a provider adding events never breaks analysis.

mod anthropic;
mod gemini;
mod ollama;
mod openai_chat;
#[cfg(feature = "parser-comparison")]
pub use openai_chat::parser_comparison;
mod openai_responses;

use std::borrow::Cow;

use serde::Deserialize;

use crate::event::EventClass;
use crate::findings::Findings;
use crate::format::{dialect_from_shape, Dialect};
use crate::timeline::Timeline;

/// A string borrowed from the frame when it has no escapes. (serde only borrows `Cow` fields
/// directly, not inside `Option`, hence the newtype.)
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(PartialEq))]
#[serde(transparent)]
pub(crate) struct Text<'a>(#[serde(borrow)] pub(crate) Cow<'a, str>);

impl Text<'_> {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

pub(crate) fn text<'s>(value: &'s Option<Text<'_>>) -> Option<&'s str> {
    value.as_ref().map(Text::as_str)
}

/// One frame to classify.
pub(crate) struct Frame<'a> {
    /// SSE `event:` field, if any.
    pub(crate) event_type: Option<&'a str>,
    pub(crate) data: &'a str,
    /// The frame is a whole non-streaming response body.
    pub(crate) whole_body: bool,
}

/// Where a classifier writes: the timeline (classes, text) and the findings (ids, usage, ...).
pub(crate) struct Out<'a> {
    pub(crate) timeline: &'a mut Timeline,
    pub(crate) findings: &'a mut Findings,
}

impl Out<'_> {
    pub(crate) fn piece(&mut self, class: EventClass, text: &str) {
        self.timeline.piece(class, text);
    }

    /// Content piece whose empty text means "keep-alive" (an empty delta).
    pub(crate) fn content_or_heartbeat(&mut self, class: EventClass, text: &str) {
        if text.is_empty() {
            self.piece(EventClass::Heartbeat, "");
        } else {
            self.piece(class, text);
        }
    }

    /// Adds to a tool call entry (id, name, a piece of its arguments) and stamps it ready as of
    /// this frame.
    pub(crate) fn tool_call(&mut self, slot: Option<usize>, id: Option<&str>, name: Option<&str>, arguments: &str) {
        let ready = (self.timeline.t_ns(), self.timeline.end_offset());
        self.findings.update_tool_call(slot, id, name, arguments, ready);
    }

    pub(crate) fn error(&mut self, error: &serde_json::Value) {
        let t = self.timeline.t_ns();
        self.findings.error(t, error);
        self.piece(EventClass::Error, "");
    }
}

/// The per-stream classifier state.
#[derive(Debug)]
pub(crate) enum Classifier {
    /// Dialect not known yet: decided by the first JSON object.
    Undecided,
    OpenaiChat(openai_chat::OpenaiChat),
    OpenaiResponses(openai_responses::OpenaiResponses),
    Anthropic(anthropic::Anthropic),
    Gemini(gemini::Gemini),
    Ollama(ollama::Ollama),
    Generic,
}

impl Classifier {
    pub(crate) fn new(dialect: Option<Dialect>) -> Self {
        match dialect {
            None => Classifier::Undecided,
            Some(d) => Self::for_dialect(d),
        }
    }

    fn for_dialect(dialect: Dialect) -> Self {
        match dialect {
            Dialect::OpenaiChat => Classifier::OpenaiChat(Default::default()),
            Dialect::OpenaiResponses => Classifier::OpenaiResponses(Default::default()),
            Dialect::AnthropicMessages => Classifier::Anthropic(Default::default()),
            Dialect::Gemini => Classifier::Gemini(Default::default()),
            Dialect::Ollama => Classifier::Ollama(Default::default()),
            Dialect::Generic => Classifier::Generic,
        }
    }

    pub(crate) fn dialect(&self) -> Option<Dialect> {
        match self {
            Classifier::Undecided => None,
            Classifier::OpenaiChat(_) => Some(Dialect::OpenaiChat),
            Classifier::OpenaiResponses(_) => Some(Dialect::OpenaiResponses),
            Classifier::Anthropic(_) => Some(Dialect::AnthropicMessages),
            Classifier::Gemini(_) => Some(Dialect::Gemini),
            Classifier::Ollama(_) => Some(Dialect::Ollama),
            Classifier::Generic => Some(Dialect::Generic),
        }
    }

    /// Classifies one frame. A frame that yields no piece is counted as `control`.
    pub(crate) fn classify(&mut self, frame: &Frame<'_>, out: &mut Out<'_>) {
        let data = frame.data.trim();
        if matches!(self, Classifier::Undecided) {
            match serde_json::from_str::<serde_json::Value>(data) {
                Ok(value @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => {
                    *self = Self::for_dialect(dialect_from_shape(&value));
                }
                _ => {
                    // Not JSON yet (e.g. "[DONE]" or text): judge it generically, decide later.
                    classify_generic(data, out);
                    return;
                }
            }
        }
        let parsed = match self {
            Classifier::Undecided | Classifier::Generic => {
                classify_generic(data, out);
                Parsed::Yes
            }
            Classifier::OpenaiChat(c) => c.classify(data, out),
            Classifier::OpenaiResponses(c) => c.classify(frame.event_type, data, frame.whole_body, out),
            Classifier::Anthropic(c) => c.classify(frame.event_type, data, out),
            Classifier::Gemini(c) => c.classify(data, out),
            Classifier::Ollama(c) => c.classify(data, out),
        };
        match parsed {
            Parsed::Yes => {
                if out.timeline.pieces_in_frame() == 0 {
                    out.piece(EventClass::Control, "");
                }
            }
            Parsed::ShapeMismatch => out.piece(EventClass::Control, ""),
            Parsed::NotJson => out.timeline.unparsed(),
        }
    }
}

/// Unknown dialect: timing only. `[DONE]` still marks the end.
fn classify_generic(data: &str, out: &mut Out<'_>) {
    if data == "[DONE]" {
        out.piece(EventClass::Done, "");
    } else {
        out.piece(EventClass::Control, "");
    }
}

/// Whether a frame could be read.
pub(crate) enum Parsed {
    Yes,
    /// Valid JSON, but not a shape this dialect knows: tolerated as `control`.
    ShapeMismatch,
    /// Not JSON where JSON was expected.
    NotJson,
}

/// Distinguishes "valid JSON of another shape" from "not JSON" after a typed parse failed.
pub(crate) fn parse_failure(data: &str) -> Parsed {
    if serde_json::from_str::<serde::de::IgnoredAny>(data).is_ok() {
        Parsed::ShapeMismatch
    } else {
        Parsed::NotJson
    }
}

/// Compact JSON text of tool arguments given as an object (Gemini, Ollama, Anthropic non-streaming).
pub(crate) fn json_text(value: Option<&serde_json::Value>) -> String {
    value.map(|v| if let serde_json::Value::String(s) = v { s.clone() } else { v.to_string() }).unwrap_or_default()
}
