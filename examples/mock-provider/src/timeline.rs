//! Turns a format's events and a [`ResponsePlan`] into the timeline of one response body: each step
//! is (offset from request arrival, bytes or abort). Preamble events go out with the headers, content
//! event k at schedule slot k, framing with the content that follows it (or at the finish slot),
//! heartbeats inside a stall; an early end cuts the timeline after content event K.

use std::time::Duration;

use bytes::Bytes;

use crate::completion::Completion;
use crate::formats::WireFormat;
use crate::scenario::{EarlyEnd, ResponsePlan};
use crate::wire::EventKind;

/// A reset is never sent sooner than this after the last data. HTTP/2 drops a stream's queued,
/// unwritten frames when it resets the stream, so the connection task needs a moment to write them.
pub(crate) const RESET_GAP: Duration = Duration::from_millis(20);

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// One body frame (one SSE event / NDJSON line / audio chunk).
    Data(Bytes),
    /// Fail the body: hyper then aborts the HTTP/1.1 connection without the final chunk, or
    /// resets the HTTP/2 stream.
    Reset,
}

pub(crate) type Timeline = Vec<(Duration, Step)>;

/// Number of content events and the finish offset: when a non-streaming body is complete.
pub(crate) fn finish_offset(format: &dyn WireFormat, completion: &Completion, plan: &ResponsePlan) -> Duration {
    let content = format.stream_events(completion).iter().filter(|e| e.kind == EventKind::Content).count();
    plan.timing.slot_offsets(content + 1)[content]
}

