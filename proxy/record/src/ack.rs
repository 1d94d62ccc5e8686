//! Client delivery from TCP ACKs.
//!
//! A handoff stamp says when tokentap gave bytes to the kernel, not when the client had them: with
//! a slow reader, megabytes can wait in the send buffer. The kernel knows better. At handoffs, and
//! while the last bytes drain, tokentap reads `tcp_info` of the client socket:
//! - bytes written so far = bytes_sent − bytes_retrans + notsent_bytes;
//! - bytes the client acknowledged = bytes_acked.
//!
//! Which handoffs are read ([`AckTracker::handoff_read_due`]): the first of a response, every one
//! while the last reading found bytes the client had not acknowledged, and otherwise (the client
//! keeping up) at most one per [`ACK_READ_INTERVAL`]. The piece that ends the response is not
//! read at its handoff: the tail is read right after it. The tail is always read.
//!
//! A reading taken at a handoff (before that piece is written) knows how many body bytes were
//! already written, and where they ended on the connection. So a chunk ends on the connection where
//! the first reading that had all of its bytes written says (pieces may be written together or
//! between readings, so this can be later than the chunk's own end, never earlier). A chunk was
//! delivered at the first reading whose acknowledged count reaches its end. Each reading also
//! carries when the last ACK arrived (`tcpi_last_ack_recv`), so a chunk whose covering reading
//! came long after (the next read handoff, after a stall or a read interval) is dated by that ACK,
//! not by the reading: between the reading before, which did not cover it, and the reading itself.
//! That reading before (or the chunk's handoff, if later) is kept too: the real ACK came after it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::stamp::ChunkStamp;

/// How often the tail is sampled after the last write while the client has not acknowledged it.
pub const ACK_POLL: Duration = Duration::from_millis(2);

/// While the client keeps up (the last reading found everything written acknowledged), handoffs
/// are read at most this often: a reading is a system call, and a client that keeps up is dated
/// by the next reading's last ACK instead (at most this much plus one chunk gap late).
pub const ACK_READ_INTERVAL: Duration = Duration::from_millis(100);

/// One reading of the client socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckSample {
    pub t_ns: u64,
    /// Body bytes already handed to the connection when the sample was taken.
    pub body_before: u64,
    /// Bytes tokentap had written to the connection (sent or queued in the kernel).
    pub written: u64,
    /// Bytes the client had acknowledged.
    pub acked: u64,
    /// When the last ACK before the reading arrived (ns since t0; the kernel's
    /// `tcpi_last_ack_recv`, millisecond resolution): `t_ns` when unknown or just now.
    pub last_ack_ns: u64,
}

/// Readings of one response, bounded.
#[derive(Debug, Default)]
pub struct AckTracker {
    /// Why ACK data is missing, when it is.
    pub unavailable: Option<String>,
    /// `samples[i]` was taken at the handoff of chunk i (while entries are kept).
    pub at_handoff: Vec<AckSample>,
    /// Samples after the last write.
    pub tail: Vec<AckSample>,
    pub max_samples: usize,
    pub backlog_max: u64,
    pub drained: bool,
    /// Where this response ends on the connection: bytes written when the tail was first
    /// sampled, right after the last write. Later bytes on a kept-alive connection belong to
    /// later responses and are not waited for.
    pub tail_end: Option<u64>,
}

/// Tail readings kept per response: only readings whose acknowledged count moved are kept, and
/// at most this many (32 KiB); later ones still update `drained` and `backlog_max`.
pub const MAX_TAIL_SAMPLES: usize = 1024;

impl AckTracker {
    /// Whether the handoff at `t_ns` should read the socket: the first handoff of the response,
    /// every handoff while the last reading found unacknowledged bytes, else once
    /// [`ACK_READ_INTERVAL`] has passed since the last reading.
    pub fn handoff_read_due(&self, t_ns: u64) -> bool {
        match self.at_handoff.last() {
            None => true,
            Some(last) => {
                last.acked < last.written || t_ns.saturating_sub(last.t_ns) >= ACK_READ_INTERVAL.as_nanos() as u64
            }
        }
    }

    /// A reading at a handoff. At most `room` are kept (the chunk entries the timeline has room
    /// for, so these readings are paid for with them), and the vector never grows past it.
    pub fn push_handoff(&mut self, s: AckSample, room: usize) {
        self.backlog_max = self.backlog_max.max(s.written.saturating_sub(s.acked));
        let limit = self.max_samples.min(room);
        let len = self.at_handoff.len();
        if len < limit {
            if len == self.at_handoff.capacity() {
                self.at_handoff.reserve_exact(len.max(8).min(limit - len));
            }
            self.at_handoff.push(s);
        }
    }

