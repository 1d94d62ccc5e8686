//! One realtime session's record: its responses, user speech, tool calls, interruptions, errors
//! and the caps it hit (docs/metrics.md, "Realtime voice"); built by [`super::analyzer`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::deflate::DeflateParams;
use super::event::{EventKind, RealtimeAudioFormat, RealtimeUsage, ResponseStatus, TurnDetection};
use super::frame::{FrameCounts, FrameError};
use crate::audio::PredictedPlayout;

pub const REALTIME_VERSION: u32 = 1;

/// Which way bytes went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    ClientToServer,
    ServerToClient,
}

/// Caps, all in bytes or counts per session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RealtimeLimits {
    /// Payload kept of one message (before and after inflating).
    pub max_message_bytes: usize,
    /// Bytes inflated per direction in all (decompression bombs).
    pub max_inflated_bytes: u64,
    /// Responses kept in detail; later ones are counted.
    pub max_responses: usize,
    /// Audio deltas per response kept for the playout prediction.
    pub max_audio_arrivals: usize,
    /// Appends kept for mapping the audio clock (the most recent ones).
    pub max_appends: usize,
    /// Events read per session; past it, frames are still counted.
    pub max_events: u64,
}

impl Default for RealtimeLimits {
    fn default() -> Self {
        Self {
            max_message_bytes: 1 << 20,
            max_inflated_bytes: 256 << 20,
            max_responses: 512,
            max_audio_arrivals: 4096,
            max_appends: 4096,
            max_events: 2_000_000,
        }
    }
}

/// What the handshake said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RealtimeContext {
    /// permessage-deflate, when the 101 response accepted it.
    pub deflate: Option<DeflateParams>,
    pub limits: RealtimeLimits,
}

/// Per direction: frames, events, and what could not be read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionSummary {
    pub frames: FrameCounts,
    pub events: u64,
    /// Text messages whose `type` tokentap does not know (counted, otherwise ignored).
    pub unknown_events: u64,
    /// Text messages that are not JSON events (and not cut by the cap).
    pub malformed_messages: u64,
    pub binary_messages: u64,
    /// Messages cut at the cap and read from their prefix only.
    pub cut_messages: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub frame_error: Option<FrameError>,
    /// Compressed messages that could not be inflated, by reason.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub inflate_errors: BTreeMap<String, u64>,
    /// The bytes ended inside a frame (an abrupt end).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub ended_mid_frame: bool,
    /// The proxy stopped keeping this direction's bytes (the per-session cap or the shared
    /// budget): what follows is counted by the forwarding path but not analysed.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub bytes_not_kept: bool,
}

/// How the session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionEnd {
    /// Both sides sent a close frame.
    CloseHandshake,
    /// One side sent a close frame and the other never answered.
    HalfClosed,
    /// The connection ended without a close frame.
    Abrupt,
}

/// A close frame.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CloseFrame {
    pub by: Direction,
    pub at_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub code: Option<u16>,
}

/// The user's speech before a response, on the audio clock and mapped to the session's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UserSpeech {
    /// Arrival of `speech_started` / `speech_stopped` (ms since t0).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub speech_started_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub speech_stopped_ms: Option<f64>,
    /// As reported, on the audio clock.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub audio_start_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub audio_end_ms: Option<f64>,
    /// Estimated true start and end of speech (padding and silence taken out), mapped to ms
    /// since t0 through the forwarded audio.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub speech_start_estimated_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub speech_end_estimated_ms: Option<f64>,
    /// `input_audio_buffer.committed` (server) and `input_audio_buffer.commit` (client).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub committed_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub commit_sent_ms: Option<f64>,
}

/// A function call of a response and what the client did with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RealtimeToolCall {
    pub call_id: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub name: Option<String>,
    /// `response.function_call_arguments.done` (or the response's end when that was all).
    pub ready_ms: f64,
    /// The client's `conversation.item.create` with the `function_call_output`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output_sent_ms: Option<f64>,
    /// The client's next `response.create` after the output.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub next_response_requested_ms: Option<f64>,
    /// ready → next response asked for: tool run + client work + network.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tool_gap_ms: Option<f64>,
}

