//! One realtime session, from the stamped bytes of both directions to its responses
//! (docs/metrics.md, "Realtime voice").
//!
//! The audio clock: server VAD reports speech on the input audio stream's own clock
//! (`audio_start_ms`, `audio_end_ms`: milliseconds of audio appended since the session began).
//! tokentap knows when it forwarded each `input_audio_buffer.append` and how much audio it held
//! (format from the session config; PCM 24 kHz 16-bit mono by default), so an audio position maps
//! to the time its append passed the proxy, less the audio after it in that append (a live
//! microphone sends each piece as soon as it is captured), but never earlier than the previous
//! append (the sample was not there yet). Audio sent faster than real time (a file) maps to when
//! it was forwarded, which is then the best that can be said.
//!
//! Server VAD's `speech_started.audio_start_ms` includes `prefix_padding_ms` of audio before the
//! speech, and `speech_stopped.audio_end_ms` comes `silence_duration_ms` after the speech ended
//! (the silence that decided the turn). The estimated true speech start and end take them out.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::deflate::{DeflateParams, InflateError, Inflater};
use super::event::{
    sniff_type, EventKind, RealtimeAudioFormat, RealtimeEvent, RealtimeUsage, ResponseStatus, TurnDetection,
};
use super::frame::{Decoded, FrameCounts, FrameDecoder, FrameError, Opcode};
use crate::audio::PredictedPlayout;

/// The version of the `realtime` object's layout (docs/records.md).
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

#[derive(Clone, Copy, Debug)]
struct Append {
    audio_start_ms: f64,
    audio_end_ms: f64,
    t_ns: u64,
}

struct DirectionState {
    decoder: FrameDecoder,
    inflater: Option<Inflater>,
    summary: DirectionSummary,
}

struct OpenResponse {
    out: RealtimeResponse,
    arrivals: Vec<crate::audio::playout::Arrival>,
    audio_bytes: u64,
    first_delta_bytes: u64,
    last_audio_ns: u64,
    first_audio_ns: Option<u64>,
    received_stride: u64,
    item_ids: Vec<String>,
}

/// Builds a [`RealtimeSession`] from both directions' pieces, fed in arrival order.
pub struct RealtimeAnalyzer {
    limits: RealtimeLimits,
    deflate: Option<DeflateParams>,
    client: DirectionState,
    server: DirectionState,
    decoded: Vec<Decoded>,
    session_id: Option<String>,
    model: Option<String>,
    input_format: RealtimeAudioFormat,
    output_format: RealtimeAudioFormat,
    turn_detection: Option<TurnDetection>,
    events: BTreeMap<EventKind, u64>,
    events_read: u64,
    beta_named_events: u64,
    input_audio_ms: f64,
    appends: VecDeque<Append>,
    appends_total: u64,
    responses: Vec<OpenResponse>,
    by_id: HashMap<String, usize>,
    pending_user: Option<UserSpeech>,
    pending_create_ms: Option<f64>,
    errors: Vec<RealtimeErrorEvent>,
    closes: Vec<CloseFrame>,
    caps: RealtimeCapsHit,
    last_ns: u64,
}

fn ms(t_ns: u64) -> f64 {
    t_ns as f64 / 1e6
}

impl RealtimeAnalyzer {
    pub fn new(ctx: RealtimeContext) -> Self {
        let limits = ctx.limits;
        let dir = |takeover_off: bool| DirectionState {
            decoder: FrameDecoder::new(limits.max_message_bytes, ctx.deflate.is_some()),
            inflater: ctx
                .deflate
                .map(|_| Inflater::new(!takeover_off, limits.max_message_bytes, limits.max_inflated_bytes)),
            summary: DirectionSummary::default(),
        };
        let d = ctx.deflate.unwrap_or_default();
        Self {
            limits,
            deflate: ctx.deflate,
            client: dir(d.client_no_context_takeover),
            server: dir(d.server_no_context_takeover),
            decoded: Vec::new(),
            session_id: None,
            model: None,
            input_format: RealtimeAudioFormat::default(),
            output_format: RealtimeAudioFormat::default(),
            turn_detection: None,
            events: BTreeMap::new(),
            events_read: 0,
            beta_named_events: 0,
            input_audio_ms: 0.0,
            appends: VecDeque::new(),
            appends_total: 0,
            responses: Vec::new(),
            by_id: HashMap::new(),
            pending_user: None,
            pending_create_ms: None,
            errors: Vec::new(),
            closes: Vec::new(),
            caps: RealtimeCapsHit::default(),
            last_ns: 0,
        }
    }

