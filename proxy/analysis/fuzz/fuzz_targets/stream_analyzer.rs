//! Arbitrary bytes, cut at arbitrary points, through the stream analyzer for every provider hint and
//! content type, and through the request parser. Besides "never panics", it checks the property the
//! proxy relies on: with equal timestamps, where the network cut the bytes must not change the result.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentap_analysis::{
    analyze_request, AnalysisLimits, RequestTiming, StreamAnalysis, StreamAnalyzer, StreamContext,
};

const ROUTES: &[(Option<&str>, &str)] = &[
    (Some("openai"), "/v1/chat/completions"),
    (Some("openai"), "/v1/responses"),
    (Some("anthropic"), "/v1/messages"),
    (
        Some("gemini"),
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
    ),
    (Some("ollama"), "/api/chat"),
    (Some("generic"), "/stream"),
    (None, "/unknown"),
];
const CONTENT_TYPES: &[Option<&str>] = &[
    Some("text/event-stream"),
    Some("application/x-ndjson"),
    Some("application/json"),
    Some("audio/mpeg"),
    None,
];

fn run(
    route: (Option<&str>, &str),
    content_type: Option<&str>,
    limits: &AnalysisLimits,
    chunks: &[&[u8]],
) -> StreamAnalysis {
    let ctx = StreamContext {
        request_path: route.1.to_owned(),
        provider_hint: route.0.map(str::to_owned),
        response_content_type: content_type.map(str::to_owned),
        response_status: Some(200),
    };
    let mut analyzer = StreamAnalyzer::new(ctx, limits.clone());
    for chunk in chunks {
        analyzer.push_chunk(chunk, 7);
    }
    let mut analysis = analyzer.finish(RequestTiming {
        t_upstream_headers_ns: Some(1),
        t_end_ns: Some(9),
        body_complete: true,
    });
    analysis.metrics.chunk_count = 0;
    analysis
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let (selector, seed, body) = (data[0], data[1], &data[2..]);
    let route = ROUTES[usize::from(selector) % ROUTES.len()];
    let content_type = CONTENT_TYPES[usize::from(selector / 8) % CONTENT_TYPES.len()];
    let limits = AnalysisLimits {
        // Small bounds half of the time, so the oversized paths are exercised too.
        max_event_bytes: if selector & 0x80 != 0 { 64 } else { 1 << 20 },
        max_events_kept: 16,
        max_token_text_bytes: 4096,
        ..AnalysisLimits::default()
    };

    let mut chunks = Vec::new();
    let mut state = u64::from(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut rest = body;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = 1 + (state % 24) as usize;
        let (head, tail) = rest.split_at(len.min(rest.len()));
        chunks.push(head);
        rest = tail;
    }
    let whole = run(route, content_type, &limits, &[body]);
    let split = run(route, content_type, &limits, &chunks);
    assert_eq!(whole, split, "the split changed the analysis");
    serde_json::to_string(&whole).unwrap();

    let info = analyze_request(route.1, content_type, body, selector & 1 == 1);
    serde_json::to_string(&info).unwrap();
});