/// How a response was cut short.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interruption {
    /// The user started speaking while the response was open or its audio was still playing
    /// (predicted), arrival of `speech_started`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub speech_started_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cancel_sent_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub truncate_sent_ms: Option<f64>,
    /// `conversation.item.truncate`'s `audio_end_ms`: how much of the answer the client played.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub truncated_at_audio_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output_audio_cleared_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub clear_sent_ms: Option<f64>,
}

impl Interruption {
    /// Nothing interrupted the response.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What started a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseTrigger {
    /// Server VAD ended the user's turn.
    ServerVad,
    /// The client sent `response.create` (after tool output, or without VAD).
    Client,
    Unknown,
}

/// One response of the session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RealtimeResponse {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub response_id: Option<String>,
    pub trigger: ResponseTrigger,
    /// The user's speech that led to it (server VAD responses).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub user: Option<UserSpeech>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub create_sent_ms: Option<f64>,
    pub created_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub first_audio_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub first_audio_transcript_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub first_text_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub audio_done_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub done_ms: Option<f64>,
    /// First audio delta − `speech_stopped` arrival (the server's end-of-turn decision).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_to_first_audio_from_speech_stopped_ms: Option<f64>,
    /// First audio delta − the estimated true end of speech.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_to_first_audio_from_speech_end_ms: Option<f64>,
    /// First audio delta − the client's `response.create` (client-triggered responses).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_to_first_audio_from_create_ms: Option<f64>,
    /// `response.created` − `speech_stopped` arrival.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_to_created_from_speech_stopped_ms: Option<f64>,
    /// First audio delta − `response.created`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_to_first_audio_from_created_ms: Option<f64>,
    pub audio_deltas: u64,
    /// Audio received (ms of audio in the output format).
    pub audio_ms: f64,
    /// `[ms since t0, audio ms received]`, at most 256 points.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub received: Vec<(f64, f64)>,
    /// (last audio arrival − first) / (audio ms − the first delta's): below 1, faster than real time.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub real_time_factor: Option<f64>,
    /// A player that starts at the first audio delta's arrival and plays in real time.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub predicted: Option<PredictedPlayout>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub tool_calls: Vec<RealtimeToolCall>,
    #[serde(skip_serializing_if = "Interruption::is_empty", default)]
    pub interruption: Interruption,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub status: Option<ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub status_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub usage: Option<RealtimeUsage>,
    /// Audio deltas past `max_audio_arrivals` (not in the prediction).
    #[serde(skip_serializing_if = "is_zero", default)]
    pub audio_arrivals_dropped: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An `error` event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RealtimeErrorEvent {
    pub at_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub code: Option<String>,
}

/// Caps hit in this session, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealtimeCapsHit {
    pub responses_dropped: u64,
    pub appends_forgotten: u64,
    pub events_not_read: u64,
    pub errors_dropped: u64,
}

/// The analysis of one realtime session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RealtimeSession {
    pub version: u32,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub model: Option<String>,
    pub input_format: RealtimeAudioFormat,
    pub output_format: RealtimeAudioFormat,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub turn_detection: Option<TurnDetection>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub deflate: Option<DeflateParams>,
    pub client: DirectionSummary,
    pub server: DirectionSummary,
    /// Events seen, by kind (both directions).
    pub events: BTreeMap<EventKind, u64>,
    /// Events under beta names.
    pub beta_named_events: u64,
    pub input_audio_ms: f64,
    pub appends: u64,
    pub responses: Vec<RealtimeResponse>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub errors: Vec<RealtimeErrorEvent>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub closes: Vec<CloseFrame>,
    pub end: SessionEnd,
    pub duration_ms: f64,
    pub caps: RealtimeCapsHit,
}