    /// One piece of one direction, stamped `t_ns` (ns since t0). Pieces of both directions must
    /// come in the order they were stamped.
    pub fn push(&mut self, direction: Direction, t_ns: u64, bytes: &[u8]) {
        self.last_ns = self.last_ns.max(t_ns);
        let mut decoded = std::mem::take(&mut self.decoded);
        decoded.clear();
        self.dir(direction).decoder.push(bytes, t_ns, &mut decoded);
        for d in decoded.drain(..) {
            match d {
                Decoded::Control(c) => {
                    if c.opcode == Opcode::Close {
                        self.closes.push(CloseFrame { by: direction, at_ms: ms(c.t_ns), code: c.close_code() });
                    }
                }
                Decoded::Message(m) => self.message(direction, m),
            }
        }
        self.decoded = decoded;
    }

    fn dir(&mut self, d: Direction) -> &mut DirectionState {
        match d {
            Direction::ClientToServer => &mut self.client,
            Direction::ServerToClient => &mut self.server,
        }
    }

    fn message(&mut self, direction: Direction, m: super::frame::Message) {
        let t_ns = m.last_t_ns;
        let state = self.dir(direction);
        // Compressed binary messages are inflated too: with context takeover, the next message's
        // window depends on them.
        let (payload, cut, total_len) = if m.compressed {
            let Some(inflater) = state.inflater.as_mut() else { return };
            match inflater.inflate(&m.payload, !m.truncated) {
                Ok(i) => (i.payload, i.truncated || m.truncated, i.len),
                Err(e) => {
                    let key = match e {
                        InflateError::Corrupt => "corrupt",
                        InflateError::ContextLost => "context_lost",
                        InflateError::BudgetSpent => "budget_spent",
                    };
                    *state.summary.inflate_errors.entry(key.to_string()).or_default() += 1;
                    return;
                }
            }
        } else {
            let len = m.payload_len;
            (m.payload, m.truncated, len)
        };
        if m.opcode == Opcode::Binary {
            state.summary.binary_messages += 1;
            return;
        }
        if self.events_read >= self.limits.max_events {
            self.caps.events_not_read += 1;
            return;
        }
        self.events_read += 1;
        let state = self.dir(direction);
        let event = if cut {
            state.summary.cut_messages += 1;
            // A cut message is read from its prefix: its type, and for audio its size estimated
            // from the whole message's length (the base64 is nearly all of it).
            match sniff_type(&payload) {
                Some(kind) => {
                    let mut ev = RealtimeEvent { kind: Some(kind), ..Default::default() };
                    if matches!(kind, EventKind::InputAudioBufferAppend | EventKind::OutputAudioDelta) {
                        ev.audio_bytes = Some(total_len.saturating_sub(128) * 3 / 4);
                    }
                    ev
                }
                None => {
                    state.summary.malformed_messages += 1;
                    return;
                }
            }
        } else {
            match RealtimeEvent::parse(&payload) {
                Ok(ev) => ev,
                Err(_) => {
                    state.summary.malformed_messages += 1;
                    return;
                }
            }
        };
        state.summary.events += 1;
        let Some(kind) = event.kind else {
            state.summary.unknown_events += 1;
            return;
        };
        *self.events.entry(kind).or_default() += 1;
        if event.beta_name {
            self.beta_named_events += 1;
        }
        self.event(kind, event, t_ns);
    }

