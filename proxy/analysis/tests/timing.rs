//! Timing math on synthetic timelines whose answers are known in advance (docs/metrics.md).

use tokentap_analysis::{count_tokens, AnalysisLimits, RequestTiming, StreamAnalysis, StreamAnalyzer, StreamContext};

const MS: u64 = 1_000_000;

fn openai(delta: &str) -> String {
    format!("data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n")
}

fn analyze(chunks: &[(String, u64)], t_end_ns: u64) -> StreamAnalysis {
    analyze_held(chunks, t_end_ns, &[])
}

/// [`analyze`] with spans in which the proxy held the provider.
fn analyze_held(chunks: &[(String, u64)], t_end_ns: u64, held: &[(u64, u64)]) -> StreamAnalysis {
    let ctx = StreamContext {
        request_path: "/v1/chat/completions".into(),
        provider_hint: Some("openai".into()),
        response_content_type: Some("text/event-stream".into()),
        response_status: Some(200),
    };
    let mut analyzer = StreamAnalyzer::new(ctx, AnalysisLimits::default());
    analyzer.upstream_held(held);
    for (bytes, t) in chunks {
        analyzer.push_chunk(bytes.as_bytes(), *t);
    }
    analyzer.finish(RequestTiming {
        t_upstream_headers_ns: Some(4 * MS),
        t_end_ns: Some(t_end_ns),
        body_complete: true,
    })
}

/// Four o200k tokens, and concatenations of it tokenize as 4 per copy (each starts with a space).
const FOUR_TOKENS: &str = " alpha beta gamma delta";

