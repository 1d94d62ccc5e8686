//! The server's own report of its time (white box) joined to the wire times tokentap measured
//! (black box): the split of the time to first token into the server's part and
//! `network_and_proxy_ms`, a consistency check with a documented tolerance, and the prompt cache
//! state (cold or warm). docs/metrics.md, "Black box and white box", defines every number.

use serde::{Deserialize, Serialize};
use tokentap_analysis::{ServerMark, ServerTiming, StreamAnalysis, StreamFormat};

/// Fixed part of the tolerance: servers report whole milliseconds (TGI, OpenAI) or round seconds.
pub const TOLERANCE_FIXED_MS: f64 = 2.0;
/// Proportional part of the tolerance: two clocks on two machines, read by two programs.
pub const TOLERANCE_FRACTION: f64 = 0.02;
/// A prompt is `warm` when at least this share of its tokens came from the server's cache.
pub const WARM_CACHED_FRACTION: f64 = 0.5;

/// The split of one request's wait between the server (as it reported) and everything else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerSplit {
    /// Which moment both sides are compared at.
    pub compared_at: ServerMark,
    /// The server's reported time up to that moment.
    pub server_ms: f64,
    /// tokentap's measurement of the same moment, from t0: the first content event (any class)
    /// for `first_token`, the first body byte for `whole_response`, the response head for
    /// `response_head`.
    pub wire_ms: f64,
    /// wire − server: the network both ways, tokentap's own time before the request left, and any
    /// queueing in front of the server's clock (a gateway, a load balancer). Negative when the
    /// server claims more time than the wire saw.
    pub network_and_proxy_ms: f64,
    /// How far below zero `network_and_proxy_ms` may go before the two disagree.
    pub tolerance_ms: f64,
    pub check: ServerCheck,
}

/// Whether the white box fits inside the black box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerCheck {
    /// The server's time fits inside the wire time (within the tolerance).
    Consistent,
    /// The server reports more time than passed on the wire, beyond the tolerance: one of the two
    /// measurements is wrong (a server counting time before the request arrived, a misreported
    /// unit). The split is kept but should not be trusted.
    ServerExceedsWire,
}

tokentap_analysis::named_enum! {
    /// Prompt cache state, a condition a report states next to a time to first token.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    pub enum PromptCache {
        /// Less than half of the prompt came from the server's cache (none at all included).
        Cold = "cold",
        /// At least half of the prompt came from the server's cache.
        Warm = "warm",
    }
}

/// True for bodies whose events arrive over time (SSE, NDJSON); a JSON body arrives whole.
fn streamed(format: StreamFormat) -> bool {
    matches!(
        format,
        StreamFormat::OpenaiChat
            | StreamFormat::OpenaiResponses
            | StreamFormat::AnthropicMessages
            | StreamFormat::Gemini
            | StreamFormat::Ndjson
            | StreamFormat::GenericSse
    )
}

/// Joins the server's report to the wire times of the analysis. `None` when the server reported
/// nothing comparable or the wire moment was not observed.
pub fn split(server: &ServerTiming, analysis: &StreamAnalysis) -> Option<ServerSplit> {
    let m = &analysis.metrics;
    let (compared_at, server_ms) = server.comparable_ms(streamed(analysis.format))?;
    let wire_ms = match compared_at {
        ServerMark::FirstToken => {
            [m.ttft_reasoning_ms, m.ttft_answer_ms, m.ttft_tool_ms].into_iter().flatten().reduce(f64::min)?
        }
        ServerMark::WholeResponse => m.time_to_first_chunk_ms?,
        ServerMark::ResponseHead => m.ttfb_ms?,
    };
    let network_and_proxy_ms = wire_ms - server_ms;
    let tolerance_ms = TOLERANCE_FIXED_MS + TOLERANCE_FRACTION * server_ms;
    let check =
        if network_and_proxy_ms < -tolerance_ms { ServerCheck::ServerExceedsWire } else { ServerCheck::Consistent };
    [server_ms, wire_ms, network_and_proxy_ms].iter().all(|v| v.is_finite()).then_some(ServerSplit {
        compared_at,
        server_ms,
        wire_ms,
        network_and_proxy_ms,
        tolerance_ms,
        check,
    })
}

