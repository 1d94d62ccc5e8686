//! Voice turns: a transcription (speech to text) before the model call that sends its transcript,
//! and speech (text to speech) requests that read the answer out, joined to the turn of that model
//! call. Links, strongest first: the same W3C trace id (when the client sent a `traceparent`), the
//! same turn header, then the text: the transcript is the model call's last user message, and the
//! speech input is the answer or made of its sentences (keyed hashes; no text is kept).
//!
//! Either side may reach the record worker first (a first sentence is often spoken while the answer
//! still streams), so both wait, bounded in count and time, for their partner.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use tokentap_analysis::conversation::TextHashes;
use tokentap_analysis::{LastInput, SPEECH_TO_TEXT, TEXT_TO_SPEECH};

use super::step::TurnHeaders;
use crate::Record;

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

/// How a voice request was joined to its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VoiceLink {
    TraceId,
    Header,
    /// The transcript is the model call's last user message.
    Transcript,
    /// The speech input is the answer, or made of its sentences.
    AnswerText,
}

/// What a voice request contributes, in Unix nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceRequest {
    pub request_id: String,
    pub trace_id: String,
    /// The client sent a `traceparent` (the trace id is then the app's, shared by its requests).
    pub traced: bool,
    pub turn_header: Option<String>,
    pub model: Option<String>,
    pub t0_unix_ns: u64,
    pub kind: VoiceKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum VoiceKind {
    Transcription {
        upload_end_unix_ns: Option<u64>,
        first_delta_unix_ns: Option<u64>,
        done_unix_ns: Option<u64>,
        upload_audio_ms: Option<f64>,
        transcript_hash: Option<u64>,
    },
    Speech {
        first_audio_unix_ns: Option<u64>,
        first_audible_unix_ns: Option<u64>,
        leading_silence_ms: Option<f64>,
        audio_ms: Option<f64>,
        real_time_factor: Option<f64>,
        underruns: Option<u32>,
        starved_ms: Option<f64>,
        input_hashes: Option<TextHashes>,
    },
}

fn at(t0: u64, ms: Option<f64>) -> Option<u64> {
    ms.filter(|v| v.is_finite() && *v >= 0.0).map(|v| t0.saturating_add((v * 1e6) as u64))
}

impl VoiceRequest {
    /// The voice facts of a record: speech-to-text and text-to-speech requests that succeeded.
    pub fn from_record(record: &Record, headers: &TurnHeaders) -> Option<VoiceRequest> {
        if record.outcome != crate::Outcome::Ok || record.analysis_shed {
            return None;
        }
        let t0 = record.timeline.t0_unix_ns;
        let kind = match record.request.operation.as_deref() {
            Some(SPEECH_TO_TEXT) => {
                let t = record.transcription.as_ref()?;
                VoiceKind::Transcription {
                    upload_end_unix_ns: record.timeline.t_upstream_sent_ns.map(|ns| t0.saturating_add(ns)),
                    first_delta_unix_ns: at(t0, t.time_to_first_delta_ms),
                    done_unix_ns: at(t0, t.transcript_done_ms),
                    upload_audio_ms: record
                        .request
                        .transcription
                        .as_ref()
                        .and_then(|r| r.upload.as_ref())
                        .and_then(|u| u.duration_ms),
                    transcript_hash: t.transcript_hash,
                }
            }
            Some(TEXT_TO_SPEECH) => {
                let s = record.speech.as_ref()?;
                VoiceKind::Speech {
                    first_audio_unix_ns: at(t0, s.time_to_first_audio_ms),
                    first_audible_unix_ns: at(t0, s.time_to_first_audible_ms),
                    leading_silence_ms: s.leading_silence_ms,
                    audio_ms: s.audio_ms,
                    real_time_factor: s.real_time_factor,
                    underruns: s.predicted.map(|p| p.underruns),
                    starved_ms: s.predicted.map(|p| p.starved_ms),
                    input_hashes: record.request.speech_input_hashes.clone(),
                }
            }
            _ => return None,
        };
        let turn_header = super::step::header_value(record, &headers.turn).map(str::to_owned);
        Some(VoiceRequest {
            request_id: record.request_id.clone(),
            trace_id: record.trace_id.clone(),
            traced: record.parent_span_id.is_some(),
            turn_header,
            model: record.conditions.model.clone().or_else(|| record.request.model.clone()),
            t0_unix_ns: t0,
            kind,
        })
    }
}

