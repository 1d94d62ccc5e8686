//! The conventions mapping, checked on hand-written records: record in, spans and observations out.

use super::*;
use tokentap_record::Record;

const T0: u64 = 1_700_000_000_000_000_000;
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const SPAN: &str = "b7ad6b7169203331";
const PARENT: &str = "00f067aa0ba902b7";

/// A streamed chat with reasoning, answer and a tool call: reasoning events at 100..=120 ms,
/// answer at 130..=150 ms, tool call at 160..=170 ms, one stall, the last byte at 200 ms.
pub(super) fn record_json() -> serde_json::Value {
    serde_json::json!({
        "record_version": 1,
        "request_id": "0123456789abcdef01234567",
        "trace_id": TRACE,
        "span_id": SPAN,
        "parent_span_id": PARENT,
        "started_at": "2023-11-14T22:13:20Z",
        "route": "/",
        "upstream": "https://api.example.com:8443/v1",
        "provider": "openai",
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": 200,
        "outcome": "ok",
        "request_headers": [],
        "conditions": {"request_bytes": 100, "concurrency_at_t0": 0, "warm_up": false, "tokentap_version": "0.1.0"},
        "request": {"operation": "chat", "model": "gpt-test", "stream": true, "max_tokens": 256},
        "timeline": {
            "t0_unix_ns": T0,
            "t_upstream_sent_ns": 5_000_000u64,
            "t_upstream_headers_ns": 60_000_000u64,
            "t_end_ns": 200_000_000u64,
            "chunk_count": 4,
            "body_bytes": 400,
            "chunks_truncated": false,
            "analysis_bytes_truncated": false,
            "chunks": [
                {"offset": 0, "len": 100, "t_up_ns": 90_000_000u64, "t_handoff_ns": 90_010_000u64},
                {"offset": 100, "len": 100, "t_up_ns": 120_000_000u64, "t_handoff_ns": 120_010_000u64},
                {"offset": 200, "len": 100, "t_up_ns": 150_000_000u64, "t_handoff_ns": 150_010_000u64},
                {"offset": 300, "len": 100, "t_up_ns": 199_000_000u64, "t_handoff_ns": 199_500_000u64}
            ]
        },
        "analysis": {
            "format": "openai_chat",
            "dialect": "openai_chat",
            "event_counts": {"answer": 3, "reasoning": 2, "tool_call": 2},
            "metrics": {
                "ttfb_ms": 60.0,
                "time_to_first_chunk_ms": 90.0,
                "ttft_reasoning_ms": 100.0,
                "ttft_answer_ms": 130.0,
                "ttft_tool_ms": 160.0,
                "time_to_first_output_ms": 130.0,
                "itl_ms": {"count": 6, "p50": 10.0, "p90": 10.0, "p95": 10.0, "p99": 10.0, "max": 10.0},
                "output_tokens": {"total": 20, "answer": 10, "reasoning": 6, "tool_call": 4},
                "output_tps": 100.0,
                "tpot_ms": 10.0,
                "e2e_ms": 200.0,
                "body_bytes": 400,
                "chunk_count": 4
            },
            "stalls": {"threshold_ms": 5.0, "count": 1, "longest_ms": 10.0, "total_ms": 10.0, "heartbeat_only": 0,
                       "list": [{"start_ms": 140.0, "gap_ms": 10.0, "heartbeats": 0}]},
            "usage": {"input_tokens": 12, "output_tokens": 21, "reasoning_tokens": 6, "cached_tokens": 4},
            "response_id": "chatcmpl-1",
            "response_model": "gpt-test-2024",
            "finish_reasons": ["tool_calls"],
            "tool_calls": [{"id": "call_1", "name": "get_weather", "argument_bytes": 20}],
            "events": [
                {"t_ms": 100.0, "class": "reasoning", "chars": 5, "answer_chars_cum": 0, "end_offset": 50},
                {"t_ms": 120.0, "class": "reasoning", "chars": 5, "answer_chars_cum": 0, "end_offset": 150},
                {"t_ms": 130.0, "class": "answer", "chars": 5, "answer_chars_cum": 5, "end_offset": 180},
                {"t_ms": 140.0, "class": "answer", "chars": 5, "answer_chars_cum": 10, "end_offset": 200},
                {"t_ms": 150.0, "class": "answer", "chars": 5, "answer_chars_cum": 15, "end_offset": 250},
                {"t_ms": 160.0, "class": "tool_call", "chars": 5, "answer_chars_cum": 15, "end_offset": 280},
                {"t_ms": 170.0, "class": "tool_call", "chars": 5, "answer_chars_cum": 15, "end_offset": 300}
            ],
            "flags": {}
        },
        "self_overhead": {"hook_time_us": 42.0, "handoff_lag_p50_us": 10.0, "handoff_lag_p99_us": 480.0, "handoff_lag_max_us": 500.0}
    })
}

fn record(json: serde_json::Value) -> Record {
    serde_json::from_value(json).expect("a valid record")
}

fn spans_of(json: serde_json::Value) -> Vec<SpanPlan> {
    request_spans(&record(json), &SpanOptions::default())
}

fn find<'a>(spans: &'a [SpanPlan], name: &str) -> &'a SpanPlan {
    spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no span {name}: {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>()))
}

fn ms(ms: u64) -> u64 {
    T0 + ms * 1_000_000
}

#[test]
fn metric_table_is_indexed_by_id_and_names_are_unique() {
    for (i, def) in METRICS.iter().enumerate() {
        assert_eq!(def.id as usize, i, "{} is out of place", def.name);
        let counter = matches!(def.instrument, Instrument::Counter);
        assert_eq!(def.prometheus_name.ends_with("_total"), counter, "{}", def.prometheus_name);
        if let Instrument::Histogram(bounds) = def.instrument {
            assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{} bounds must increase", def.name);
        }
    }
    let mut names: Vec<_> = METRICS.iter().map(|d| d.prometheus_name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), METRICS.len());
    assert_eq!(MetricId::OperationDuration.def().name, "gen_ai.client.operation.duration");
    assert_eq!(MetricId::OperationDuration.def().instrument, Instrument::Histogram(DURATION_BUCKETS));
}

