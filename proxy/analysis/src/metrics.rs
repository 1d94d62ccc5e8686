//! The arithmetic of docs/metrics.md: from the timeline's stamps and texts to the reported metrics.

use crate::analysis::{ms, OutputTokens, StallSummary, StreamMetrics};
use crate::distribution::Distribution;
use crate::timeline::Timeline;
use crate::tokens::{count_tokens, for_each_token_len};

/// Inputs besides the timeline.
pub(crate) struct MetricInputs {
    pub(crate) t_upstream_headers_ns: Option<u64>,
    pub(crate) t_first_chunk_ns: Option<u64>,
    pub(crate) t_end_ns: Option<u64>,
    pub(crate) body_bytes: u64,
    pub(crate) chunk_count: u64,
    /// Whether the dialect knows content at all (false for generic SSE, audio, binary).
    pub(crate) content_aware: bool,
}

pub(crate) fn stream_metrics(timeline: &Timeline, inputs: &MetricInputs) -> StreamMetrics {
    let ttft_answer_ms = timeline.first_answer_ns.map(ms);
    let ttft_tool_ms = timeline.first_tool_ns.map(ms);
    let time_to_first_output_ms = match (timeline.first_answer_ns, timeline.first_tool_ns) {
        (Some(a), Some(t)) => Some(ms(a.min(t))),
        (a, t) => a.or(t).map(ms),
    };
    let itl_ms = itl_distribution(timeline);
    let mut metrics = StreamMetrics {
        ttfb_ms: inputs.t_upstream_headers_ns.map(ms),
        time_to_first_chunk_ms: inputs.t_first_chunk_ns.map(ms),
        ttft_reasoning_ms: timeline.first_reasoning_ns.map(ms),
        ttft_answer_ms,
        ttft_tool_ms,
        time_to_first_output_ms,
        itl_ms,
        e2e_ms: inputs.t_end_ns.map(ms),
        to_last_content_ms: timeline.last_content_ns.map(ms),
        body_bytes: inputs.body_bytes,
        chunk_count: inputs.chunk_count,
        ..StreamMetrics::default()
    };
    if inputs.content_aware {
        add_token_metrics(timeline, &mut metrics);
    }
    metrics
}

fn itl_distribution(timeline: &Timeline) -> Option<Distribution> {
    let reservoir = &timeline.itl;
    if reservoir.seen == 0 {
        return None;
    }
    let mut sorted: Vec<f64> = reservoir.samples.iter().map(|&ns| ms(ns)).collect();
    sorted.sort_by(f64::total_cmp);
    let mut distribution = Distribution::from_sorted(&sorted, reservoir.seen);
    // The reservoir may have dropped the largest gap; the maximum is tracked exactly.
    distribution.max = ms(reservoir.max);
    Some(distribution)
}

/// Token counts, rate and tokens per chunk. Each class's text is tokenized as one concatenated
/// string (closest to what the model generated); each token is attributed to the event whose bytes
/// completed it, which gives `tokens_per_chunk` without a second tokenization pass.
fn add_token_metrics(timeline: &Timeline, metrics: &mut StreamMetrics) {
    let mut per_class = [0u64; 3];
    let events_with_text = [0, 1, 2]
        .iter()
        .filter_map(|&slot| timeline.boundaries[slot].last().map(|b| b.content_event as usize + 1))
        .max()
        .unwrap_or(0);
    let mut tokens_per_event = vec![0u64; events_with_text];
    for ((count, text), boundaries) in per_class.iter_mut().zip(&timeline.texts).zip(&timeline.boundaries) {
        let mut consumed = 0usize;
        let mut next_boundary = 0usize;
        let ok = for_each_token_len(text, |len| {
            *count += 1;
            consumed += len;
            while next_boundary < boundaries.len() && boundaries[next_boundary].end < consumed {
                next_boundary += 1;
            }
            if let Some(b) = boundaries.get(next_boundary) {
                if let Some(n) = tokens_per_event.get_mut(b.content_event as usize) {
                    *n += 1;
                }
            }
        });
        if !ok {
            return; // tokenizer unavailable: token metrics stay absent rather than wrong
        }
    }
    let total = per_class.iter().sum::<u64>();
    metrics.output_tokens =
        Some(OutputTokens { total, answer: per_class[0], reasoning: per_class[1], tool_call: per_class[2] });
    if timeline.content_events == 0 {
        return;
    }
    // One content event holding one text, all of it kept for tokenization (a non-streamed answer,
    // typically): its tokens are those just counted, without tokenizing it again.
    let whole_text_in_first_event = timeline.content_events == 1
        && !timeline.token_text_truncated
        && matches!(timeline.first_event_texts.as_slice(), [only] if only.len() == timeline.text_bytes);
    let first: u64 = if whole_text_in_first_event {
        total
    } else {
        timeline.first_event_texts.iter().filter_map(|t| count_tokens(t)).sum()
    };
    metrics.first_content_tokens = Some(first);
    if let (Some(t_first), Some(t_last)) = (timeline.first_content_ns, timeline.last_content_ns) {
        let span_ns = t_last.saturating_sub(t_first).saturating_sub(timeline.held_between(t_first, t_last));
        if timeline.content_events > 1 && span_ns > 0 && !timeline.token_text_truncated {
            let rate = total.saturating_sub(first) as f64 / (span_ns as f64 / 1e9);
            metrics.output_tps = Some(rate);
            if rate > 0.0 {
                metrics.tpot_ms = Some(1000.0 / rate);
            }
        }
    }
    let samples: Vec<f64> = tokens_per_event.iter().map(|&n| n as f64).collect();
    metrics.tokens_per_chunk = Distribution::from_samples(&samples);
}

pub(crate) fn stall_summary(timeline: &Timeline, threshold_ns: u64) -> StallSummary {
    let s = &timeline.stalls;
    StallSummary {
        threshold_ms: ms(threshold_ns),
        count: s.count,
        longest_ms: (s.count > 0).then(|| ms(s.longest_ns)),
        total_ms: ms(s.total_ns),
        heartbeat_only: s.heartbeat_only,
        list: s.list.clone(),
    }
}
