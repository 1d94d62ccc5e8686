//! Data-driven tests: every fixture under tests/fixtures/ is analysed whole and again split at many
//! seeded random byte positions (and one byte per chunk). With all chunks stamped at the same time the
//! analysis must not depend on where the network cut the bytes. The result is compared with the
//! reviewed expectation file `<fixture>.expected.json` (regenerate with `UPDATE_EXPECT=1`, then
//! review the diff), and the key facts of each fixture are asserted by hand below.

use std::path::PathBuf;

use tokentap_analysis::{
    AnalysisLimits, Dialect, EventClass, RequestTiming, ServerTiming, ServerTimingSource, StreamAnalysis,
    StreamAnalyzer, StreamContext, StreamFormat,
};

const T_CHUNK_NS: u64 = 5_000_000;

struct Case {
    file: &'static str,
    path: &'static str,
    hint: Option<&'static str>,
    content_type: Option<&'static str>,
}

const CASES: &[Case] = &[
    Case {
        file: "openai_chat_reasoning_answer.sse",
        path: "/v1/chat/completions",
        hint: Some("openai"),
        content_type: Some("text/event-stream"),
    },
    Case {
        file: "openai_chat_tool_calls.sse",
        path: "/v1/chat/completions",
        hint: None,
        content_type: Some("text/event-stream; charset=utf-8"),
    },
    Case {
        file: "openai_chat_refusal.sse",
        path: "/v1/chat/completions",
        hint: Some("openai"),
        content_type: Some("text/event-stream"),
    },
    Case {
        file: "openai_chat_error_crlf_bom.sse",
        path: "/v1/chat/completions",
        hint: Some("openai"),
        content_type: Some("text/event-stream"),
    },
    Case {
        file: "openai_chat_cr_multiline_unterminated.sse",
        path: "/v1/chat/completions",
        hint: None,
        content_type: None,
    },
    Case {
        file: "openai_chat_invalid_utf8.sse",
        path: "/v1/chat/completions",
        hint: Some("openai"),
        content_type: Some("text/event-stream"),
    },
    Case {
        file: "openai_responses_reasoning_tool.sse",
        path: "/v1/responses",
        hint: Some("openai"),
        content_type: Some("text/event-stream"),
    },
    Case {
        file: "anthropic_thinking_tool.sse",
        path: "/v1/messages",
        hint: Some("anthropic"),
        content_type: Some("text/event-stream"),
    },
    Case {
        file: "anthropic_overloaded.sse",
        path: "/v1/messages",
        hint: None,
        content_type: Some("text/event-stream"),
    },
    Case {
        file: "gemini_thought_function.sse",
        path: "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        hint: None,
        content_type: Some("text/event-stream"),
    },
    Case {
        file: "ollama_chat.ndjson",
        path: "/api/chat",
        hint: Some("ollama"),
        content_type: Some("application/x-ndjson"),
    },
    Case {
        file: "generic_unknown.sse",
        path: "/custom/stream",
        hint: Some("generic"),
        content_type: Some("text/event-stream"),
    },
    Case {
        file: "openai_chat_nonstream.json",
        path: "/v1/chat/completions",
        hint: None,
        content_type: Some("application/json"),
    },
    Case { file: "anthropic_nonstream.json", path: "/proxy/llm", hint: None, content_type: Some("application/json") },
    Case {
        file: "gemini_array.json",
        path: "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
        hint: Some("gemini"),
        content_type: Some("application/json; charset=UTF-8"),
    },
    Case { file: "audio_speech.bin", path: "/v1/audio/speech", hint: Some("openai"), content_type: Some("audio/mpeg") },
    Case {
        file: "llamacpp_chat_timings.sse",
        path: "/v1/chat/completions",
        hint: None,
        content_type: Some("text/event-stream"),
    },
    Case { file: "llamacpp_nonstream.json", path: "/v1/chat/completions", hint: None, content_type: None },
    Case {
        file: "llamacpp_hostile_timings.sse",
        path: "/v1/chat/completions",
        hint: Some("openai"),
        content_type: Some("text/event-stream"),
    },
    Case {
        file: "groq_chat.sse",
        path: "/openai/v1/chat/completions",
        hint: Some("openai"),
        content_type: Some("text/event-stream"),
    },
    Case {
        file: "groq_nonstream.json",
        path: "/openai/v1/chat/completions",
        hint: Some("openai"),
        content_type: Some("application/json"),
    },
    Case {
        file: "cerebras_chat.sse",
        path: "/v1/chat/completions",
        hint: None,
        content_type: Some("text/event-stream"),
    },
    Case {
        file: "ollama_generate_timings.ndjson",
        path: "/api/generate",
        hint: Some("ollama"),
        content_type: Some("application/x-ndjson"),
    },
];

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn case(file: &str) -> &'static Case {
    CASES.iter().find(|c| c.file == file).expect("known fixture")
}