#[test]
fn request_span_carries_genai_and_tokentap_attributes() {
    let spans = spans_of(record_json());
    let span = &spans[0];
    assert_eq!(span.name, "chat gpt-test");
    assert_eq!(span.kind, SpanKind::Client);
    assert_eq!(hex(&span.trace_id), TRACE);
    assert_eq!(hex(&span.span_id), SPAN);
    assert_eq!(span.parent_span_id.map(|p| hex(&p)).as_deref(), Some(PARENT));
    assert_eq!((span.start_unix_ns, span.end_unix_ns), (T0, ms(200)));
    assert_eq!(span.status, SpanStatus::Unset);
    let expect: &[(&str, AttrValue)] = &[
        (attr::OPERATION_NAME, AttrValue::Str("chat".into())),
        (attr::PROVIDER_NAME, AttrValue::Str("openai".into())),
        (attr::REQUEST_MODEL, AttrValue::Str("gpt-test".into())),
        (attr::REQUEST_STREAM, AttrValue::Bool(true)),
        (attr::REQUEST_MAX_TOKENS, AttrValue::Int(256)),
        (attr::RESPONSE_ID, AttrValue::Str("chatcmpl-1".into())),
        (attr::RESPONSE_MODEL, AttrValue::Str("gpt-test-2024".into())),
        (attr::RESPONSE_FINISH_REASONS, AttrValue::StrArray(vec!["tool_calls".into()])),
        (attr::RESPONSE_TIME_TO_FIRST_CHUNK, AttrValue::F64(0.09)),
        (attr::USAGE_INPUT_TOKENS, AttrValue::Int(12)),
        (attr::USAGE_OUTPUT_TOKENS, AttrValue::Int(21)),
        (attr::USAGE_REASONING_OUTPUT_TOKENS, AttrValue::Int(6)),
        (attr::USAGE_CACHE_READ_INPUT_TOKENS, AttrValue::Int(4)),
        (attr::SERVER_ADDRESS, AttrValue::Str("api.example.com".into())),
        (attr::SERVER_PORT, AttrValue::Int(8443)),
        (attr::TTFT_ANSWER_MS, AttrValue::F64(130.0)),
        (attr::TTFT_REASONING_MS, AttrValue::F64(100.0)),
        (attr::TTFT_TOOL_MS, AttrValue::F64(160.0)),
        (attr::OUTPUT_TPS, AttrValue::F64(100.0)),
        (attr::TPOT_MS, AttrValue::F64(10.0)),
        (attr::ITL_P50_MS, AttrValue::F64(10.0)),
        (attr::ITL_P99_MS, AttrValue::F64(10.0)),
        (attr::ITL_MAX_MS, AttrValue::F64(10.0)),
        (attr::STALL_COUNT, AttrValue::Int(1)),
        (attr::STALL_LONGEST_MS, AttrValue::F64(10.0)),
        (attr::STALL_HEARTBEAT_ONLY, AttrValue::Int(0)),
        (attr::HOOK_TIME_US, AttrValue::F64(42.0)),
        (attr::OUTCOME, AttrValue::Str("ok".into())),
        (attr::REBUFFERED, AttrValue::Bool(false)),
    ];
    for (key, value) in expect {
        assert_eq!(span.attribute(key), Some(value), "{key}");
    }
    for absent in [attr::ERROR_TYPE, attr::CONTENT_REQUEST_BODY, attr::EVENTS_DROPPED] {
        assert!(span.attribute(absent).is_none(), "{absent} must be absent");
    }
    // The stall is an event on the request span, at its start.
    assert_eq!(span.events.len(), 1);
    assert_eq!((span.events[0].name, span.events[0].time_unix_ns), (event::STALL, ms(140)));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn phase_spans_cover_the_stream_in_order() {
    let spans = spans_of(record_json());
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["chat gpt-test", "provider_wait", "reasoning", "answer", "tool_call", "delivery"]);
    let root = &spans[0];
    let expect = [
        ("provider_wait", ms(5), ms(100)),
        ("reasoning", ms(100), ms(120)),
        ("answer", ms(130), ms(150)),
        ("tool_call", ms(160), ms(170)),
        ("delivery", ms(90), ms(200)),
    ];
    for (name, start, end) in expect {
        let s = find(&spans, name);
        assert_eq!((s.start_unix_ns, s.end_unix_ns), (start, end), "{name}");
        assert_eq!(s.kind, SpanKind::Internal);
        assert_eq!(s.parent_span_id, Some(root.span_id), "{name}");
        assert_eq!(s.trace_id, root.trace_id);
        assert!(
            s.start_unix_ns >= root.start_unix_ns && s.end_unix_ns <= root.end_unix_ns,
            "{name} outside its parent"
        );
        assert_eq!(s.attribute(attr::PHASE), Some(&AttrValue::Str(name.into())));
        for e in &s.events {
            assert!(e.time_unix_ns >= s.start_unix_ns && e.time_unix_ns <= s.end_unix_ns, "{name}: event outside");
        }
    }
    let tool = find(&spans, "tool_call");
    assert_eq!(tool.attribute(attr::STREAMED_TOOL_NAME), Some(&AttrValue::Str("get_weather".into())));
    assert_eq!(tool.attribute(attr::STREAMED_TOOL_CALL_ID), Some(&AttrValue::Str("call_1".into())));
    // Child ids are distinct and stable: the same record gives the same ids.
    let mut ids: Vec<_> = spans.iter().map(|s| s.span_id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), spans.len());
    assert_eq!(spans_of(record_json()), spans);
    // Chunk events sit on the delivery span at each chunk's arrival.
    let delivery = find(&spans, "delivery");
    let times: Vec<u64> = delivery.events.iter().map(|e| e.time_unix_ns).collect();
    assert_eq!(times, [ms(90), ms(120), ms(150), ms(199)]);
    assert_eq!(
        delivery.events[3].attributes.iter().find(|(k, _)| *k == attr::CHUNK_HANDOFF_LAG_US).map(|(_, v)| v),
        Some(&AttrValue::F64(500.0))
    );
}

