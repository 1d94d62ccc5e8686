//! A WebRTC peer connection as the page sees it: the answer's audio arriving and played (from
//! `getStats()` and `getSynchronizationSources()` readings the web layer takes), the user's own
//! speech on the microphone track (an energy voice-activity detector over the same readings), and
//! the events a data channel brings (OpenAI Realtime's `type`s).
//!
//! When the page lets the probe tap the tracks' samples (an `AudioWorklet`, see `web::tap`), the
//! tap's transitions take over: the microphone's speech from its voice-activity detector, the
//! answers' onsets from the received samples' energy; the readings' estimates of the same onsets
//! are kept beside them as a cross-check, and take over again when the tap heard nothing.
//!
//! Plain Rust: the web layer polls and hands readings over; this module keeps what a report needs,
//! every list capped and what does not fit counted.

use tokentap_probe_protocol::caps::{MAX_NAME_LEN, MAX_WEBRTC_ANSWERS, MAX_WEBRTC_EVENTS, MAX_WEBRTC_EVENT_NAMES};

/// RMS above which audio counts as audible (−40 dBFS), received or spoken.
pub const AUDIBLE_RMS: f64 = 0.01;
/// Silence that ends an answer (or a stretch of speech) and lets the next audible sample start a
/// new one.
pub const ANSWER_GAP_MS: f64 = 250.0;
/// Within a stretch of speech, a reading under its peak divided by this is not voiced.
pub const SPEECH_TAIL_FACTOR: f64 = 3.0;
/// Silence after the last voiced reading that confirms the user's end of speech.
pub const SPEECH_HANGOVER_MS: f64 = 500.0;
/// An estimate's onset that the tap did not hear within this long means the tap hears nothing
/// (in Chromium a remote track feeds WebAudio only while a media element plays it).
pub const TAP_DEAF_MS: f64 = 2.0 * ANSWER_GAP_MS;

/// One `getStats()` reading of the remote audio track (`inbound-rtp`, cumulative counters as the
/// stats define them; seconds where the stats use seconds), and of the `media-playout` object.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Inbound {
    pub packets_received: f64,
    pub packets_lost: f64,
    pub jitter_s: f64,
    pub jitter_buffer_delay_s: f64,
    pub jitter_buffer_target_s: f64,
    pub jitter_buffer_emitted: f64,
    pub samples_received: f64,
    pub concealed_samples: f64,
    pub silent_concealed_samples: f64,
    pub concealment_events: f64,
    pub energy: f64,
    pub energy_duration_s: f64,
    /// `media-playout`: Σ playout delay (s) and the samples it covers.
    pub playout_delay_s: f64,
    pub playout_samples: f64,
}

/// The received audio's delays over an interval: jitter buffer (mean, its target) and playout.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Delays {
    pub jitter_buffer_ms: Option<f64>,
    pub jitter_buffer_target_ms: Option<f64>,
    pub playout_ms: Option<f64>,
}

fn ratio_ms(num: f64, den: f64) -> Option<f64> {
    (den > 0.0 && num >= 0.0).then(|| num / den * 1000.0)
}

impl Inbound {
    /// From the `inbound-rtp` members in the order of the fields above (missing ones are 0).
    pub fn from_fields(v: &[f64]) -> Inbound {
        let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
        Inbound {
            packets_received: at(0),
            packets_lost: at(1),
            jitter_s: at(2),
            jitter_buffer_delay_s: at(3),
            jitter_buffer_target_s: at(4),
            jitter_buffer_emitted: at(5),
            samples_received: at(6),
            concealed_samples: at(7),
            silent_concealed_samples: at(8),
            concealment_events: at(9),
            energy: at(10),
            energy_duration_s: at(11),
            ..Inbound::default()
        }
    }

