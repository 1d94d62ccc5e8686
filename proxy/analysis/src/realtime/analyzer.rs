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

use super::deflate::{DeflateParams, InflateError, Inflater};
use super::event::{sniff_type, EventKind, RealtimeAudioFormat, RealtimeEvent, TurnDetection};
use super::frame::{Decoded, FrameDecoder, Opcode};
use super::ms;
use super::response::{predicted_end, OpenResponse};
use super::session::{
    CloseFrame, Direction, DirectionSummary, Interruption, RealtimeCapsHit, RealtimeContext, RealtimeErrorEvent,
    RealtimeLimits, RealtimeResponse, RealtimeSession, ResponseTrigger, SessionEnd, UserSpeech, REALTIME_VERSION,
};

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