#[test]
fn chunk_events_stay_within_the_budget_and_count_the_rest() {
    let mut json = record_json();
    let chunks: Vec<serde_json::Value> = (0..1000u64)
        .map(|i| serde_json::json!({"offset": i, "len": 1, "t_up_ns": 90_000_000 + i * 100_000, "t_handoff_ns": 90_000_000 + i * 100_000 + 1000}))
        .collect();
    json["timeline"]["chunks"] = serde_json::Value::Array(chunks);
    json["timeline"]["chunk_count"] = serde_json::json!(1200);
    let options = SpanOptions { max_events_per_span: 10, ..SpanOptions::default() };
    let spans = request_spans(&record(json), &options);
    let delivery = find(&spans, "delivery");
    assert_eq!(delivery.events.len(), 10);
    // 990 listed chunks left out, and 200 never listed (past timeline.max_chunks).
    assert_eq!(delivery.dropped_events, 1190);
    assert_eq!(delivery.attribute(attr::EVENTS_DROPPED), Some(&AttrValue::Int(1190)));
    let index = |e: &EventPlan| e.attributes.iter().find(|(k, _)| *k == attr::CHUNK_INDEX).map(|(_, v)| v.clone());
    assert_eq!(index(&delivery.events[0]), Some(AttrValue::Int(0)));
    assert_eq!(index(&delivery.events[4]), Some(AttrValue::Int(4)));
    assert_eq!(index(&delivery.events[5]), Some(AttrValue::Int(995)));
    assert_eq!(index(&delivery.events[9]), Some(AttrValue::Int(999)));
    assert!(delivery.events.windows(2).all(|w| w[0].time_unix_ns <= w[1].time_unix_ns));
}

#[test]
fn errors_set_status_and_error_type() {
    let mut json = record_json();
    json["status"] = serde_json::json!(429);
    json["outcome"] = serde_json::json!("http_error");
    let span = &spans_of(json)[0];
    assert_eq!(span.attribute(attr::ERROR_TYPE), Some(&AttrValue::Str("429".into())));
    assert!(matches!(span.status, SpanStatus::Error(_)));

    let mut json = record_json();
    json["outcome"] = serde_json::json!("upstream_connect_error");
    json["error"] = serde_json::json!({"side": "upstream", "kind": "connect_refused", "message": "connection refused"});
    json.as_object_mut().unwrap().remove("analysis");
    json["timeline"]["chunks"] = serde_json::json!([]);
    let spans = spans_of(json);
    assert_eq!(spans[0].attribute(attr::ERROR_TYPE), Some(&AttrValue::Str("connect_refused".into())));
    assert_eq!(spans[0].status, SpanStatus::Error("connect_refused: connection refused".into()));

    // An error event inside a 200 stream is an error too.
    let mut json = record_json();
    json["analysis"]["errors"] =
        serde_json::json!([{"t_ms": 150.0, "error_type": "overloaded_error", "message": "Overloaded"}]);
    let span = &spans_of(json)[0];
    assert_eq!(span.attribute(attr::ERROR_TYPE), Some(&AttrValue::Str("overloaded_error".into())));
    assert!(span.events.iter().any(|e| e.name == event::STREAM_ERROR && e.time_unix_ns == ms(150)));
}

#[test]
fn end_is_never_before_start_even_with_odd_stamps() {
    let mut json = record_json();
    // No t_end (the client went away) and an event stamped after every other stamp.
    json["timeline"].as_object_mut().unwrap().remove("t_end_ns");
    json["outcome"] = serde_json::json!("client_cancelled");
    json["analysis"]["events"][6]["t_ms"] = serde_json::json!(500.0);
    let spans = spans_of(json);
    let root = &spans[0];
    assert_eq!(root.end_unix_ns, ms(500));
    for s in &spans {
        assert!(s.end_unix_ns >= s.start_unix_ns, "{}", s.name);
        assert!(s.start_unix_ns >= root.start_unix_ns && s.end_unix_ns <= root.end_unix_ns, "{}", s.name);
    }
}

#[test]
fn unknown_operation_is_named_like_an_http_span_and_bad_ids_give_no_spans() {
    let mut json = record_json();
    json["request"] = serde_json::json!({});
    json["provider"] = serde_json::Value::Null;
    json["analysis"]["dialect"] = serde_json::json!("generic");
    let spans = spans_of(json.clone());
    assert_eq!(spans[0].name, "POST");
    assert!(spans[0].attribute(attr::OPERATION_NAME).is_none());
    assert_eq!(spans[0].attribute(attr::PROVIDER_NAME), Some(&AttrValue::Str(PROVIDER_OTHER.into())));
    json["trace_id"] = serde_json::json!("not-hex");
    assert!(spans_of(json).is_empty());
}

#[test]
fn content_is_attached_only_when_asked() {
    let mut json = record_json();
    json["content"] = serde_json::json!({"request_body": "{\"messages\":[]}", "request_body_truncated": false, "response_body": "data: x", "response_body_truncated": false});
    assert!(spans_of(json.clone())[0].attribute(attr::CONTENT_REQUEST_BODY).is_none());
    let options = SpanOptions { capture_content: true, ..SpanOptions::default() };
    let spans = request_spans(&record(json), &options);
    assert_eq!(spans[0].attribute(attr::CONTENT_RESPONSE_BODY), Some(&AttrValue::Str("data: x".into())));
}

#[test]
fn observations_follow_the_conventions() {
    let r = record(record_json());
    let objectives =
        Objectives { ttft_answer_ms: Some(500.0), tpot_ms: Some(50.0), e2e_ms: Some(30_000.0), first_paint_ms: None };
    let obs = metric_observations(&r, &objectives);
    let values = |metric: MetricId| obs.iter().filter(|o| o.metric == metric).map(|o| o.value).collect::<Vec<_>>();
    assert_eq!(values(MetricId::Requests), [1.0]);
    assert_eq!(values(MetricId::GoodRequests), [1.0]);
    assert_eq!(values(MetricId::OperationDuration), [0.2]);
    assert_eq!(values(MetricId::TimeToFirstChunk), [0.09]);
    // Seven content events: six gaps of 10 or 20 ms.
    let per_chunk = values(MetricId::TimePerOutputChunk);
    assert_eq!(per_chunk.len(), 6);
    assert!(
        per_chunk.iter().all(|v| (*v - 0.01).abs() < 1e-9 || (*v - 0.02).abs() < 1e-9 || (*v - 0.0).abs() < 1e-9),
        "{per_chunk:?}"
    );
    assert_eq!(values(MetricId::InterTokenLatency).len(), 6);
    assert_eq!(values(MetricId::TtftAnswer), [0.13]);
    assert_eq!(values(MetricId::TtftReasoning), [0.1]);
    assert_eq!(values(MetricId::OutputTps), [100.0]);
    assert_eq!(values(MetricId::Stalls), [1.0]);
    let usage: Vec<(String, f64)> = obs
        .iter()
        .filter(|o| o.metric == MetricId::TokenUsage)
        .map(|o| (o.labels.iter().find(|(k, _)| *k == attr::TOKEN_TYPE).unwrap().1.clone(), o.value))
        .collect();
    assert_eq!(usage, [("input".to_string(), 12.0), ("output".to_string(), 21.0)]);
    let labels = &obs[0].labels;
    let keys: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, [attr::OPERATION_NAME, attr::PROVIDER_NAME, attr::REQUEST_MODEL, attr::ROUTE, attr::OUTCOME]);

    // A slow first answer is not good.
    let strict = Objectives { ttft_answer_ms: Some(100.0), ..objectives.clone() };
    assert!(metric_observations(&r, &strict).iter().all(|o| o.metric != MetricId::GoodRequests));
    // A non-streaming request has no streaming metrics.
    let mut json = record_json();
    json["request"]["stream"] = serde_json::json!(false);
    let obs = metric_observations(&record(json), &objectives);
    assert!(obs.iter().all(|o| o.metric != MetricId::TimeToFirstChunk && o.metric != MetricId::TimePerOutputChunk));
}