    fn event(&mut self, kind: EventKind, ev: RealtimeEvent, t_ns: u64) {
        let t = ms(t_ns);
        match kind {
            EventKind::SessionUpdate | EventKind::SessionCreated | EventKind::SessionUpdated => {
                if let Some(s) = ev.session {
                    self.model = s.model.or(self.model.take());
                    self.session_id = s.session_id.or(self.session_id.take());
                    self.input_format = s.input_format.unwrap_or(self.input_format);
                    self.output_format = s.output_format.unwrap_or(self.output_format);
                    self.turn_detection = s.turn_detection.or(self.turn_detection);
                }
            }
            EventKind::InputAudioBufferAppend => {
                let bytes = ev.audio_bytes.unwrap_or(0);
                let start = self.input_audio_ms;
                self.input_audio_ms += self.input_format.ms_of(bytes);
                self.appends_total += 1;
                if self.appends.len() >= self.limits.max_appends {
                    self.appends.pop_front();
                    self.caps.appends_forgotten += 1;
                }
                self.appends.push_back(Append { audio_start_ms: start, audio_end_ms: self.input_audio_ms, t_ns });
            }
            EventKind::InputAudioBufferCommit => {
                self.pending_user.get_or_insert_with(UserSpeech::default).commit_sent_ms = Some(t)
            }
            EventKind::SpeechStarted => {
                // Speech while a response is open (or its audio predicted to still play) interrupts it.
                if let Some(r) = self.responses.last_mut() {
                    let playing = r.out.done_ms.is_none() || predicted_end(r, self.output_format) > t;
                    if playing && r.out.interruption.speech_started_ms.is_none() {
                        r.out.interruption.speech_started_ms = Some(t);
                    }
                }
                let padding = self.turn_detection.and_then(|d| d.prefix_padding_ms).unwrap_or(0.0);
                let estimated = ev.audio_start_ms.and_then(|a| self.wall_of_audio(a + padding));
                self.pending_user = Some(UserSpeech {
                    speech_started_ms: Some(t),
                    audio_start_ms: ev.audio_start_ms,
                    speech_start_estimated_ms: estimated,
                    ..Default::default()
                });
            }
            EventKind::SpeechStopped => {
                let silence = self.turn_detection.and_then(|d| d.silence_duration_ms).unwrap_or(0.0);
                let estimated = ev.audio_end_ms.and_then(|a| self.wall_of_audio((a - silence).max(0.0)));
                let u = self.pending_user.get_or_insert_with(UserSpeech::default);
                u.speech_stopped_ms = Some(t);
                u.audio_end_ms = ev.audio_end_ms;
                u.speech_end_estimated_ms = estimated;
            }
            EventKind::InputAudioBufferCommitted => {
                self.pending_user.get_or_insert_with(UserSpeech::default).committed_ms = Some(t)
            }
            EventKind::ResponseCreate => self.pending_create_ms = Some(t),
            EventKind::ResponseCreated => self.response_created(ev.response_id, t),
            EventKind::OutputAudioDelta => {
                let limit = self.limits.max_audio_arrivals;
                let format = self.output_format;
                if let Some(r) = self.response_for(ev.response_id.as_deref()) {
                    r.audio_delta(t_ns, ev.audio_bytes.unwrap_or(0), format, limit);
                }
            }
            EventKind::OutputAudioDone => {
                if let Some(r) = self.response_for(ev.response_id.as_deref()) {
                    r.out.audio_done_ms.get_or_insert(t);
                }
            }
            EventKind::OutputAudioTranscriptDelta => {
                if let Some(r) = self.response_for(ev.response_id.as_deref()) {
                    r.out.first_audio_transcript_ms.get_or_insert(t);
                }
            }
            EventKind::OutputTextDelta => {
                if let Some(r) = self.response_for(ev.response_id.as_deref()) {
                    r.out.first_text_ms.get_or_insert(t);
                }
            }
            EventKind::ResponseOutputItemAdded => {
                if let (Some(r), Some(id)) = (self.response_for(ev.response_id.as_deref()), ev.item_id) {
                    if r.item_ids.len() < 16 {
                        r.item_ids.push(id);
                    }
                }
            }
            EventKind::FunctionCallArgumentsDone => {
                if let (Some(r), Some(call_id)) = (self.response_for(ev.response_id.as_deref()), ev.call_id) {
                    r.call_ready(call_id, ev.name, t);
                }
            }
            EventKind::ConversationItemCreate if ev.function_call_output => {
                if let Some(call_id) = ev.call_id {
                    if let Some(c) = self
                        .responses
                        .iter_mut()
                        .rev()
                        .take(16)
                        .flat_map(|r| r.out.tool_calls.iter_mut())
                        .find(|c| c.call_id == call_id)
                    {
                        c.output_sent_ms.get_or_insert(t);
                    }
                }
            }
            EventKind::ResponseCancel => {
                if let Some(r) = self.response_for(ev.response_id.as_deref()) {
                    r.out.interruption.cancel_sent_ms.get_or_insert(t);
                }
            }
            EventKind::ConversationItemTruncate => {
                let idx = ev
                    .item_id
                    .as_deref()
                    .and_then(|id| self.responses.iter().rposition(|r| r.item_ids.iter().any(|i| i == id)));
                let r = match idx {
                    Some(i) => self.responses.get_mut(i),
                    None => self.responses.last_mut(),
                };
                if let Some(r) = r {
                    r.out.interruption.truncate_sent_ms.get_or_insert(t);
                    r.out.interruption.truncated_at_audio_ms = ev.audio_end_ms;
                }
            }
            EventKind::OutputAudioBufferClear => {
                if let Some(r) = self.responses.last_mut() {
                    r.out.interruption.clear_sent_ms.get_or_insert(t);
                }
            }
            EventKind::OutputAudioBufferCleared => {
                if let Some(r) = self.response_for(ev.response_id.as_deref()) {
                    r.out.interruption.output_audio_cleared_ms.get_or_insert(t);
                }
            }
            EventKind::ResponseDone => {
                if let Some(r) = self.response_for(ev.response_id.as_deref()) {
                    r.out.done_ms = Some(t);
                    r.out.status = ev.status;
                    r.out.status_reason = ev.status_reason;
                    r.out.usage = ev.usage;
                    for (call_id, name) in ev.output_calls {
                        r.call_ready(call_id, Some(name), t);
                    }
                }
            }
            EventKind::Error => {
                if self.errors.len() < 32 {
                    self.errors.push(RealtimeErrorEvent { at_ms: t, code: ev.error_code });
                } else {
                    self.caps.errors_dropped += 1;
                }
            }
            _ => {}
        }
        // The client's response.create after tool output closes the tool gap.
        if kind == EventKind::ResponseCreate {
            for c in self.responses.iter_mut().rev().take(16).flat_map(|r| r.out.tool_calls.iter_mut()) {
                if c.output_sent_ms.is_some() && c.next_response_requested_ms.is_none() {
                    c.next_response_requested_ms = Some(t);
                    c.tool_gap_ms = Some(t - c.ready_ms);
                }
            }
        }
    }