    /// The mean delays of the samples emitted between `earlier` and `self`.
    fn delays_since(&self, earlier: &Inbound) -> Delays {
        let emitted = self.jitter_buffer_emitted - earlier.jitter_buffer_emitted;
        Delays {
            jitter_buffer_ms: ratio_ms(self.jitter_buffer_delay_s - earlier.jitter_buffer_delay_s, emitted),
            jitter_buffer_target_ms: ratio_ms(self.jitter_buffer_target_s - earlier.jitter_buffer_target_s, emitted),
            playout_ms: ratio_ms(
                self.playout_delay_s - earlier.playout_delay_s,
                self.playout_samples - earlier.playout_samples,
            ),
        }
    }
}

/// RMS over an interval from cumulative energy and duration (webrtc-stats: √(ΔE/ΔD)).
pub fn rms(energy: f64, duration_s: f64) -> Option<f64> {
    (duration_s > 0.0 && energy >= 0.0).then(|| (energy / duration_s).sqrt())
}

/// How an answer's first audible sample was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnsetMethod {
    /// `getSynchronizationSources()`: the delivery time of the first frame whose sender-reported
    /// level (RFC 6464) is audible.
    Ssrc,
    /// `getStats()` energy: the reading interval whose RMS is audible (its midpoint).
    Stats,
    /// The tap on the received samples: the first sample over the threshold in the first audible
    /// 10 ms window.
    Worklet,
}

impl OnsetMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            OnsetMethod::Ssrc => "ssrc",
            OnsetMethod::Stats => "stats",
            OnsetMethod::Worklet => "worklet",
        }
    }
}

/// How the tap on one track fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapState {
    /// Its samples reach the probe's detector.
    Running,
    /// The page has no `AudioWorklet` (an old browser, or not a secure context).
    Unavailable,
    /// Loading the detector's module failed (a content security policy that refuses `blob:`
    /// scripts, or the audio context could not be made).
    Blocked,
    /// The probe's audio context did not start (autoplay policy: no user gesture yet).
    Suspended,
    /// It heard nothing while the readings heard an answer (the remote stream is not played by a
    /// media element): the readings' estimates took over.
    Silent,
}

impl TapState {
    pub fn as_str(self) -> &'static str {
        match self {
            TapState::Running => "running",
            TapState::Unavailable => "unavailable",
            TapState::Blocked => "blocked",
            TapState::Suspended => "suspended",
            TapState::Silent => "silent",
        }
    }
}

/// Which detector found a stretch of the user's speech.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeechSource {
    /// The tap's voice-activity detector over the microphone's samples.
    Worklet,
    /// The readings' detector over the microphone's `media-source` energy.
    Stats,
}

impl SpeechSource {
    pub fn as_str(self) -> &'static str {
        match self {
            SpeechSource::Worklet => "worklet",
            SpeechSource::Stats => "stats",
        }
    }
}

/// One answer: a stretch of audible received audio after silence.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// When its first audible sample left the jitter buffer for playout.
    pub delivered_ms: f64,
    pub method: OnsetMethod,
    /// With the tap's onset: the readings' estimate of the same onset (method `ssrc` when the
    /// sender reports levels, else `stats`).
    pub estimate_ms: Option<f64>,
    /// Delays over the first reading interval that contains it.
    pub delays: Delays,
    /// Last audible sample (`None` while it plays).
    pub end_ms: Option<f64>,
    /// Received and concealed (not silent) samples while it played.
    pub samples: f64,
    pub concealed: f64,
    pub concealment_events: f64,
    /// The user started speaking while it played (barge-in).
    pub barge_in_ms: Option<f64>,
}

/// A stretch of the user's speech on the local microphone track.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Speech {
    pub start_ms: f64,
    /// The end of the last voiced reading, once confirmed by [`SPEECH_HANGOVER_MS`] of silence.
    pub end_ms: Option<f64>,
    pub source: SpeechSource,
}

/// A data channel event kept with its time.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelEvent {
    pub name: String,
    pub t_ms: f64,
}

/// Data channel event types kept with their arrival time; others are only counted.
const TIMED_EVENTS: &[&str] = &[
    "input_audio_buffer.speech_started",
    "input_audio_buffer.speech_stopped",
    "input_audio_buffer.committed",
    "response.created",
    "output_audio_buffer.started",
    "output_audio_buffer.stopped",
    "output_audio_buffer.cleared",
    "response.done",
];