    pub fn push_tail(&mut self, s: AckSample) {
        let end = *self.tail_end.get_or_insert(s.written);
        self.backlog_max = self.backlog_max.max(end.saturating_sub(s.acked));
        self.drained = s.acked >= end;
        // The first reading that reaches each acknowledged count is all delivery needs.
        let moved = self.tail.last().is_none_or(|last| last.acked != s.acked);
        if moved && self.tail.len() < self.max_samples.min(MAX_TAIL_SAMPLES) {
            self.tail.push(s);
        }
    }
}

/// What a record says about client delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientDelivery {
    /// False when the platform, the protocol (HTTP/2 multiplexes streams on one socket) or a
    /// truncated timeline leaves no per-chunk ACK times; `reason` says which.
    pub available: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Largest number of bytes written but not yet acknowledged by the client.
    pub backlog_max_bytes: u64,
    /// True when the client acknowledged everything before tokentap stopped watching.
    pub drained: bool,
    pub samples: u64,
}

/// Fills `t_acked_ns` of each chunk from the samples; returns the record's summary.
pub fn apply(tracker: &AckTracker, chunks: &mut [ChunkStamp], chunks_truncated: bool) -> ClientDelivery {
    let samples = (tracker.at_handoff.len() + tracker.tail.len()) as u64;
    let summary = |available: bool, reason: Option<String>| ClientDelivery {
        available,
        reason,
        backlog_max_bytes: tracker.backlog_max,
        drained: tracker.drained,
        samples,
    };
    if let Some(reason) = &tracker.unavailable {
        return summary(false, Some(reason.clone()));
    }
    if chunks.is_empty() {
        return summary(false, Some("no body".into()));
    }
    if chunks_truncated || tracker.at_handoff.len() >= tracker.max_samples.max(1) {
        return summary(false, Some("more chunks than timeline.max_chunks: per-chunk ACK times dropped".into()));
    }
    if tracker.tail.is_empty() {
        return summary(false, Some("the connection ended before the tail was sampled".into()));
    }
    // Where each chunk ended on the connection: the first sample taken once all its bytes were written.
    let all: Vec<&AckSample> = tracker.at_handoff.iter().chain(tracker.tail.iter()).collect();
    let mut end_sample = 0;
    let mut cursor = 0;
    for chunk in chunks.iter_mut() {
        let body_end = chunk.offset + u64::from(chunk.len);
        while end_sample < all.len() && all[end_sample].body_before < body_end {
            end_sample += 1;
        }
        let Some(end) = all.get(end_sample).map(|s| s.written) else {
            (chunk.t_acked_ns, chunk.t_ack_after_ns) = (None, None);
            continue;
        };
        cursor = cursor.max(end_sample);
        while cursor < all.len() && all[cursor].acked < end {
            cursor += 1;
        }
        // The ACK that covered the chunk came after the reading before (which did not cover it)
        // and after the chunk's handoff, and at or before the last ACK the covering reading
        // reports: across a stall or a read interval, readings are far apart, and the reading's
        // own time would make the chunk look acknowledged late.
        let before = cursor.checked_sub(1).and_then(|i| all.get(i)).map_or(0, |s| s.t_ns);
        let before = before.max(chunk.t_handoff_ns.unwrap_or(0));
        match all.get(cursor) {
            Some(s) => {
                let after = before.min(s.t_ns);
                chunk.t_acked_ns = Some(s.last_ack_ns.clamp(after, s.t_ns));
                chunk.t_ack_after_ns = Some(after);
            }
            None => (chunk.t_acked_ns, chunk.t_ack_after_ns) = (None, None),
        }
    }
    summary(true, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(offset: u64, len: u32) -> ChunkStamp {
        ChunkStamp { offset, len, t_up_ns: 0, t_handoff_ns: None, t_acked_ns: None, t_ack_after_ns: None }
    }

    #[test]
    fn ack_times_come_from_the_first_sample_covering_each_chunk() {
        // Head of 100 bytes, then three chunks of 10 bytes (+ framing) written at 10, 20, 30 ms.
        let mut t = AckTracker { max_samples: 100, ..Default::default() };
        t.push_handoff(AckSample { t_ns: 10, body_before: 0, written: 100, acked: 0, last_ack_ns: 10 }, usize::MAX);
        t.push_handoff(AckSample { t_ns: 20, body_before: 10, written: 115, acked: 100, last_ack_ns: 20 }, usize::MAX);
        t.push_handoff(AckSample { t_ns: 30, body_before: 20, written: 130, acked: 100, last_ack_ns: 30 }, usize::MAX);
        t.push_tail(AckSample { t_ns: 31, body_before: 30, written: 145, acked: 115, last_ack_ns: 31 });
        t.push_tail(AckSample { t_ns: 40, body_before: 30, written: 145, acked: 130, last_ack_ns: 40 });
        t.push_tail(AckSample { t_ns: 50, body_before: 30, written: 145, acked: 145, last_ack_ns: 50 });
        let mut chunks = vec![chunk(0, 10), chunk(10, 10), chunk(20, 10)];
        let d = apply(&t, &mut chunks, false);
        assert!(d.available && d.drained);
        assert_eq!(d.backlog_max_bytes, 100);
        let acked: Vec<_> = chunks.iter().map(|c| c.t_acked_ns).collect();
        assert_eq!(acked, [Some(31), Some(40), Some(50)]);
    }

    #[test]
    fn chunks_written_together_never_get_an_ack_before_their_write() {
        // Two upstream chunks handed off in one write: one handoff sample before it, then the tail.
        let mut t = AckTracker { max_samples: 100, ..Default::default() };
        t.push_handoff(AckSample { t_ns: 10, body_before: 0, written: 100, acked: 100, last_ack_ns: 10 }, usize::MAX);
        t.push_tail(AckSample { t_ns: 20, body_before: 20, written: 124, acked: 100, last_ack_ns: 20 });
        t.push_tail(AckSample { t_ns: 25, body_before: 20, written: 124, acked: 124, last_ack_ns: 25 });
        let mut chunks = vec![chunk(0, 10), chunk(10, 10)];
        let d = apply(&t, &mut chunks, false);
        assert!(d.available && d.drained);
        assert_eq!(chunks[0].t_acked_ns, Some(25));
        assert_eq!(chunks[1].t_acked_ns, Some(25));
    }

    #[test]
    fn says_why_when_unavailable() {
        let mut chunks = vec![chunk(0, 10)];
        let t = AckTracker { unavailable: Some("HTTP/2 client".into()), ..Default::default() };
        let d = apply(&t, &mut chunks, false);
        assert!(!d.available);
        assert_eq!(d.reason.as_deref(), Some("HTTP/2 client"));
        assert_eq!(chunks[0].t_acked_ns, None);
        let t = AckTracker { max_samples: 10, ..Default::default() };
        assert!(!apply(&t, &mut chunks, false).available);
    }

    #[test]
    fn undrained_tail_leaves_late_chunks_without_ack() {
        let mut t = AckTracker { max_samples: 100, ..Default::default() };
        t.push_handoff(AckSample { t_ns: 10, body_before: 0, written: 100, acked: 100, last_ack_ns: 10 }, usize::MAX);
        t.push_handoff(AckSample { t_ns: 20, body_before: 10, written: 110, acked: 110, last_ack_ns: 20 }, usize::MAX);
        t.push_tail(AckSample { t_ns: 30, body_before: 20, written: 120, acked: 110, last_ack_ns: 30 });
        let mut chunks = vec![chunk(0, 10), chunk(10, 10)];
        let d = apply(&t, &mut chunks, false);
        assert!(d.available && !d.drained);
        assert_eq!(chunks[0].t_acked_ns, Some(20));
        assert_eq!(chunks[1].t_acked_ns, None);
    }

    #[test]
    fn the_tail_is_drained_when_this_response_is_acknowledged_not_later_ones() {
        let mut tracker = AckTracker { max_samples: 10, ..AckTracker::default() };
        tracker.push_tail(AckSample { t_ns: 1, body_before: 10, written: 500, acked: 400, last_ack_ns: 1 });
        assert!(!tracker.drained);
        // The next response on the kept-alive connection is being written meanwhile.
        tracker.push_tail(AckSample { t_ns: 2, body_before: 10, written: 900, acked: 500, last_ack_ns: 2 });
        assert!(tracker.drained);
        assert_eq!(tracker.backlog_max, 100);
    }

    #[test]
    fn tail_readings_are_kept_only_when_the_acknowledged_count_moves_and_are_capped() {
        let mut tracker = AckTracker { max_samples: usize::MAX, ..AckTracker::default() };
        for t in 0..20_000u64 {
            // A client that acknowledges one byte every tenth reading.
            tracker.push_tail(AckSample {
                t_ns: t,
                body_before: 10,
                written: 1_000_000,
                acked: t / 10,
                last_ack_ns: t,
            });
        }
        assert_eq!(tracker.tail.len(), MAX_TAIL_SAMPLES);
        assert_eq!(tracker.tail[1].t_ns, 10, "the first reading of each count is the one kept");
        assert!(!tracker.drained);
        let mut handoffs = AckTracker { max_samples: usize::MAX, ..AckTracker::default() };
        for t in 0..100 {
            handoffs.push_handoff(AckSample { t_ns: t, body_before: t, written: t, acked: t, last_ack_ns: t }, 40);
        }
        assert_eq!((handoffs.at_handoff.len(), handoffs.at_handoff.capacity()), (40, 40));
    }

    #[test]
    fn handoffs_are_read_every_time_while_the_client_lags_else_once_per_interval() {
        const MS: u64 = 1_000_000;
        let interval = ACK_READ_INTERVAL.as_nanos() as u64;
        let mut t = AckTracker { max_samples: 64, ..Default::default() };
        assert!(t.handoff_read_due(0), "the first handoff is read");
        t.push_handoff(AckSample { t_ns: 0, body_before: 0, written: 100, acked: 100, last_ack_ns: 0 }, 64);
        assert!(!t.handoff_read_due(MS), "caught up: not again within the interval");
        assert!(!t.handoff_read_due(interval - 1));
        assert!(t.handoff_read_due(interval));
        t.push_handoff(AckSample { t_ns: interval, body_before: 10, written: 110, acked: 105, last_ack_ns: 0 }, 64);
        assert!(t.handoff_read_due(interval + 1), "bytes not acknowledged: every handoff is read");
    }

    #[test]
    fn between_sparse_readings_chunks_get_an_upper_bound_and_the_reading_before() {
        const MS: u64 = 1_000_000;
        // A client that keeps up; four chunks of 10 bytes handed off 50 ms apart after a head of
        // 100 bytes. Read: the first handoff, the third (100 ms later), and the tail.
        let mut t = AckTracker { max_samples: 64, ..Default::default() };
        t.push_handoff(AckSample { t_ns: 0, body_before: 0, written: 100, acked: 100, last_ack_ns: 0 }, 64);
        assert!(!t.handoff_read_due(50 * MS));
        assert!(t.handoff_read_due(100 * MS));
        t.push_handoff(
            AckSample { t_ns: 100 * MS, body_before: 20, written: 120, acked: 120, last_ack_ns: 50 * MS },
            64,
        );
        t.push_tail(AckSample { t_ns: 151 * MS, body_before: 40, written: 140, acked: 140, last_ack_ns: 150 * MS });
        let mut chunks: Vec<ChunkStamp> =
            (0..4u64).map(|i| ChunkStamp { t_handoff_ns: Some(i * 50 * MS), ..chunk(i * 10, 10) }).collect();
        let d = apply(&t, &mut chunks, false);
        assert!(d.available && d.drained, "{d:?}");
        let acked: Vec<_> = chunks.iter().map(|c| c.t_acked_ns.unwrap() / MS).collect();
        let after: Vec<_> = chunks.iter().map(|c| c.t_ack_after_ns.unwrap() / MS).collect();
        // Chunk 0 was acknowledged at about 0 ms, but the first reading that saw it reports the
        // last ACK, chunk 1's: an upper bound, one chunk gap late.
        assert_eq!(acked, [50, 50, 150, 150]);
        // The certain lower bound: the reading before the covering one, or the handoff.
        assert_eq!(after, [0, 50, 100, 150]);
        for c in &chunks {
            assert!(c.t_ack_after_ns <= c.t_acked_ns && c.t_handoff_ns <= c.t_ack_after_ns, "{c:?}");
        }
    }

    #[test]
    fn across_a_stall_a_chunk_is_dated_by_its_ack_not_by_the_next_reading() {
        const MS: u64 = 1_000_000;
        let mut t = AckTracker { max_samples: 64, ..Default::default() };
        // Chunk 0 (100 bytes) written at 10 ms; the client acknowledges it at 10.4 ms; the next
        // reading is chunk 1's handoff, 1.5 s later, which says the last ACK came at 10 ms (ms
        // resolution).
        t.push_handoff(AckSample { t_ns: 10 * MS, body_before: 0, written: 0, acked: 0, last_ack_ns: 10 * MS }, 64);
        t.push_handoff(
            AckSample { t_ns: 1_510 * MS, body_before: 100, written: 100, acked: 100, last_ack_ns: 10 * MS },
            64,
        );
        t.push_tail(AckSample {
            t_ns: 1_511 * MS,
            body_before: 120,
            written: 120,
            acked: 120,
            last_ack_ns: 1_511 * MS,
        });
        let mut chunks: Vec<ChunkStamp> = [(0u64, 100u32), (100, 20)]
            .iter()
            .map(|&(offset, len)| ChunkStamp {
                offset,
                len,
                t_up_ns: 0,
                t_handoff_ns: None,
                t_acked_ns: None,
                t_ack_after_ns: None,
            })
            .collect();
        let d = apply(&t, &mut chunks, false);
        assert!(d.available, "{d:?}");
        assert_eq!(chunks[0].t_acked_ns, Some(10 * MS), "dated by its ACK, not by the reading 1.5 s later");
        assert_eq!(chunks[1].t_acked_ns, Some(1_511 * MS));
    }
}