/// What the linker needs of a model call, after the turn tracker placed it.
#[derive(Debug, Clone, Default)]
pub struct ModelCall<'a> {
    pub turn_id: &'a str,
    pub trace_id: &'a str,
    pub traced: bool,
    pub turn_header: Option<&'a str>,
    pub t0_unix_ns: u64,
    pub last_input: Option<LastInput>,
    pub last_user_text_hash: Option<u64>,
    pub first_answer_unix_ns: Option<u64>,
    /// The answer's hashes, when this call answered (no tool calls).
    pub answer_hashes: Option<&'a TextHashes>,
}

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

#[derive(Debug, Default)]
struct VoiceState {
    transcription: Option<(VoiceRequest, VoiceLink)>,
    model_start_unix_ns: Option<u64>,
    first_answer_unix_ns: Option<u64>,
    speech: Vec<(VoiceRequest, VoiceLink)>,
    speech_not_listed: u32,
    answer: Option<TextHashes>,
    seen_unix_ns: u64,
    /// The trace id and turn header that name this turn in the lookups (removed with it).
    keys: Vec<(bool, String)>,
}

/// Counters for health.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VoiceCounters {
    pub transcriptions_linked: u64,
    pub speech_linked: u64,
    /// Waited in vain (expired or pushed out by newer ones).
    pub transcriptions_unlinked: u64,
    pub speech_unlinked: u64,
}

/// Joins voice requests to turns. Bounded: at most [`MAX_PENDING`] waiting requests of each kind
/// and [`MAX_TURNS`] turns, each with at most [`MAX_SPEECH_STAGES`] speech requests.
#[derive(Debug, Default)]
pub struct VoiceLinker {
    pending_transcriptions: VecDeque<VoiceRequest>,
    pending_speech: VecDeque<VoiceRequest>,
    turns: HashMap<String, VoiceState>,
    order: VecDeque<(u64, String)>,
    by_trace: HashMap<String, String>,
    by_header: HashMap<String, String>,
    counters: VoiceCounters,
}

impl VoiceLinker {
    pub fn counters(&self) -> &VoiceCounters {
        &self.counters
    }

    /// A voice request ended. Returns the turn it joined, if one is known yet (the turn record
    /// then needs [`Self::voice_of`] again).
    pub fn observe(&mut self, request: VoiceRequest) -> Option<String> {
        let now = request.t0_unix_ns;
        self.expire(now);
        let found = self.find_turn(&request);
        match (&request.kind, found) {
            (VoiceKind::Transcription { .. }, Some((turn, link))) => {
                let state = self.turns.get_mut(&turn)?;
                if state.transcription.is_none() {
                    state.transcription = Some((request, link));
                    self.counters.transcriptions_linked += 1;
                }
                Some(turn)
            }
            (VoiceKind::Speech { .. }, Some((turn, link))) => {
                self.add_speech(&turn, request, link);
                Some(turn)
            }
            (VoiceKind::Speech { input_hashes: Some(input), .. }, None) => {
                // By the answer's text, newest turn first.
                let by_text = self
                    .order
                    .iter()
                    .rev()
                    .find(|(_, id)| self.turns.get(id).and_then(|s| s.answer.as_ref()).is_some_and(|a| a.covers(input)))
                    .map(|(_, id)| id.clone());
                match by_text {
                    Some(turn) => {
                        self.add_speech(&turn, request, VoiceLink::AnswerText);
                        Some(turn)
                    }
                    None => {
                        push_bounded(&mut self.pending_speech, request, &mut self.counters.speech_unlinked);
                        None
                    }
                }
            }
            (VoiceKind::Speech { .. }, None) => {
                push_bounded(&mut self.pending_speech, request, &mut self.counters.speech_unlinked);
                None
            }
            (VoiceKind::Transcription { .. }, None) => {
                push_bounded(&mut self.pending_transcriptions, request, &mut self.counters.transcriptions_unlinked);
                None
            }
        }
    }

    fn find_turn(&self, request: &VoiceRequest) -> Option<(String, VoiceLink)> {
        if request.traced {
            if let Some(turn) = self.by_trace.get(&request.trace_id) {
                return Some((turn.clone(), VoiceLink::TraceId));
            }
        }
        if let Some(h) = &request.turn_header {
            if let Some(turn) = self.by_header.get(h) {
                return Some((turn.clone(), VoiceLink::Header));
            }
        }
        None
    }

