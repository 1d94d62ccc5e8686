//! Stream analysis end to end: tokentap's records match the mock provider's schedule.
//!
//! The mock sends content event k at ttft + k × itl after the request (an absolute schedule), so a
//! record's numbers have hard lower bounds (nothing arrives before it is sent) and, on a busy
//! machine, generous upper bounds. No assertion here is about how fast anything is.

use tokentap_e2e::{http1, Mock, Tokentap};

const CHAT: &str = "/v1/chat/completions";
const SLACK_MS: f64 = 750.0;

fn chat_body(tools: bool) -> Vec<u8> {
    let mut body = serde_json::json!({
        "model": "mock-gpt",
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    });
    if tools {
        body["tools"] = serde_json::json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    }
    serde_json::to_vec(&body).unwrap()
}

fn within(value: &serde_json::Value, low: f64, what: &str) -> f64 {
    let v = value.as_f64().unwrap_or_else(|| panic!("{what} is absent"));
    assert!(v >= low && v <= low + SLACK_MS, "{what} = {v} ms, schedule says {low} ms (+{SLACK_MS} slack)");
    v
}

#[test]
fn reasoning_then_answer_matches_the_schedule() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let headers = [
        ("content-type", "application/json"),
        ("x-mock-ttft-ms", "150"),
        ("x-mock-itl-ms", "20"),
        ("x-mock-reasoning-tokens", "10"),
        ("x-mock-tokens", "30"),
    ];
    let resp = http1::post(tokentap.addr, CHAT, &headers, &chat_body(false));
    assert_eq!(resp.status, 200);
    let r = feed.next_record_for(CHAT);
    let m = &r["analysis"]["metrics"];
    assert_eq!(r["analysis"]["format"], "openai_chat", "{r}");
    let reasoning = within(&m["ttft_reasoning_ms"], 150.0, "ttft_reasoning");
    let answer = within(&m["ttft_answer_ms"], 150.0 + 10.0 * 20.0, "ttft_answer");
    assert!(reasoning < answer);
    assert_eq!(m["time_to_first_output_ms"], m["ttft_answer_ms"]);
    assert!(m["ttft_tool_ms"].is_null(), "no tool call was made: {m}");
    // 40 content events 20 ms apart: the median gap is the schedule's gap.
    let itl = &m["itl_ms"];
    assert_eq!(itl["count"], 39, "{itl}");
    let p50 = itl["p50"].as_f64().unwrap();
    assert!((10.0..=60.0).contains(&p50), "itl p50 {p50}");
    let tokens = &m["output_tokens"];
    assert_eq!(
        tokens["reasoning"].as_u64().unwrap() + tokens["answer"].as_u64().unwrap(),
        tokens["total"].as_u64().unwrap()
    );
    assert!((25..=45).contains(&tokens["answer"].as_u64().unwrap()), "{tokens}");
    assert!((8..=20).contains(&tokens["reasoning"].as_u64().unwrap()), "{tokens}");
    // ~50 tokens/s by the schedule (1 token per 20 ms); a loaded machine can only make it lower.
    let tps = m["output_tps"].as_f64().unwrap();
    assert!(tps > 5.0 && tps < 80.0, "output_tps {tps}");
    assert!((m["tpot_ms"].as_f64().unwrap() - 1000.0 / tps).abs() < 1e-6);
    // Provider usage is kept verbatim next to our counts.
    assert_eq!(r["analysis"]["usage"]["output_tokens"], 40, "{r}");
    assert_eq!(r["conditions"]["model"], "mock-gpt");
    assert_eq!(r["conditions"]["stream"], true);
    assert!(r["conditions"]["prompt_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn tool_call_is_timed_separately_from_answer() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    // A pure tool call (no answer text), as function-calling models usually answer.
    let headers = [
        ("content-type", "application/json"),
        ("x-mock-scenario", "tool_call"),
        ("x-mock-tokens", "0"),
        ("x-mock-ttft-ms", "100"),
        ("x-mock-itl-ms", "10"),
    ];
    let resp = http1::post(tokentap.addr, CHAT, &headers, &chat_body(true));
    assert_eq!(resp.status, 200);
    let r = feed.next_record_for(CHAT);
    let a = &r["analysis"];
    within(&a["metrics"]["ttft_tool_ms"], 100.0, "ttft_tool");
    assert!(a["metrics"]["ttft_answer_ms"].is_null(), "{a}");
    assert_eq!(a["metrics"]["time_to_first_output_ms"], a["metrics"]["ttft_tool_ms"]);
    assert_eq!(a["tool_calls"][0]["name"], "get_weather", "{a}");
    assert!(a["finish_reasons"].to_string().contains("tool_calls"), "{a}");
    assert!(a["metrics"]["output_tokens"]["tool_call"].as_u64().unwrap() > 0);

    // Text first, then a tool call: the first thing the app can act on is the text.
    let headers = [
        ("content-type", "application/json"),
        ("x-mock-scenario", "tool_call"),
        ("x-mock-tokens", "5"),
        ("x-mock-ttft-ms", "100"),
        ("x-mock-itl-ms", "10"),
    ];
    let resp = http1::post(tokentap.addr, CHAT, &headers, &chat_body(true));
    assert_eq!(resp.status, 200);
    let r = feed.next_record_for(CHAT);
    let m = &r["analysis"]["metrics"];
    let answer = within(&m["ttft_answer_ms"], 100.0, "ttft_answer");
    let tool = within(&m["ttft_tool_ms"], 100.0 + 5.0 * 10.0, "ttft_tool");
    assert!(answer < tool);
    assert_eq!(m["time_to_first_output_ms"], m["ttft_answer_ms"]);
}

#[test]
fn stall_kept_alive_by_heartbeats_is_flagged() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let headers = [
        ("content-type", "application/json"),
        ("x-mock-ttft-ms", "20"),
        ("x-mock-itl-ms", "10"),
        ("x-mock-tokens", "20"),
        ("x-mock-stall-at", "8"),
        ("x-mock-stall-ms", "1500"),
        ("x-mock-heartbeat-ms", "200"),
    ];
    let resp = http1::post(tokentap.addr, CHAT, &headers, &chat_body(false));
    assert_eq!(resp.status, 200);
    let r = feed.next_record_for(CHAT);
    let stalls = &r["analysis"]["stalls"];
    assert_eq!(stalls["count"], 1, "{stalls}");
    assert_eq!(stalls["heartbeat_only"], 1, "{stalls}");
    // A gap is not bounded below by the schedule as a time since the request is: on a busy machine
    // the event before the stall can be sent late, and the one after it, on its absolute
    // schedule, is not, so the gap shrinks by that lateness. Both sides get the slack.
    let longest = stalls["longest_ms"].as_f64().expect("longest stall");
    assert!((1500.0 - SLACK_MS..=1500.0 + SLACK_MS).contains(&longest), "longest stall {longest} ms, schedule 1500 ms");
    assert!(r["analysis"]["event_counts"]["heartbeat"].as_u64().unwrap() >= 3, "{r}");
}

