//! What the linker holds of one turn: the voice requests joined to it and the model call's times.

use tokentap_analysis::conversation::TextHashes;

use super::{VoiceLink, VoiceRequest};

#[derive(Debug, Default)]
pub(super) struct VoiceState {
    pub(super) transcription: Option<(VoiceRequest, VoiceLink)>,
    pub(super) model_start_unix_ns: Option<u64>,
    pub(super) first_answer_unix_ns: Option<u64>,
    pub(super) speech: Vec<(VoiceRequest, VoiceLink)>,
    pub(super) speech_not_listed: u32,
    pub(super) answer: Option<TextHashes>,
    pub(super) seen_unix_ns: u64,
    /// The trace ids and turn headers that name this turn in the lookups (removed with it).
    pub(super) keys: Vec<TurnKey>,
}

/// A name a turn is looked up by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TurnKey {
    /// A W3C trace id the client sent.
    Trace(String),
    /// A turn header's value.
    Header(String),
}