    fn add_speech(&mut self, turn: &str, request: VoiceRequest, link: VoiceLink) {
        let Some(state) = self.turns.get_mut(turn) else { return };
        self.counters.speech_linked += 1;
        if state.speech.len() < MAX_SPEECH_STAGES {
            state.speech.push((request, link));
        } else {
            state.speech_not_listed += 1;
        }
    }

    /// A model call was placed in its turn: voice requests waiting for it join the turn.
    /// Returns the ids of the requests that joined (their records can now name the turn).
    pub fn on_model_call(&mut self, call: &ModelCall<'_>) -> Vec<String> {
        self.expire(call.t0_unix_ns);
        let turn = call.turn_id.to_owned();
        if !self.turns.contains_key(&turn) {
            self.turns.insert(turn.clone(), VoiceState::default());
            self.order.push_back((call.t0_unix_ns, turn.clone()));
            while self.turns.len() > MAX_TURNS {
                let Some((_, old)) = self.order.pop_front() else { break };
                self.forget(&old);
            }
        }
        let mut joined = Vec::new();
        let Some(state) = self.turns.get_mut(&turn) else { return joined };
        const MAX_KEYS_PER_TURN: usize = 8;
        if call.traced && state.keys.len() < MAX_KEYS_PER_TURN {
            self.by_trace.insert(call.trace_id.to_owned(), turn.clone());
            state.keys.push((true, call.trace_id.to_owned()));
        }
        if let Some(h) = call.turn_header.filter(|_| state.keys.len() < MAX_KEYS_PER_TURN) {
            self.by_header.insert(h.to_owned(), turn.clone());
            state.keys.push((false, h.to_owned()));
        }
        state.seen_unix_ns = state.seen_unix_ns.max(call.t0_unix_ns);
        state.model_start_unix_ns.get_or_insert(call.t0_unix_ns);
        if let Some(t) = call.first_answer_unix_ns {
            state.first_answer_unix_ns = Some(t);
        }
        if let Some(a) = call.answer_hashes {
            state.answer = Some(a.clone());
        }
        // The transcript this call sends on.
        if state.transcription.is_none() && call.last_input == Some(LastInput::User) {
            let matches = |r: &VoiceRequest| -> Option<VoiceLink> {
                if call.traced && r.traced && r.trace_id == call.trace_id {
                    return Some(VoiceLink::TraceId);
                }
                if r.turn_header.is_some() && r.turn_header.as_deref() == call.turn_header {
                    return Some(VoiceLink::Header);
                }
                let VoiceKind::Transcription { transcript_hash: Some(h), .. } = &r.kind else { return None };
                (Some(*h) == call.last_user_text_hash).then_some(VoiceLink::Transcript)
            };
            // The newest matching transcription that started before the call.
            let hit = self
                .pending_transcriptions
                .iter()
                .enumerate()
                .rev()
                .filter(|(_, r)| r.t0_unix_ns <= call.t0_unix_ns)
                .find_map(|(i, r)| matches(r).map(|link| (i, link)));
            if let Some((i, link)) = hit {
                if let Some(r) = self.pending_transcriptions.remove(i) {
                    joined.push(r.request_id.clone());
                    state.transcription = Some((r, link));
                    self.counters.transcriptions_linked += 1;
                }
            }
        }
        // Speech requests that read this answer (or share its trace or turn header).
        let mut i = 0;
        while i < self.pending_speech.len() {
            let r = &self.pending_speech[i];
            let link = if call.traced && r.traced && r.trace_id == call.trace_id {
                Some(VoiceLink::TraceId)
            } else if r.turn_header.is_some() && r.turn_header.as_deref() == call.turn_header {
                Some(VoiceLink::Header)
            } else {
                match (&r.kind, &state.answer) {
                    (VoiceKind::Speech { input_hashes: Some(input), .. }, Some(answer)) if answer.covers(input) => {
                        Some(VoiceLink::AnswerText)
                    }
                    _ => None,
                }
            };
            match link {
                Some(link) => {
                    if let Some(r) = self.pending_speech.remove(i) {
                        joined.push(r.request_id.clone());
                        self.counters.speech_linked += 1;
                        if state.speech.len() < MAX_SPEECH_STAGES {
                            state.speech.push((r, link));
                        } else {
                            state.speech_not_listed += 1;
                        }
                    }
                }
                None => i += 1,
            }
        }
        joined
    }