fn analyze_chunks(case: &Case, chunks: &[&[u8]]) -> StreamAnalysis {
    let ctx = StreamContext {
        request_path: case.path.to_owned(),
        provider_hint: case.hint.map(str::to_owned),
        response_content_type: case.content_type.map(str::to_owned),
        response_status: Some(200),
    };
    let mut analyzer = StreamAnalyzer::new(ctx, AnalysisLimits::default());
    for chunk in chunks {
        analyzer.push_chunk(chunk, T_CHUNK_NS);
    }
    let mut analysis = analyzer.finish(RequestTiming {
        t_upstream_headers_ns: Some(1_000_000),
        t_end_ns: Some(6_000_000),
        body_complete: true,
    });
    // The only field that legitimately depends on how the bytes were cut.
    analysis.metrics.chunk_count = 0;
    analysis
}

/// Splits `bytes` at `cuts` sorted random positions drawn from a seeded xorshift generator.
fn random_split(bytes: &[u8], seed: u64, cuts: usize) -> Vec<&[u8]> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut positions: Vec<usize> = (0..cuts)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % (bytes.len() as u64 + 1)) as usize
        })
        .collect();
    positions.sort_unstable();
    let mut chunks = Vec::new();
    let mut last = 0;
    for p in positions {
        chunks.push(&bytes[last..p]);
        last = p;
    }
    chunks.push(&bytes[last..]);
    chunks
}

/// The one helper every fixture goes through.
fn check(case: &Case, bytes: &[u8]) -> StreamAnalysis {
    let whole = analyze_chunks(case, &[bytes]);
    for seed in 1..=40u64 {
        let chunks = random_split(bytes, seed, 1 + (seed as usize % 17));
        let split = analyze_chunks(case, &chunks);
        assert_eq!(split, whole, "{}: split with seed {seed} changed the analysis", case.file);
    }
    let one_byte: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(analyze_chunks(case, &one_byte), whole, "{}: 1-byte chunks changed the analysis", case.file);

    let expected_path = fixture_dir().join(format!("{}.expected.json", case.file));
    let actual = serde_json::to_string_pretty(&whole).unwrap() + "\n";
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&expected_path, &actual).unwrap();
    } else {
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|_| panic!("missing {}; run with UPDATE_EXPECT=1 and review", expected_path.display()));
        let expected: StreamAnalysis = serde_json::from_str(&expected).expect("expectation parses");
        // The answer's keyed hashes are never written (their key is per process); the server's
        // timings are written in the record, not in the analysis; the reply key and the tool
        // calls' argument hashes only with a fleet key.
        let mut written = StreamAnalysis { answer_hashes: None, server_timing: None, reply_key: None, ..whole.clone() };
        written.tool_calls.iter_mut().for_each(|c| c.arguments_hash = None);
        assert_eq!(written, expected, "{} differs from its expectation file", case.file);
    }
    whole
}