    fn response_created(&mut self, id: Option<String>, t: f64) {
        if self.responses.len() >= self.limits.max_responses {
            self.caps.responses_dropped += 1;
            self.pending_user = None;
            self.pending_create_ms = None;
            return;
        }
        let user = self.pending_user.take().filter(|u| u.speech_stopped_ms.is_some() || u.committed_ms.is_some());
        let create_sent_ms = self.pending_create_ms.take();
        let trigger = match (&user, create_sent_ms) {
            (_, Some(_)) => ResponseTrigger::Client,
            (Some(u), None) if u.speech_stopped_ms.is_some() => ResponseTrigger::ServerVad,
            _ => ResponseTrigger::Unknown,
        };
        let time_to_created_from_speech_stopped_ms = user.and_then(|u| u.speech_stopped_ms).map(|s| t - s);
        if let Some(id) = id.clone() {
            self.by_id.insert(id, self.responses.len());
        }
        self.responses.push(OpenResponse {
            out: RealtimeResponse {
                response_id: id,
                trigger,
                user,
                create_sent_ms,
                created_ms: t,
                first_audio_ms: None,
                first_audio_transcript_ms: None,
                first_text_ms: None,
                audio_done_ms: None,
                done_ms: None,
                time_to_first_audio_from_speech_stopped_ms: None,
                time_to_first_audio_from_speech_end_ms: None,
                time_to_first_audio_from_create_ms: None,
                time_to_created_from_speech_stopped_ms,
                time_to_first_audio_from_created_ms: None,
                audio_deltas: 0,
                audio_ms: 0.0,
                received: Vec::new(),
                real_time_factor: None,
                predicted: None,
                tool_calls: Vec::new(),
                interruption: Interruption::default(),
                status: None,
                status_reason: None,
                usage: None,
                audio_arrivals_dropped: 0,
            },
            arrivals: Vec::new(),
            audio_bytes: 0,
            first_delta_bytes: 0,
            last_audio_ns: 0,
            first_audio_ns: None,
            received_stride: 1,
            item_ids: Vec::new(),
        });
    }

