//! Joins what the page saw of a WebRTC peer connection (the report's `webrtc` section) to the
//! record of the request that carried its SDP offer: one voice turn per answer, on tokentap's
//! timeline (ms since t0), from the user's end of speech to the answer's first sample heard.
//!
//! A turn's end of speech is the page's own `user_speech_end` mark when it set one, else the end
//! of the probe's detected speech; the latest one before the answer started and after the previous
//! answer started. Server events are the data channel's timed events after the previous answer
//! started and up to this one's delivery. Heard = delivered to playout + the mean
//! playout delay; first packet = delivered − the jitter buffer delay of that interval.

use serde::{Deserialize, Serialize};

use crate::browser::report::Mark;
use crate::browser::webrtc_report::{OnsetMethod, ReportedWebrtc, SpeechSource, TapState};

/// Share of received samples concealed (not silent) above which audio is choppy: 2 %, about one
/// 20 ms packet in fifty lost or late.
pub const CHOPPY_RATIO: f64 = 0.02;

/// The page mark an app sets for its own end of speech.
pub const SPEECH_END_MARK: &str = "user_speech_end";

/// A peer connection's audio, on tokentap's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrowserWebrtc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connected_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_packet_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<f64>,
    /// packets lost / (received + lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_ratio: Option<f64>,
    #[serde(flatten)]
    pub delays: WebrtcDelays,
    /// The probe's taps on the microphone's and the remote audio's samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mic_tap: Option<TapState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_tap: Option<TapState>,
    /// Concealed, not silent, samples over received ones, for the whole session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concealed_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concealment_events: Option<f64>,
    /// The session's audio was choppy ([`CHOPPY_RATIO`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub choppy: bool,
    pub turns: Vec<WebrtcVoiceTurn>,
    /// Answers the user talked over.
    #[serde(default)]
    pub barge_ins: u64,
    /// Data channel events by name (the timed ones and the counted ones).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event_counts: Vec<WebrtcEventCount>,
    #[serde(default)]
    pub answers_dropped: u64,
    #[serde(default)]
    pub events_dropped: u64,
}

/// The received audio's delays: mean jitter buffer delay and target per emitted sample, and the
/// mean playout delay (for the session, or over the reading that holds a turn's onset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WebrtcDelays {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_buffer_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_buffer_target_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub playout_delay_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebrtcEventCount {
    pub name: String,
    pub count: u64,
}

tokentap_analysis::named_enum! {
    /// Where the end of speech came from.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum SpeechEndSource {
        /// The page's `user_speech_end` mark.
        Mark = "mark",
        /// The probe's energy detector on the microphone's `getStats()` energy.
        Vad = "vad",
        /// The probe's voice-activity detector on the microphone's samples (`AudioWorklet`).
        Worklet = "worklet",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebrtcEvent {
    pub name: String,
    pub t_ms: f64,
}

/// One answer of the session, with what led to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebrtcVoiceTurn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speech_end_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speech_end_source: Option<SpeechEndSource>,
    /// The server's events on the data channel, as they reached the page.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<WebrtcEvent>,
    /// The answer's first audible packet reached the page (delivered − jitter buffer delay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_packet_ms: Option<f64>,
    /// Its first audible sample left the jitter buffer for playout.
    pub delivered_ms: f64,
    /// Its first audible sample was played (delivered + playout delay).
    pub heard_ms: f64,
    pub onset_method: OnsetMethod,
    /// With onset method `worklet`: `getSynchronizationSources()`'s (else `getStats()`'s)
    /// estimate of the same onset, a cross-check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onset_estimate_ms: Option<f64>,
    #[serde(flatten)]
    pub delays: WebrtcDelays,
    /// Heard − end of speech.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voice_to_ear_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concealed_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub choppy: bool,
    /// The user started speaking while it played, and how long its audio went on after that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barge_in_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_after_barge_in_ms: Option<f64>,
}

fn ratio(part: f64, whole: f64) -> Option<f64> {
    (whole > 0.0).then(|| (part / whole).max(0.0))
}

