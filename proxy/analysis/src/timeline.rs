//! Per-event bookkeeping. Classifiers report "pieces" (a class plus the text it carried) for the
//! frame being analysed; the timeline turns them into first-arrival stamps, inter-token gaps,
//! stalls, the capped event list and the text to tokenize. Counters are exact; every detail list is
//! bounded, so a stream of millions of tiny events only grows counters.

use crate::analysis::{EventStamp, Stall};
use crate::event::{EventClass, EventCounts};

/// Gaps kept for the inter-token-latency percentiles. Beyond this, a deterministic reservoir sample
/// keeps the percentiles unbiased while `count` and `max` stay exact.
const ITL_SAMPLES_KEPT: usize = 100_000;
/// Stalls listed individually; the summary counters are exact.
const STALLS_LISTED: usize = 256;

/// Where a content piece's text ends inside its class's concatenated text, so tokens can be
/// attributed back to the event that completed them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextBoundary {
    pub(crate) content_event: u32,
    pub(crate) end: usize,
}

#[derive(Debug)]
pub(crate) struct Timeline {
    stall_threshold_ns: u64,
    max_events_kept: usize,
    max_token_text_bytes: usize,

    /// Arrival time and end offset of the frame being classified.
    t_ns: u64,
    end_offset: u64,
    pieces_in_frame: u32,
    frame_has_content: bool,

    pub(crate) counts: EventCounts,
    pub(crate) first_reasoning_ns: Option<u64>,
    pub(crate) first_answer_ns: Option<u64>,
    pub(crate) first_tool_ns: Option<u64>,
    pub(crate) first_content_ns: Option<u64>,
    pub(crate) last_content_ns: Option<u64>,
    /// Content-bearing events (frames with at least one non-empty content piece).
    pub(crate) content_events: u64,
    pub(crate) itl: Reservoir,
    pub(crate) stalls: StallCounters,
    /// Spans in which the proxy held the provider (`StreamAnalyzer::upstream_held`).
    pub(crate) held: Vec<(u64, u64)>,
    heartbeats_since_content: u64,
    answer_chars_cum: u64,
    pub(crate) events: Vec<EventStamp>,
    pub(crate) events_truncated: u64,
    /// Concatenated text per content class: answer, reasoning, tool_call.
    pub(crate) texts: [String; 3],
    pub(crate) boundaries: [Vec<TextBoundary>; 3],
    pub(crate) text_bytes: usize,
    pub(crate) token_text_truncated: bool,
    /// Texts of the pieces of the first content-bearing event, tokenized on their own.
    pub(crate) first_event_texts: Vec<String>,
}

#[derive(Debug, Default)]
pub(crate) struct StallCounters {
    pub(crate) count: u64,
    pub(crate) longest_ns: u64,
    pub(crate) total_ns: u64,
    pub(crate) heartbeat_only: u64,
    pub(crate) list: Vec<Stall>,
}

/// Algorithm-R reservoir with a fixed-seed generator: the same stream always yields the same sample.
#[derive(Debug)]
pub(crate) struct Reservoir {
    pub(crate) samples: Vec<u64>,
    pub(crate) seen: u64,
    pub(crate) max: u64,
    rng: u64,
}

impl Reservoir {
    fn new() -> Self {
        Reservoir { samples: Vec::new(), seen: 0, max: 0, rng: 0x9E37_79B9_7F4A_7C15 }
    }

    fn push(&mut self, value: u64) {
        self.seen += 1;
        self.max = self.max.max(value);
        if self.samples.len() < ITL_SAMPLES_KEPT {
            self.samples.push(value);
            return;
        }
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let slot = r % self.seen;
        if let Some(s) = usize::try_from(slot).ok().and_then(|i| self.samples.get_mut(i)) {
            *s = value;
        }
    }
}

fn class_slot(class: EventClass) -> Option<usize> {
    match class {
        EventClass::Answer => Some(0),
        EventClass::Reasoning => Some(1),
        EventClass::ToolCall => Some(2),
        _ => None,
    }
}

impl Timeline {
    pub(crate) fn new(stall_threshold_ns: u64, max_events_kept: usize, max_token_text_bytes: usize) -> Self {
        Timeline {
            stall_threshold_ns,
            max_events_kept,
            max_token_text_bytes,
            t_ns: 0,
            end_offset: 0,
            pieces_in_frame: 0,
            frame_has_content: false,
            counts: EventCounts::default(),
            first_reasoning_ns: None,
            first_answer_ns: None,
            first_tool_ns: None,
            first_content_ns: None,
            last_content_ns: None,
            content_events: 0,
            itl: Reservoir::new(),
            held: Vec::new(),
            stalls: StallCounters::default(),
            heartbeats_since_content: 0,
            answer_chars_cum: 0,
            events: Vec::new(),
            events_truncated: 0,
            texts: Default::default(),
            boundaries: Default::default(),
            text_bytes: 0,
            token_text_truncated: false,
            first_event_texts: Vec::new(),
        }
    }