pub(crate) fn stream_timeline(format: &dyn WireFormat, completion: &Completion, plan: &ResponsePlan) -> Timeline {
    let events = format.stream_events(completion);
    let content_count = events.iter().filter(|e| e.kind == EventKind::Content).count();
    let slots = plan.timing.slot_offsets(content_count + 1);
    let cut_after = plan.early_end.map(|end| match end {
        EarlyEnd::ErrorEvent { after } | EarlyEnd::Reset { after } => after as usize,
    });

    let mut timeline = Timeline::new();
    let mut pending_control = Vec::new();
    let mut content_index = 0;
    let mut events_sent = 0;
    let mut cut_at: Option<usize> = None;
    for event in events {
        match event.kind {
            EventKind::Preamble => {
                timeline.push((plan.timing.headers_offset(), Step::Data(event.bytes)));
                events_sent += 1;
            }
            EventKind::Control => pending_control.push(event.bytes),
            EventKind::Content => {
                let at = slots[content_index];
                events_sent += pending_control.len() + 1;
                timeline.extend(pending_control.drain(..).map(|b| (at, Step::Data(b))));
                timeline.push((at, Step::Data(event.bytes)));
                // An index past the last content event is clamped to it.
                if cut_after.is_some_and(|k| k <= content_index || content_index + 1 == content_count) {
                    cut_at = Some(content_index);
                    break;
                }
                content_index += 1;
            }
        }
    }

    match (plan.early_end, cut_at) {
        (None, _) => {
            let finish = slots[content_count];
            timeline.extend(pending_control.into_iter().map(|b| (finish, Step::Data(b))));
        }
        (Some(end), cut) => {
            // After content event `cut`, at the slot the next event would have had; with no content
            // at all, at slot 0.
            let (next, last) = match cut {
                Some(k) => (slots[k + 1], slots[k]),
                None => (slots[0], plan.timing.headers_offset()),
            };
            match end {
                EarlyEnd::ErrorEvent { .. } => {
                    if let Some(error) = format.midstream_error(completion, events_sent) {
                        timeline.push((next, Step::Data(error)));
                    }
                }
                EarlyEnd::Reset { .. } => timeline.push((next.max(last + RESET_GAP), Step::Reset)),
            }
        }
    }

    if let Some(heartbeat) = format.heartbeat() {
        let end = timeline.last().map_or(Duration::ZERO, |(t, _)| *t);
        for beat in plan.timing.heartbeat_offsets(content_count + 1) {
            if beat < end {
                timeline.push((beat, Step::Data(heartbeat.clone())));
            }
        }
        // Stable: at equal offsets, scheduled events stay before heartbeats.
        timeline.sort_by_key(|(t, _)| *t);
    }
    timeline
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::for_endpoint;
    use crate::formats::testing::completion as test_completion;
    use crate::request::Endpoint;
    use crate::schedule::Stall;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn plan(c: &Completion) -> ResponsePlan {
        let _ = c;
        let mut plan = ResponsePlan::resolve(
            &crate::config::MockConfig::default(),
            &http::HeaderMap::new(),
            crate::scenario::RequestWishes::default(),
        )
        .unwrap();
        plan.timing.ttft = ms(100);
        plan.timing.itl = ms(10);
        plan
    }

    fn text(step: &Step) -> String {
        match step {
            Step::Data(b) => String::from_utf8_lossy(b).into_owned(),
            Step::Reset => "RESET".into(),
        }
    }

    #[test]
    fn anthropic_preamble_with_headers_content_on_slots_framing_at_finish() {
        let c = test_completion(0, 3, false);
        let p = plan(&c);
        let t = stream_timeline(for_endpoint(&Endpoint::AnthropicMessages), &c, &p);
        let at: Vec<(Duration, String)> =
            t.iter().map(|(d, s)| (*d, text(s).lines().next().unwrap_or_default().to_owned())).collect();
        assert_eq!(at[0], (ms(0), "event: message_start".into()));
        assert_eq!(at[1], (ms(0), "event: ping".into()));
        assert_eq!(at[2], (ms(100), "event: content_block_start".into()));
        assert_eq!(at[3], (ms(100), "event: content_block_delta".into()));
        assert_eq!(at[4].0, ms(110));
        assert_eq!(at[5].0, ms(120));
        assert_eq!(at[6], (ms(130), "event: content_block_stop".into()));
        assert_eq!(at.last().unwrap(), &(ms(130), "event: message_stop".into()));
    }

    #[test]
    fn reset_cuts_after_event_k_and_never_finishes() {
        let c = test_completion(0, 10, false);
        let mut p = plan(&c);
        p.early_end = Some(EarlyEnd::Reset { after: 3 });
        p.timing.itl = ms(40);
        let t = stream_timeline(for_endpoint(&Endpoint::OpenAiChat), &c, &p);
        // role chunk + content 0..=3, then the reset at slot 4.
        assert_eq!(t.len(), 1 + 4 + 1);
        assert_eq!(t.last().unwrap(), &(ms(260), Step::Reset), "slot 4 is more than RESET_GAP after slot 3");
        assert!(!t.iter().any(|(_, s)| text(s).contains("[DONE]")));
    }

    #[test]
    fn error_event_uses_next_sequence_number() {
        let c = test_completion(0, 10, false);
        let mut p = plan(&c);
        p.early_end = Some(EarlyEnd::ErrorEvent { after: 1 });
        let t = stream_timeline(for_endpoint(&Endpoint::OpenAiResponses), &c, &p);
        let last = text(&t.last().unwrap().1);
        // created, in_progress, item.added, part.added, delta 0, delta 1 → the error is number 6.
        assert!(last.starts_with("event: error\n"), "{last}");
        assert!(last.contains("\"sequence_number\":6"), "{last}");
        assert_eq!(t.last().unwrap().0, ms(120));
    }

    #[test]
    fn heartbeats_fill_the_stall() {
        let c = test_completion(0, 4, false);
        let mut p = plan(&c);
        p.timing.stall = Some(Stall { at: 2, duration: ms(100), heartbeat: Some(ms(30)) });
        let t = stream_timeline(for_endpoint(&Endpoint::OpenAiChat), &c, &p);
        let beats: Vec<Duration> = t.iter().filter(|(_, s)| text(s) == ": keep-alive\n\n").map(|(d, _)| *d).collect();
        assert_eq!(beats, vec![ms(150), ms(180), ms(210)]);
        assert!(t.windows(2).all(|w| w[0].0 <= w[1].0));
        let third = t.iter().find(|(_, s)| text(s).contains(&c.answer_chunks[2])).unwrap();
        assert_eq!(third.0, ms(220));
    }
}
