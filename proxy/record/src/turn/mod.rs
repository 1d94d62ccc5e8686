//! Agent turns rebuilt from the wire: a user waits on a turn, which is one or more model calls
//! (steps) with tool runs between them. The [`TurnTracker`] links each request to the step before
//! it, strongest rule first (docs/metrics.md, "Turns"):
//!
//! 1. the same W3C trace id, when the client sent a `traceparent`;
//! 2. an explicit turn or conversation header (`[turns] turn_header`, `conversation_header`);
//! 3. a tool result whose id matches a tool call of an earlier response (OpenAI `tool_call_id`,
//!    Responses `call_id`, Anthropic `tool_use_id`, Gemini `functionResponse.id`; Gemini results
//!    without ids are matched by name and order inside the conversation);
//! 4. OpenAI Responses `previous_response_id`;
//! 5. the conversation prefix: the request's messages extend an earlier request's messages
//!    (keyed hashes; a prefix shared by several conversations links nothing and is counted).
//!
//! Voice requests (speech to text before the model call, text to speech after it) join the turn
//! through [`VoiceLinker`]: by trace id, turn header, or the transcript and answer text (hashes).
//!
//! A response that finishes without tool calls closes its turn; a new user message starts the next
//! turn of the same conversation. Open turns close after `idle_close`. All state is ids and
//! hashes, bounded in bytes.

mod breakdown;
mod conversation;
pub mod mcp_join;
pub mod mcp_trace;
pub mod schema;
pub mod step;
pub mod tracker;
pub mod voice;

pub use mcp_join::McpCalls;
pub use mcp_trace::{ExecuteToolRef, TurnTool};
pub use schema::*;
pub use step::{derived_id, StepInput, StepToolCall, TurnHeaders, TurnKeys};
pub use tracker::{Placement, TurnConfig, TurnCounters, TurnTracker};
pub use voice::{ModelCall, TurnVoice, VoiceLinker, VoiceRequest};

#[cfg(test)]
mod tests;