#[test]
fn long_model_names_are_capped_in_labels() {
    let mut json = record_json();
    json["request"]["model"] = serde_json::json!("m".repeat(1000));
    let labels = request_labels(&record(json));
    let model = &labels.iter().find(|(k, _)| *k == attr::REQUEST_MODEL).unwrap().1;
    assert_eq!(model.chars().count(), MAX_LABEL_CHARS);
}

#[test]
fn server_address_parses_the_upstream() {
    assert_eq!(server_address("https://api.openai.com"), Some(("api.openai.com".into(), 443)));
    assert_eq!(server_address("http://127.0.0.1:9000/base"), Some(("127.0.0.1".into(), 9000)));
    assert_eq!(server_address("http://[::1]:81/x"), Some(("::1".into(), 81)));
    assert_eq!(server_address("nonsense"), None);
}

#[test]
fn browser_spans_continue_the_trace_from_the_probe() {
    let mut json = record_json();
    json["parent_span_id"] = "00f067aa0ba902b7".into();
    json["browser"] = serde_json::json!({
        "probe_span_id": "00f067aa0ba902b7", "page_path": "/chat",
        "clock": {"offset_ms": 0.1, "uncertainty_ms": 0.4, "samples": 5},
        "marks": [{"name": "user_send", "t_ms": -12.0}],
        "fetch_start_ms": -10.0, "response_ms": 3.0, "fetch_end_ms": 400.0,
        "first_paint_ms": 215.0, "last_paint_ms": 405.0,
        "time_to_first_paint_ms": 227.0, "time_to_first_paint_from": "user_send",
        "render_delay_ms": {"count": 3, "p50": 8.0, "p90": 9.0, "p95": 9.5, "p99": 9.9, "max": 10.0},
        "chunks": [], "long_frames": [{"start_ms": 300.0, "duration_ms": 80.0}], "audio": [],
        "browser_bytes": 10, "bytes_match": true, "painted_chars": 3, "answer_chars": 3,
        "chunks_dropped": 0, "paints_dropped": 0
    });
    let r = record(json);
    assert!(request_spans(&r, &SpanOptions::default())
        .iter()
        .any(|s| s.parent_span_id == Some([0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])));
    let spans = browser_spans(&r, &SpanOptions::default());
    assert_eq!(spans.len(), 2);
    let fetch = &spans[0];
    assert_eq!(hex(&fetch.span_id), "00f067aa0ba902b7");
    assert_eq!(hex(&fetch.trace_id), r.trace_id);
    assert_eq!(fetch.kind, SpanKind::Client);
    assert_eq!(r.timeline.t0_unix_ns, T0);
    assert_eq!(fetch.start_unix_ns, T0 - 10_000_000);
    assert_eq!(fetch.end_unix_ns, ms(405));
    assert_eq!(fetch.attribute(attr::BROWSER_TIME_TO_FIRST_PAINT_MS), Some(&AttrValue::F64(227.0)));
    let names: Vec<_> = fetch.events.iter().map(|e| e.name).collect();
    assert_eq!(names, [event::BROWSER_MARK, event::FIRST_PAINT, event::LONG_FRAME]);
    assert!(fetch.events.windows(2).all(|w| w[0].time_unix_ns <= w[1].time_unix_ns));
    let render = &spans[1];
    assert_eq!(render.parent_span_id, Some(fetch.span_id));
    assert!(render.start_unix_ns >= fetch.start_unix_ns && render.end_unix_ns <= fetch.end_unix_ns);
    assert_eq!(render.start_unix_ns, ms(215));
    // No browser part: no browser spans.
    assert!(browser_spans(&record(record_json()), &SpanOptions::default()).is_empty());
}

#[test]
fn each_playback_the_page_heard_is_a_playout_span() {
    let mut json = record_json();
    json["browser"] = serde_json::json!({
        "probe_span_id": "00f067aa0ba902b7", "marks": [], "fetch_start_ms": -5.0, "fetch_end_ms": 300.0,
        "clock": {"offset_ms": 0.1, "uncertainty_ms": 0.4, "samples": 5},
        "chunks": [], "long_frames": [],
        "audio": [
            {"kind": "audio_context", "audible_ms": 350.0, "end_ms": 2350.0, "underruns": 2, "starved_ms": 120.5, "interrupted": true},
            {"kind": "media_element", "audible_ms": 400.0, "underruns": 0, "starved_ms": 0.0}
        ],
        "browser_bytes": 10, "bytes_match": true, "painted_chars": 0, "answer_chars": 0,
        "chunks_dropped": 0, "paints_dropped": 0
    });
    let spans = browser_spans(&record(json), &SpanOptions::default());
    let playouts: Vec<_> = spans.iter().filter(|s| s.name == "playout").collect();
    assert_eq!(playouts.len(), 2);
    let (first, second) = (playouts[0], playouts[1]);
    assert_eq!(first.parent_span_id, Some(spans[0].span_id), "under the page's fetch span");
    assert_ne!(first.span_id, second.span_id);
    assert_eq!((first.start_unix_ns, first.end_unix_ns), (ms(350), ms(2350)));
    assert_eq!(first.attribute(attr::VOICE_OBSERVED_UNDERRUNS), Some(&AttrValue::Int(2)));
    assert_eq!(first.attribute(attr::VOICE_OBSERVED_STARVED_MS), Some(&AttrValue::F64(120.5)));
    assert_eq!(first.attribute(attr::VOICE_INTERRUPTED), Some(&AttrValue::Bool(true)));
    assert_eq!(first.attribute(attr::BROWSER_CLOCK_UNCERTAINTY_MS), Some(&AttrValue::F64(0.4)));
    // The end not known when the page reported: a span of no length at the first sound.
    assert_eq!((second.start_unix_ns, second.end_unix_ns), (ms(400), ms(400)));
    assert_eq!(second.attribute(attr::VOICE_INTERRUPTED), Some(&AttrValue::Bool(false)));
}

