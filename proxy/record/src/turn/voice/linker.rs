//! The linker: voice requests wait, bounded, for the model call of their turn, and model calls
//! take the voice requests that belong to them.

use std::collections::{HashMap, VecDeque};

use tokentap_analysis::conversation::TextHashes;
use tokentap_analysis::LastInput;

use super::breakdown::breakdown;
use super::state::{TurnKey, VoiceState};
use super::{
    TurnVoice, VoiceKind, VoiceLink, VoiceRequest, MAX_PENDING, MAX_SPEECH_STAGES, MAX_TURNS, PENDING_NS, TURN_NS,
};

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

/// The link a voice request and a model call share without looking at text: the client's trace
/// id (both traced), else the same turn header.
fn context_link(request: &VoiceRequest, call: &ModelCall<'_>) -> Option<VoiceLink> {
    if call.traced && request.traced && request.trace_id == call.trace_id {
        return Some(VoiceLink::TraceId);
    }
    if request.turn_header.is_some() && request.turn_header.as_deref() == call.turn_header {
        return Some(VoiceLink::Header);
    }
    None
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
    pub(super) pending_transcriptions: VecDeque<VoiceRequest>,
    pub(super) pending_speech: VecDeque<VoiceRequest>,
    pub(super) turns: HashMap<String, VoiceState>,
    pub(super) order: VecDeque<(u64, String)>,
    pub(super) by_trace: HashMap<String, String>,
    pub(super) by_header: HashMap<String, String>,
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
            state.keys.push(TurnKey::Trace(call.trace_id.to_owned()));
        }
        if let Some(h) = call.turn_header.filter(|_| state.keys.len() < MAX_KEYS_PER_TURN) {
            self.by_header.insert(h.to_owned(), turn.clone());
            state.keys.push(TurnKey::Header(h.to_owned()));
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
                context_link(r, call).or_else(|| {
                    let VoiceKind::Transcription { transcript_hash: Some(h), .. } = &r.kind else { return None };
                    (Some(*h) == call.last_user_text_hash).then_some(VoiceLink::Transcript)
                })
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
            let link = context_link(r, call).or_else(|| match (&r.kind, &state.answer) {
                (VoiceKind::Speech { input_hashes: Some(input), .. }, Some(answer)) if answer.covers(input) => {
                    Some(VoiceLink::AnswerText)
                }
                _ => None,
            });
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
        for key in state.keys {
            let (map, key) = match key {
                TurnKey::Trace(key) => (&mut self.by_trace, key),
                TurnKey::Header(key) => (&mut self.by_header, key),
            };
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
