//! Event classes: the vocabulary every dialect classifier maps provider events onto.

use serde::{Deserialize, Serialize};

/// What one provider event means for the user's wait. See docs/metrics.md, "Event classes".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventClass {
    /// User-visible answer text (including refusal text).
    Answer,
    /// Reasoning / thinking text or summaries.
    Reasoning,
    /// Tool name or tool argument fragments.
    ToolCall,
    /// A usage report without content.
    Usage,
    /// Keep-alives: SSE comments, `ping` events, empty deltas.
    Heartbeat,
    /// Lifecycle events: role-only deltas, block start/stop, `response.created`, ...
    Control,
    /// A mid-stream error event.
    Error,
    /// End-of-stream markers (`[DONE]`, `message_stop`, `response.completed`, ...).
    Done,
}

impl EventClass {
    /// Classes whose non-empty text makes an event content-bearing.
    pub fn is_content(self) -> bool {
        matches!(self, EventClass::Answer | EventClass::Reasoning | EventClass::ToolCall)
    }
}

/// How many events of each class the stream carried, plus frames that could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EventCounts {
    pub answer: u64,
    pub reasoning: u64,
    pub tool_call: u64,
    pub usage: u64,
    pub heartbeat: u64,
    pub control: u64,
    pub error: u64,
    pub done: u64,
    /// Frames whose data was not valid JSON where the dialect expects JSON.
    pub unparsed: u64,
}

impl EventCounts {
    pub(crate) fn add(&mut self, class: EventClass) {
        let slot = match class {
            EventClass::Answer => &mut self.answer,
            EventClass::Reasoning => &mut self.reasoning,
            EventClass::ToolCall => &mut self.tool_call,
            EventClass::Usage => &mut self.usage,
            EventClass::Heartbeat => &mut self.heartbeat,
            EventClass::Control => &mut self.control,
            EventClass::Error => &mut self.error,
            EventClass::Done => &mut self.done,
        };
        *slot += 1;
    }
}