    /// The response an event names, else the latest one.
    fn response_for(&mut self, id: Option<&str>) -> Option<&mut OpenResponse> {
        match id.and_then(|id| self.by_id.get(id).copied()) {
            Some(i) => self.responses.get_mut(i),
            None => self.responses.last_mut(),
        }
    }

    /// Maps an input audio position (ms on the audio clock) to ms since t0 (module docs).
    fn wall_of_audio(&self, audio_ms: f64) -> Option<f64> {
        let last = self.appends.back()?;
        let i = self.appends.partition_point(|a| a.audio_end_ms < audio_ms);
        let Some(a) = self.appends.get(i) else {
            // Past the audio forwarded (should not happen): the last append's time.
            return Some(ms(last.t_ns));
        };
        if a.audio_start_ms > audio_ms {
            return None; // older than the appends kept
        }
        let prev_ns = i.checked_sub(1).and_then(|p| self.appends.get(p)).map_or(0, |p| p.t_ns);
        let after = a.audio_end_ms - audio_ms;
        Some((ms(a.t_ns) - after).max(ms(prev_ns)))
    }

    /// The session so far, closed at `end_ns` (ns since t0).
    pub fn finish(mut self, end_ns: u64) -> RealtimeSession {
        let end_ns = end_ns.max(self.last_ns);
        let format = self.output_format;
        let responses = std::mem::take(&mut self.responses).into_iter().map(|r| r.finish(format)).collect();
        let dir_summary = |d: DirectionState| {
            let mut s = d.summary;
            s.frames = d.decoder.counts();
            s.frame_error = d.decoder.error();
            s.ended_mid_frame = d.decoder.mid_frame();
            s
        };
        let client = dir_summary(self.client);
        let server = dir_summary(self.server);
        let by_client = self.closes.iter().any(|c| c.by == Direction::ClientToServer);
        let by_server = self.closes.iter().any(|c| c.by == Direction::ServerToClient);
        let end = match (by_client, by_server) {
            (true, true) => SessionEnd::CloseHandshake,
            (false, false) => SessionEnd::Abrupt,
            _ => SessionEnd::HalfClosed,
        };
        RealtimeSession {
            version: REALTIME_VERSION,
            session_id: self.session_id,
            model: self.model,
            input_format: self.input_format,
            output_format: self.output_format,
            turn_detection: self.turn_detection,
            deflate: self.deflate,
            client,
            server,
            events: self.events,
            beta_named_events: self.beta_named_events,
            input_audio_ms: self.input_audio_ms,
            appends: self.appends_total,
            responses,
            errors: self.errors,
            closes: self.closes,
            end,
            duration_ms: ms(end_ns),
            caps: self.caps,
        }
    }
}