fn fixture(file: &str) -> StreamAnalysis {
    let case = case(file);
    let bytes = std::fs::read(fixture_dir().join(file)).unwrap();
    check(case, &bytes)
}

#[test]
fn every_fixture_is_split_invariant_and_matches_expectation() {
    for case in CASES {
        let bytes = std::fs::read(fixture_dir().join(case.file)).unwrap();
        check(case, &bytes);
    }
}

fn answer_chars(a: &StreamAnalysis) -> u64 {
    a.events.iter().map(|e| e.answer_chars_cum).max().unwrap_or(0)
}

#[test]
fn openai_reasoning_then_answer_with_usage() {
    let a = fixture("openai_chat_reasoning_answer.sse");
    assert_eq!(a.format, StreamFormat::OpenaiChat);
    let c = &a.event_counts;
    assert_eq!((c.control, c.reasoning, c.answer, c.heartbeat, c.usage, c.done), (2, 4, 4, 1, 1, 1));
    assert_eq!(answer_chars(&a), "Hello, world! How are you?".chars().count() as u64);
    let usage = a.usage.as_ref().unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens, usage.reasoning_tokens), (Some(12), Some(9), Some(4)));
    assert_eq!(usage.cached_tokens, Some(0));
    assert_eq!(a.finish_reasons, vec!["stop"]);
    assert_eq!(a.response_id.as_deref(), Some("chatcmpl-abc"));
    assert_eq!(a.response_model.as_deref(), Some("gpt-4o-mini"));
    let tokens = a.metrics.output_tokens.as_ref().unwrap();
    assert_eq!(tokens.total, tokens.answer + tokens.reasoning);
    assert!(tokens.answer >= 6 && tokens.reasoning >= 4);
    assert_eq!(a.events.len(), 8);
    assert_eq!(a.metrics.ttft_answer_ms, Some(5.0));
    assert_eq!(a.metrics.time_to_first_chunk_ms, Some(5.0));
    // All events at one instant: a rate is undefined, never infinite.
    assert_eq!(a.metrics.output_tps, None);
}

