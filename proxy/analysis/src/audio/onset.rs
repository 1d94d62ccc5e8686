//! The first audible sample: an energy-onset rule over decoded audio. The audio is cut into 10 ms
//! windows; a window is loud when its RMS level is at least −40 dBFS (full scale = 1.0, so a
//! full-scale square wave is 0 dBFS and a full-scale sine −3 dBFS); the onset is the start of the
//! first run of loud windows that lasts 50 ms (or runs to the end of the audio). Resolution: one
//! window. Quieter noise floors, clicks and dither are not sound to this rule.

/// Window length.
pub const WINDOW_MS: u32 = 10;
/// A run of loud windows this long is sound.
pub const SUSTAIN_MS: u32 = 50;
/// The level a window must reach.
pub const THRESHOLD_DBFS: f64 = -40.0;

#[derive(Debug)]
pub(crate) struct OnsetDetector {
    window_frames: u64,
    windows_needed: u32,
    threshold_power: f64,
    /// Power summed over the current window.
    acc: f64,
    in_window: u64,
    frames: u64,
    run_start: u64,
    run_windows: u32,
    onset: Option<u64>,
}

impl OnsetDetector {
    pub(super) fn new(sample_rate_hz: u32) -> Self {
        let window_frames = (u64::from(sample_rate_hz) * u64::from(WINDOW_MS) / 1000).max(1);
        Self {
            window_frames,
            windows_needed: SUSTAIN_MS / WINDOW_MS,
            threshold_power: 10f64.powf(THRESHOLD_DBFS / 10.0),
            acc: 0.0,
            in_window: 0,
            frames: 0,
            run_start: 0,
            run_windows: 0,
            onset: None,
        }
    }

    pub(super) fn onset_found(&self) -> bool {
        self.onset.is_some()
    }

    /// Feeds one frame's power (mean square over channels).
    pub(super) fn push(&mut self, power: f64) {
        if self.onset.is_some() {
            return;
        }
        self.acc += power;
        self.in_window += 1;
        self.frames += 1;
        if self.in_window == self.window_frames {
            self.close_window(self.acc / self.window_frames as f64);
        }
    }

    fn close_window(&mut self, mean_power: f64) {
        let start = self.frames - self.in_window;
        if mean_power >= self.threshold_power {
            if self.run_windows == 0 {
                self.run_start = start;
            }
            self.run_windows += 1;
            if self.run_windows >= self.windows_needed {
                self.onset = Some(self.run_start);
            }
        } else {
            self.run_windows = 0;
        }
        self.acc = 0.0;
        self.in_window = 0;
    }

    /// The audio ended: a loud run (or a loud last partial window) that reached the end counts.
    pub(super) fn finish(&mut self) -> Option<u64> {
        if self.onset.is_none() && self.in_window > 0 {
            let partial = self.in_window;
            let mean = self.acc / partial as f64;
            let start = self.frames - partial;
            if mean >= self.threshold_power {
                if self.run_windows == 0 {
                    self.run_start = start;
                }
                self.run_windows += 1;
            } else {
                self.run_windows = 0;
            }
            self.in_window = 0;
        }
        if self.onset.is_none() && self.run_windows > 0 {
            self.onset = Some(self.run_start);
        }
        self.onset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic noise in [-1, 1] (xorshift).
    pub(crate) fn noise(seed: &mut u64) -> f64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }

    fn run(rate: u32, samples: impl Iterator<Item = f64>) -> Option<u64> {
        let mut d = OnsetDetector::new(rate);
        for x in samples {
            d.push(x * x);
        }
        d.finish()
    }

    fn db(level_dbfs: f64) -> f64 {
        10f64.powf(level_dbfs / 20.0)
    }

    #[test]
    fn silence_then_tone_is_found_at_the_window_of_the_tone() {
        for rate in [8_000u32, 16_000, 24_000, 44_100, 48_000] {
            for silence_ms in [0u64, 10, 125, 300, 1_000] {
                for (floor_dbfs, tone_dbfs) in [(-200.0, -20.0), (-60.0, -20.0), (-50.0, -30.0), (-70.0, -36.0)] {
                    let silent = u64::from(rate) * silence_ms / 1000;
                    let total = silent + u64::from(rate) / 2;
                    let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ silent;
                    let amp = db(tone_dbfs) * std::f64::consts::SQRT_2;
                    let samples = (0..total).map(|i| {
                        let n = noise(&mut seed) * db(floor_dbfs) * 3f64.sqrt();
                        if i < silent {
                            n
                        } else {
                            amp * (2.0 * std::f64::consts::PI * 440.0 * i as f64 / f64::from(rate)).sin() + n
                        }
                    });
                    let onset = run(rate, samples).expect("a tone is sound");
                    let window = (u64::from(rate) * 10 / 1000).max(1);
                    // The onset is the start of the window the tone starts in, or the next one
                    // when the tone fills too little of it.
                    let tone_window = silent / window * window;
                    assert!(
                        onset == tone_window || onset == tone_window + window,
                        "rate {rate} silence {silence_ms} ms floor {floor_dbfs}: onset {onset}, tone at {silent}"
                    );
                }
            }
        }
    }

    #[test]
    fn noise_floors_and_short_clicks_are_not_sound() {
        let rate = 24_000;
        let mut seed = 42;
        for floor in [-45.0, -55.0, -90.0] {
            // Uniform noise: RMS = amplitude / sqrt(3).
            let a = db(floor) * 3f64.sqrt();
            assert_eq!(run(rate, (0..rate).map(|_| noise(&mut seed) * a)), None, "floor {floor}");
        }
        // A 20 ms click at full scale inside silence, then silence: too short (and not at the end).
        let click = |i: u32| if (2_400..2_880).contains(&i) { 1.0 } else { 0.0 };
        assert_eq!(run(rate, (0..rate).map(click)), None);
    }

    #[test]
    fn sound_that_runs_to_the_end_counts_even_if_short() {
        let rate = 16_000;
        // 100 ms of silence, then 25 ms of tone that ends the clip.
        let samples = (0..2_000u32).map(|i| if i < 1_600 { 0.0 } else { 0.5 });
        assert_eq!(run(rate, samples), Some(1_600));
        assert_eq!(run(rate, std::iter::empty()), None);
    }
}