#[test]
fn the_rebuffering_verdict_is_a_span_attribute_and_a_metric() {
    let mut r = record(record_json());
    r.diagnosis = tokentap_record::diagnosis::diagnose(&r);
    let d = r.diagnosis.clone().expect("a streamed answer has a diagnosis");
    let spans = request_spans(&r, &SpanOptions::default());
    let request = &spans[0];
    let kind = request.attribute(attr::REBUFFER_KIND).and_then(|v| v.as_str()).expect("verdict kind").to_string();
    assert_eq!(request.attribute(attr::REBUFFER_VERDICT).and_then(|v| v.as_str()), Some(d.verdict.as_str()));
    assert_eq!(request.attribute(attr::REBUFFERED), Some(&AttrValue::Bool(kind != "no_rebuffering")));
    let observations = metric_observations(&r, &Objectives::default());
    let verdicts: Vec<_> = observations.iter().filter(|o| o.metric == MetricId::RebufferVerdicts).collect();
    assert_eq!(verdicts.len(), 1);
    assert!(verdicts[0].labels.iter().any(|(k, v)| *k == attr::REBUFFER_KIND && *v == kind));
    assert!(verdicts[0].labels.iter().any(|(k, v)| *k == attr::REBUFFER_SCOPE && v == "proxy"));
    assert_eq!(rebuffer_observation(&r, "browser").unwrap().labels.last().unwrap().1, "browser");
}

const TURN_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const AGENT: &str = "a3ce929d0e0e4736";

fn agent_turn() -> tokentap_record::turn::TurnRecord {
    serde_json::from_value(serde_json::json!({
        "record_version": 1, "turn_id": "turn-1", "conversation_id": "conv-1", "turn_index": 0,
        "trace_id": TURN_TRACE, "agent_span_id": AGENT, "parent_span_id": PARENT,
        "started_at": "2023-11-14T22:13:20Z", "t0_unix_ns": T0, "route": "/", "status": "complete",
        "totals": {"e2e_ms": 2500.0, "model_ms": 1900.0, "tool_ms": 600.0, "client_ms": 0.0, "steps": 2,
                   "tool_calls": 2, "unanswered_tool_calls": 0, "input_tokens": 30, "output_tokens": 20},
        "steps": [
            {"step": 1, "request_id": "r1", "span_id": SPAN, "link": "first", "start_ms": 0.0, "end_ms": 1000.0, "outcome": "ok", "tool_calls": 2},
            {"step": 2, "request_id": "r2", "span_id": "b7ad6b7169203332", "link": "tool_result", "start_ms": 1600.0, "end_ms": 2500.0, "outcome": "ok", "tool_calls": 0}
        ],
        "tool_runs": [
            {"call_id": "call_a", "name": "get_weather", "step": 1, "ready_ms": 800.0, "result_step": 2, "result_ms": 1600.0, "duration_ms": 800.0},
            {"call_id": "call_b", "name": "get_time", "step": 1, "ready_ms": 900.0, "result_step": 2, "result_ms": 1600.0, "duration_ms": 700.0},
            {"call_id": "call_c", "name": "never", "step": 2, "ready_ms": 2400.0}
        ],
        "critical_path": []
    }))
    .unwrap()
}

#[test]
fn an_agent_turn_is_an_invoke_agent_span_with_a_tool_span_per_answered_call() {
    let turn = agent_turn();
    let spans = turn_spans(&turn);
    assert_eq!(spans.len(), 3, "the unanswered call gets no span");
    let agent = &spans[0];
    assert_eq!((agent.name.as_str(), agent.kind), ("invoke_agent", SpanKind::Internal));
    assert_eq!(agent.trace_id, hex_bytes::<16>(TURN_TRACE).unwrap());
    assert_eq!(agent.span_id, hex_bytes::<8>(AGENT).unwrap());
    assert_eq!(agent.parent_span_id, hex_bytes::<8>(PARENT));
    assert_eq!(agent.end_unix_ns - agent.start_unix_ns, 2_500_000_000);
    assert_eq!(agent.attribute(attr::CONVERSATION_ID).and_then(AttrValue::as_str), Some("conv-1"));
    assert_eq!(agent.attribute(attr::OPERATION_NAME).and_then(AttrValue::as_str), Some("invoke_agent"));
    // The turn's tokens, not as usage: backends add the agent's usage to its steps' usage.
    assert_eq!(agent.attribute(attr::TURN_INPUT_TOKENS), Some(&AttrValue::Int(30)));
    assert_eq!(agent.attribute(attr::TURN_OUTPUT_TOKENS), Some(&AttrValue::Int(20)));
    assert!(agent.attributes.iter().all(|(k, _)| !k.starts_with("gen_ai.usage.")));
    let tool = &spans[1];
    assert_eq!(tool.name, "execute_tool get_weather");
    assert_eq!(tool.parent_span_id, Some(agent.span_id));
    assert_eq!(tool.trace_id, agent.trace_id);
    assert_eq!(tool.attribute(attr::TOOL_CALL_ID).and_then(AttrValue::as_str), Some("call_a"));
    assert_eq!(tool.attribute(attr::TOOL_TYPE).and_then(AttrValue::as_str), Some("function"));
    assert_eq!((tool.start_unix_ns - T0, tool.end_unix_ns - T0), (800_000_000, 1_600_000_000));
    assert_ne!(spans[1].span_id, spans[2].span_id);

    let observations = turn_observations(&turn);
    let of = |id: MetricId| observations.iter().filter(|o| o.metric == id).map(|o| o.value).collect::<Vec<_>>();
    assert_eq!(of(MetricId::InvokeAgentDuration), [2.5]);
    assert_eq!(of(MetricId::ExecuteToolDuration), [0.8, 0.7]);
    assert_eq!(of(MetricId::TurnSteps), [2.0]);

    // A fragment (another instance began the turn and exports its agent span): tool spans under
    // that span, no second agent span, no partial turn times.
    let mut fragment = agent_turn();
    fragment.fragment = true;
    let spans = turn_spans(&fragment);
    assert!(spans.iter().all(|s| s.name != "invoke_agent") && spans.len() == 2, "{spans:?}");
    assert!(spans.iter().all(|s| s.parent_span_id == hex_bytes::<8>(AGENT)));
    let observations = turn_observations(&fragment);
    assert!(observations.iter().all(|o| matches!(o.metric, MetricId::ExecuteToolDuration)), "{observations:?}");

    let mut plain = agent_turn();
    plain.agent_span_id = None;
    assert!(turn_spans(&plain).is_empty(), "a turn without tool calls exports no agent span");
    assert!(turn_observations(&plain).iter().all(|o| o.metric != MetricId::InvokeAgentDuration));
}

