//! Predicted playout: a player that starts at a given audio position at a given time and plays in
//! real time, with no buffer beyond what has arrived. When the audio received so far is shorter
//! than the time played, it runs dry (an underrun) until the next chunk arrives. Gaps shorter than
//! [`MIN_UNDERRUN_NS`] are absorbed by any real player's output buffer and not counted.

use serde::{Deserialize, Serialize};

/// Shorter dry spells are not underruns (a 10 ms output buffer hides them).
pub const MIN_UNDERRUN_NS: u64 = 10_000_000;

/// One chunk's arrival: when, and how much audio (in frames) had arrived in total with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Arrival {
    pub t_ns: u64,
    pub frames_total: u64,
}

/// The outcome of the simulation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PredictedPlayout {
    /// Times the player ran dry for at least 10 ms.
    pub underruns: u32,
    /// Total time dry in those underruns.
    pub starved_ms: f64,
    /// When the first underrun began (ms since t0).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub first_underrun_ms: Option<f64>,
    /// When the player reached the end of the audio received (ms since t0).
    pub playout_end_ms: f64,
}

/// Plays from `start_frame` at `start_ns`. `arrivals` are in arrival order.
pub(crate) fn simulate(arrivals: &[Arrival], sample_rate_hz: u32, start_frame: u64, start_ns: u64) -> PredictedPlayout {
    let ns_per_frame = 1e9 / f64::from(sample_rate_hz.max(1));
    // Audio already received when playback starts.
    let mut buffered = arrivals.iter().take_while(|a| a.t_ns <= start_ns).map(|a| a.frames_total).max().unwrap_or(0);
    let mut position = start_frame as f64;
    let mut now = start_ns;
    let mut out = PredictedPlayout::default();
    let mut starved_ns = 0u64;
    for a in arrivals.iter().filter(|a| a.t_ns > start_ns) {
        let available_ns = ((buffered as f64 - position).max(0.0) * ns_per_frame) as u64;
        let elapsed = a.t_ns - now;
        if elapsed > available_ns {
            let dry = elapsed - available_ns;
            if dry >= MIN_UNDERRUN_NS {
                out.underruns += 1;
                starved_ns += dry;
                if out.first_underrun_ms.is_none() {
                    out.first_underrun_ms = Some((now + available_ns) as f64 / 1e6);
                }
            }
            position = position.max(buffered as f64);
        } else {
            position += elapsed as f64 / ns_per_frame;
        }
        now = a.t_ns;
        buffered = buffered.max(a.frames_total);
    }
    let rest_ns = ((buffered as f64 - position).max(0.0) * ns_per_frame) as u64;
    out.starved_ms = starved_ns as f64 / 1e6;
    out.playout_end_ms = (now + rest_ns) as f64 / 1e6;
    out
}

/// When a player that started at `start_ns` from frame 0 (stalling when dry) reaches `frame`.
pub(crate) fn time_to_reach(arrivals: &[Arrival], sample_rate_hz: u32, start_ns: u64, frame: u64) -> Option<u64> {
    let ns_per_frame = 1e9 / f64::from(sample_rate_hz.max(1));
    let mut buffered = arrivals.iter().take_while(|a| a.t_ns <= start_ns).map(|a| a.frames_total).max().unwrap_or(0);
    let mut position = 0.0f64;
    let mut now = start_ns;
    let target = frame as f64;
    let mut rest = arrivals.iter().filter(|a| a.t_ns > start_ns).peekable();
    loop {
        if position >= target {
            return Some(now);
        }
        // Play what is buffered, up to the target.
        let playable_to = (buffered as f64).min(target);
        if playable_to > position {
            let until = now as f64 + (playable_to - position) * ns_per_frame;
            match rest.peek() {
                Some(a) if (a.t_ns as f64) < until => {
                    position += (a.t_ns - now) as f64 / ns_per_frame;
                }
                _ => {
                    if playable_to >= target {
                        return Some(until as u64);
                    }
                    position = playable_to;
                    now = until as u64;
                    continue;
                }
            }
        }
        let a = rest.next()?;
        now = now.max(a.t_ns);
        buffered = buffered.max(a.frames_total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: u32 = 1_000; // one frame per millisecond keeps the arithmetic readable
    const MS: u64 = 1_000_000;

    fn arrivals(list: &[(u64, u64)]) -> Vec<Arrival> {
        list.iter().map(|&(t_ms, frames)| Arrival { t_ns: t_ms * MS, frames_total: frames }).collect()
    }

    #[test]
    fn faster_than_real_time_never_runs_dry() {
        // 100 ms of audio every 50 ms.
        let a = arrivals(&(0..10).map(|i| (i * 50, (i + 1) * 100)).collect::<Vec<_>>());
        let p = simulate(&a, RATE, 0, 0);
        assert_eq!(p.underruns, 0);
        assert_eq!(p.starved_ms, 0.0);
        assert_eq!(p.playout_end_ms, 1_000.0);
    }

    #[test]
    fn slower_than_real_time_runs_dry_between_chunks() {
        // 100 ms of audio every 150 ms: after the first chunk, each gap starves 50 ms.
        let a = arrivals(&(0..5).map(|i| (i * 150, (i + 1) * 100)).collect::<Vec<_>>());
        let p = simulate(&a, RATE, 0, 0);
        assert_eq!(p.underruns, 4);
        assert_eq!(p.starved_ms, 200.0);
        assert_eq!(p.first_underrun_ms, Some(100.0));
        assert_eq!(p.playout_end_ms, 700.0);
    }

    #[test]
    fn jitter_below_the_threshold_is_not_an_underrun() {
        // Real time with every chunk 5 ms late.
        let a = arrivals(&[(0, 100), (105, 200), (205, 300)]);
        let p = simulate(&a, RATE, 0, 0);
        assert_eq!(p.underruns, 0);
    }

    #[test]
    fn starting_later_in_the_audio_uses_what_is_buffered() {
        // 300 ms arrives at once, then 100 ms at 400 ms. Starting at frame 250 at t = 0 leaves
        // 50 ms buffered: dry from 50 to 400 ms.
        let a = arrivals(&[(0, 300), (400, 400)]);
        let p = simulate(&a, RATE, 250, 0);
        assert_eq!(p.underruns, 1);
        assert_eq!(p.starved_ms, 350.0);
        assert_eq!(p.playout_end_ms, 500.0);
    }

    #[test]
    fn reaching_a_position_waits_for_audio() {
        // Silence of 300 ms arrives in three 100 ms chunks at 0, 200, 400 ms; sound at frame 300.
        // The player plays 0–100 ms, waits, plays until 300 ms, waits, and reaches it at 500 ms.
        let a = arrivals(&[(0, 100), (200, 200), (400, 300), (400, 400)]);
        assert_eq!(time_to_reach(&a, RATE, 0, 300), Some(500 * MS));
        // All at once: reached after the silence plays.
        let a = arrivals(&[(0, 1_000)]);
        assert_eq!(time_to_reach(&a, RATE, 10 * MS, 300), Some(310 * MS));
        assert_eq!(time_to_reach(&a, RATE, 10 * MS, 0), Some(10 * MS));
        // Never reached.
        assert_eq!(time_to_reach(&a, RATE, 0, 2_000), None);
        assert_eq!(time_to_reach(&[], RATE, 0, 1), None);
    }
}