/// The prompt's cache state from the cached and total prompt tokens (provider usage, else the
/// server's timings): the cached share and `warm` from [`WARM_CACHED_FRACTION`]. Absent when the
/// cached count is unknown, or when it is non-zero and the prompt size is unknown or smaller.
pub fn prompt_cache(cached: Option<u64>, prompt: Option<u64>) -> (Option<f64>, Option<PromptCache>) {
    let Some(cached) = cached else {
        return (None, None);
    };
    match prompt.filter(|&p| p > 0 && p >= cached) {
        Some(prompt) => {
            let ratio = cached as f64 / prompt as f64;
            let state = if ratio >= WARM_CACHED_FRACTION { PromptCache::Warm } else { PromptCache::Cold };
            (Some(ratio), Some(state))
        }
        None if cached == 0 => (None, Some(PromptCache::Cold)),
        None => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use tokentap_analysis::{ServerTimingSource, StreamMetrics};

    use super::*;

    fn analysis(format: StreamFormat, metrics: StreamMetrics) -> StreamAnalysis {
        let mut a: StreamAnalysis = serde_json::from_value(serde_json::json!({
            "format": "openai_chat", "event_counts": {}, "metrics": {"body_bytes": 0, "chunk_count": 0},
            "stalls": {"threshold_ms": 1000.0, "count": 0, "total_ms": 0.0, "heartbeat_only": 0}, "flags": {}
        }))
        .unwrap();
        a.format = format;
        a.metrics = metrics;
        a
    }

    fn llama(prefill: f64) -> ServerTiming {
        ServerTiming {
            prefill_ms: Some(prefill),
            decode_ms: Some(100.0),
            ..ServerTiming::new(ServerTimingSource::LlamaCpp)
        }
    }

    #[test]
    fn a_stream_splits_at_its_first_token_of_any_class() {
        let metrics =
            StreamMetrics { ttft_reasoning_ms: Some(340.0), ttft_answer_ms: Some(900.0), ..Default::default() };
        let s = split(&llama(300.0), &analysis(StreamFormat::OpenaiChat, metrics)).unwrap();
        assert_eq!((s.compared_at, s.server_ms, s.wire_ms), (ServerMark::FirstToken, 300.0, 340.0));
        assert_eq!((s.network_and_proxy_ms, s.check), (40.0, ServerCheck::Consistent));
        assert_eq!(s.tolerance_ms, 8.0);
    }

    #[test]
    fn a_server_claiming_more_than_the_wire_saw_is_flagged_beyond_the_tolerance() {
        let metrics = StreamMetrics { ttft_answer_ms: Some(295.0), ..Default::default() };
        let within = split(&llama(300.0), &analysis(StreamFormat::OpenaiChat, metrics.clone())).unwrap();
        assert_eq!((within.network_and_proxy_ms, within.check), (-5.0, ServerCheck::Consistent));
        let beyond = split(&llama(400.0), &analysis(StreamFormat::OpenaiChat, metrics)).unwrap();
        assert_eq!(beyond.check, ServerCheck::ServerExceedsWire);
    }

    #[test]
    fn whole_bodies_compare_at_the_first_byte_and_head_times_at_the_head() {
        let metrics = StreamMetrics { ttfb_ms: Some(50.0), time_to_first_chunk_ms: Some(420.0), ..Default::default() };
        let s = split(&llama(300.0), &analysis(StreamFormat::Json, metrics.clone())).unwrap();
        assert_eq!((s.compared_at, s.server_ms, s.wire_ms), (ServerMark::WholeResponse, 400.0, 420.0));
        let openai = ServerTiming { processing_ms: Some(45.0), ..ServerTiming::new(ServerTimingSource::Openai) };
        let s = split(&openai, &analysis(StreamFormat::OpenaiChat, metrics)).unwrap();
        assert_eq!((s.compared_at, s.network_and_proxy_ms), (ServerMark::ResponseHead, 5.0));
    }

    #[test]
    fn nothing_comparable_is_no_split() {
        let metrics = StreamMetrics { ttfb_ms: Some(50.0), ..Default::default() };
        assert_eq!(split(&llama(300.0), &analysis(StreamFormat::OpenaiChat, metrics)), None, "no first token");
        let tokens_only = ServerTiming { prompt_tokens: Some(3), ..ServerTiming::new(ServerTimingSource::Groq) };
        assert_eq!(split(&tokens_only, &analysis(StreamFormat::Json, StreamMetrics::default())), None);
    }

    #[test]
    fn prompt_cache_state() {
        assert_eq!(prompt_cache(None, Some(10)), (None, None));
        assert_eq!(prompt_cache(Some(0), None), (None, Some(PromptCache::Cold)));
        assert_eq!(prompt_cache(Some(5), None), (None, None));
        assert_eq!(prompt_cache(Some(30), Some(42)).1, Some(PromptCache::Warm));
        assert_eq!(prompt_cache(Some(10), Some(42)).1, Some(PromptCache::Cold));
        assert_eq!(prompt_cache(Some(50), Some(42)), (None, None), "more cached than the prompt: not believed");
    }
}