/// When a player started at the first delta would finish the audio received so far (ignoring
/// underruns), ms since t0; −∞ without audio.
fn predicted_end(r: &OpenResponse, format: RealtimeAudioFormat) -> f64 {
    match r.first_audio_ns {
        Some(first) => ms(first) + format.ms_of(r.audio_bytes),
        None => f64::NEG_INFINITY,
    }
}

impl OpenResponse {
    fn audio_delta(&mut self, t_ns: u64, bytes: u64, format: RealtimeAudioFormat, limit: usize) {
        let t = ms(t_ns);
        self.out.audio_deltas += 1;
        if self.first_audio_ns.is_none() {
            self.first_audio_ns = Some(t_ns);
            self.first_delta_bytes = bytes;
            self.out.first_audio_ms = Some(t);
        }
        self.audio_bytes += bytes;
        self.last_audio_ns = t_ns;
        let frames_total = self.audio_bytes / u64::from(format.bytes_per_frame());
        if self.arrivals.len() < limit {
            self.arrivals.push(crate::audio::playout::Arrival { t_ns, frames_total });
        } else {
            self.out.audio_arrivals_dropped += 1;
        }
        // `received`, thinned to at most 256 points: when full, every other point goes and the
        // stride doubles.
        let index = self.out.audio_deltas - 1;
        if index.is_multiple_of(self.received_stride) {
            if self.out.received.len() >= 256 {
                let kept: Vec<_> = self.out.received.iter().copied().step_by(2).collect();
                self.out.received = kept;
                self.received_stride *= 2;
            }
            if index.is_multiple_of(self.received_stride) {
                self.out.received.push((t, format.ms_of(self.audio_bytes)));
            }
        }
    }

    fn call_ready(&mut self, call_id: String, name: Option<String>, t: f64) {
        if let Some(c) = self.out.tool_calls.iter_mut().find(|c| c.call_id == call_id) {
            c.name = c.name.take().or(name);
            return;
        }
        if self.out.tool_calls.len() < 32 {
            self.out.tool_calls.push(RealtimeToolCall {
                call_id,
                name,
                ready_ms: t,
                output_sent_ms: None,
                next_response_requested_ms: None,
                tool_gap_ms: None,
            });
        }
    }

    fn finish(mut self, format: RealtimeAudioFormat) -> RealtimeResponse {
        let out = &mut self.out;
        out.audio_ms = format.ms_of(self.audio_bytes);
        if let Some(first) = out.first_audio_ms {
            if let Some(u) = &out.user {
                out.time_to_first_audio_from_speech_stopped_ms = u.speech_stopped_ms.map(|s| first - s);
                out.time_to_first_audio_from_speech_end_ms = u.speech_end_estimated_ms.map(|s| first - s);
            }
            out.time_to_first_audio_from_create_ms = out.create_sent_ms.map(|c| first - c);
            out.time_to_first_audio_from_created_ms = Some(first - out.created_ms);
            let after_first_ms = format.ms_of(self.audio_bytes - self.first_delta_bytes);
            if after_first_ms > 0.0 {
                out.real_time_factor = Some((ms(self.last_audio_ns) - first) / after_first_ms);
            }
        }
        // The last point is the whole audio received.
        let last = (ms(self.last_audio_ns), out.audio_ms);
        if self.first_audio_ns.is_some() && out.received.last() != Some(&last) {
            if out.received.len() >= 256 {
                out.received.pop();
            }
            out.received.push(last);
        }
        if let Some(first_ns) = self.first_audio_ns {
            out.predicted = Some(crate::audio::playout::simulate(&self.arrivals, format.sample_rate_hz(), 0, first_ns));
        }
        self.out
    }
}
