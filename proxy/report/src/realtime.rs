//! Realtime voice sessions over records (`Record::realtime`, joined with the page's view when the
//! browser probe reported one): per response, the waits docs/metrics.md ("Realtime voice")
//! defines, as distributions over every response of every session in the window.
//!
//! A session's own latency is per response, so the rows here are over responses; the counts say
//! how many sessions and responses they come from.

use std::collections::BTreeMap;

use serde::Serialize;
use tokentap_analysis::realtime::SessionEnd;
use tokentap_analysis::Distribution;
use tokentap_record::Record;

/// The report's realtime section.
#[derive(Debug, Clone, Serialize)]
pub struct RealtimeSummary {
    pub sessions: u64,
    /// Sessions that ended without a close frame from either side.
    pub sessions_ended_abruptly: u64,
    pub responses: u64,
    /// Responses the user talked over (or the client cancelled or truncated).
    pub responses_interrupted: u64,
    /// `error` events the server sent.
    pub error_events: u64,
    /// First audio delta − the estimated true end of the user's speech.
    pub time_to_first_audio_from_speech_end_ms: Option<Distribution>,
    /// First audio delta − `speech_stopped` (the server's end-of-turn decision).
    pub time_to_first_audio_from_speech_stopped_ms: Option<Distribution>,
    /// First audio delta − the client's `response.create` (client-triggered responses).
    pub time_to_first_audio_from_create_ms: Option<Distribution>,
    /// (last audio arrival − first) / audio after the first delta: below 1, faster than real time.
    pub real_time_factor: Option<Distribution>,
    /// A function call ready → the client's next `response.create`.
    pub tool_gap_ms: Option<Distribution>,
    /// Responses the browser probe saw played: end of speech → first audible sample.
    pub voice_to_voice_ms: Option<Distribution>,
    /// First audio delta at tokentap → first audible sample in the page.
    pub heard_after_first_audio_ms: Option<Distribution>,
    /// Each distribution's samples by its field's name (for plots; not serialized).
    #[serde(skip)]
    pub samples: BTreeMap<&'static str, Vec<f64>>,
}

/// The realtime section over `records`, `None` when none of them is a realtime session.
pub fn summarize_realtime(records: &[&Record]) -> Option<RealtimeSummary> {
    let sessions: Vec<_> = records.iter().filter_map(|r| r.realtime.as_ref().map(|s| (*r, s))).collect();
    if sessions.is_empty() {
        return None;
    }
    let responses = || sessions.iter().flat_map(|(_, s)| s.responses.iter());
    let heard =
        || sessions.iter().flat_map(|(r, _)| r.browser.as_ref().map(|b| b.realtime.as_slice()).unwrap_or_default());
    let mut samples = BTreeMap::new();
    let mut of = |name: &'static str, values: Vec<f64>| {
        let d = Distribution::from_samples(&values);
        if d.is_some() {
            samples.insert(name, values);
        }
        d
    };
    let mut summary = RealtimeSummary {
        sessions: sessions.len() as u64,
        sessions_ended_abruptly: sessions.iter().filter(|(_, s)| s.end == SessionEnd::Abrupt).count() as u64,
        responses: responses().count() as u64,
        responses_interrupted: responses().filter(|r| !r.interruption.is_empty()).count() as u64,
        error_events: sessions.iter().map(|(_, s)| s.errors.len() as u64).sum(),
        time_to_first_audio_from_speech_end_ms: of(
            "time_to_first_audio_from_speech_end_ms",
            responses().filter_map(|r| r.time_to_first_audio_from_speech_end_ms).collect(),
        ),
        time_to_first_audio_from_speech_stopped_ms: of(
            "time_to_first_audio_from_speech_stopped_ms",
            responses().filter_map(|r| r.time_to_first_audio_from_speech_stopped_ms).collect(),
        ),
        time_to_first_audio_from_create_ms: of(
            "time_to_first_audio_from_create_ms",
            responses().filter_map(|r| r.time_to_first_audio_from_create_ms).collect(),
        ),
        real_time_factor: of("real_time_factor", responses().filter_map(|r| r.real_time_factor).collect()),
        tool_gap_ms: of(
            "tool_gap_ms",
            responses().flat_map(|r| r.tool_calls.iter().filter_map(|c| c.tool_gap_ms)).collect(),
        ),
        voice_to_voice_ms: of("voice_to_voice_ms", heard().filter_map(|h| h.voice_to_voice_ms).collect()),
        heard_after_first_audio_ms: of(
            "heard_after_first_audio_ms",
            heard().filter_map(|h| h.heard_after_first_audio_ms).collect(),
        ),
        samples: BTreeMap::new(),
    };
    summary.samples = samples;
    Some(summary)
}

impl RealtimeSummary {
    /// Each row of the section's table: its words and its distribution.
    pub fn rows(&self) -> [(&'static str, Option<&Distribution>); 7] {
        [
            (
                "end of speech (estimated) → first audio delta (ms)",
                self.time_to_first_audio_from_speech_end_ms.as_ref(),
            ),
            ("speech_stopped → first audio delta (ms)", self.time_to_first_audio_from_speech_stopped_ms.as_ref()),
            ("response.create → first audio delta (ms)", self.time_to_first_audio_from_create_ms.as_ref()),
            ("audio real-time factor (below 1: faster than playback)", self.real_time_factor.as_ref()),
            ("tool call ready → next response.create (ms)", self.tool_gap_ms.as_ref()),
            ("end of speech → heard in the browser (ms)", self.voice_to_voice_ms.as_ref()),
            ("first audio delta → heard in the browser (ms)", self.heard_after_first_audio_ms.as_ref()),
        ]
    }
}
