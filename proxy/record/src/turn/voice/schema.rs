//! The voice part of a turn record (`TurnVoice`, docs/records.md) and its stages.

use serde::{Deserialize, Serialize};

use super::VoiceLink;

/// The voice part of a turn record. Times are ms since `t0_unix_ns`: the transcription request's
/// start when there is one, else the turn's first model call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnVoice {
    pub t0_unix_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcription: Option<TranscriptionStage>,
    /// The model call's start (the transcript sent on), and its first answer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_start_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_answer_token_ms: Option<f64>,
    #[serde(default)]
    pub speech: Vec<SpeechStage>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub speech_not_listed: u32,
    /// The earliest first audible sample of the speech requests: voice to ear, as far as the wire
    /// shows (the browser's playout is later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_audible_ms: Option<f64>,
    /// The user's end of speech, from the browser probe's `user_speech_end` mark on the
    /// transcription request (negative: before that request started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_speech_end_ms: Option<f64>,
    /// When the first speech request's first audible sample was heard in the browser.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heard_ms: Option<f64>,
    /// End of speech → heard: the wait the user had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voice_to_voice_ms: Option<f64>,
    /// The wait in order, each from the end of the one before: after the end of speech, upload,
    /// transcription, to the model call, to the first answer token, to the first speech request,
    /// to its first audio byte, to its first audible sample, to when it was heard. Stages that are
    /// unknown are left out.
    #[serde(default)]
    pub segments: Vec<VoiceSegment>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptionStage {
    pub request_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub link: VoiceLink,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_end_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_delta_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_done_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_audio_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeechStage {
    pub request_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub link: VoiceLink,
    pub start_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_audio_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_audible_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leading_silence_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real_time_factor: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_underruns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_starved_ms: Option<f64>,
    /// What the browser probe saw of this answer's playback, when its report joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub playout: Option<SpeechPlayout>,
}

/// One speech request's playback in the browser (ms since the voice part's t0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeechPlayout {
    /// When the playback's first sample left the output device (the probe's audio start).
    pub started_ms: f64,
    /// When its first audible sample did: the start plus the answer's leading silence (the
    /// onset's audio position, found on the wire; the start itself when the onset is unknown).
    pub heard_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<f64>,
    /// Observed in the page: times playback ran dry, and for how long in total.
    pub underruns: u64,
    pub starved_ms: f64,
    /// Stopped before its end (barge-in).
    pub interrupted: bool,
    /// The browser clock's uncertainty against tokentap's (±).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_uncertainty_ms: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VoiceSegmentKind {
    /// The user's end of speech (browser) → the transcription request's start: the app's own
    /// end-of-speech detection, encoding and sending.
    AfterSpeech,
    /// The transcription request's start → its body's end.
    Upload,
    /// Upload end → transcript done.
    Transcription,
    /// Transcript done → the model call's start (the app's own work and network).
    ToModel,
    /// Model call start → first answer token.
    FirstToken,
    /// First answer token → the first speech request's start (sentence buffering in the app).
    ToSpeech,
    /// Speech request start → its first audio byte.
    SpeechFirstByte,
    /// First audio byte → first audible sample (leading silence, and waiting for audio).
    LeadingSilence,
    /// First audible sample (as the wire shows it) → heard in the browser: delivery, decoding,
    /// the app's scheduling and the output device.
    Playout,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VoiceSegment {
    pub kind: VoiceSegmentKind,
    pub start_ms: f64,
    pub end_ms: f64,
}

/// What the browser probe joined to one voice request: the request's t0 and its browser section.
pub type VoiceBrowser = (u64, crate::browser::BrowserTimeline);

/// The name of the probe mark that says when the user stopped speaking.
pub const USER_SPEECH_END: &str = "user_speech_end";
