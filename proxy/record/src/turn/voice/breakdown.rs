//! A turn's voice part from the linker's state: the stages in the voice part's own clock, and the
//! chain of waits (also after the browser probe's report joined).

use super::state::VoiceState;
use super::{
    SpeechPlayout, SpeechStage, TranscriptionStage, TurnVoice, VoiceBrowser, VoiceKind, VoiceSegment, VoiceSegmentKind,
    USER_SPEECH_END,
};

pub(super) fn breakdown(state: &VoiceState, turn_t0: u64) -> TurnVoice {
    let t0 = state.transcription.as_ref().map_or(turn_t0, |(r, _)| r.t0_unix_ns.min(turn_t0));
    let rel = |t: u64| t.saturating_sub(t0) as f64 / 1e6;
    // The linker keeps only transcriptions in `state.transcription`.
    let transcription = state.transcription.as_ref().and_then(|(r, link)| {
        let VoiceKind::Transcription { upload_end_unix_ns, first_delta_unix_ns, done_unix_ns, upload_audio_ms, .. } =
            &r.kind
        else {
            return None;
        };
        Some(TranscriptionStage {
            request_id: r.request_id.clone(),
            model: r.model.clone(),
            link: *link,
            upload_end_ms: upload_end_unix_ns.map(rel),
            first_delta_ms: first_delta_unix_ns.map(rel),
            transcript_done_ms: done_unix_ns.map(rel),
            upload_audio_ms: *upload_audio_ms,
        })
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