#[test]
fn openai_fragmented_parallel_tool_calls() {
    let a = fixture("openai_chat_tool_calls.sse");
    assert_eq!(a.tool_calls.len(), 2);
    assert_eq!(a.tool_calls[0].id.as_deref(), Some("call_1"));
    assert_eq!(a.tool_calls[0].name.as_deref(), Some("get_weather"));
    assert_eq!(a.tool_calls[0].argument_bytes, r#"{"city": "Paris"}"#.len() as u64);
    assert_eq!(a.tool_calls[1].name.as_deref(), Some("get_time"));
    assert_eq!(a.tool_calls[1].argument_bytes, r#"{"tz": "CET"}"#.len() as u64);
    assert_eq!(a.event_counts.tool_call, 7);
    assert_eq!(a.event_counts.reasoning, 1);
    assert_eq!(a.finish_reasons, vec!["tool_calls"]);
    assert_eq!(a.metrics.ttft_answer_ms, None);
    assert_eq!(a.metrics.ttft_tool_ms, Some(5.0));
    assert_eq!(a.metrics.time_to_first_output_ms, Some(5.0));
}

#[test]
fn openai_refusal_counts_as_answer_and_sets_flag() {
    let a = fixture("openai_chat_refusal.sse");
    assert!(a.refusal);
    assert_eq!(a.event_counts.answer, 3);
    assert_eq!(answer_chars(&a), "I'm sorry, I can't help with that.".chars().count() as u64);
}

#[test]
fn openai_midstream_error_with_comments_crlf_and_bom() {
    let a = fixture("openai_chat_error_crlf_bom.sse");
    assert_eq!(a.event_counts.heartbeat, 3, "three comment lines");
    assert_eq!(a.event_counts.answer, 2);
    assert_eq!(a.event_counts.error, 1);
    assert_eq!(a.errors.len(), 1);
    assert_eq!(a.errors[0].error_type.as_deref(), Some("server_error"));
    assert!(a.errors[0].message.as_deref().unwrap().starts_with("The server had an error"));
    assert_eq!(a.events.last().unwrap().class, EventClass::Error);
    assert_eq!(
        a.events.last().unwrap().end_offset,
        std::fs::read(fixture_dir().join("openai_chat_error_crlf_bom.sse")).unwrap().len() as u64 - 1
    );
    assert_eq!(answer_chars(&a), "Partial answer".len() as u64);
    assert!(!a.flags.invalid_utf8);
}

#[test]
fn cr_only_multiline_data_and_unterminated_block() {
    let a = fixture("openai_chat_cr_multiline_unterminated.sse");
    // Content-type absent: the body was sniffed as SSE, the path chose the dialect.
    assert_eq!(a.format, StreamFormat::OpenaiChat);
    assert_eq!(a.event_counts.answer, 2, "the unterminated last block is discarded");
    assert_eq!(a.event_counts.unparsed, 1);
    assert_eq!(answer_chars(&a), "multi line".len() as u64);
}

#[test]
fn invalid_utf8_is_decoded_lossily_and_flagged() {
    let a = fixture("openai_chat_invalid_utf8.sse");
    assert!(a.flags.invalid_utf8);
    assert_eq!(a.event_counts.answer, 2);
    // "caf\u{FFFD} ok \u{FFFD}" is 9 chars (the lone lead byte before a space is one U+FFFD), " naïve 東京" is 9.
    assert_eq!(answer_chars(&a), 9 + 9);
}

#[test]
fn responses_api_reasoning_text_tool_and_usage() {
    let a = fixture("openai_responses_reasoning_tool.sse");
    assert_eq!(a.format, StreamFormat::OpenaiResponses);
    let c = &a.event_counts;
    assert_eq!((c.reasoning, c.answer, c.tool_call, c.done), (2, 2, 3, 1));
    assert_eq!(c.control, 11, "lifecycle, *.done repeats and the unknown event");
    assert_eq!(a.tool_calls.len(), 1);
    assert_eq!(a.tool_calls[0].id.as_deref(), Some("call_abc"));
    assert_eq!(a.tool_calls[0].name.as_deref(), Some("lookup"));
    assert_eq!(a.tool_calls[0].argument_bytes, 9);
    let u = a.usage.as_ref().unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.reasoning_tokens, u.cached_tokens, u.total_tokens),
        (Some(30), Some(40), Some(20), Some(10), Some(70))
    );
    assert_eq!(a.response_id.as_deref(), Some("resp_123"));
    assert_eq!(a.finish_reasons, vec!["completed"]);
    assert_eq!(answer_chars(&a), "Checking now.".len() as u64);
}

#[test]
fn anthropic_thinking_redacted_text_tool_ping_unknown() {
    let a = fixture("anthropic_thinking_tool.sse");
    assert_eq!(a.format, StreamFormat::AnthropicMessages);
    let c = &a.event_counts;
    assert_eq!(c.heartbeat, 2, "ping and the empty input_json_delta");
    assert_eq!(c.reasoning, 3, "two thinking deltas and the redacted block");
    assert_eq!(c.answer, 2);
    assert_eq!(c.tool_call, 3, "tool name at block start, two argument fragments");
    assert_eq!((c.usage, c.done), (1, 1));
    assert!(a.flags.redacted_reasoning);
    let u = a.usage.as_ref().unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.cached_tokens, u.cache_creation_tokens),
        (Some(25), Some(89), Some(100), Some(5))
    );
    assert_eq!(u.raw.as_ref().unwrap()["output_tokens"], 89);
    assert_eq!(a.tool_calls[0].name.as_deref(), Some("get_weather"));
    assert_eq!(a.tool_calls[0].id.as_deref(), Some("toolu_01"));
    assert_eq!(a.tool_calls[0].argument_bytes, r#"{"location": "Paris"}"#.len() as u64);
    assert_eq!(a.finish_reasons, vec!["tool_use"]);
    assert_eq!(a.response_model.as_deref(), Some("claude-sonnet-4-5"));
}