#[test]
fn a_step_is_exported_in_its_turns_trace_under_the_agent_span() {
    let mut record: Record = serde_json::from_value(record_json()).unwrap();
    record.turn = Some(tokentap_record::turn::TurnRef {
        turn_id: "turn-1".into(),
        conversation_id: "conv-1".into(),
        step: 2,
        link: tokentap_record::turn::TurnLink::ToolResult,
        trace_id: TURN_TRACE.into(),
        agent_span_id: Some(AGENT.into()),
    });
    let spans = request_spans(&record, &SpanOptions::default());
    assert!(spans.iter().all(|s| s.trace_id == hex_bytes::<16>(TURN_TRACE).unwrap()));
    assert_eq!(spans[0].parent_span_id, hex_bytes::<8>(AGENT));
    assert_eq!(spans[0].attribute(attr::TURN_STEP), Some(&AttrValue::Int(2)));
    // Without an agent span, in another trace: the client's parent does not belong there.
    record.turn.as_mut().unwrap().agent_span_id = None;
    assert_eq!(request_spans(&record, &SpanOptions::default())[0].parent_span_id, None);
}

#[test]
fn server_timings_become_span_attributes_and_histograms() {
    let mut json = record_json();
    json["server"] =
        serde_json::json!({"source": "llama_cpp", "prefill_ms": 90.0, "decode_ms": 60.0, "cached_prompt_tokens": 30});
    json["server_split"] = serde_json::json!({
        "compared_at": "first_token", "server_ms": 90.0, "wire_ms": 100.0, "network_and_proxy_ms": 10.0,
        "tolerance_ms": 3.8, "check": "consistent"
    });
    json["conditions"]["prompt_cache"] = serde_json::json!("warm");
    let r = record(json);
    let attrs = request_attributes(&r, &SpanOptions::default());
    let get = |k: &str| attrs.iter().find(|(name, _)| *name == k).map(|(_, v)| v.clone());
    assert_eq!(get(attr::SERVER_SOURCE), Some(AttrValue::Str("llama_cpp".into())));
    assert_eq!(get(attr::SERVER_PREFILL_MS), Some(AttrValue::F64(90.0)));
    assert_eq!(get(attr::SERVER_QUEUE_MS), None, "not reported, not invented");
    assert_eq!(get(attr::SERVER_NETWORK_AND_PROXY_MS), Some(AttrValue::F64(10.0)));
    assert_eq!(get(attr::SERVER_CHECK), Some(AttrValue::Str("consistent".into())));
    assert_eq!(get(attr::PROMPT_CACHE), Some(AttrValue::Str("warm".into())));
    let obs = metric_observations(&r, &Objectives::default());
    let value = |m: MetricId| obs.iter().find(|o| o.metric == m).map(|o| o.value);
    assert_eq!(value(MetricId::ServerPrefill), Some(0.09));
    assert_eq!(value(MetricId::ServerDecode), Some(0.06));
    assert_eq!(value(MetricId::ServerQueue), None);
    assert_eq!(value(MetricId::NetworkAndProxy), Some(0.01));
}

/// A realtime session: one VAD response with audio, one with a tool call answered 210 ms later.
fn realtime_record() -> serde_json::Value {
    let frames = serde_json::json!({"frames": 10, "bytes": 1000, "masked_frames": 0, "messages": 10,
        "fragmented_messages": 0, "pings": 0, "pongs": 0, "closes": 1, "messages_truncated": 0});
    let side = serde_json::json!({"frames": frames, "events": 10, "unknown_events": 1, "malformed_messages": 0,
        "binary_messages": 0, "cut_messages": 0});
    let mut json = record_json();
    let o = json.as_object_mut().unwrap();
    o.remove("analysis");
    o.insert("status".into(), 101.into());
    o.insert("path".into(), "/v1/realtime?model=gpt-realtime".into());
    o.insert("request".into(), serde_json::json!({"operation": "realtime", "model": "gpt-realtime"}));
    o.insert("realtime".into(), serde_json::json!({
        "version": 1, "session_id": "sess_1", "model": "gpt-realtime",
        "input_format": {"pcm16": {"rate_hz": 24000}}, "output_format": {"pcm16": {"rate_hz": 24000}},
        "client": side, "server": side, "events": {}, "beta_named_events": 0, "input_audio_ms": 3000.0,
        "appends": 30, "end": "close_handshake", "duration_ms": 5000.0,
        "caps": {"responses_dropped": 0, "appends_forgotten": 0, "events_not_read": 0, "errors_dropped": 0},
        "responses": [
            {"response_id": "r1", "trigger": "server_vad", "created_ms": 2110.0, "first_audio_ms": 2300.0, "done_ms": 2610.0,
             "user": {"speech_stopped_ms": 2100.0, "speech_end_estimated_ms": 1500.0},
             "time_to_first_audio_from_speech_stopped_ms": 200.0, "time_to_first_audio_from_speech_end_ms": 800.0,
             "audio_deltas": 3, "audio_ms": 300.0, "status": "completed",
             "usage": {"input_tokens": 30, "output_tokens": 40, "output_audio_tokens": 35}},
            {"response_id": "r2", "trigger": "server_vad", "created_ms": 4000.0, "done_ms": 4110.0, "audio_deltas": 0, "audio_ms": 0.0,
             "tool_calls": [{"call_id": "c1", "name": "get_weather", "ready_ms": 4100.0, "output_sent_ms": 4300.0,
                             "next_response_requested_ms": 4310.0, "tool_gap_ms": 210.0}]}
        ]
    }));
    json
}

