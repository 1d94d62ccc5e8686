//! When audio answers go out. Transcripts: the first text delta `x-mock-stt-first-ms` after the
//! request (default 150), then one every `x-mock-stt-delta-ms` (default 20). Speech: the first
//! audio chunk after `x-mock-tts-first-ms` (default 120), each next one `chunk × x-mock-tts-rtf`
//! later (default 0.5: twice as fast as real time). Both use the mock's absolute [`Timing`], so
//! `x-mock-headers-delay-ms`, `x-mock-jitter-ms` and `x-mock-stall-at/-ms` apply as to the text
//! streams; the event after the last content chunk (the transcript's `done`, speech's
//! `speech.audio.done`) goes out at the finish slot, one interval after the last chunk.

use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;

use crate::scenario::{parse_header, EarlyEnd, InvalidMockHeader, ResponsePlan};
use crate::schedule::Timing;
use crate::timeline::{Step, Timeline, RESET_GAP};

/// Timing of a transcript.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TranscriptPacing {
    pub(crate) first: Duration,
    pub(crate) delta: Duration,
}

impl TranscriptPacing {
    pub(crate) fn from_headers(headers: &HeaderMap) -> Result<TranscriptPacing, InvalidMockHeader> {
        let first = parse_header(headers, "x-mock-stt-first-ms")?.unwrap_or(150);
        let delta = parse_header(headers, "x-mock-stt-delta-ms")?.unwrap_or(20);
        Ok(TranscriptPacing { first: Duration::from_millis(first), delta: Duration::from_millis(delta) })
    }

    pub(crate) fn timing(&self, plan: &ResponsePlan) -> Timing {
        paced(plan, self.first, self.delta)
    }
}

/// Timing of speech audio.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SpeechPacing {
    pub(crate) first: Duration,
    /// Audio per chunk.
    pub(crate) chunk: Duration,
    /// Send time per second of audio.
    pub(crate) real_time_factor: f64,
}

/// The largest real-time factor: a chunk every 100 × its play time.
const MAX_REAL_TIME_FACTOR: f64 = 100.0;

impl SpeechPacing {
    pub(crate) fn from_headers(headers: &HeaderMap) -> Result<SpeechPacing, InvalidMockHeader> {
        let first = parse_header(headers, "x-mock-tts-first-ms")?.unwrap_or(120);
        let chunk_ms: u64 = parse_header(headers, "x-mock-tts-chunk-ms")?.unwrap_or(100);
        let real_time_factor: f64 = parse_header(headers, "x-mock-tts-rtf")?.unwrap_or(0.5);
        let invalid = |name: &'static str, value: String| InvalidMockHeader { name, value };
        if !(1..=60_000).contains(&chunk_ms) {
            return Err(invalid("x-mock-tts-chunk-ms", chunk_ms.to_string()));
        }
        if !(real_time_factor.is_finite() && real_time_factor > 0.0 && real_time_factor <= MAX_REAL_TIME_FACTOR) {
            return Err(invalid("x-mock-tts-rtf", real_time_factor.to_string()));
        }
        Ok(SpeechPacing {
            first: Duration::from_millis(first),
            chunk: Duration::from_millis(chunk_ms),
            real_time_factor,
        })
    }

    /// Time between two chunks.
    pub(crate) fn interval(&self) -> Duration {
        self.chunk.mul_f64(self.real_time_factor)
    }

    pub(crate) fn timing(&self, plan: &ResponsePlan) -> Timing {
        paced(plan, self.first, self.interval())
    }
}

fn paced(plan: &ResponsePlan, first: Duration, every: Duration) -> Timing {
    Timing { ttft: first, itl: every, ..plan.timing }
}