#[test]
fn anthropic_overloaded_midstream() {
    let a = fixture("anthropic_overloaded.sse");
    assert_eq!(a.format, StreamFormat::AnthropicMessages);
    assert_eq!(a.errors[0].error_type.as_deref(), Some("overloaded_error"));
    assert_eq!(a.errors[0].message.as_deref(), Some("Overloaded"));
    assert_eq!(a.event_counts.done, 0);
}

#[test]
fn gemini_thoughts_function_call_and_last_usage() {
    let a = fixture("gemini_thought_function.sse");
    assert_eq!(a.format, StreamFormat::Gemini);
    let c = &a.event_counts;
    assert_eq!((c.reasoning, c.answer, c.tool_call, c.done), (1, 2, 1, 1));
    let u = a.usage.as_ref().unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.reasoning_tokens, u.total_tokens),
        (Some(8), Some(12), Some(5), Some(25))
    );
    assert_eq!(a.tool_calls[0].name.as_deref(), Some("get_weather"));
    assert_eq!(a.tool_calls[0].argument_bytes, r#"{"city":"Paris"}"#.len() as u64);
    assert_eq!(a.finish_reasons, vec!["STOP"]);
    assert_eq!(a.response_model.as_deref(), Some("gemini-2.5-flash"));
}

#[test]
fn ollama_ndjson_with_final_line_without_newline() {
    let a = fixture("ollama_chat.ndjson");
    assert_eq!(a.format, StreamFormat::Ndjson);
    assert_eq!(a.dialect, Some(Dialect::Ollama));
    let c = &a.event_counts;
    assert_eq!((c.reasoning, c.answer, c.tool_call, c.heartbeat, c.done), (2, 2, 1, 1, 1));
    let u = a.usage.as_ref().unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (Some(11), Some(7)));
    assert_eq!(a.finish_reasons, vec!["stop"]);
}

#[test]
fn generic_sse_is_timing_only() {
    let a = fixture("generic_unknown.sse");
    assert_eq!(a.format, StreamFormat::GenericSse);
    assert_eq!(a.dialect, Some(Dialect::Generic));
    assert_eq!((a.event_counts.control, a.event_counts.heartbeat, a.event_counts.done), (2, 1, 1));
    assert_eq!(a.metrics.output_tokens, None);
    assert_eq!(a.metrics.ttft_answer_ms, None);
}

#[test]
fn non_streaming_bodies() {
    let a = fixture("openai_chat_nonstream.json");
    assert_eq!((a.format, a.dialect), (StreamFormat::Json, Some(Dialect::OpenaiChat)));
    assert_eq!((a.event_counts.answer, a.event_counts.tool_call, a.event_counts.usage), (1, 1, 1));
    assert_eq!(a.metrics.ttft_answer_ms, Some(5.0));
    assert_eq!(a.metrics.itl_ms, None);
    assert_eq!(a.usage.as_ref().unwrap().output_tokens, Some(10));

    let a = fixture("anthropic_nonstream.json");
    assert_eq!(a.dialect, Some(Dialect::AnthropicMessages), "detected from the body shape");
    assert_eq!((a.event_counts.answer, a.event_counts.reasoning), (1, 1));
    assert_eq!(a.finish_reasons, vec!["end_turn"]);

    let a = fixture("gemini_array.json");
    assert_eq!(a.dialect, Some(Dialect::Gemini));
    assert_eq!(a.event_counts.answer, 2);
    assert_eq!(a.usage.as_ref().unwrap().output_tokens, Some(2));
}

#[test]
fn audio_is_bytes_and_timing_only() {
    let a = fixture("audio_speech.bin");
    assert_eq!((a.format, a.dialect), (StreamFormat::Audio, None));
    assert_eq!(a.metrics.body_bytes, 2048);
    assert_eq!(a.metrics.time_to_first_chunk_ms, Some(5.0));
    assert_eq!(a.metrics.output_tokens, None);
}