/// One peer connection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WebRtcSeen {
    pub connected_ms: Option<f64>,
    pub closed_ms: Option<f64>,
    /// The first reading that saw a received audio packet.
    pub first_packet_ms: Option<f64>,
    pub rtt_ms: Option<f64>,
    /// The first and the latest readings of the remote audio.
    pub first: Option<Inbound>,
    pub last: Option<Inbound>,
    pub last_reading_ms: f64,
    pub answers: Vec<Answer>,
    pub answers_dropped: u64,
    /// Whether the answer audio is audible now, and its last audible sample.
    audible: bool,
    last_audible_ms: Option<f64>,
    /// The sender reports audio levels: onsets come from them, not from stats energy.
    pub ssrc_levels: bool,
    pub speech: Vec<Speech>,
    pub speech_dropped: u64,
    /// The microphone's cumulative energy and duration at the last reading.
    local: Option<(f64, f64)>,
    last_voiced_ms: Option<f64>,
    /// The loudest reading of the open stretch of speech.
    speech_peak: f64,
    pub events: Vec<ChannelEvent>,
    pub event_counts: Vec<(String, u64)>,
    pub events_dropped: u64,
    /// The taps on the microphone and on the remote audio (`None`: not tried).
    pub mic_tap: Option<TapState>,
    pub remote_tap: Option<TapState>,
    /// While the remote tap runs: the readings' own view of the answers, and an onset of theirs
    /// the tap has not matched yet.
    estimate_audible: bool,
    estimate_last_ms: Option<f64>,
    estimate_pending: Option<(f64, OnsetMethod)>,
}

impl WebRtcSeen {
    /// A `getStats()` reading of the remote audio at `t_ms` (the previous one at
    /// `last_reading_ms`). `round_trip_s` is the nominated candidate pair's current RTT.
    pub fn inbound(&mut self, t_ms: f64, now: Inbound, round_trip_s: Option<f64>) {
        if let Some(rtt) = round_trip_s {
            self.rtt_ms = Some(rtt * 1000.0);
        }
        if now.packets_received > 0.0 && self.first_packet_ms.is_none() {
            self.first_packet_ms = Some(t_ms);
        }
        let before = self.last.unwrap_or_default();
        let mid_ms = if self.last.is_some() { (self.last_reading_ms + t_ms) / 2.0 } else { t_ms };
        self.first.get_or_insert(now);
        self.last = Some(now);
        self.last_reading_ms = t_ms;
        if !self.ssrc_levels {
            if let Some(level) = rms(now.energy - before.energy, now.energy_duration_s - before.energy_duration_s) {
                self.level(mid_ms, level > AUDIBLE_RMS, OnsetMethod::Stats);
            }
        }
        self.check_tap(t_ms);
        // The newest answer takes the interval's delays (once) and its concealment while it plays.
        let delays = now.delays_since(&before);
        if let Some(a) = self.answers.last_mut() {
            if a.end_ms.is_none_or(|end| t_ms <= end + ANSWER_GAP_MS) && a.delivered_ms <= t_ms {
                if a.delays.jitter_buffer_ms.is_none() {
                    a.delays = delays;
                }
                a.samples += now.samples_received - before.samples_received;
                a.concealed += (now.concealed_samples - now.silent_concealed_samples)
                    - (before.concealed_samples - before.silent_concealed_samples);
                a.concealment_events += now.concealment_events - before.concealment_events;
            }
        }
    }

    /// A `getSynchronizationSources()` entry: the frame delivered at `t_ms` had `level`
    /// (0..1, from the sender's RFC 6464 header extension).
    pub fn ssrc(&mut self, t_ms: f64, level: f64) {
        self.ssrc_levels = true;
        self.level(t_ms, level > AUDIBLE_RMS, OnsetMethod::Ssrc);
    }

