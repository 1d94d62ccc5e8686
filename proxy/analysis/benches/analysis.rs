//! Benchmarks of the analysis core.
//!
//! - `sse_framing`: framer throughput on a large, realistic OpenAI chat stream (target ≥ 300 MB/s).
//! - `full_analysis/{1000,2000}_tokens`: everything the proxy pays per response — framing, JSON
//!   classification, timing, o200k tokenization and percentiles (target < 1 ms for 2,000 tokens).
//!
//! Run: `cargo bench -p tokentap-analysis -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tokentap_analysis::sse::{SseFramer, SseItem};
use tokentap_analysis::{count_tokens, AnalysisLimits, RequestTiming, StreamAnalyzer, StreamContext};

const WORDS: &[&str] = &[
    " the", " model", " streams", " tokens", " to", " a", " browser", ",", " and", " every", " gap", " between",
    " them", " is", " time", " the", " user", " waits", ".", " Latency", " matters",
];

/// One `chat.completion.chunk` per token, as OpenAI sends them (about 1 token per chunk).
fn openai_stream(tokens: usize) -> Vec<Vec<u8>> {
    let mut events = vec![
        br#"data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}

"#
        .to_vec(),
    ];
    for i in 0..tokens {
        events.push(
            format!(
                "data: {{\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_eb9dce56a8\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
                WORDS[i % WORDS.len()]
            )
            .into_bytes(),
        );
    }
    events.push(br#"data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_eb9dce56a8","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2000,"total_tokens":2020}}

data: [DONE]

"#.to_vec());
    events
}

fn sse_framing(c: &mut Criterion) {
    let body: Vec<u8> = openai_stream(20_000).concat();
    let mut group = c.benchmark_group("sse_framing");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("openai_20k_events_16KiB_reads", |b| {
        b.iter(|| {
            let mut framer = SseFramer::new(1 << 20);
            let mut events = 0u64;
            for chunk in body.chunks(16 * 1024) {
                framer.push(chunk, &mut |item| {
                    if let SseItem::Event(e) = item {
                        events += e.data.len() as u64;
                    }
                });
            }
            black_box(events)
        })
    });
    group.finish();
}

fn full_analysis(c: &mut Criterion) {
    // Load the o200k ranks outside the measurement: that is a once-per-process cost.
    count_tokens("warm up");
    let mut group = c.benchmark_group("full_analysis");
    for tokens in [1000usize, 2000] {
        let events = openai_stream(tokens);
        group.bench_with_input(BenchmarkId::new("openai_chunk_per_token", tokens), &events, |b, events| {
            b.iter(|| {
                let ctx = StreamContext {
                    request_path: "/v1/chat/completions".into(),
                    provider_hint: Some("openai".into()),
                    response_content_type: Some("text/event-stream".into()),
                    response_status: Some(200),
                };
                let mut analyzer = StreamAnalyzer::new(ctx, AnalysisLimits::default());
                for (i, event) in events.iter().enumerate() {
                    analyzer.push_chunk(event, 100_000_000 + i as u64 * 20_000_000);
                }
                black_box(analyzer.finish(RequestTiming {
                    t_upstream_headers_ns: Some(50_000_000),
                    t_end_ns: Some(100_000_000 + events.len() as u64 * 20_000_000),
                    body_complete: true,
                }))
            })
        });
    }
    group.finish();
}

/// The tokenization share of `full_analysis`: o200k over the same 2,000-token answer text.
fn tokenization(c: &mut Criterion) {
    let text: String = (0..2000).map(|i| WORDS[i % WORDS.len()]).collect();
    count_tokens("warm up");
    c.bench_function("o200k_count/2000_tokens", |b| b.iter(|| black_box(count_tokens(black_box(&text)))));
}

criterion_group!(benches, sse_framing, full_analysis, tokenization);
criterion_main!(benches);