#[test]
fn reasoning_then_answer_exact_metrics() {
    assert_eq!(count_tokens(FOUR_TOKENS), Some(4));
    assert_eq!(count_tokens(&FOUR_TOKENS.repeat(15)), Some(60));
    let mut chunks = vec![(openai(r#"{"role":"assistant","content":""}"#), 5 * MS)];
    for i in 0..5 {
        chunks.push((openai(&format!(r#"{{"reasoning_content":"{FOUR_TOKENS}"}}"#)), (100 + 20 * i) * MS));
    }
    for i in 0..10 {
        chunks.push((openai(&format!(r#"{{"content":"{FOUR_TOKENS}"}}"#)), (200 + 20 * i) * MS));
    }
    chunks.push(("data: [DONE]\n\n".to_owned(), 400 * MS));
    let a = analyze(&chunks, 401 * MS);
    let m = &a.metrics;
    assert_eq!(m.ttfb_ms, Some(4.0));
    assert_eq!(m.time_to_first_chunk_ms, Some(5.0));
    assert_eq!(m.ttft_reasoning_ms, Some(100.0));
    assert_eq!(m.ttft_answer_ms, Some(200.0));
    assert_eq!(m.ttft_tool_ms, None);
    assert_eq!(m.time_to_first_output_ms, Some(200.0));
    let itl = m.itl_ms.as_ref().unwrap();
    assert_eq!((itl.count, itl.p50, itl.p99, itl.max), (14, 20.0, 20.0, 20.0));
    let tokens = m.output_tokens.as_ref().unwrap();
    assert_eq!((tokens.total, tokens.answer, tokens.reasoning), (60, 40, 20));
    assert_eq!(m.first_content_tokens, Some(4));
    // (60 - 4) tokens over 380 - 100 ms.
    let tps = m.output_tps.unwrap();
    assert!((tps - 200.0).abs() < 1e-9, "{tps}");
    assert!((m.tpot_ms.unwrap() - 5.0).abs() < 1e-9);
    let per_chunk = m.tokens_per_chunk.as_ref().unwrap();
    assert_eq!((per_chunk.count, per_chunk.p50, per_chunk.max), (15, 4.0, 4.0));
    assert_eq!(m.to_last_content_ms, Some(380.0));
    assert_eq!(m.e2e_ms, Some(401.0));
    assert_eq!(m.chunk_count, 17);
    assert_eq!(a.stalls.count, 0);
    // Hops are aligned by cumulative answer characters.
    let answer_events: Vec<_> = a.events.iter().filter(|e| e.class == tokentap_analysis::EventClass::Answer).collect();
    assert_eq!(answer_events.len(), 10);
    let n = FOUR_TOKENS.chars().count() as u64;
    for (i, e) in answer_events.iter().enumerate() {
        assert_eq!(e.answer_chars_cum, n * (i as u64 + 1));
        assert_eq!(e.t_ms, (200 + 20 * i) as f64);
    }
}

#[test]
fn vllm_style_role_chunk_is_first_chunk_not_first_token() {
    let chunks = vec![
        (openai(r#"{"role":"assistant","content":""}"#), 2 * MS),
        (openai(r#"{"content":"Hi"}"#), 150 * MS),
        (openai(r#"{"content":" there"}"#), 170 * MS),
    ];
    let a = analyze(&chunks, 171 * MS);
    assert_eq!(a.metrics.time_to_first_chunk_ms, Some(2.0));
    assert_eq!(a.metrics.ttft_answer_ms, Some(150.0));
    assert_eq!(a.event_counts.control, 1);
    // One token after the first event, over 20 ms.
    assert_eq!(a.metrics.output_tps, Some(50.0));
}

#[test]
fn single_content_event_has_no_rate() {
    let a = analyze(&[(openai(r#"{"content":"Hello world"}"#), 10 * MS)], 11 * MS);
    assert_eq!(a.metrics.output_tps, None);
    assert_eq!(a.metrics.tpot_ms, None);
    assert_eq!(a.metrics.itl_ms, None);
    assert_eq!(a.metrics.first_content_tokens, Some(2));
}

#[test]
fn stalls_with_and_without_heartbeats() {
    let chunks = vec![
        (openai(r#"{"content":"a"}"#), 100 * MS),
        (": keep-alive\n\n".to_owned(), 600 * MS),
        (": keep-alive\n\n".to_owned(), 1100 * MS),
        (openai(r#"{"content":"b"}"#), 1700 * MS),
        (openai(r#"{"content":"c"}"#), 3000 * MS),
        (openai(r#"{"content":"d"}"#), 3100 * MS),
    ];
    let a = analyze(&chunks, 3200 * MS);
    let s = &a.stalls;
    assert_eq!(s.threshold_ms, 1000.0);
    assert_eq!(s.count, 2);
    assert_eq!(s.heartbeat_only, 1);
    assert_eq!(s.longest_ms, Some(1600.0));
    assert_eq!(s.total_ms, 2900.0);
    assert_eq!(s.list.len(), 2);
    assert_eq!((s.list[0].start_ms, s.list[0].gap_ms, s.list[0].heartbeats), (100.0, 1600.0, 2));
    assert_eq!((s.list[1].start_ms, s.list[1].gap_ms, s.list[1].heartbeats), (1700.0, 1300.0, 0));
    assert_eq!(a.event_counts.heartbeat, 2);
    let itl = a.metrics.itl_ms.as_ref().unwrap();
    assert_eq!(itl.max, 1600.0);
    // numpy.percentile([1600, 1300, 100], 50) == 1300
    assert_eq!(itl.p50, 1300.0);
}

#[test]
fn time_the_proxy_held_the_provider_is_not_the_providers_gap() {
    // Events 100 ms apart, then 2 s in which the proxy's window was closed (a slow client), then
    // the rest: the provider's gap across the held span is 300 ms, not 2.3 s.
    let chunks: Vec<(String, u64)> = [100, 200, 300, 2_600, 2_700]
        .iter()
        .enumerate()
        .map(|(i, t)| (openai(&format!(r#"{{"content":"{}"}}"#, FOUR_TOKENS.repeat(i + 1))), t * MS))
        .collect();
    let a = analyze_held(&chunks, 2_800 * MS, &[(400 * MS, 2_400 * MS)]);
    assert_eq!(a.stalls.count, 0, "{:?}", a.stalls);
    let itl = a.metrics.itl_ms.as_ref().unwrap();
    assert_eq!(itl.max, 300.0);
    // (4·(2+3+4+5) = 56 tokens after the first event) over 2.6 s − 2 s held.
    let tps = a.metrics.output_tps.unwrap();
    assert!((tps - 56.0 / 0.6).abs() < 1e-6, "{tps}");
    // The events keep the times they were read at.
    assert_eq!(a.events.last().unwrap().t_ms, 2_700.0);
}

#[test]
fn event_spanning_chunks_is_stamped_by_the_completing_chunk() {
    let event = openai(r#"{"content":"late"}"#);
    let (head, tail) = event.split_at(20);
    let a = analyze(&[(head.to_owned(), 10 * MS), (tail.to_owned(), 50 * MS)], 60 * MS);
    assert_eq!(a.metrics.time_to_first_chunk_ms, Some(10.0));
    assert_eq!(a.metrics.ttft_answer_ms, Some(50.0));
    assert_eq!(a.events[0].end_offset, event.len() as u64);
}

#[test]
fn body_incomplete_and_missing_end_are_reported_not_guessed() {
    let ctx = StreamContext { request_path: "/v1/chat/completions".into(), ..Default::default() };
    let mut analyzer = StreamAnalyzer::new(ctx, AnalysisLimits::default());
    analyzer.push_chunk(openai(r#"{"content":"x"}"#).as_bytes(), MS);
    let a = analyzer.finish(RequestTiming { t_upstream_headers_ns: None, t_end_ns: None, body_complete: false });
    assert!(a.flags.body_incomplete);
    assert_eq!(a.metrics.e2e_ms, None);
    assert_eq!(a.metrics.ttfb_ms, None);
    let json = serde_json::to_value(&a).unwrap();
    assert!(json["metrics"].get("e2e_ms").is_none(), "undefined values are absent, not zero");
}

#[test]
fn empty_body() {
    let a = StreamAnalyzer::new(StreamContext::default(), AnalysisLimits::default())
        .finish(RequestTiming { body_complete: true, ..Default::default() });
    assert_eq!(a.format, tokentap_analysis::StreamFormat::Empty);
    assert_eq!(a.metrics.time_to_first_chunk_ms, None);
}