/// An audio answer before it is timed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// One body, sent whole when a stream of `slots` content chunks would have finished.
    Whole { content_type: &'static str, body: Bytes, slots: usize },
    /// Content chunks on the schedule's slots, then `finish` (if any) at the finish slot.
    Stream { content_type: &'static str, chunks: Vec<Bytes>, finish: Option<Bytes> },
}

/// When a whole answer of `slots` content chunks is sent.
pub(crate) fn finish_offset(timing: &Timing, slots: usize) -> Duration {
    timing.slot_offsets(slots + 1)[slots]
}

/// The body timeline of a stream: chunk k at slot k, `finish` at the finish slot. With
/// `x-mock-reset-at: K` the body aborts after chunk K instead (at the slot chunk K+1 would have
/// had, at least [`RESET_GAP`] after chunk K), without `finish`; `x-mock-error-at` ends a stream
/// cleanly after chunk K, without `finish` (audio streams have no error event).
pub(crate) fn stream_timeline(
    chunks: Vec<Bytes>,
    finish: Option<Bytes>,
    timing: &Timing,
    early_end: Option<EarlyEnd>,
) -> Timeline {
    let count = chunks.len();
    let slots = timing.slot_offsets(count + 1);
    let cut_after = early_end.map(|end| match end {
        EarlyEnd::ErrorEvent { after } | EarlyEnd::Reset { after } => (after as usize).min(count.saturating_sub(1)),
    });
    let mut timeline: Timeline = Vec::with_capacity(count + 1);
    for (k, chunk) in chunks.into_iter().enumerate() {
        timeline.push((slots[k], Step::Data(chunk)));
        if cut_after == Some(k) {
            break;
        }
    }
    match (early_end, cut_after) {
        (Some(EarlyEnd::Reset { .. }), Some(k)) if count > 0 => {
            timeline.push((slots[k + 1].max(slots[k] + RESET_GAP), Step::Reset));
        }
        (Some(EarlyEnd::Reset { .. }), _) => timeline.push((slots[0], Step::Reset)),
        (Some(EarlyEnd::ErrorEvent { .. }), _) => {}
        (None, _) => timeline.extend(finish.map(|bytes| (slots[count], Step::Data(bytes)))),
    }
    timeline
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MockConfig;
    use crate::scenario::RequestWishes;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (http::HeaderName::from_static(k), v.parse().unwrap())).collect()
    }

    fn plan(pairs: &[(&'static str, &str)]) -> ResponsePlan {
        ResponsePlan::resolve(&MockConfig::default(), &headers(pairs), RequestWishes::default()).unwrap()
    }

    fn chunks(n: usize) -> Vec<Bytes> {
        (0..n).map(|k| Bytes::from(format!("chunk {k}"))).collect()
    }

    fn offsets(timeline: &Timeline) -> Vec<Duration> {
        timeline.iter().map(|(at, _)| *at).collect()
    }

    #[test]
    fn speech_defaults_and_spacing() {
        let pacing = SpeechPacing::from_headers(&HeaderMap::new()).unwrap();
        assert_eq!(pacing, SpeechPacing { first: ms(120), chunk: ms(100), real_time_factor: 0.5 });
        let timeline = stream_timeline(chunks(4), Some(Bytes::from("done")), &pacing.timing(&plan(&[])), None);
        assert_eq!(offsets(&timeline), vec![ms(120), ms(170), ms(220), ms(270), ms(320)]);

        let slow = SpeechPacing::from_headers(&headers(&[
            ("x-mock-tts-first-ms", "0"),
            ("x-mock-tts-chunk-ms", "40"),
            ("x-mock-tts-rtf", "2.0"),
        ]))
        .unwrap();
        let timeline = stream_timeline(chunks(3), None, &slow.timing(&plan(&[("x-mock-headers-delay-ms", "5")])), None);
        assert_eq!(offsets(&timeline), vec![ms(5), ms(85), ms(165)], "slower than real time, after the headers");
    }

    #[test]
    fn transcript_defaults_and_whole_answer_time() {
        let pacing = TranscriptPacing::from_headers(&HeaderMap::new()).unwrap();
        assert_eq!(pacing, TranscriptPacing { first: ms(150), delta: ms(20) });
        let timing = pacing.timing(&plan(&[]));
        assert_eq!(finish_offset(&timing, 7), ms(150 + 7 * 20));
        let timeline = stream_timeline(chunks(2), Some(Bytes::from("done")), &timing, None);
        assert_eq!(offsets(&timeline), vec![ms(150), ms(170), ms(190)]);
    }

    #[test]
    fn bad_pacing_headers_are_refused() {
        for (name, value) in [
            ("x-mock-tts-rtf", "0"),
            ("x-mock-tts-rtf", "-1"),
            ("x-mock-tts-rtf", "NaN"),
            ("x-mock-tts-rtf", "inf"),
            ("x-mock-tts-rtf", "fast"),
            ("x-mock-tts-chunk-ms", "0"),
            ("x-mock-tts-first-ms", "-5"),
        ] {
            assert!(SpeechPacing::from_headers(&headers(&[(name, value)])).is_err(), "{name}: {value}");
        }
        assert!(TranscriptPacing::from_headers(&headers(&[("x-mock-stt-delta-ms", "1.5")])).is_err());
    }

    #[test]
    fn early_ends_cut_the_stream() {
        let timing = TranscriptPacing { first: ms(100), delta: ms(10) }.timing(&plan(&[]));
        let reset = stream_timeline(chunks(5), Some(Bytes::from("done")), &timing, Some(EarlyEnd::Reset { after: 1 }));
        assert_eq!(reset.len(), 3);
        assert_eq!(reset.last().unwrap(), &(ms(130), Step::Reset), "RESET_GAP after chunk 1");
        let cut =
            stream_timeline(chunks(5), Some(Bytes::from("done")), &timing, Some(EarlyEnd::ErrorEvent { after: 9 }));
        assert_eq!(cut.len(), 5, "all chunks, no done event");
        let empty = stream_timeline(Vec::new(), None, &timing, Some(EarlyEnd::Reset { after: 0 }));
        assert_eq!(empty, vec![(ms(100), Step::Reset)]);
    }
}