    /// The voice part of a turn, when it has any voice request.
    pub fn voice_of(&self, turn_id: &str, turn_t0_unix_ns: u64) -> Option<TurnVoice> {
        let state = self.turns.get(turn_id)?;
        if state.transcription.is_none() && state.speech.is_empty() {
            return None;
        }
        Some(breakdown(state, turn_t0_unix_ns))
    }

    fn forget(&mut self, turn: &str) {
        let Some(state) = self.turns.remove(turn) else { return };
        for (traced, key) in state.keys {
            let map = if traced { &mut self.by_trace } else { &mut self.by_header };
            // A later turn may have taken the key over.
            if map.get(&key).is_some_and(|t| t == turn) {
                map.remove(&key);
            }
        }
    }

    fn expire(&mut self, now: u64) {
        let cutoff = now.saturating_sub(PENDING_NS);
        for (queue, counter) in [
            (&mut self.pending_transcriptions, &mut self.counters.transcriptions_unlinked),
            (&mut self.pending_speech, &mut self.counters.speech_unlinked),
        ] {
            while queue.front().is_some_and(|r| r.t0_unix_ns < cutoff) {
                queue.pop_front();
                *counter += 1;
            }
        }
        let cutoff = now.saturating_sub(TURN_NS);
        while self
            .order
            .front()
            .is_some_and(|(t, id)| *t < cutoff && self.turns.get(id).is_none_or(|s| s.seen_unix_ns < cutoff))
        {
            if let Some((_, old)) = self.order.pop_front() {
                self.forget(&old);
            }
        }
    }
}

fn push_bounded(queue: &mut VecDeque<VoiceRequest>, request: VoiceRequest, dropped: &mut u64) {
    if queue.len() >= MAX_PENDING {
        queue.pop_front();
        *dropped += 1;
    }
    queue.push_back(request);
}

fn breakdown(state: &VoiceState, turn_t0: u64) -> TurnVoice {
    let t0 = state.transcription.as_ref().map_or(turn_t0, |(r, _)| r.t0_unix_ns.min(turn_t0));
    let rel = |t: u64| t.saturating_sub(t0) as f64 / 1e6;
    let transcription = state.transcription.as_ref().map(|(r, link)| {
        let VoiceKind::Transcription { upload_end_unix_ns, first_delta_unix_ns, done_unix_ns, upload_audio_ms, .. } =
            &r.kind
        else {
            unreachable!("only transcriptions are kept here")
        };
        TranscriptionStage {
            request_id: r.request_id.clone(),
            model: r.model.clone(),
            link: *link,
            upload_end_ms: upload_end_unix_ns.map(rel),
            first_delta_ms: first_delta_unix_ns.map(rel),
            transcript_done_ms: done_unix_ns.map(rel),
            upload_audio_ms: *upload_audio_ms,
        }
    });
    let mut speech: Vec<SpeechStage> = state
        .speech
        .iter()
        .filter_map(|(r, link)| {
            let VoiceKind::Speech {
                first_audio_unix_ns,
                first_audible_unix_ns,
                leading_silence_ms,
                audio_ms,
                real_time_factor,
                underruns,
                starved_ms,
                ..
            } = &r.kind
            else {
                return None;
            };
            Some(SpeechStage {
                request_id: r.request_id.clone(),
                model: r.model.clone(),
                link: *link,
                start_ms: rel(r.t0_unix_ns),
                first_audio_ms: first_audio_unix_ns.map(rel),
                first_audible_ms: first_audible_unix_ns.map(rel),
                leading_silence_ms: *leading_silence_ms,
                audio_ms: *audio_ms,
                real_time_factor: *real_time_factor,
                predicted_underruns: *underruns,
                predicted_starved_ms: *starved_ms,
                playout: None,
            })
        })
        .collect();
    speech.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    let first_audible_ms = speech.iter().filter_map(|s| s.first_audible_ms).min_by(f64::total_cmp);
    let model_start_ms = state.model_start_unix_ns.map(rel);
    let first_answer_token_ms = state.first_answer_unix_ns.map(rel);

    let mut voice = TurnVoice {
        t0_unix_ns: t0,
        transcription,
        model_start_ms,
        first_answer_token_ms,
        speech,
        speech_not_listed: state.speech_not_listed,
        first_audible_ms,
        user_speech_end_ms: None,
        heard_ms: None,
        voice_to_voice_ms: None,
        segments: Vec::new(),
    };
    voice.segments = voice.chain();
    voice
}