#[test]
fn anthropic_thinking_and_text_are_separated() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let body = serde_json::json!({
        "model": "claude-mock", "max_tokens": 1024, "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 512},
        "messages": [{"role": "user", "content": "hi"}],
    });
    let headers = [
        ("content-type", "application/json"),
        ("x-mock-ttft-ms", "100"),
        ("x-mock-itl-ms", "10"),
        ("x-mock-reasoning-tokens", "8"),
        ("x-mock-tokens", "12"),
    ];
    let resp = http1::post(tokentap.addr, "/v1/messages", &headers, &serde_json::to_vec(&body).unwrap());
    assert_eq!(resp.status, 200);
    let r = feed.next_record_for("/v1/messages");
    let m = &r["analysis"]["metrics"];
    assert_eq!(r["analysis"]["format"], "anthropic_messages", "{r}");
    let reasoning = within(&m["ttft_reasoning_ms"], 100.0, "ttft_reasoning");
    let answer = within(&m["ttft_answer_ms"], 100.0 + 8.0 * 10.0, "ttft_answer");
    assert!(reasoning < answer);
    assert_eq!(r["conditions"]["model"], "claude-mock");
    assert_eq!(r["request"]["max_tokens"], 1024);
}

#[test]
fn gemini_stream_is_understood() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &["--provider", "gemini"]);
    let mut feed = tokentap.feed();
    let path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
    let headers = [
        ("content-type", "application/json"),
        ("x-mock-ttft-ms", "50"),
        ("x-mock-itl-ms", "5"),
        ("x-mock-tokens", "10"),
    ];
    let resp = http1::post(tokentap.addr, path, &headers, br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#);
    assert_eq!(resp.status, 200);
    let r = feed.next_record_for(path);
    assert_eq!(r["analysis"]["format"], "gemini", "{r}");
    within(&r["analysis"]["metrics"]["ttft_answer_ms"], 50.0, "ttft_answer");
    assert_eq!(r["conditions"]["model"], "gemini-2.5-flash");
    assert!(r["analysis"]["usage"]["output_tokens"].as_u64().is_some(), "{r}");
}

#[test]
fn non_streaming_json_is_timed() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let body = br#"{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}"#;
    let resp =
        http1::post(tokentap.addr, CHAT, &[("content-type", "application/json"), ("x-mock-ttft-ms", "80")], body);
    assert_eq!(resp.status, 200);
    let r = feed.next_record_for(CHAT);
    assert_eq!(r["analysis"]["format"], "json", "{r}");
    assert_eq!(r["conditions"]["stream"], false);
    assert!(r["analysis"]["metrics"]["output_tokens"]["answer"].as_u64().unwrap() > 0, "{r}");
    assert!(r["analysis"]["usage"]["output_tokens"].as_u64().is_some());
}
