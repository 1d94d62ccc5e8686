//! One answer's audio as the page played it: when it was first heard, when playback ran dry, and
//! whether it was stopped before its end (barge-in).
//!
//! Two sources feed it, both platform-free here:
//! - an AudioContext the app schedules buffers on (`audioScheduled(ctx, when, duration)`): a buffer
//!   that starts later than the end of the one before is starvation (the app had nothing to play);
//!   times are context seconds, and the end of what was scheduled maps to wall time through the
//!   context's output clock;
//! - a media element's events: `waiting` (ran dry) … `playing` (resumed), `ended`, `pause` before
//!   the end (stopped).
//!
//! Gaps shorter than [`MIN_UNDERRUN_MS`] are not counted: an output buffer absorbs them, as the
//! proxy's predicted underruns do (docs/metrics.md).

/// Where a playback was observed (the protocol's names).
pub use tokentap_probe_protocol::AudioKind;

/// Shorter gaps are absorbed by any output buffer.
pub const MIN_UNDERRUN_MS: f64 = 10.0;
/// A playback that started but whose end the page never learns holds its turn's report this long
/// after it was first heard (the page is hidden or flushed sooner, and reports then).
pub const MAX_PLAYOUT_WAIT_MS: f64 = 120_000.0;
/// Stopped this close to its scheduled end, a playback counts as played out, not interrupted.
const END_SLACK_MS: f64 = 20.0;

#[derive(Debug, Clone, PartialEq)]
pub struct Playout {
    pub kind: AudioKind,
    /// When the first sound left the output (wall-clock ms).
    pub audible_ms: Option<f64>,
    pub output_latency_ms: Option<f64>,
    /// Audio scheduled so far (AudioContext only), in ms of audio.
    pub scheduled_audio_ms: f64,
    /// Times the playback ran dry, and for how long in total.
    pub underruns: u32,
    pub starved_ms: f64,
    /// When playback ended: the `ended` event, or the scheduled end once it has passed.
    pub ended_ms: Option<f64>,
    /// When the app (or the user) stopped playback before its end.
    pub interrupted_ms: Option<f64>,
    /// The scheduled end on the wall clock (AudioContext), as last mapped.
    expected_end_ms: Option<f64>,
    /// End of the last scheduled buffer, in context seconds.
    end_context_s: Option<f64>,
    /// A media element waiting for data since then.
    stalled_since_ms: Option<f64>,
}

impl Playout {
    pub fn new(kind: AudioKind) -> Playout {
        Playout {
            kind,
            audible_ms: None,
            output_latency_ms: None,
            scheduled_audio_ms: 0.0,
            underruns: 0,
            starved_ms: 0.0,
            ended_ms: None,
            interrupted_ms: None,
            expected_end_ms: None,
            end_context_s: None,
            stalled_since_ms: None,
        }
    }

    /// The first sound was heard at `audible_ms`; later starts of the same playback change nothing.
    /// An AudioContext playback the app stopped before its first sound left the output was never
    /// heard: its scheduled start, read from the output clock after the stop, is refused. (A
    /// media element paused before it played and played later is heard when it plays.)
    pub fn heard(&mut self, audible_ms: f64, output_latency_ms: Option<f64>) {
        let stopped_before = self.kind == AudioKind::AudioContext
            && self.ended_ms.or(self.interrupted_ms).is_some_and(|stop| audible_ms > stop);
        if stopped_before {
            return;
        }
        if self.audible_ms.is_none() {
            self.audible_ms = Some(audible_ms);
        }
        if output_latency_ms.is_some() {
            self.output_latency_ms = output_latency_ms;
        }
    }

    /// Whether nothing was scheduled yet (the first buffer starts the playback).
    pub fn is_unscheduled(&self) -> bool {
        self.end_context_s.is_none()
    }

    /// A buffer of `duration_s` scheduled at context time `when_s`; `to_wall_ms` maps context
    /// seconds to wall-clock ms (through the output clock). A buffer starting after the end of
    /// what was scheduled before is starvation: the listener heard silence in between.
    pub fn schedule(&mut self, when_s: f64, duration_s: f64, to_wall_ms: impl Fn(f64) -> f64) {
        if !(when_s.is_finite() && duration_s.is_finite()) || duration_s < 0.0 || self.is_stopped() {
            return;
        }
        let end = match self.end_context_s {
            None => when_s + duration_s,
            Some(previous_end) => {
                let gap_ms = (when_s - previous_end) * 1000.0;
                if gap_ms >= MIN_UNDERRUN_MS {
                    self.underruns += 1;
                    self.starved_ms += gap_ms;
                }
                previous_end.max(when_s + duration_s)
            }
        };
        self.end_context_s = Some(end);
        self.scheduled_audio_ms += duration_s * 1000.0;
        self.expected_end_ms = Some(to_wall_ms(end));
    }