/// What the browser probe joined to one voice request: the request's t0 and its browser section.
pub type VoiceBrowser = (u64, crate::browser::BrowserTimeline);

/// The name of the probe mark that says when the user stopped speaking.
pub const USER_SPEECH_END: &str = "user_speech_end";

impl TurnVoice {
    /// The chain of waits, each stage from the end of the last known one.
    fn chain(&self) -> Vec<VoiceSegment> {
        let first_speech = self.speech.first();
        let mut points: Vec<(VoiceSegmentKind, Option<f64>)> = Vec::new();
        if let Some(t) = &self.transcription {
            if self.user_speech_end_ms.is_some() {
                points.push((VoiceSegmentKind::AfterSpeech, Some(0.0)));
            }
            points.push((VoiceSegmentKind::Upload, t.upload_end_ms));
            points.push((VoiceSegmentKind::Transcription, t.transcript_done_ms));
        }
        points.push((VoiceSegmentKind::ToModel, self.model_start_ms));
        points.push((VoiceSegmentKind::FirstToken, self.first_answer_token_ms));
        points.push((VoiceSegmentKind::ToSpeech, first_speech.map(|s| s.start_ms)));
        points.push((VoiceSegmentKind::SpeechFirstByte, first_speech.and_then(|s| s.first_audio_ms)));
        points.push((VoiceSegmentKind::LeadingSilence, first_speech.and_then(|s| s.first_audible_ms)));
        points.push((VoiceSegmentKind::Playout, first_speech.and_then(|s| s.playout.as_ref()).map(|p| p.heard_ms)));
        let mut segments = Vec::new();
        let mut last = match (&self.transcription, self.user_speech_end_ms) {
            (Some(_), Some(end)) => Some(end.min(0.0)),
            (Some(_), None) => Some(0.0),
            (None, _) => self.model_start_ms,
        };
        for (kind, end) in points {
            let (Some(start), Some(end)) = (last, end) else { continue };
            if kind == VoiceSegmentKind::ToModel && self.transcription.is_none() {
                continue;
            }
            segments.push(VoiceSegment { kind, start_ms: start, end_ms: end.max(start) });
            last = Some(end.max(start));
        }
        segments
    }

