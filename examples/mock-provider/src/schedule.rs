//! The send schedule: pure functions from a [`Timing`] to offsets from the moment the request arrived.
//!
//! Every offset is computed from the same origin (`headers_delay + ttft + k * itl + jitter_k + stall`),
//! never from the previous send, so a late wake-up never shifts the events after it. The body then
//! sleeps with `tokio::time::sleep_until(arrival + offset)`.

use std::time::Duration;

use crate::random::SplitMix64;

/// The timing knobs of one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Delay before the response headers.
    pub headers_delay: Duration,
    /// From the headers to content event 0.
    pub ttft: Duration,
    /// Between consecutive content events.
    pub itl: Duration,
    /// Maximum seeded extra delay per event; never accumulates.
    pub jitter: Duration,
    /// An optional pause before one content event.
    pub stall: Option<Stall>,
    /// Seed of the jitter PRNG.
    pub seed: u64,
}

/// A pause before content event `at` (and therefore before every later event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// Index of the first delayed content event.
    pub at: u32,
    /// How long the stream pauses.
    pub duration: Duration,
    /// Heartbeat period during the pause, if any.
    pub heartbeat: Option<Duration>,
}

impl Timing {
    /// Offset of the response headers (and of preamble events such as Anthropic `message_start`).
    pub fn headers_offset(&self) -> Duration {
        self.headers_delay
    }

    /// Intended send offsets of slots `0..slots`; the slot after the last content event is the finish slot.
    /// Jitter is drawn once per slot from the seeded PRNG and the result is kept non-decreasing.
    pub fn slot_offsets(&self, slots: usize) -> Vec<Duration> {
        let mut rng = SplitMix64::new(self.seed ^ 0x6a69_7474_6572); // "jitter"
        let jitter_us = u64::try_from(self.jitter.as_micros()).unwrap_or(u64::MAX);
        let mut offsets = Vec::with_capacity(slots);
        let mut previous = Duration::ZERO;
        for k in 0..slots {
            let jitter =
                if jitter_us == 0 { Duration::ZERO } else { Duration::from_micros(rng.next_u64() % (jitter_us + 1)) };
            let mut offset = self.unstalled_offset(k) + jitter;
            if let Some(stall) = self.stall {
                if k as u64 >= u64::from(stall.at) {
                    offset += stall.duration;
                }
            }
            offset = offset.max(previous);
            previous = offset;
            offsets.push(offset);
        }
        offsets
    }

    /// Heartbeat offsets during the stall: every `heartbeat` from when the stalled event was due,
    /// strictly before it is finally sent. Empty without a stall, without heartbeats, or when the
    /// stall lies beyond `slots`.
    pub fn heartbeat_offsets(&self, slots: usize) -> Vec<Duration> {
        let Some(Stall { at, duration, heartbeat: Some(period) }) = self.stall else {
            return Vec::new();
        };
        if period.is_zero() || u64::from(at) >= slots as u64 {
            return Vec::new();
        }
        let due = self.unstalled_offset(at as usize);
        let mut beats = Vec::new();
        let mut t = period;
        while t < duration {
            beats.push(due + t);
            t += period;
        }
        beats
    }

    fn unstalled_offset(&self, k: usize) -> Duration {
        let k = u32::try_from(k).unwrap_or(u32::MAX);
        self.headers_delay + self.ttft + self.itl.saturating_mul(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn timing() -> Timing {
        Timing { headers_delay: ms(50), ttft: ms(200), itl: ms(20), jitter: Duration::ZERO, stall: None, seed: 7 }
    }

    #[test]
    fn offsets_are_absolute_from_one_origin() {
        let offsets = timing().slot_offsets(5);
        assert_eq!(offsets, vec![ms(250), ms(270), ms(290), ms(310), ms(330)]);
    }

    #[test]
    fn jitter_is_bounded_seeded_and_does_not_accumulate() {
        let t = Timing { jitter: ms(15), ..timing() };
        let a = t.slot_offsets(200);
        assert_eq!(a, t.slot_offsets(200), "same seed, same schedule");
        assert_ne!(a, Timing { seed: 8, ..t }.slot_offsets(200));
        for (k, offset) in a.iter().enumerate() {
            let base = ms(250) + ms(20) * k as u32;
            // Non-decreasing clamp can only lift an offset up to the previous one, which is itself bounded.
            assert!(*offset >= base && *offset <= base + ms(15), "slot {k}: {offset:?}");
        }
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn stall_shifts_the_stalled_event_and_everything_after() {
        let t = Timing { stall: Some(Stall { at: 2, duration: ms(1000), heartbeat: Some(ms(300)) }), ..timing() };
        assert_eq!(t.slot_offsets(4), vec![ms(250), ms(270), ms(1290), ms(1310)]);
        assert_eq!(t.heartbeat_offsets(4), vec![ms(590), ms(890), ms(1190)]);
        assert!(t.heartbeat_offsets(2).is_empty(), "stall beyond the stream has no heartbeats");
    }
}