/// The voice turns of `page`, with `marks` (the report's), each browser time mapped by `rel`.
pub fn join_webrtc(page: &ReportedWebrtc, marks: &[Mark], rel: impl Fn(f64) -> f64) -> BrowserWebrtc {
    let concealed = page.concealed_samples.unwrap_or(0.0) - page.silent_concealed_samples.unwrap_or(0.0);
    let concealed_ratio = page.samples_received.and_then(|s| ratio(concealed, s));
    let loss_ratio = match (page.packets_received, page.packets_lost) {
        (Some(r), Some(l)) => ratio(l.max(0.0), r + l.max(0.0)),
        _ => None,
    };
    let mut speech_ends: Vec<(f64, SpeechEndSource)> =
        marks.iter().filter(|m| m.name == SPEECH_END_MARK).map(|m| (m.t_ms, SpeechEndSource::Mark)).collect();
    if speech_ends.is_empty() {
        speech_ends = page
            .speech
            .iter()
            .filter_map(|s| {
                let source = match s.source {
                    Some(SpeechSource::Worklet) => SpeechEndSource::Worklet,
                    Some(SpeechSource::Stats) | None => SpeechEndSource::Vad,
                };
                Some((s.end_ms?, source))
            })
            .collect();
    }
    let mut turns = Vec::with_capacity(page.answers.len());
    let mut previous = f64::NEG_INFINITY;
    for a in &page.answers {
        let speech_end = speech_ends.iter().rev().find(|(t, _)| *t > previous && *t <= a.delivered_ms).copied();
        let events = page
            .events
            .iter()
            .filter(|e| e.t_ms > previous && e.t_ms <= a.delivered_ms)
            .map(|e| WebrtcEvent { name: e.name.clone(), t_ms: rel(e.t_ms) })
            .collect();
        let heard = a.delivered_ms + a.playout_delay_ms.unwrap_or(0.0);
        let answer_ratio = ratio(a.concealed_samples, a.samples);
        turns.push(WebrtcVoiceTurn {
            speech_end_ms: speech_end.map(|(t, _)| rel(t)),
            speech_end_source: speech_end.map(|(_, s)| s),
            events,
            first_packet_ms: a.jitter_buffer_ms.map(|jb| rel(a.delivered_ms - jb)),
            delivered_ms: rel(a.delivered_ms),
            heard_ms: rel(heard),
            onset_method: a.method,
            onset_estimate_ms: a.estimate_ms.map(&rel),
            delays: WebrtcDelays {
                jitter_buffer_ms: a.jitter_buffer_ms,
                jitter_buffer_target_ms: a.jitter_buffer_target_ms,
                playout_delay_ms: a.playout_delay_ms,
            },
            voice_to_ear_ms: speech_end.map(|(t, _)| heard - t),
            end_ms: a.end_ms.map(&rel),
            concealed_ratio: answer_ratio,
            choppy: answer_ratio.is_some_and(|r| r > CHOPPY_RATIO),
            barge_in_ms: a.barge_in_ms.map(&rel),
            stopped_after_barge_in_ms: match (a.barge_in_ms, a.end_ms) {
                (Some(b), Some(e)) => Some((e - b).max(0.0)),
                _ => None,
            },
        });
        previous = a.delivered_ms;
    }
    let mut event_counts: Vec<WebrtcEventCount> = Vec::new();
    for e in &page.events {
        match event_counts.iter_mut().find(|c| c.name == e.name) {
            Some(c) => c.count += 1,
            None => event_counts.push(WebrtcEventCount { name: e.name.clone(), count: 1 }),
        }
    }
    event_counts.extend(page.event_counts.iter().map(|c| WebrtcEventCount { name: c.name.clone(), count: c.count }));
    BrowserWebrtc {
        connected_ms: page.connected_ms.map(&rel),
        closed_ms: page.closed_ms.map(&rel),
        first_packet_ms: page.first_packet_ms.map(&rel),
        rtt_ms: page.rtt_ms,
        jitter_ms: page.jitter_ms,
        loss_ratio,
        delays: WebrtcDelays {
            jitter_buffer_ms: page.jitter_buffer_ms,
            jitter_buffer_target_ms: page.jitter_buffer_target_ms,
            playout_delay_ms: page.playout_delay_ms,
        },
        mic_tap: page.mic_tap,
        remote_tap: page.remote_tap,
        concealed_ratio,
        concealment_events: page.concealment_events,
        choppy: concealed_ratio.is_some_and(|r| r > CHOPPY_RATIO) || turns.iter().any(|t| t.choppy),
        barge_ins: turns.iter().filter(|t| t.barge_in_ms.is_some()).count() as u64,
        turns,
        event_counts,
        answers_dropped: page.answers_dropped,
        events_dropped: page.events_dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> ReportedWebrtc {
        serde_json::from_value(serde_json::json!({
            "connected_ms": 1000.0, "first_packet_ms": 1100.0, "rtt_ms": 1.5,
            "packets_received": 900, "packets_lost": 100,
            "samples_received": 100000, "concealed_samples": 5000, "silent_concealed_samples": 1000,
            "jitter_buffer_ms": 40.0,
            "answers": [
                {"delivered_ms": 3000.0, "method": "ssrc", "jitter_buffer_ms": 30.0, "playout_delay_ms": 10.0,
                 "end_ms": 4000.0, "samples": 48000, "concealed_samples": 0},
                {"delivered_ms": 6000.0, "method": "stats", "jitter_buffer_ms": 50.0,
                 "end_ms": 7000.0, "samples": 48000, "concealed_samples": 4800, "barge_in_ms": 6500.0}
            ],
            "speech": [{"start_ms": 1500.0, "end_ms": 2000.0}, {"start_ms": 4500.0, "end_ms": 5000.0}],
            "events": [{"name": "input_audio_buffer.speech_stopped", "t_ms": 2400.0},
                       {"name": "response.created", "t_ms": 2500.0},
                       {"name": "response.created", "t_ms": 5500.0}],
            "event_counts": [{"name": "response.output_audio_transcript.delta", "count": 7}]
        }))
        .unwrap()
    }

    #[test]
    fn one_turn_per_answer_from_the_end_of_speech_to_heard() {
        let joined = join_webrtc(&page(), &[], |t| t - 1000.0);
        assert_eq!(joined.turns.len(), 2);
        let first = &joined.turns[0];
        assert_eq!(first.speech_end_ms, Some(1000.0));
        assert_eq!(first.speech_end_source, Some(SpeechEndSource::Vad));
        assert_eq!(first.first_packet_ms, Some(1970.0));
        assert_eq!((first.delivered_ms, first.heard_ms, first.voice_to_ear_ms), (2000.0, 2010.0, Some(1010.0)));
        assert_eq!(first.events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().len(), 2);
        assert!(!first.choppy);
        let second = &joined.turns[1];
        assert_eq!(second.events.len(), 1);
        assert_eq!(second.voice_to_ear_ms, Some(1000.0));
        assert!(second.choppy, "10 % concealed");
        assert_eq!(second.stopped_after_barge_in_ms, Some(500.0));
        assert_eq!(joined.barge_ins, 1);
        assert_eq!(joined.loss_ratio, Some(0.1));
        assert_eq!(joined.concealed_ratio, Some(0.04));
        assert!(joined.choppy);
        assert_eq!(joined.event_counts.len(), 3);
    }

    #[test]
    fn the_taps_speech_and_onsets_are_named_and_their_estimates_kept() {
        let mut page = page();
        page.speech[0].source = Some(SpeechSource::Worklet);
        page.answers[0].method = OnsetMethod::Worklet;
        page.answers[0].estimate_ms = Some(3012.0);
        page.mic_tap = Some(TapState::Running);
        let joined = join_webrtc(&page, &[], |t| t - 1000.0);
        assert_eq!(joined.turns[0].speech_end_source, Some(SpeechEndSource::Worklet));
        assert_eq!(joined.turns[0].onset_method, OnsetMethod::Worklet);
        assert_eq!(joined.turns[0].onset_estimate_ms, Some(2012.0));
        assert_eq!(joined.turns[1].speech_end_source, Some(SpeechEndSource::Vad));
        assert_eq!(joined.mic_tap, Some(TapState::Running));
        // The delays stay flat in the record.
        let json = serde_json::to_value(&joined).unwrap();
        assert_eq!(json["jitter_buffer_ms"], 40.0);
        assert_eq!(json["turns"][0]["jitter_buffer_ms"], 30.0);
        assert_eq!(json["turns"][0]["playout_delay_ms"], 10.0);
        assert_eq!(json["mic_tap"], "running");
        assert_eq!(serde_json::from_value::<BrowserWebrtc>(json).unwrap(), joined);
    }

    #[test]
    fn the_pages_own_mark_wins_over_the_detector() {
        let marks = [Mark { name: SPEECH_END_MARK.into(), t_ms: 2100.0 }];
        let joined = join_webrtc(&page(), &marks, |t| t);
        assert_eq!(joined.turns[0].speech_end_ms, Some(2100.0));
        assert_eq!(joined.turns[0].speech_end_source, Some(SpeechEndSource::Mark));
        assert_eq!(joined.turns[1].speech_end_ms, None, "one mark, for the first answer");
    }
}