    /// Adds what the browser probe saw: the end of speech (the `user_speech_end` mark joined to the
    /// transcription request) and each answer's playback (joined to its speech request), then
    /// rebuilds the chain. `browser_of` looks a voice request's browser section up by request id.
    /// Returns whether anything changed.
    pub fn apply_browser(&mut self, browser_of: impl Fn(&str) -> Option<VoiceBrowser>) -> bool {
        let before = self.clone();
        let t0 = self.t0_unix_ns;
        // A time of a request whose own t0 is `request_t0`, as ms since this voice part's t0.
        let here = |request_t0: u64, ms: f64| (request_t0 as f64 - t0 as f64) / 1e6 + ms;
        self.user_speech_end_ms = self.transcription.as_ref().and_then(|t| {
            let (request_t0, browser) = browser_of(&t.request_id)?;
            let mark = browser.marks.iter().rev().find(|m| m.name == USER_SPEECH_END)?;
            Some(here(request_t0, mark.t_ms))
        });
        for stage in &mut self.speech {
            stage.playout = browser_of(&stage.request_id).and_then(|(request_t0, browser)| {
                let uncertainty = browser.clock.as_ref().map(|c| c.uncertainty_ms);
                let audio = browser.audio.iter().min_by(|a, b| a.audible_ms.total_cmp(&b.audible_ms))?;
                let started_ms = here(request_t0, audio.audible_ms);
                Some(SpeechPlayout {
                    started_ms,
                    heard_ms: started_ms + stage.leading_silence_ms.unwrap_or(0.0),
                    end_ms: browser
                        .audio
                        .iter()
                        .filter_map(|a| a.end_ms)
                        .max_by(f64::total_cmp)
                        .map(|e| here(request_t0, e)),
                    underruns: browser.audio.iter().map(|a| a.underruns).sum(),
                    starved_ms: browser.audio.iter().map(|a| a.starved_ms).sum(),
                    interrupted: browser.audio.iter().any(|a| a.interrupted),
                    clock_uncertainty_ms: uncertainty,
                })
            });
        }
        self.heard_ms = self.speech.first().and_then(|s| s.playout.as_ref()).map(|p| p.heard_ms);
        self.voice_to_voice_ms = match (self.user_speech_end_ms, self.heard_ms) {
            (Some(end), Some(heard)) => Some((heard - end).max(0.0)),
            _ => None,
        };
        self.segments = self.chain();
        *self != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentap_analysis::conversation::text_hash;

    const MS: u64 = 1_000_000;
    const T: u64 = 1_700_000_000_000_000_000;

    fn transcription(id: &str, t0_ms: u64, transcript: &str) -> VoiceRequest {
        VoiceRequest {
            request_id: id.into(),
            trace_id: format!("trace-{id}"),
            traced: false,
            turn_header: None,
            model: Some("gpt-4o-transcribe".into()),
            t0_unix_ns: T + t0_ms * MS,
            kind: VoiceKind::Transcription {
                upload_end_unix_ns: Some(T + (t0_ms + 40) * MS),
                first_delta_unix_ns: Some(T + (t0_ms + 200) * MS),
                done_unix_ns: Some(T + (t0_ms + 300) * MS),
                upload_audio_ms: Some(1_500.0),
                transcript_hash: Some(text_hash(transcript)),
            },
        }
    }

    fn speech(id: &str, t0_ms: u64, input: &str) -> VoiceRequest {
        VoiceRequest {
            request_id: id.into(),
            trace_id: format!("trace-{id}"),
            traced: false,
            turn_header: None,
            model: Some("gpt-4o-mini-tts".into()),
            t0_unix_ns: T + t0_ms * MS,
            kind: VoiceKind::Speech {
                first_audio_unix_ns: Some(T + (t0_ms + 120) * MS),
                first_audible_unix_ns: Some(T + (t0_ms + 320) * MS),
                leading_silence_ms: Some(200.0),
                audio_ms: Some(1_800.0),
                real_time_factor: Some(0.5),
                underruns: Some(0),
                starved_ms: Some(0.0),
                input_hashes: Some(TextHashes::of(input)),
            },
        }
    }

    fn call<'a>(turn: &'a str, t0_ms: u64, user_text: &str, answer: &'a TextHashes) -> ModelCall<'a> {
        ModelCall {
            turn_id: turn,
            trace_id: "trace-chat",
            traced: false,
            turn_header: None,
            t0_unix_ns: T + t0_ms * MS,
            last_input: Some(LastInput::User),
            last_user_text_hash: Some(text_hash(user_text)),
            first_answer_unix_ns: Some(T + (t0_ms + 250) * MS),
            answer_hashes: Some(answer),
        }
    }

    #[test]
    fn transcript_then_answer_then_speech_in_one_turn() {
        let mut v = VoiceLinker::default();
        assert_eq!(v.observe(transcription("stt", 0, "What is the weather in Paris?")), None);
        let answer = TextHashes::of("It is sunny in Paris. Highs of 21 degrees.");
        let joined = v.on_model_call(&call("turn-1", 350, "what is the weather in  paris?", &answer));
        assert_eq!(joined, vec!["stt".to_owned()]);
        // The first sentence is spoken (it arrives after the answer), then the second.
        assert_eq!(v.observe(speech("tts-1", 700, "It is sunny in Paris.")), Some("turn-1".into()));
        assert_eq!(v.observe(speech("tts-2", 900, "Highs of 21 degrees.")), Some("turn-1".into()));
        let voice = v.voice_of("turn-1", T + 350 * MS).unwrap();
        assert_eq!(voice.t0_unix_ns, T);
        let t = voice.transcription.as_ref().unwrap();
        assert_eq!((t.link, t.upload_end_ms, t.transcript_done_ms), (VoiceLink::Transcript, Some(40.0), Some(300.0)));
        assert_eq!(voice.model_start_ms, Some(350.0));
        assert_eq!(voice.first_answer_token_ms, Some(600.0));
        assert_eq!(voice.speech.len(), 2);
        assert_eq!(voice.speech[0].link, VoiceLink::AnswerText);
        assert_eq!(voice.first_audible_ms, Some(1_020.0));
        let kinds: Vec<_> = voice.segments.iter().map(|s| s.kind).collect();
        use VoiceSegmentKind::*;
        assert_eq!(kinds, vec![Upload, Transcription, ToModel, FirstToken, ToSpeech, SpeechFirstByte, LeadingSilence]);
        // Contiguous from 0 to the first audible sample.
        assert_eq!(voice.segments[0].start_ms, 0.0);
        for w in voice.segments.windows(2) {
            assert_eq!(w[0].end_ms, w[1].start_ms);
        }
        assert_eq!(voice.segments.last().unwrap().end_ms, 1_020.0);
        assert_eq!(v.counters().transcriptions_linked, 1);
        assert_eq!(v.counters().speech_linked, 2);
    }

    fn browser(marks: &[(&str, f64)], audio: &[(f64, Option<f64>, u64, f64, bool)]) -> crate::browser::BrowserTimeline {
        use crate::browser::timeline::{BrowserAudio, BrowserClock, BrowserMark};
        let mut b: crate::browser::BrowserTimeline = serde_json::from_value(serde_json::json!({
            "probe_span_id": "b7ad6b7169203331", "marks": [], "chunks": [], "long_frames": [], "audio": [],
            "browser_bytes": 0, "bytes_match": true, "painted_chars": 0, "answer_chars": 0,
            "chunks_dropped": 0, "paints_dropped": 0
        }))
        .unwrap();
        b.clock = Some(BrowserClock { offset_ms: 0.5, uncertainty_ms: 0.25, samples: 5 });
        b.marks = marks.iter().map(|(n, t)| BrowserMark { name: (*n).into(), t_ms: *t }).collect();
        b.audio = audio
            .iter()
            .map(|&(audible_ms, end_ms, underruns, starved_ms, interrupted)| BrowserAudio {
                kind: "audio_context".into(),
                audible_ms,
                output_latency_ms: None,
                end_ms,
                underruns,
                starved_ms,
                interrupted,
                scheduled_audio_ms: None,
            })
            .collect();
        b
    }

    #[test]
    fn the_browser_adds_end_of_speech_and_playout_to_the_chain() {
        let mut v = VoiceLinker::default();
        v.observe(transcription("stt", 0, "What is the weather in Paris?"));
        let answer = TextHashes::of("It is sunny in Paris. Highs of 21 degrees.");
        v.on_model_call(&call("turn-1", 350, "What is the weather in Paris?", &answer));
        v.observe(speech("tts-1", 700, "It is sunny in Paris."));
        v.observe(speech("tts-2", 900, "Highs of 21 degrees."));
        let mut voice = v.voice_of("turn-1", T + 350 * MS).unwrap();
        let without = voice.clone();
        assert!(!voice.apply_browser(|_| None), "nothing joined, nothing changes");
        // The user stopped speaking 180 ms before the upload started (the mark is before the
        // transcription's t0). The first answer's request started at 700 ms; on the wire its first
        // audible sample is at 320 ms of it; the page started playing it at 410 ms of it, so its
        // first audible sample (200 ms of leading silence) was heard at 610 ms of it. It ran dry
        // twice and was cut off; the second played out.
        let lookup = |id: &str| match id {
            "stt" => Some((T, browser(&[("user_send", -500.0), (USER_SPEECH_END, -180.0)], &[]))),
            "tts-1" => Some((T + 700 * MS, browser(&[], &[(410.0, Some(2_000.0), 2, 130.0, true)]))),
            "tts-2" => Some((T + 900 * MS, browser(&[], &[(900.0, Some(2_800.0), 0, 0.0, false)]))),
            _ => None,
        };
        assert!(voice.apply_browser(lookup));
        assert_eq!(voice.user_speech_end_ms, Some(-180.0));
        assert_eq!(voice.heard_ms, Some(1_310.0));
        assert_eq!(voice.voice_to_voice_ms, Some(1_490.0));
        let first = voice.speech[0].playout.as_ref().unwrap();
        assert_eq!(first.started_ms, 1_110.0);
        assert_eq!((first.underruns, first.starved_ms, first.interrupted), (2, 130.0, true));
        assert_eq!((first.end_ms, first.clock_uncertainty_ms), (Some(2_700.0), Some(0.25)));
        assert!(!voice.speech[1].playout.as_ref().unwrap().interrupted);
        use VoiceSegmentKind::*;
        let kinds: Vec<_> = voice.segments.iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            vec![
                AfterSpeech,
                Upload,
                Transcription,
                ToModel,
                FirstToken,
                ToSpeech,
                SpeechFirstByte,
                LeadingSilence,
                Playout
            ]
        );
        assert_eq!((voice.segments[0].start_ms, voice.segments[0].end_ms), (-180.0, 0.0));
        for w in voice.segments.windows(2) {
            assert_eq!(w[0].end_ms, w[1].start_ms);
        }
        let last = voice.segments.last().unwrap();
        assert_eq!((last.start_ms, last.end_ms), (1_020.0, 1_310.0));
        // The same join again changes nothing; and the wire part is as before.
        assert!(!voice.apply_browser(lookup));
        assert_eq!(voice.segments[1..8], without.segments[..]);
    }