    /// Starts a new frame (SSE event, NDJSON line, JSON body) that completed at `t_ns`.
    pub(crate) fn begin_frame(&mut self, t_ns: u64, end_offset: u64) {
        self.t_ns = t_ns;
        self.end_offset = end_offset;
        self.pieces_in_frame = 0;
        self.frame_has_content = false;
    }

    pub(crate) fn t_ns(&self) -> u64 {
        self.t_ns
    }

    /// Body byte offset where the current frame ended.
    pub(crate) fn end_offset(&self) -> u64 {
        self.end_offset
    }

    pub(crate) fn pieces_in_frame(&self) -> u32 {
        self.pieces_in_frame
    }

    pub(crate) fn unparsed(&mut self) {
        self.counts.unparsed += 1;
    }

    /// Room for `pieces` pieces' events and gaps (`StreamAnalyzer::expect_pieces`), within the
    /// caps they are kept under.
    pub(crate) fn reserve(&mut self, pieces: usize) {
        self.events.reserve(pieces.min(self.max_events_kept));
        self.itl.samples.reserve(pieces.min(ITL_SAMPLES_KEPT));
    }

    /// Records one classified piece of the current frame.
    pub(crate) fn piece(&mut self, class: EventClass, text: &str) {
        self.pieces_in_frame += 1;
        self.counts.add(class);
        match class {
            EventClass::Heartbeat => self.heartbeats_since_content += 1,
            EventClass::Error => self.stamp(class, 0),
            _ if class.is_content() && !text.is_empty() => self.content(class, text),
            _ => {}
        }
    }

    fn content(&mut self, class: EventClass, text: &str) {
        let t = self.t_ns;
        if !self.frame_has_content {
            // Several content pieces in one frame (e.g. a Gemini chunk with thought and answer
            // parts) are one event: gaps are measured between frames, never inside one.
            self.frame_has_content = true;
            self.content_events += 1;
            match self.last_content_ns {
                Some(previous) => {
                    // The provider's gap: time the proxy held it is not the provider's.
                    let gap = t.saturating_sub(previous).saturating_sub(self.held_between(previous, t));
                    self.itl.push(gap);
                    if gap >= self.stall_threshold_ns {
                        self.stall(previous, gap);
                    }
                }
                None => self.first_content_ns = Some(t),
            }
            self.last_content_ns = Some(t);
            self.heartbeats_since_content = 0;
        }
        if self.content_events == 1 && self.first_event_texts.len() < 64 {
            self.first_event_texts.push(text.to_owned());
        }
        let first = match class {
            EventClass::Answer => &mut self.first_answer_ns,
            EventClass::Reasoning => &mut self.first_reasoning_ns,
            _ => &mut self.first_tool_ns,
        };
        first.get_or_insert(t);
        let chars = text.chars().count() as u64;
        if class == EventClass::Answer {
            self.answer_chars_cum += chars;
        }
        if let Some(slot) = class_slot(class) {
            if !self.token_text_truncated && self.text_bytes + text.len() <= self.max_token_text_bytes {
                self.text_bytes += text.len();
                self.texts[slot].push_str(text);
                if self.events.len() < self.max_events_kept {
                    let content_event = u32::try_from(self.content_events - 1).unwrap_or(u32::MAX);
                    self.boundaries[slot].push(TextBoundary { content_event, end: self.texts[slot].len() });
                }
            } else {
                self.token_text_truncated = true;
            }
        }
        self.stamp(class, chars);
    }

    /// Of `[from, to]`, the time inside the held spans.
    pub(crate) fn held_between(&self, from: u64, to: u64) -> u64 {
        self.held.iter().map(|&(start, end)| end.min(to).saturating_sub(start.max(from))).sum()
    }

    fn stall(&mut self, start_ns: u64, gap_ns: u64) {
        let s = &mut self.stalls;
        s.count += 1;
        s.longest_ns = s.longest_ns.max(gap_ns);
        s.total_ns = s.total_ns.saturating_add(gap_ns);
        if self.heartbeats_since_content > 0 {
            s.heartbeat_only += 1;
        }
        if s.list.len() < STALLS_LISTED {
            s.list.push(Stall {
                start_ms: crate::analysis::ms(start_ns),
                gap_ms: crate::analysis::ms(gap_ns),
                heartbeats: self.heartbeats_since_content,
            });
        }
    }

    fn stamp(&mut self, class: EventClass, chars: u64) {
        if self.events.len() >= self.max_events_kept {
            self.events_truncated += 1;
            return;
        }
        self.events.push(EventStamp {
            t_ms: crate::analysis::ms(self.t_ns),
            class,
            chars,
            answer_chars_cum: self.answer_chars_cum,
            end_offset: self.end_offset,
        });
    }
}