    fn start_answer(&mut self, t_ms: f64, method: OnsetMethod, estimate_ms: Option<f64>) {
        if self.answers.len() < MAX_WEBRTC_ANSWERS {
            self.answers.push(Answer {
                delivered_ms: t_ms,
                method,
                estimate_ms,
                delays: Delays::default(),
                end_ms: None,
                samples: 0.0,
                concealed: 0.0,
                concealment_events: 0.0,
                barge_in_ms: None,
            });
        } else {
            self.answers_dropped += 1;
        }
    }

    /// Received audio at `t_ms` is audible or not, by the readings.
    fn level(&mut self, t_ms: f64, audible: bool, method: OnsetMethod) {
        if self.remote_tap == Some(TapState::Running) {
            self.estimate(t_ms, audible, method);
            return;
        }
        if audible {
            let resumed = self.last_audible_ms.is_some_and(|last| t_ms - last < ANSWER_GAP_MS);
            if !self.audible && !resumed {
                self.start_answer(t_ms, method, None);
            }
            if let Some(a) = self.answers.last_mut() {
                a.end_ms = None;
            }
            self.audible = true;
            self.last_audible_ms = Some(t_ms);
        } else if self.audible {
            self.audible = false;
            if let Some(a) = self.answers.last_mut() {
                a.end_ms = self.last_audible_ms;
            }
        }
    }

    /// The readings' onsets while the tap runs: each goes to the tap's answer it matches (within
    /// [`ANSWER_GAP_MS`]), or waits for it.
    fn estimate(&mut self, t_ms: f64, audible: bool, method: OnsetMethod) {
        if !audible {
            self.estimate_audible = false;
            return;
        }
        let resumed = self.estimate_last_ms.is_some_and(|last| t_ms - last < ANSWER_GAP_MS);
        if !self.estimate_audible && !resumed {
            match self.answers.last_mut() {
                Some(a) if a.estimate_ms.is_none() && (a.delivered_ms - t_ms).abs() < ANSWER_GAP_MS => {
                    a.estimate_ms = Some(t_ms);
                }
                _ => self.estimate_pending = Some((t_ms, method)),
            }
        }
        self.estimate_audible = true;
        self.estimate_last_ms = Some(t_ms);
    }

    /// An onset the readings found and the tap did not hear for [`TAP_DEAF_MS`]: a tap that never
    /// heard an answer hears nothing, and the readings take over from that answer on; one that did
    /// hears the track (the readings split an answer the samples kept whole).
    fn check_tap(&mut self, t_ms: f64) {
        let Some((at, method)) = self.estimate_pending else { return };
        if self.remote_tap != Some(TapState::Running) || t_ms - at < TAP_DEAF_MS {
            return;
        }
        self.estimate_pending = None;
        if self.answers.iter().all(|a| a.method != OnsetMethod::Worklet) {
            self.remote_tap = Some(TapState::Silent);
            self.start_answer(at, method, None);
            self.audible = self.estimate_audible;
            self.last_audible_ms = self.estimate_last_ms;
        }
    }

    /// The remote tap heard the answer audio start (`audible`) or end at `t_ms` (it confirmed the
    /// end after [`ANSWER_GAP_MS`] of silence).
    pub fn tap_audible(&mut self, t_ms: f64, audible: bool) {
        if self.remote_tap != Some(TapState::Running) {
            return;
        }
        if audible {
            let estimate = self.estimate_pending.take().filter(|(e, _)| (e - t_ms).abs() < ANSWER_GAP_MS);
            self.start_answer(t_ms, OnsetMethod::Worklet, estimate.map(|(e, _)| e));
            self.audible = true;
        } else if let Some(a) = self.answers.last_mut().filter(|a| a.end_ms.is_none()) {
            a.end_ms = Some(t_ms);
            // Speech that started after the answer's last sample did not talk over it.
            if a.barge_in_ms.is_some_and(|b| b > t_ms) {
                a.barge_in_ms = None;
            }
            self.audible = false;
        }
        self.last_audible_ms = Some(t_ms);
    }