#[test]
fn a_realtime_session_is_one_trace_with_a_span_per_response_and_tool_gap() {
    let spans = spans_of(realtime_record());
    let root = &spans[0];
    assert_eq!(root.attribute(attr::REALTIME_RESPONSES), Some(&AttrValue::Int(2)));
    assert_eq!(root.attribute(attr::REALTIME_SESSION_END), Some(&AttrValue::Str("close_handshake".into())));
    let responses: Vec<&SpanPlan> = spans.iter().filter(|s| s.name == "realtime_inference gpt-realtime").collect();
    assert_eq!(responses.len(), 2);
    let r1 = responses[0];
    assert_eq!(r1.parent_span_id, Some(root.span_id));
    assert_eq!(r1.trace_id, root.trace_id);
    // From the estimated end of speech to response.done.
    assert_eq!((r1.start_unix_ns - T0, r1.end_unix_ns - T0), (1_500_000_000, 2_610_000_000));
    assert_eq!(r1.attribute(attr::VOICE_TIME_TO_FIRST_AUDIO_FROM_SPEECH_STOPPED_MS), Some(&AttrValue::F64(200.0)));
    assert_eq!(r1.attribute(attr::VOICE_TIME_TO_FIRST_AUDIO_FROM_SPEECH_END_MS), Some(&AttrValue::F64(800.0)));
    assert_eq!(r1.attribute(attr::RESPONSE_ID), Some(&AttrValue::Str("r1".into())));
    let tool = spans.iter().find(|s| s.name == "execute_tool get_weather").expect("tool span");
    assert_eq!(tool.parent_span_id, Some(responses[1].span_id));
    assert_eq!((tool.start_unix_ns - T0, tool.end_unix_ns - T0), (4_100_000_000, 4_310_000_000));
    assert_eq!(tool.attribute(attr::TOOL_CALL_ID), Some(&AttrValue::Str("c1".into())));

    let obs = metric_observations(&record(realtime_record()), &Objectives::default());
    let values = |m: MetricId| obs.iter().filter(|o| o.metric == m).map(|o| o.value).collect::<Vec<_>>();
    assert_eq!(values(MetricId::RealtimeFirstAudioFromSpeechStopped), vec![0.2]);
    assert_eq!(values(MetricId::RealtimeFirstAudioFromSpeechEnd), vec![0.8]);
    assert_eq!(values(MetricId::ExecuteToolDuration), vec![0.21]);
}

/// Every span tokentap exports for `record` and `turn`: the request's, the browser's, the turn's.
fn every_span(record: &Record, turn: &tokentap_record::turn::TurnRecord) -> Vec<SpanPlan> {
    let mut spans = request_spans(record, &SpanOptions::default());
    spans.extend(browser_spans(record, &SpanOptions::default()));
    spans.extend(turn_spans(turn));
    spans
}

#[test]
fn only_tool_executions_carry_the_conventions_tool_attributes() {
    // A chat that streamed a tool call, a realtime session with a function call, an agent turn:
    // backends (Phoenix) show any span with `gen_ai.tool.*` as a tool run, so the model streaming
    // a call's arguments (the `tool_call` phase) must not carry them.
    let mut several = record_json();
    several["analysis"]["tool_calls"] = serde_json::json!([
        {"id": "call_1", "name": "get_weather", "argument_bytes": 20},
        {"id": "call_2", "name": "get_time", "argument_bytes": 20}
    ]);
    let turn = agent_turn();
    let mut all = Vec::new();
    for json in [record_json(), several, realtime_record()] {
        all.extend(every_span(&record(json), &turn));
    }
    let tools =
        all.iter().filter(|s| s.attribute(attr::OPERATION_NAME).and_then(AttrValue::as_str) == Some("execute_tool"));
    assert!(tools.count() >= 3, "the turn's two answered calls and the realtime call");
    for span in &all {
        let is_tool_run = span.attribute(attr::OPERATION_NAME).and_then(AttrValue::as_str) == Some("execute_tool");
        let tool_keys: Vec<&str> =
            span.attributes.iter().map(|(k, _)| *k).filter(|k| k.starts_with("gen_ai.tool.")).collect();
        assert_eq!(!tool_keys.is_empty(), is_tool_run, "{}: {tool_keys:?}", span.name);
        if is_tool_run {
            assert!(span.name.starts_with("execute_tool"), "{}", span.name);
        }
        // Phase spans carry tokentap's names only: nothing that makes a backend classify them.
        if span.attribute(attr::PHASE).is_some() {
            let genai: Vec<&str> =
                span.attributes.iter().map(|(k, _)| *k).filter(|k| k.starts_with("gen_ai.")).collect();
            assert!(genai.is_empty(), "phase span {} carries {genai:?}", span.name);
        }
    }
    let tool_call = find(&spans_of(record_json()), "tool_call").clone();
    assert_eq!(tool_call.attribute(attr::STREAMED_TOOL_NAMES), Some(&AttrValue::StrArray(vec!["get_weather".into()])));
}

#[test]
fn langfuse_gets_the_first_answer_token_as_its_completion_start_time() {
    let r = record(record_json());
    let plain = request_spans(&r, &SpanOptions::default());
    assert_eq!(plain[0].attribute(attr::LANGFUSE_COMPLETION_START_TIME), None);
    let options = SpanOptions::default().for_profile(BackendProfile::Langfuse, LlmSpan::Tokentap);
    let spans = request_spans(&r, &options);
    // t0 2023-11-14T22:13:20Z, first answer event at 130 ms.
    assert_eq!(
        spans[0].attribute(attr::LANGFUSE_COMPLETION_START_TIME),
        Some(&AttrValue::Str("2023-11-14T22:13:20.130000Z".into()))
    );
    assert!(spans[1..].iter().all(|s| s.attribute(attr::LANGFUSE_COMPLETION_START_TIME).is_none()));
    // No answer: the first content of any kind (here a reasoning event at 100 ms).
    let mut json = record_json();
    json["analysis"]["metrics"]["ttft_answer_ms"] = serde_json::Value::Null;
    let spans = request_spans(&record(json), &options);
    assert_eq!(
        spans[0].attribute(attr::LANGFUSE_COMPLETION_START_TIME),
        Some(&AttrValue::Str("2023-11-14T22:13:20.100000Z".into()))
    );
}

