//! Voice turns: a transcription (speech to text) before the model call that sends its transcript,
//! and speech (text to speech) requests that read the answer out, joined to the turn of that model
//! call. Links, strongest first: the same W3C trace id (when the client sent a `traceparent`), the
//! same turn header, then the text: the transcript is the model call's last user message, and the
//! speech input is the answer or made of its sentences (keyed hashes; no text is kept).
//!
//! Either side may reach the record worker first (a first sentence is often spoken while the answer
//! still streams), so both wait, bounded in count and time, for their partner.

mod breakdown;
mod linker;
mod request;
mod schema;
mod state;
#[cfg(test)]
mod tests;

pub use linker::{ModelCall, VoiceCounters, VoiceLinker};
pub use request::{VoiceKind, VoiceLink, VoiceRequest};
pub use schema::{
    SpeechPlayout, SpeechStage, TranscriptionStage, TurnVoice, VoiceBrowser, VoiceSegment, VoiceSegmentKind,
    USER_SPEECH_END,
};

/// Transcriptions and speech requests waiting for their model call.
const MAX_PENDING: usize = 256;
/// How long they wait.
const PENDING_NS: u64 = 120_000_000_000;
/// Turns remembered for later speech requests.
const MAX_TURNS: usize = 4096;
/// How long a turn takes later speech requests.
const TURN_NS: u64 = 600_000_000_000;
/// Speech requests listed per turn.
pub const MAX_SPEECH_STAGES: usize = 32;
