//! Hostile and huge inputs: memory stays bounded, nothing panics, counters stay exact.

use tokentap_analysis::{AnalysisLimits, RequestTiming, StreamAnalyzer, StreamContext, StreamFormat};

fn openai_ctx() -> StreamContext {
    StreamContext {
        request_path: "/v1/chat/completions".into(),
        provider_hint: Some("openai".into()),
        response_content_type: Some("text/event-stream".into()),
        response_status: Some(200),
    }
}

fn done() -> RequestTiming {
    RequestTiming { t_upstream_headers_ns: Some(1), t_end_ns: Some(2), body_complete: true }
}

#[test]
fn fifty_megabyte_line_is_skipped_not_buffered() {
    let mut analyzer = StreamAnalyzer::new(openai_ctx(), AnalysisLimits::default());
    analyzer.push_chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\"", 1);
    let block = vec![b'x'; 64 * 1024];
    let mut sent = 0;
    while sent < 50 << 20 {
        analyzer.push_chunk(&block, 2);
        sent += block.len();
    }
    analyzer.push_chunk(b"\"}}]}\n\n", 3);
    analyzer.push_chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\"after\"}}]}\n\n", 4);
    let a = analyzer.finish(done());
    assert_eq!(a.flags.oversized_events, 1);
    assert_eq!(a.event_counts.answer, 1, "framing resynced after the oversized event");
    assert_eq!(a.metrics.ttft_answer_ms, Some(4.0 / 1e6));
    // The analyzer's own buffers never hold the line: its debug form stays small.
    assert!(a.metrics.body_bytes > 50 << 20);
}

#[test]
fn fifty_megabyte_json_body_is_flagged() {
    let ctx = StreamContext { response_content_type: Some("application/json".into()), ..openai_ctx() };
    let mut analyzer = StreamAnalyzer::new(ctx, AnalysisLimits::default());
    let block = vec![b' '; 64 * 1024];
    analyzer.push_chunk(b"{\"choices\":[],\"pad\":\"", 1);
    for _ in 0..800 {
        analyzer.push_chunk(&block, 2);
    }
    analyzer.push_chunk(b"\"}", 3);
    let a = analyzer.finish(done());
    assert_eq!(a.format, StreamFormat::Json);
    assert_eq!(a.flags.oversized_events, 1);
}

#[test]
fn a_million_tiny_events_only_grow_counters() {
    let event = b"data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\n";
    let per_chunk = 1000;
    let chunk: Vec<u8> = event.repeat(per_chunk);
    let mut analyzer = StreamAnalyzer::new(openai_ctx(), AnalysisLimits::default());
    for i in 0..1000u64 {
        analyzer.push_chunk(&chunk, 1_000_000 + i * 1_000_000);
    }
    let a = analyzer.finish(done());
    assert_eq!(a.event_counts.answer, 1_000_000);
    assert_eq!(a.events.len(), 20_000);
    assert_eq!(a.events_truncated, 980_000);
    assert_eq!(a.metrics.output_tokens.as_ref().unwrap().answer, 1_000_000);
    let itl = a.metrics.itl_ms.as_ref().unwrap();
    assert_eq!(itl.count, 999_999);
    assert_eq!(itl.max, 1.0);
    assert_eq!(itl.p50, 0.0);
    // 999_999 tokens after the first event over 999 ms.
    assert!((a.metrics.output_tps.unwrap() - 999_999.0 / 0.999).abs() < 1e-3);
}

#[test]
fn token_text_cap_flags_and_withholds_the_rate() {
    let limits = AnalysisLimits { max_token_text_bytes: 1000, ..AnalysisLimits::default() };
    let mut analyzer = StreamAnalyzer::new(openai_ctx(), limits);
    for i in 0..1000u64 {
        analyzer.push_chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\" word\"}}]}\n\n", i * 1000);
    }
    let a = analyzer.finish(done());
    assert!(a.flags.token_text_truncated);
    assert_eq!(a.metrics.output_tokens.as_ref().unwrap().answer, 200);
    assert_eq!(a.metrics.output_tps, None);
    assert_eq!(a.event_counts.answer, 1000);
}

#[test]
fn long_text_without_spaces_tokenizes_in_bounded_time() {
    let ctx = openai_ctx();
    let mut analyzer = StreamAnalyzer::new(ctx, AnalysisLimits::default());
    let word = "x".repeat(500_000);
    let event = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{word}\"}}}}]}}\n\n");
    analyzer.push_chunk(event.as_bytes(), 1);
    let started = std::time::Instant::now();
    let a = analyzer.finish(done());
    assert!(a.metrics.output_tokens.unwrap().answer > 0);
    // Generous bound for a shared debug build; the quadratic path would take minutes.
    assert!(started.elapsed().as_secs() < 60);
}

#[test]
fn garbage_never_panics_for_any_hint() {
    let mut state = 0x1234_5678_9abc_def0u64;
    let alphabet: &[u8] = b"data: {}[]\":,\r\n event id retry choices delta content type \xff\xc3";
    let mut bytes = vec![0u8; 20_000];
    for b in &mut bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *b = alphabet[(state % alphabet.len() as u64) as usize];
    }
    for hint in ["openai", "anthropic", "gemini", "ollama", "generic"] {
        for ct in [Some("text/event-stream"), Some("application/x-ndjson"), Some("application/json"), None] {
            let ctx = StreamContext {
                request_path: "/x".into(),
                provider_hint: Some(hint.into()),
                response_content_type: ct.map(str::to_owned),
                response_status: None,
            };
            let mut analyzer = StreamAnalyzer::new(ctx, AnalysisLimits { max_event_bytes: 512, ..Default::default() });
            for (i, chunk) in bytes.chunks(97).enumerate() {
                analyzer.push_chunk(chunk, i as u64);
            }
            let a = analyzer.finish(done());
            serde_json::to_string(&a).unwrap();
        }
    }
}

/// Found by the fuzzer: without a content type, a BOM cut after its first byte was sniffed as binary.
#[test]
fn bom_split_before_sniffing_is_still_sse() {
    let body = b"\xEF\xBB\xBF: keep-alive\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
    let ctx = StreamContext { response_content_type: None, ..openai_ctx() };
    for cut in 1..4 {
        let mut analyzer = StreamAnalyzer::new(ctx.clone(), AnalysisLimits::default());
        analyzer.push_chunk(&body[..cut], 1);
        analyzer.push_chunk(&body[cut..], 2);
        let a = analyzer.finish(done());
        assert_eq!(a.format, StreamFormat::OpenaiChat, "cut at {cut}");
        assert_eq!((a.event_counts.heartbeat, a.event_counts.answer), (1, 1));
    }
}