#[test]
fn with_the_apps_own_llm_span_tokentaps_span_is_counted_once() {
    let app = SpanOptions::default().for_profile(BackendProfile::Generic, LlmSpan::App);
    let spans = request_spans(&record(record_json()), &app);
    let root = &spans[0];
    // Still under the app's span, in its trace: the trace joins keep working.
    assert_eq!(root.trace_id, hex_bytes::<16>(TRACE).unwrap());
    assert_eq!(root.parent_span_id, hex_bytes::<8>(PARENT));
    assert_eq!(root.name, "tokentap chat gpt-test");
    assert_eq!(root.attribute(attr::OPERATION_NAME), None, "not an LLM call of its own");
    let genai_usage: Vec<&str> =
        root.attributes.iter().map(|(k, _)| *k).filter(|k| k.starts_with("gen_ai.usage.")).collect();
    assert!(genai_usage.is_empty(), "{genai_usage:?}");
    assert_eq!(root.attribute(attr::APP_USAGE_INPUT_TOKENS), Some(&AttrValue::Int(12)));
    assert_eq!(root.attribute(attr::APP_USAGE_OUTPUT_TOKENS), Some(&AttrValue::Int(21)));
    let genai: Vec<&str> = root.attributes.iter().map(|(k, _)| *k).filter(|k| k.starts_with("gen_ai.")).collect();
    assert!(genai.is_empty(), "a model or provider alone makes Phoenix show an LLM span: {genai:?}");
    assert_eq!(root.attribute("tokentap.request.model"), Some(&AttrValue::Str("gpt-test".into())));
    assert!(root.attribute(attr::TTFT_ANSWER_MS).is_some());
    assert_eq!(spans.len(), spans_of(record_json()).len(), "the same phase spans");

    // Without a caller's span, tokentap's span is the only record of the call: the LLM span.
    let mut json = record_json();
    json.as_object_mut().unwrap().remove("parent_span_id");
    let alone = request_spans(&record(json), &app);
    assert_eq!(alone[0].name, "chat gpt-test");
    assert_eq!(alone[0].attribute(attr::USAGE_INPUT_TOKENS), Some(&AttrValue::Int(12)));
    // Under tokentap's own spans (an agent turn, an ingress hop) too.
    let mut stepped = record(record_json());
    stepped.turn = Some(tokentap_record::turn::TurnRef {
        turn_id: "turn-1".into(),
        conversation_id: "conv-1".into(),
        step: 1,
        link: tokentap_record::turn::TurnLink::First,
        trace_id: TURN_TRACE.into(),
        agent_span_id: Some(AGENT.into()),
    });
    assert_eq!(request_spans(&stepped, &app)[0].name, "chat gpt-test");
    let mut egress = record(record_json());
    egress.route_role = Some(tokentap_record::RouteRole::Egress);
    assert_eq!(request_spans(&egress, &app)[0].name, "chat gpt-test");
}

/// An MCP exchange: a tools/call answered at 150 ms with progress at 40 ms, carrying a `_meta`
/// trace context, and an initialize-less ping without one.
fn mcp_record() -> Record {
    let mut json = record_json();
    json["mcp"] = serde_json::json!({
        "session_id": "s-1",
        "protocol_version": "2025-11-25",
        "operations": [
            {"method": "tools/call", "direction": "client_to_server", "request_id": "7", "name": "get_weather",
             "traceparent": "00-11111111111111111111111111111111-2222222222222222-01",
             "start_ns": 0, "first_progress_ns": 40_000_000, "progress_notifications": 2, "end_ns": 150_000_000,
             "status": "answered", "is_error": true, "request_bytes": 90, "response_bytes": 120},
            {"method": "ping", "direction": "client_to_server", "request_id": "8", "start_ns": 0,
             "end_ns": 2_000_000, "status": "answered", "request_bytes": 30,
             "error": {"code": -32601, "message": "Method not found"}},
            {"method": "roots/list", "direction": "server_to_client", "request_id": "0", "start_ns": 5_000_000,
             "status": "unanswered", "request_bytes": 30}
        ]
    });
    record(json)
}

#[test]
fn mcp_operations_are_client_spans_named_by_method_and_tool() {
    let spans = request_spans(&mcp_record(), &SpanOptions::default());
    let tool = find(&spans, "tools/call get_weather");
    assert_eq!(tool.kind, SpanKind::Client);
    assert_eq!((tool.start_unix_ns, tool.end_unix_ns), (ms(0), ms(150)));
    // In the trace of the request's `_meta.traceparent`, under its span.
    assert_eq!(tool.trace_id, [0x11; 16]);
    assert_eq!(tool.parent_span_id, Some([0x22; 8]));
    for (key, value) in [
        (attr::MCP_METHOD_NAME, "tools/call"),
        (attr::TOOL_NAME, "get_weather"),
        (attr::OPERATION_NAME, "execute_tool"),
        (attr::JSONRPC_REQUEST_ID, "7"),
        (attr::MCP_SESSION_ID, "s-1"),
        (attr::MCP_PROTOCOL_VERSION, "2025-11-25"),
        (attr::ERROR_TYPE, "tool_error"),
    ] {
        assert_eq!(tool.attribute(key).and_then(AttrValue::as_str), Some(value), "{key}");
    }
    assert_eq!(tool.attribute(attr::MCP_FIRST_PROGRESS_MS), Some(&AttrValue::F64(40.0)));
    assert!(matches!(tool.status, SpanStatus::Error(_)));
    // Without a `_meta` context: under the HTTP request's span, in its trace.
    let ping = find(&spans, "ping");
    assert_eq!(ping.parent_span_id, hex_bytes::<8>(SPAN));
    assert_eq!(ping.trace_id, hex_bytes::<16>(TRACE).unwrap());
    assert_eq!(ping.attribute(attr::RPC_RESPONSE_STATUS_CODE).and_then(AttrValue::as_str), Some("-32601"));
    assert_eq!(ping.status, SpanStatus::Error("Method not found".into()));
    // The server's own requests are not the client's operations.
    assert!(spans.iter().all(|s| s.name != "roots/list"));

    let observations = metric_observations(&mcp_record(), &Objectives::default());
    let durations: Vec<&Observation> =
        observations.iter().filter(|o| o.metric == MetricId::McpClientOperationDuration).collect();
    assert_eq!(durations.len(), 2);
    assert_eq!(durations[0].value, 0.15);
    assert!(durations.iter().all(|o| o.labels.iter().all(|(k, _)| *k != attr::JSONRPC_REQUEST_ID)));
}