fn server_timing(file: &str) -> ServerTiming {
    fixture(file).server_timing.unwrap_or_else(|| panic!("{file}: no server timing"))
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9)
}

#[test]
fn llama_cpp_timings_on_the_usage_event_and_the_whole_body() {
    let t = server_timing("llamacpp_chat_timings.sse");
    assert_eq!(t.source, ServerTimingSource::LlamaCpp);
    assert_eq!((t.prefill_ms, t.decode_ms, t.queue_ms, t.total_ms), (Some(310.25), Some(72.5), None, None));
    assert_eq!((t.prompt_tokens, t.cached_prompt_tokens, t.output_tokens), (Some(42), Some(30), Some(3)));
    assert_eq!(t.rejected_values, 0);
    let a = fixture("llamacpp_chat_timings.sse");
    assert_eq!(a.usage.as_ref().and_then(|u| u.cached_tokens), Some(30));
    assert_eq!(a.event_counts.answer, 3);

    let t = server_timing("llamacpp_nonstream.json");
    assert_eq!(
        (t.source, t.prefill_ms, t.cached_prompt_tokens, t.prompt_tokens),
        (ServerTimingSource::LlamaCpp, Some(310.25), Some(0), Some(42))
    );
}

#[test]
fn hostile_timings_are_dropped_and_counted_never_nan() {
    let a = fixture("llamacpp_hostile_timings.sse");
    // Neither time survives, so there is no report at all; the answer is still analysed.
    assert_eq!(a.server_timing, None);
    assert_eq!(a.event_counts.answer, 1);
}

#[test]
fn groq_x_groq_usage_and_whole_body_usage_in_seconds() {
    let t = server_timing("groq_chat.sse");
    assert_eq!(t.source, ServerTimingSource::Groq);
    assert!(close(t.queue_ms, 12.3) && close(t.prefill_ms, 4.1) && close(t.decode_ms, 6.2) && close(t.total_ms, 10.3));
    assert_eq!((t.prompt_tokens, t.output_tokens), (Some(18), Some(3)));
    let t = server_timing("groq_nonstream.json");
    assert_eq!(t.source, ServerTimingSource::Groq);
    assert!(close(t.queue_ms, 20.0) && close(t.prefill_ms, 4.0) && close(t.total_ms, 10.0));
    let a = fixture("groq_nonstream.json");
    assert_eq!(a.usage.as_ref().and_then(|u| u.input_tokens), Some(18));
}

#[test]
fn cerebras_time_info() {
    let t = server_timing("cerebras_chat.sse");
    assert_eq!(t.source, ServerTimingSource::Cerebras);
    assert!(close(t.queue_ms, 0.2) && close(t.prefill_ms, 1.5) && close(t.decode_ms, 2.1) && close(t.total_ms, 6.1));
    assert_eq!((t.prompt_tokens, t.output_tokens), (Some(9), Some(2)));
}

#[test]
fn ollama_durations_in_nanoseconds() {
    let t = server_timing("ollama_generate_timings.ndjson");
    assert_eq!(t.source, ServerTimingSource::Ollama);
    assert!(close(t.total_ms, 10706.818083) && close(t.load_ms, 6338.219291));
    assert!(close(t.prefill_ms, 130.079) && close(t.decode_ms, 4232.71));
    assert_eq!((t.prompt_tokens, t.output_tokens), (Some(26), Some(259)));
    // The older chat fixture reports durations too.
    assert_eq!(server_timing("ollama_chat.ndjson").source, ServerTimingSource::Ollama);
}

#[test]
fn plain_openai_streams_report_no_server_timing() {
    assert_eq!(fixture("openai_chat_reasoning_answer.sse").server_timing, None);
    assert_eq!(fixture("openai_chat_nonstream.json").server_timing, None);
}