    #[test]
    fn speech_that_ends_before_the_answer_waits_for_it() {
        let mut v = VoiceLinker::default();
        assert_eq!(v.observe(speech("tts-1", 400, "It is sunny in Paris.")), None);
        let answer = TextHashes::of("It is sunny in Paris. Highs of 21 degrees.");
        let joined = v.on_model_call(&call("turn-1", 100, "weather?", &answer));
        assert_eq!(joined, vec!["tts-1".to_owned()]);
        let voice = v.voice_of("turn-1", T + 100 * MS).unwrap();
        assert!(voice.transcription.is_none());
        assert_eq!(voice.t0_unix_ns, T + 100 * MS);
        let kinds: Vec<_> = voice.segments.iter().map(|s| s.kind).collect();
        use VoiceSegmentKind::*;
        assert_eq!(kinds, vec![FirstToken, ToSpeech, SpeechFirstByte, LeadingSilence]);
    }

    #[test]
    fn trace_and_header_links_win_over_text() {
        let mut v = VoiceLinker::default();
        let mut stt = transcription("stt", 0, "something else entirely");
        stt.traced = true;
        stt.trace_id = "app-trace".into();
        v.observe(stt);
        let answer = TextHashes::of("Fine.");
        let mut c = call("turn-1", 350, "What is the weather?", &answer);
        c.traced = true;
        c.trace_id = "app-trace";
        assert_eq!(v.on_model_call(&c), vec!["stt".to_owned()]);
        let mut tts = speech("tts", 900, "Words the answer never had.");
        tts.turn_header = Some("t-42".into());
        assert_eq!(v.observe(tts.clone()), None, "no turn has that header yet");
        let mut c2 = call("turn-2", 1_000, "next question", &answer);
        c2.turn_header = Some("t-42");
        assert_eq!(v.on_model_call(&c2), vec!["tts".to_owned()]);
        assert_eq!(v.voice_of("turn-1", T).unwrap().transcription.unwrap().link, VoiceLink::TraceId);
        assert_eq!(v.voice_of("turn-2", T).unwrap().speech[0].link, VoiceLink::Header);
    }

