//! A report's `webrtc` section: a WebRTC peer connection the page held, whose SDP offer the
//! reported request carried. Counters are `getStats()`'s, cumulative at the connection's last
//! reading; every browser time is wall-clock milliseconds in the browser.

use serde::{Deserialize, Serialize};
use tokentap_probe_protocol::caps::{MAX_WEBRTC_ANSWERS, MAX_WEBRTC_EVENTS, MAX_WEBRTC_EVENT_NAMES};

use super::checks::{count, duration, invalid, name, ReportError, Span, MAX_COUNT};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedWebrtc {
    /// First reading with `connectionState` `connected`, and the connection's end.
    #[serde(default)]
    pub connected_ms: Option<f64>,
    #[serde(default)]
    pub closed_ms: Option<f64>,
    /// First reading that saw a received audio packet.
    #[serde(default)]
    pub first_packet_ms: Option<f64>,
    /// The nominated candidate pair's `currentRoundTripTime` at the last reading.
    #[serde(default)]
    pub rtt_ms: Option<f64>,
    /// RFC 3550 interarrival jitter at the last reading.
    #[serde(default)]
    pub jitter_ms: Option<f64>,
    #[serde(default)]
    pub packets_received: Option<f64>,
    /// May be negative (duplicates), as RTCP defines it.
    #[serde(default)]
    pub packets_lost: Option<f64>,
    #[serde(default)]
    pub samples_received: Option<f64>,
    #[serde(default)]
    pub concealed_samples: Option<f64>,
    #[serde(default)]
    pub silent_concealed_samples: Option<f64>,
    #[serde(default)]
    pub concealment_events: Option<f64>,
    /// Means over the session: jitter buffer delay and target per emitted sample, playout delay.
    #[serde(default)]
    pub jitter_buffer_ms: Option<f64>,
    #[serde(default)]
    pub jitter_buffer_target_ms: Option<f64>,
    #[serde(default)]
    pub playout_delay_ms: Option<f64>,
    /// The probe's taps on the microphone's and the remote audio's samples (absent: not tried).
    #[serde(default)]
    pub mic_tap: Option<TapState>,
    #[serde(default)]
    pub remote_tap: Option<TapState>,
    #[serde(default)]
    pub answers: Vec<ReportedAnswer>,
    #[serde(default)]
    pub answers_dropped: u64,
    /// The user's speech on the microphone track (the probe's voice-activity detector).
    #[serde(default)]
    pub speech: Vec<ReportedSpeech>,
    #[serde(default)]
    pub speech_dropped: u64,
    /// Data channel events kept with their arrival time, and the others counted by name.
    #[serde(default)]
    pub events: Vec<ReportedEvent>,
    #[serde(default)]
    pub event_counts: Vec<ReportedEventCount>,
    #[serde(default)]
    pub events_dropped: u64,
}

tokentap_analysis::named_enum! {
    /// How an answer's first audible sample was found.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum OnsetMethod {
        /// `getSynchronizationSources()`: delivery time of the first frame whose sender-reported
        /// level is audible (within one poll, 20 ms, late).
        Ssrc = "ssrc",
        /// `getStats()` energy: the midpoint of the first audible reading interval (±half a
        /// reading, 30 ms).
        Stats = "stats",
        /// The probe's `AudioWorklet` tap on the received samples: the first sample over the
        /// threshold in the first audible 10 ms window.
        Worklet = "worklet",
    }
}

tokentap_analysis::named_enum! {
    /// How the probe's `AudioWorklet` tap on one track fared.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum TapState {
        /// Its samples reached the probe's detector.
        Running = "running",
        /// The page has no `AudioWorklet` (an old browser, or not a secure context).
        Unavailable = "unavailable",
        /// The detector's module did not load (a content security policy refusing `blob:`).
        Blocked = "blocked",
        /// The probe's audio context did not start (autoplay policy).
        Suspended = "suspended",
        /// It heard nothing while `getStats()` heard an answer (no media element plays the
        /// remote stream): the estimates took over.
        Silent = "silent",
    }
}

tokentap_analysis::named_enum! {
    /// Which of the probe's detectors found a stretch of the user's speech.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum SpeechSource {
        /// The `AudioWorklet` tap's voice-activity detector over the microphone's samples.
        Worklet = "worklet",
        /// The detector over the microphone's `getStats()` `media-source` energy.
        Stats = "stats",
    }
}

