//! When the page's response bytes arrived, whatever their format.
//!
//! The probe stamps every read of the page's response body (time and cumulative bytes), before
//! and independently of any attempt to read answer text out of it. That is evidence on its own:
//! when the whole response reached the page in one burst at the end, something between tokentap
//! and the page held it, even when no answer text could be aligned.

use serde::{Deserialize, Serialize};

use crate::browser::report::BrowserChunk;
use crate::hops::BURST_GAP_MS;

/// The page's body reads, summarised on tokentap's timeline (ms since t0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ByteArrival {
    /// Reads that returned bytes (reported ones and those the probe's cap dropped).
    pub reads: u64,
    pub bytes: u64,
    pub first_ms: f64,
    pub last_ms: f64,
    /// The final burst: the last reads, each within [`BURST_GAP_MS`] of the next.
    pub last_burst_start_ms: f64,
    pub last_burst_reads: u64,
    pub last_burst_bytes: u64,
}

impl ByteArrival {
    /// Summarises the reported reads (`rel`: browser time → ms since t0). `None` without reads.
    pub fn from_reads(chunks: &[BrowserChunk], dropped: u64, rel: impl Fn(f64) -> f64) -> Option<ByteArrival> {
        let last = chunks.last()?;
        let mut start = chunks.len() - 1;
        while start > 0 && chunks[start].t_ms - chunks[start - 1].t_ms <= BURST_GAP_MS {
            start -= 1;
        }
        let before = if start == 0 { 0 } else { chunks[start - 1].bytes };
        Some(ByteArrival {
            reads: chunks.len() as u64 + dropped,
            bytes: last.bytes,
            first_ms: rel(chunks[0].t_ms),
            last_ms: rel(last.t_ms),
            last_burst_start_ms: rel(chunks[start].t_ms),
            last_burst_reads: (chunks.len() - start) as u64,
            last_burst_bytes: last.bytes - before,
        })
    }

    /// Share of the response's bytes that arrived in the final burst.
    pub fn last_burst_fraction(&self) -> f64 {
        if self.bytes == 0 {
            0.0
        } else {
            self.last_burst_bytes as f64 / self.bytes as f64
        }
    }

    /// The response arrived in one burst at the end: at least `fraction` of its bytes came in the
    /// final burst, and that burst started at least `hold_ms` after `text_started_ms` (when the
    /// answer's text began reaching tokentap), so the text had been streaming meanwhile.
    pub fn held_to_end(&self, fraction: f64, text_started_ms: f64, hold_ms: f64) -> bool {
        self.last_burst_fraction() >= fraction && self.last_burst_start_ms - text_started_ms >= hold_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(times_bytes: &[(f64, u64)]) -> Vec<BrowserChunk> {
        times_bytes.iter().map(|&(t_ms, bytes)| BrowserChunk { t_ms, bytes, chars: None }).collect()
    }

    #[test]
    fn the_final_burst_is_the_last_reads_close_together() {
        // A 10-byte gzip header early, then everything at the end in three close reads.
        let r = reads(&[(100.0, 10), (1300.0, 4000), (1302.0, 8000), (1305.0, 9000)]);
        let a = ByteArrival::from_reads(&r, 0, |t| t).unwrap();
        assert_eq!((a.reads, a.bytes, a.last_burst_reads, a.last_burst_bytes), (4, 9000, 3, 8990));
        assert_eq!((a.first_ms, a.last_burst_start_ms, a.last_ms), (100.0, 1300.0, 1305.0));
        assert!(a.held_to_end(0.8, 100.0, 100.0));
        // Streamed: one read per event.
        let streamed: Vec<(f64, u64)> = (0..40).map(|i| (100.0 + 30.0 * i as f64, 70 * (i + 1))).collect();
        let s = ByteArrival::from_reads(&reads(&streamed), 0, |t| t).unwrap();
        assert_eq!(s.last_burst_reads, 1);
        assert!(!s.held_to_end(0.8, 100.0, 100.0));
        // One read right as the text started: not held (nothing streamed meanwhile).
        let one = ByteArrival::from_reads(&reads(&[(150.0, 500)]), 0, |t| t).unwrap();
        assert!(!one.held_to_end(0.8, 100.0, 100.0));
        assert!(ByteArrival::from_reads(&[], 0, |t| t).is_none());
    }
}