    #[test]
    fn unrelated_requests_never_link_and_waiting_is_bounded() {
        let mut v = VoiceLinker::default();
        for i in 0..1_000 {
            v.observe(transcription(&format!("stt-{i}"), i, &format!("question number {i}")));
            v.observe(speech(&format!("tts-{i}"), i, &format!("answer number {i}")));
        }
        assert!(v.pending_transcriptions.len() <= MAX_PENDING && v.pending_speech.len() <= MAX_PENDING);
        assert_eq!(v.counters().transcriptions_unlinked, 1_000 - MAX_PENDING as u64);
        let answer = TextHashes::of("Nothing anyone asked for.");
        assert!(v.on_model_call(&call("turn", 2_000, "a question nobody transcribed", &answer)).is_empty());
        assert_eq!(v.voice_of("turn", T), None);
        // Two minutes later the waiting ones are gone, and counted.
        v.on_model_call(&call("late", 200_000, "x", &answer));
        assert!(v.pending_transcriptions.is_empty() && v.pending_speech.is_empty());
        assert_eq!(v.counters().transcriptions_unlinked, 1_000);
        // Turns are bounded too, and so are the lookups that name them.
        for i in 0..(MAX_TURNS + 10) {
            let (id, trace) = (format!("t{i}"), format!("trace-{i}"));
            let mut c = call(&id, 300_000 + i as u64, "x", &answer);
            c.traced = true;
            c.trace_id = &trace;
            c.turn_header = Some(&trace);
            v.on_model_call(&c);
        }
        assert!(v.turns.len() <= MAX_TURNS);
        assert!(v.by_trace.len() <= MAX_TURNS && v.by_header.len() <= MAX_TURNS, "{}", v.by_trace.len());
    }
}