    /// A media element ran out of data.
    pub fn waiting(&mut self, t_ms: f64) {
        if self.audible_ms.is_some() && self.stalled_since_ms.is_none() && !self.is_stopped() {
            self.stalled_since_ms = Some(t_ms);
        }
    }

    /// A media element is playing again (after `waiting`).
    pub fn resumed(&mut self, t_ms: f64) {
        if let Some(since) = self.stalled_since_ms.take() {
            let gap = t_ms - since;
            if gap >= MIN_UNDERRUN_MS {
                self.underruns += 1;
                self.starved_ms += gap;
            }
        }
    }

    /// Playback reached its end.
    pub fn ended(&mut self, t_ms: f64) {
        if self.is_stopped() {
            return;
        }
        self.resumed(t_ms);
        self.ended_ms = Some(t_ms);
    }

    /// The app stopped playback at `t_ms` (`stopAudio()`, or a media element paused before its
    /// end). Stopped at or after the scheduled end, it simply ended.
    pub fn stopped(&mut self, t_ms: f64) {
        if self.is_stopped() {
            return;
        }
        self.stalled_since_ms = None;
        match self.expected_end_ms {
            Some(end) if t_ms + END_SLACK_MS >= end => self.ended_ms = Some(end),
            _ => self.interrupted_ms = Some(t_ms),
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.ended_ms.is_some() || self.interrupted_ms.is_some()
    }

    /// The playback's end as the report states it: when it ended or was stopped, else the
    /// scheduled end when that has passed by `now_ms`.
    pub fn end_ms(&self, now_ms: f64) -> Option<f64> {
        self.ended_ms.or(self.interrupted_ms).or(self.expected_end_ms.filter(|&end| end <= now_ms))
    }

    /// Until when this playback holds its turn's report: its end (known or scheduled), or, for a
    /// media element whose end is not known yet, [`MAX_PLAYOUT_WAIT_MS`] after it was heard.
    /// `None` when there is nothing to wait for: it never started, or it is an AudioContext
    /// playback known only by `trackAudio` (no scheduled buffers, so no end).
    pub fn busy_until(&self) -> Option<f64> {
        if let Some(end) = self.ended_ms.or(self.interrupted_ms) {
            return Some(end);
        }
        if let Some(end) = self.expected_end_ms {
            return Some(end);
        }
        match self.kind {
            // A media element says when it ends (or pauses).
            AudioKind::MediaElement => self.audible_ms.map(|t| t + MAX_PLAYOUT_WAIT_MS),
            // A context the app schedules nothing on through the probe has no end to wait for.
            AudioKind::AudioContext => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Context time 0 is wall time 1000 ms.
    fn wall(s: f64) -> f64 {
        1000.0 + s * 1000.0
    }

    #[test]
    fn back_to_back_buffers_never_starve_and_end_where_scheduled() {
        let mut p = Playout::new(AudioKind::AudioContext);
        for i in 0..10 {
            p.schedule(0.5 + i as f64 * 0.1, 0.1, wall);
        }
        assert_eq!((p.underruns, p.starved_ms), (0, 0.0));
        assert!((p.scheduled_audio_ms - 1000.0).abs() < 1e-6);
        assert_eq!(p.end_ms(2499.0), None, "the end has not passed yet");
        assert!((p.end_ms(2500.0).unwrap() - 2500.0).abs() < 1e-6);
        assert!((p.busy_until().unwrap() - 2500.0).abs() < 1e-6);
    }

    #[test]
    fn table_of_gaps_between_buffers() {
        // (start of the second buffer after a first one ending at 1.0 s, underruns, starved ms)
        let cases = [(1.0, 0, 0.0), (1.005, 0, 0.0), (1.01, 1, 10.0), (1.25, 1, 250.0), (0.9, 0, 0.0)];
        for (start, underruns, starved) in cases {
            let mut p = Playout::new(AudioKind::AudioContext);
            p.schedule(0.5, 0.5, wall);
            p.schedule(start, 0.5, wall);
            assert_eq!(p.underruns, underruns, "second buffer at {start}");
            assert!((p.starved_ms - starved).abs() < 1e-6, "second buffer at {start}: {}", p.starved_ms);
        }
    }

    #[test]
    fn stopping_before_the_scheduled_end_is_an_interruption() {
        let mut p = Playout::new(AudioKind::AudioContext);
        p.heard(1500.0, None);
        p.schedule(0.5, 2.0, wall);
        p.stopped(2000.0);
        assert_eq!(p.interrupted_ms, Some(2000.0));
        assert_eq!(p.ended_ms, None);
        assert_eq!(p.end_ms(0.0), Some(2000.0));
        // Nothing scheduled after the stop counts.
        p.schedule(2.5, 1.0, wall);
        assert!((p.scheduled_audio_ms - 2000.0).abs() < 1e-6);
    }

    #[test]
    fn a_playback_stopped_before_its_first_sound_was_never_heard() {
        // Scheduled from 0.5 s of context time (1500 ms on the wall), stopped at 1200 ms: the
        // output clock passes 0.5 s later, and that start is refused.
        let mut p = Playout::new(AudioKind::AudioContext);
        p.schedule(0.5, 2.0, wall);
        p.stopped(1200.0);
        p.heard(1500.0, Some(10.0));
        assert_eq!((p.audible_ms, p.output_latency_ms), (None, None));
        assert_eq!(p.interrupted_ms, Some(1200.0));
        // Stopped after its first sound left (read late, after the stop): heard.
        let mut p = Playout::new(AudioKind::AudioContext);
        p.schedule(0.5, 2.0, wall);
        p.stopped(1600.0);
        p.heard(1500.0, None);
        assert_eq!(p.audible_ms, Some(1500.0));
        // A media element paused before it played, then played: heard when it played.
        let mut p = Playout::new(AudioKind::MediaElement);
        p.stopped(900.0);
        p.heard(1000.0, None);
        assert_eq!(p.audible_ms, Some(1000.0));
    }

    #[test]
    fn stopping_at_the_scheduled_end_is_the_end() {
        let mut p = Playout::new(AudioKind::AudioContext);
        p.schedule(0.5, 1.0, wall);
        p.stopped(2495.0);
        assert_eq!(p.interrupted_ms, None);
        assert!((p.ended_ms.unwrap() - 2500.0).abs() < 1e-6);
    }

    #[test]
    fn media_element_waits_count_once_started() {
        let mut p = Playout::new(AudioKind::MediaElement);
        p.waiting(900.0); // before it played: the initial load, not an underrun
        p.resumed(950.0);
        assert_eq!(p.underruns, 0);
        p.heard(1000.0, None);
        assert_eq!(p.busy_until(), Some(1000.0 + MAX_PLAYOUT_WAIT_MS), "end unknown yet");
        p.waiting(1500.0);
        p.waiting(1510.0); // repeated events keep the first
        p.resumed(1800.0);
        p.waiting(2000.0);
        p.resumed(2005.0); // absorbed
        p.waiting(2500.0);
        p.ended(2600.0); // ran dry up to the end
        assert_eq!(p.underruns, 2);
        assert!((p.starved_ms - 400.0).abs() < 1e-6);
        assert_eq!(p.ended_ms, Some(2600.0));
        assert_eq!(p.busy_until(), Some(2600.0));
        p.stopped(2700.0); // a pause after the end changes nothing
        assert_eq!(p.interrupted_ms, None);
    }

    #[test]
    fn a_media_element_paused_before_its_end_was_interrupted() {
        let mut p = Playout::new(AudioKind::MediaElement);
        p.heard(1000.0, Some(12.0));
        p.stopped(1400.0);
        assert_eq!(p.interrupted_ms, Some(1400.0));
        assert_eq!(p.output_latency_ms, Some(12.0));
        p.ended(1500.0);
        assert_eq!(p.ended_ms, None, "the first stop wins");
    }

    #[test]
    fn a_context_known_only_by_its_first_sound_holds_nothing() {
        let mut p = Playout::new(AudioKind::AudioContext);
        p.heard(1000.0, None);
        assert_eq!(p.busy_until(), None);
        assert_eq!(p.end_ms(5000.0), None);
    }

    #[test]
    fn nonsense_schedules_are_ignored() {
        let mut p = Playout::new(AudioKind::AudioContext);
        p.schedule(f64::NAN, 1.0, wall);
        p.schedule(1.0, -1.0, wall);
        p.schedule(1.0, f64::INFINITY, wall);
        assert!(p.is_unscheduled());
        assert_eq!(p.busy_until(), None);
    }
}