    /// The microphone tap heard the user start (`voiced`) or stop speaking at `t_ms` (it
    /// confirmed the end after [`SPEECH_HANGOVER_MS`] of silence).
    pub fn tap_speech(&mut self, t_ms: f64, voiced: bool) {
        if self.mic_tap != Some(TapState::Running) {
            return;
        }
        let open = self.speech.last().is_some_and(|s| s.end_ms.is_none());
        if voiced && !open {
            self.speech_started(t_ms, SpeechSource::Worklet);
        } else if !voiced && open {
            if let Some(s) = self.speech.last_mut() {
                s.end_ms = Some(t_ms);
            }
        }
    }

    fn speech_started(&mut self, t_ms: f64, source: SpeechSource) {
        if self.speech.len() < MAX_WEBRTC_ANSWERS {
            self.speech.push(Speech { start_ms: t_ms, end_ms: None, source });
            // Speech that starts while an answer plays is a barge-in.
            if let Some(a) = self.answers.last_mut().filter(|a| a.end_ms.is_none()) {
                a.barge_in_ms.get_or_insert(t_ms);
            }
        } else {
            self.speech_dropped += 1;
        }
    }

    /// A `getStats()` reading of the microphone (`media-source`): cumulative energy and duration.
    /// Ignored while the microphone tap runs.
    pub fn local(&mut self, t_ms: f64, energy: f64, duration_s: f64) {
        if self.mic_tap == Some(TapState::Running) {
            return;
        }
        let before = self.local.replace((energy, duration_s));
        let Some((e0, d0)) = before else { return };
        let Some(level) = rms(energy - e0, duration_s - d0) else { return };
        let open = self.speech.last().is_some_and(|s| s.end_ms.is_none());
        // libwebrtc's level holds the peak of the last 100 ms and then falls by 4 per 100 ms: within
        // a stretch of speech, a reading under a third of its peak is that tail, not speech.
        let voiced = level > AUDIBLE_RMS && (!open || level > self.speech_peak / SPEECH_TAIL_FACTOR);
        if voiced {
            self.last_voiced_ms = Some(t_ms);
            self.speech_peak = if open { self.speech_peak.max(level) } else { level };
            if !open {
                // The reading covers the interval before it: speech started within it.
                self.speech_started(t_ms, SpeechSource::Stats);
            }
        } else if let (true, Some(last)) = (open, self.last_voiced_ms) {
            if t_ms - last >= SPEECH_HANGOVER_MS {
                if let Some(s) = self.speech.last_mut() {
                    s.end_ms = Some(last);
                }
            }
        }
    }

    /// A data channel message whose `type` is `name` arrived at `t_ms`.
    pub fn event(&mut self, t_ms: f64, name: &str) {
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            self.events_dropped += 1;
            return;
        }
        if TIMED_EVENTS.contains(&name) && self.events.len() < MAX_WEBRTC_EVENTS {
            self.events.push(ChannelEvent { name: name.to_string(), t_ms });
            return;
        }
        if let Some(c) = self.event_counts.iter_mut().find(|(n, _)| n == name) {
            c.1 += 1;
        } else if self.event_counts.len() < MAX_WEBRTC_EVENT_NAMES {
            self.event_counts.push((name.to_string(), 1));
        } else {
            self.events_dropped += 1;
        }
    }

    /// The connection is over: an answer still playing ends at its last audible sample.
    pub fn close(&mut self, t_ms: f64) {
        self.closed_ms.get_or_insert(t_ms);
        if let (Some(a), Some(last)) = (self.answers.last_mut(), self.last_audible_ms) {
            // The tap tells only the onset of what still plays.
            a.end_ms.get_or_insert(if a.method == OnsetMethod::Worklet { t_ms } else { last });
        }
    }

    /// Delays over the whole session (first to last reading).
    pub fn session_delays(&self) -> Delays {
        match (&self.first, &self.last) {
            (Some(first), Some(last)) => last.delays_since(first),
            _ => Delays::default(),
        }
    }
}

#[cfg(test)]
mod tests;
