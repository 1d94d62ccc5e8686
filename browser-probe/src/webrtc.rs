//! A WebRTC peer connection as the page sees it: the answer's audio arriving and played (from
//! `getStats()` and `getSynchronizationSources()` readings the web layer takes), the user's own
//! speech on the microphone track (an energy voice-activity detector over the same readings), and
//! the events a data channel brings (OpenAI Realtime's `type`s).
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
}

impl OnsetMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            OnsetMethod::Ssrc => "ssrc",
            OnsetMethod::Stats => "stats",
        }
    }
}

/// One answer: a stretch of audible received audio after silence.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// When its first audible sample left the jitter buffer for playout.
    pub delivered_ms: f64,
    pub method: OnsetMethod,
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

    /// Received audio at `t_ms` is audible or not.
    fn level(&mut self, t_ms: f64, audible: bool, method: OnsetMethod) {
        if audible {
            let resumed = self.last_audible_ms.is_some_and(|last| t_ms - last < ANSWER_GAP_MS);
            if !self.audible && !resumed {
                if self.answers.len() < MAX_WEBRTC_ANSWERS {
                    self.answers.push(Answer {
                        delivered_ms: t_ms,
                        method,
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

    /// A `getStats()` reading of the microphone (`media-source`): cumulative energy and duration.
    pub fn local(&mut self, t_ms: f64, energy: f64, duration_s: f64) {
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
                if self.speech.len() < MAX_WEBRTC_ANSWERS {
                    // The reading covers the interval before it: speech started within it.
                    self.speech.push(Speech { start_ms: t_ms, end_ms: None });
                    // Speech that starts while an answer plays is a barge-in.
                    if let Some(a) = self.answers.last_mut().filter(|a| a.end_ms.is_none()) {
                        a.barge_in_ms.get_or_insert(t_ms);
                    }
                } else {
                    self.speech_dropped += 1;
                }
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
            a.end_ms.get_or_insert(last);
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
mod tests {
    use super::*;

    fn reading(t: f64, rms: f64, emitted: f64, jb_s_per_sample: f64) -> Inbound {
        // 48 kHz: `t` ms of audio so far, all of it at `rms`.
        Inbound {
            packets_received: t / 20.0,
            samples_received: t * 48.0,
            energy: rms * rms * t / 1000.0,
            energy_duration_s: t / 1000.0,
            jitter_buffer_emitted: emitted,
            jitter_buffer_delay_s: emitted * jb_s_per_sample,
            ..Inbound::default()
        }
    }

    #[test]
    fn an_answer_starts_at_the_first_audible_interval_and_ends_after_a_gap() {
        let mut s = WebRtcSeen::default();
        let mut energy = 0.0;
        let mut t = 0.0;
        // 50 ms readings: silence until 1000 ms, audible until 1500 ms, silence after.
        for step in 1..=50 {
            t = f64::from(step) * 50.0;
            let level: f64 = if t > 1000.0 && t <= 1500.0 { 0.1 } else { 0.0 };
            energy += level * level * 0.05;
            let now = Inbound {
                packets_received: t / 20.0,
                samples_received: t * 48.0,
                energy,
                energy_duration_s: t / 1000.0,
                jitter_buffer_emitted: t * 48.0,
                jitter_buffer_delay_s: t * 48.0 * 0.04,
                ..Inbound::default()
            };
            s.inbound(t, now, Some(0.002));
        }
        s.close(t + 1.0);
        assert_eq!(s.first_packet_ms, Some(50.0));
        assert_eq!(s.answers.len(), 1);
        let a = &s.answers[0];
        assert_eq!((a.delivered_ms, a.end_ms, a.method), (1025.0, Some(1475.0), OnsetMethod::Stats));
        let jb = a.delays.jitter_buffer_ms.unwrap();
        assert!((jb - 40.0).abs() < 1e-6, "{jb}");
        assert_eq!(s.rtt_ms, Some(2.0));
        assert!((s.session_delays().jitter_buffer_ms.unwrap() - 40.0).abs() < 1e-6);
    }

    #[test]
    fn ssrc_levels_take_over_and_short_gaps_do_not_split_an_answer() {
        let mut s = WebRtcSeen::default();
        s.ssrc(100.0, 0.0);
        s.ssrc(110.0, 0.5);
        s.ssrc(120.0, 0.0);
        s.ssrc(200.0, 0.5); // 90 ms after the last audible frame: the same answer
        s.ssrc(220.0, 0.0);
        s.ssrc(600.0, 0.3); // a new answer
                            // Stats energy no longer starts answers.
        s.inbound(700.0, reading(700.0, 0.5, 0.0, 0.0), None);
        let starts: Vec<f64> = s.answers.iter().map(|a| a.delivered_ms).collect();
        assert_eq!(starts, vec![110.0, 600.0]);
        assert_eq!(s.answers[0].end_ms, Some(200.0));
    }

    #[test]
    fn speech_ends_after_the_hangover_and_barge_in_is_counted() {
        let mut s = WebRtcSeen::default();
        let mut e = 0.0;
        let mut t = 0.0;
        s.local(t, e, 0.0);
        // Speech from 100 to 600 ms, silence to 2000 ms, speech again at 2000 ms.
        for step in 1..=45 {
            t = f64::from(step) * 50.0;
            if (t > 100.0 && t <= 600.0) || t > 2000.0 {
                e += 0.01 * 0.05;
            }
            if t == 1500.0 {
                s.ssrc(1500.0, 0.5);
            }
            s.local(t, e, t / 1000.0);
        }
        assert_eq!(s.speech.len(), 2);
        assert_eq!((s.speech[0].start_ms, s.speech[0].end_ms), (150.0, Some(600.0)));
        assert_eq!(s.speech[1].end_ms, None);
        assert_eq!(s.answers[0].barge_in_ms, Some(2050.0));
    }

    #[test]
    fn the_levels_decaying_tail_is_not_speech() {
        // libwebrtc's level after loud speech that ended at 1000 ms: held until the next 100 ms
        // update, then a quarter of it per update; 50 ms readings.
        let mut s = WebRtcSeen::default();
        let (mut e, mut t) = (0.0, 0.0);
        s.local(t, e, 0.0);
        for step in 1..=40 {
            t = f64::from(step) * 50.0;
            let level: f64 = match t {
                t if t <= 500.0 => 0.0,
                t if t <= 1100.0 => 0.25,
                t if t <= 1200.0 => 0.0625,
                t if t <= 1300.0 => 0.0156,
                _ => 0.0039,
            };
            e += level * level * 0.05;
            s.local(t, e, t / 1000.0);
        }
        assert_eq!(s.speech.len(), 1);
        assert_eq!(s.speech[0].end_ms, Some(1100.0), "the end of the held peak, not of the tail");
    }

    #[test]
    fn events_are_timed_or_counted_within_caps() {
        let mut s = WebRtcSeen::default();
        s.event(1.0, "response.created");
        s.event(2.0, "response.output_audio_transcript.delta");
        s.event(3.0, "response.output_audio_transcript.delta");
        s.event(4.0, &"x".repeat(MAX_NAME_LEN + 1));
        for i in 0..MAX_WEBRTC_EVENT_NAMES + 2 {
            s.event(5.0, &format!("other.{i}"));
        }
        assert_eq!(s.events, vec![ChannelEvent { name: "response.created".into(), t_ms: 1.0 }]);
        assert_eq!(s.event_counts[0], ("response.output_audio_transcript.delta".to_string(), 2));
        assert_eq!(s.event_counts.len(), MAX_WEBRTC_EVENT_NAMES);
        assert_eq!(s.events_dropped, 4);
    }
}