/// One answer: a stretch of audible received audio after at least 250 ms of silence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedAnswer {
    /// Its first audible sample left the jitter buffer for playout.
    pub delivered_ms: f64,
    pub method: OnsetMethod,
    /// With method `worklet`: the `ssrc` (or `stats`) estimate of the same onset.
    #[serde(default)]
    pub estimate_ms: Option<f64>,
    #[serde(default)]
    pub jitter_buffer_ms: Option<f64>,
    #[serde(default)]
    pub jitter_buffer_target_ms: Option<f64>,
    #[serde(default)]
    pub playout_delay_ms: Option<f64>,
    /// Its last audible sample.
    #[serde(default)]
    pub end_ms: Option<f64>,
    #[serde(default)]
    pub samples: f64,
    /// Concealed samples that were not silent.
    #[serde(default)]
    pub concealed_samples: f64,
    #[serde(default)]
    pub concealment_events: f64,
    /// The user started speaking while it played.
    #[serde(default)]
    pub barge_in_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedSpeech {
    pub start_ms: f64,
    #[serde(default)]
    pub end_ms: Option<f64>,
    /// Absent from older probes: `stats`.
    #[serde(default)]
    pub source: Option<SpeechSource>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedEvent {
    pub name: String,
    pub t_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedEventCount {
    pub name: String,
    pub count: u64,
}

/// A cumulative counter or a mean: finite, non-negative, at most [`MAX_COUNT`].
fn amount(field: &'static str, v: f64) -> Result<(), ReportError> {
    if v.is_finite() && (0.0..=MAX_COUNT as f64).contains(&v) {
        Ok(())
    } else {
        Err(invalid(field, format!("{v} is not between 0 and {MAX_COUNT}")))
    }
}

impl ReportedWebrtc {
    pub(super) fn validate(&self, span: &mut Span) -> Result<(), ReportError> {
        for (field, t) in [
            ("webrtc.connected_ms", self.connected_ms),
            ("webrtc.closed_ms", self.closed_ms),
            ("webrtc.first_packet_ms", self.first_packet_ms),
        ] {
            if let Some(t) = t {
                span.time(field, t)?;
            }
        }
        for (field, d) in [
            ("webrtc.rtt_ms", self.rtt_ms),
            ("webrtc.jitter_ms", self.jitter_ms),
            ("webrtc.jitter_buffer_ms", self.jitter_buffer_ms),
            ("webrtc.jitter_buffer_target_ms", self.jitter_buffer_target_ms),
            ("webrtc.playout_delay_ms", self.playout_delay_ms),
        ] {
            if let Some(d) = d {
                duration(field, d)?;
            }
        }
        for (field, v) in [
            ("webrtc.packets_received", self.packets_received),
            ("webrtc.samples_received", self.samples_received),
            ("webrtc.concealed_samples", self.concealed_samples),
            ("webrtc.silent_concealed_samples", self.silent_concealed_samples),
            ("webrtc.concealment_events", self.concealment_events),
        ] {
            if let Some(v) = v {
                amount(field, v)?;
            }
        }
        if let Some(lost) = self.packets_lost {
            if !lost.is_finite() || lost.abs() > MAX_COUNT as f64 {
                return Err(invalid("webrtc.packets_lost", format!("at most ±{MAX_COUNT}")));
            }
        }
        for (field, n) in [
            ("webrtc.answers_dropped", self.answers_dropped),
            ("webrtc.speech_dropped", self.speech_dropped),
            ("webrtc.events_dropped", self.events_dropped),
        ] {
            count(field, n)?;
        }
        if self.answers.len() > MAX_WEBRTC_ANSWERS || self.speech.len() > MAX_WEBRTC_ANSWERS {
            return Err(invalid(
                "webrtc.answers",
                format!("at most {MAX_WEBRTC_ANSWERS} answers and speech stretches"),
            ));
        }
        for a in &self.answers {
            span.time("webrtc.answers.delivered_ms", a.delivered_ms)?;
            for t in [a.end_ms, a.barge_in_ms, a.estimate_ms].into_iter().flatten() {
                span.time("webrtc.answers.end_ms", t)?;
            }
            for d in [a.jitter_buffer_ms, a.jitter_buffer_target_ms, a.playout_delay_ms].into_iter().flatten() {
                duration("webrtc.answers.jitter_buffer_ms", d)?;
            }
            for v in [a.samples, a.concealed_samples, a.concealment_events] {
                amount("webrtc.answers.samples", v)?;
            }
        }
        for s in &self.speech {
            span.time("webrtc.speech.start_ms", s.start_ms)?;
            if let Some(t) = s.end_ms {
                span.time("webrtc.speech.end_ms", t)?;
            }
        }
        if self.events.len() > MAX_WEBRTC_EVENTS {
            return Err(invalid("webrtc.events", format!("at most {MAX_WEBRTC_EVENTS}")));
        }
        for e in &self.events {
            name("webrtc.events.name", &e.name)?;
            span.time("webrtc.events.t_ms", e.t_ms)?;
        }
        if self.event_counts.len() > MAX_WEBRTC_EVENT_NAMES {
            return Err(invalid("webrtc.event_counts", format!("at most {MAX_WEBRTC_EVENT_NAMES}")));
        }
        for c in &self.event_counts {
            name("webrtc.event_counts.name", &c.name)?;
            count("webrtc.event_counts.count", c.count)?;
        }
        Ok(())
    }
}
