//! The mock's "speech": a leading silence of exact zeros, then a deterministic 220 Hz tone whose
//! amplitude swells and fades three times a second, like syllables: −12 dBFS RMS at its loudest,
//! −26 dBFS at its quietest (a sine's RMS is its peak over √2), so every 10 ms of it is far above
//! the −40 dBFS at which a listener (or an onset detector) calls audio audible. Rendered as 24 kHz
//! 16-bit signed little-endian mono PCM.

use std::f64::consts::{PI, SQRT_2};
use std::ops::Range;
use std::time::Duration;

use super::wav::PcmLayout;

/// Pitch of the tone.
const TONE_HZ: f64 = 220.0;
/// Swells per second of the amplitude envelope.
const ENVELOPE_HZ: f64 = 3.0;
/// Level at the top of a swell (dBFS, RMS).
const LOUDEST_DBFS: f64 = -12.0;
/// The envelope's lowest point, as a fraction of its highest: 0.2 is −14 dB.
const ENVELOPE_FLOOR: f64 = 0.2;

/// Leading silence, then speech.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SpeechSignal {
    silence_frames: u64,
    speech_frames: u64,
}

impl SpeechSignal {
    pub(crate) const LAYOUT: PcmLayout = PcmLayout::SPEECH;

    pub(crate) fn new(silence: Duration, speech: Duration) -> SpeechSignal {
        SpeechSignal { silence_frames: frames_in(silence), speech_frames: frames_in(speech) }
    }

    /// Frames (= samples: mono) of the whole signal.
    pub(crate) fn frames(&self) -> u64 {
        self.silence_frames + self.speech_frames
    }

    /// Play time of the whole signal.
    pub(crate) fn duration(&self) -> Duration {
        Duration::from_micros(self.frames() * 1_000_000 / u64::from(Self::LAYOUT.sample_rate_hz))
    }

    /// Sample `frame`: zero in the silence and past the end.
    pub(crate) fn sample(&self, frame: u64) -> i16 {
        if frame < self.silence_frames || frame >= self.frames() {
            return 0;
        }
        // Counted from 1, so that the first sample of speech is not a zero crossing: the silence
        // ends exactly where the zeros do.
        let t = (frame - self.silence_frames + 1) as f64 / f64::from(Self::LAYOUT.sample_rate_hz);
        let loudest_peak = 10f64.powf(LOUDEST_DBFS / 20.0) * SQRT_2;
        let swell = (1.0 + ENVELOPE_FLOOR) / 2.0 + (1.0 - ENVELOPE_FLOOR) / 2.0 * (2.0 * PI * ENVELOPE_HZ * t).sin();
        let value = loudest_peak * swell * (2.0 * PI * TONE_HZ * t).sin();
        // In range by construction (|value| < 0.36); `as` saturates anyway.
        (value * f64::from(i16::MAX)).round() as i16
    }

    /// Little-endian PCM bytes of `frames` (clamped to the signal).
    pub(crate) fn pcm(&self, frames: Range<u64>) -> Vec<u8> {
        let frames = frames.start.min(self.frames())..frames.end.min(self.frames());
        let mut bytes = Vec::with_capacity(usize::try_from(frames.end.saturating_sub(frames.start) * 2).unwrap_or(0));
        for frame in frames {
            bytes.extend_from_slice(&self.sample(frame).to_le_bytes());
        }
        bytes
    }
}

/// Frames in `duration` at the speech sample rate, rounded down.
pub(crate) fn frames_in(duration: Duration) -> u64 {
    let frames = duration.as_micros() * u128::from(SpeechSignal::LAYOUT.sample_rate_hz) / 1_000_000;
    u64::try_from(frames).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rms_dbfs(samples: &[i16]) -> f64 {
        let power: f64 = samples.iter().map(|s| (f64::from(*s) / 32768.0).powi(2)).sum::<f64>() / samples.len() as f64;
        10.0 * power.log10()
    }

    #[test]
    fn leading_silence_is_exactly_that_many_zeros() {
        for silence_ms in [0, 1, 200, 333] {
            let signal = SpeechSignal::new(Duration::from_millis(silence_ms), Duration::from_millis(300));
            let samples: Vec<i16> = (0..signal.frames()).map(|f| signal.sample(f)).collect();
            let first_sound = samples.iter().position(|s| *s != 0).unwrap();
            assert_eq!(first_sound as u64, silence_ms * 24, "{silence_ms} ms of silence");
            assert_eq!(signal.frames(), (silence_ms + 300) * 24);
        }
    }

    #[test]
    fn every_10_ms_of_speech_is_well_above_minus_40_dbfs() {
        let signal = SpeechSignal::new(Duration::from_millis(200), Duration::from_secs(3));
        let speech: Vec<i16> = (200 * 24..signal.frames()).map(|f| signal.sample(f)).collect();
        let levels: Vec<f64> = speech.chunks_exact(240).map(rms_dbfs).collect();
        assert_eq!(levels.len(), 300);
        let quietest = levels.iter().copied().fold(f64::INFINITY, f64::min);
        let loudest = levels.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        assert!(quietest > -30.0, "quietest 10 ms at {quietest:.1} dBFS");
        assert!((-13.0..=-11.0).contains(&loudest), "loudest 10 ms at {loudest:.1} dBFS");
        // Not a constant tone: the envelope moves.
        assert!(loudest - quietest > 10.0);
    }

    #[test]
    fn pcm_is_little_endian_samples_and_deterministic() {
        let signal = SpeechSignal::new(Duration::from_millis(10), Duration::from_millis(20));
        let bytes = signal.pcm(0..signal.frames() + 100);
        assert_eq!(bytes.len() as u64, signal.frames() * 2, "clamped to the signal");
        assert_eq!(bytes, signal.pcm(0..signal.frames()));
        let k = 240 + 5;
        assert_eq!(i16::from_le_bytes([bytes[2 * k], bytes[2 * k + 1]]), signal.sample(k as u64));
        assert_eq!(signal.duration(), Duration::from_millis(30));
        let (from, to) = (5, 2);
        assert!(signal.pcm(from..to).is_empty(), "a reversed range is empty");
    }
}
