//! The offset between the browser's wall clock and tokentap's, NTP style.
//!
//! The probe asks tokentap's clock endpoint for its time a few times. For each round trip it knows
//! when it sent the request and when the answer arrived (browser clock) and the server's time in
//! between. Assuming the server read its clock halfway, the offset is
//! `server_time - (sent + received) / 2`, wrong by at most half the round trip. The sample with the
//! shortest round trip has the smallest error bound, so it wins.

/// Round trips made by `init`.
pub const CLOCK_SAMPLES: u32 = 5;

/// The estimate sent with every report: add `offset_ms` to a browser time to get tokentap's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockEstimate {
    pub offset_ms: f64,
    pub uncertainty_ms: f64,
    pub samples: u32,
}

/// One round trip, all in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockSample {
    pub sent_ms: f64,
    pub server_ms: f64,
    pub received_ms: f64,
}

/// The estimate from the sample with the shortest round trip; `None` without a usable sample.
pub fn estimate(samples: &[ClockSample]) -> Option<ClockEstimate> {
    let usable = samples.iter().filter(|s| s.received_ms >= s.sent_ms && s.server_ms.is_finite());
    let best = usable.min_by(|a, b| (a.received_ms - a.sent_ms).total_cmp(&(b.received_ms - b.sent_ms)))?;
    let rtt = best.received_ms - best.sent_ms;
    Some(ClockEstimate {
        offset_ms: best.server_ms - (best.sent_ms + best.received_ms) / 2.0,
        uncertainty_ms: rtt / 2.0,
        samples: u32::try_from(samples.len()).unwrap_or(u32::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_round_trip_wins() {
        let samples = [
            ClockSample { sent_ms: 1000.0, server_ms: 1110.0, received_ms: 1020.0 },
            ClockSample { sent_ms: 2000.0, server_ms: 2102.0, received_ms: 2004.0 },
            ClockSample { sent_ms: 3000.0, server_ms: 3000.0, received_ms: 2999.0 }, // clock stepped back
        ];
        let e = estimate(&samples).unwrap();
        assert_eq!(e.offset_ms, 100.0);
        assert_eq!(e.uncertainty_ms, 2.0);
        assert_eq!(e.samples, 3);
        assert_eq!(estimate(&[]), None);
    }
}
