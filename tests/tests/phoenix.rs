//! tokentap → Arize Phoenix, the way a team running Phoenix would point tokentap at it
//! (`[otel] profile = "phoenix"`, no collector in between). Phoenix converts the GenAI spans at
//! ingest; the test reads them back through its REST API and checks what its UI would show: one
//! AGENT span for an agent turn, LLM spans for the model calls (model, token counts equal to
//! tokentap's record, time to first chunk), TOOL spans only for tool runs (never for the model
//! streaming a tool call's arguments), the parent-child structure, the project. Then, against the
//! same Phoenix without the profile, that its refusal of OTLP metrics (405) is noticed once, said
//! once in the log and in health, and not retried; and with `llm_span = "app"`, that a request
//! continuing the app's trace is not shown as a second LLM call.
//!
//! Phoenix comes from `.cache/venv-phoenix` (`scripts/setup.sh test`); without it the test fails
//! and says how to install it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use tokentap_e2e::llama::sse_events;
use tokentap_e2e::phoenix::Phoenix;
use tokentap_e2e::{http1, Mock, Tokentap};

const CHAT: &str = "/v1/chat/completions";
const PROJECT: &str = "tokentap-e2e";
const WAIT: Duration = Duration::from_secs(90);

fn config(dir: &tempfile::TempDir, phoenix: &Phoenix, extra: &str) -> String {
    let path = dir.path().join("tokentap.toml");
    let text = format!(
        "[otel]\nendpoint = \"{}\"\nbatch_delay_ms = 50\nretry_initial_ms = 50\nretry_max_ms = 200\n{extra}\n",
        phoenix.url
    );
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_else(|| panic!("{pointer} missing in {v}"))
}

fn span_id(span: &Value) -> &str {
    str_at(span, "/context/span_id")
}

fn kind(span: &Value) -> &str {
    str_at(span, "/span_kind")
}

fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// A streamed chat completion's tool calls, assembled from their fragments: (id, name, arguments).
fn streamed_tool_calls(body: &[u8]) -> Vec<(String, String, String)> {
    let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
    for event in sse_events(body) {
        for fragment in event["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let call = calls.entry(fragment["index"].as_u64().unwrap_or(0)).or_default();
            if let Some(id) = fragment["id"].as_str() {
                call.0 = id.to_string();
            }
            if let Some(name) = fragment["function"]["name"].as_str() {
                call.1.push_str(name);
            }
            if let Some(arguments) = fragment["function"]["arguments"].as_str() {
                call.2.push_str(arguments);
            }
        }
    }
    calls.into_values().collect()
}

/// The record's usage: (input, output) tokens.
fn usage(record: &Value) -> (u64, u64) {
    let u = &record["analysis"]["usage"];
    (
        u["input_tokens"].as_u64().unwrap_or_else(|| panic!("input tokens in {u}")),
        u["output_tokens"].as_u64().unwrap_or_else(|| panic!("output tokens in {u}")),
    )
}

/// Checks an LLM span against tokentap's record of the same request.
fn check_llm_span(span: &Value, record: &Value) {
    assert_eq!(kind(span), "LLM", "{span}");
    assert_eq!(span["name"], "chat mock-gpt", "{span}");
    assert_eq!(span_id(span), record["span_id"].as_str().unwrap(), "{span}");
    assert_eq!(attribute(span, "llm.model_name"), "mock-gpt", "{span}");
    assert_eq!(attribute(span, "llm.provider"), "openai", "{span}");
    let (input, output) = usage(record);
    assert_eq!(attribute(span, "llm.token_count.prompt").as_u64(), Some(input), "{span}");
    assert_eq!(attribute(span, "llm.token_count.completion").as_u64(), Some(output), "{span}");
    // Time to first chunk stays a raw attribute in Phoenix (seconds), next to tokentap's own.
    let ttfc = attribute(span, "gen_ai.response.time_to_first_chunk").as_f64().expect("time to first chunk");
    let recorded = record["analysis"]["metrics"]["time_to_first_chunk_ms"].as_f64().unwrap();
    assert!((ttfc * 1e3 - recorded).abs() < 1e-6, "{ttfc} s vs {recorded} ms");
    assert!(
        attribute(span, "tokentap.ttft_answer_ms").as_f64().is_some()
            || attribute(span, "tokentap.ttft_tool_ms").as_f64().is_some()
    );
}

/// One Phoenix (it takes a while to start and about 450 MB) for the three checks.
#[test]
fn phoenix_shows_tokentaps_spans_as_agent_llm_and_tool_calls() {
    let phoenix = Phoenix::start();
    a_chat_and_an_agent_turn_have_the_right_span_kinds(&phoenix);
    a_backend_that_refuses_metrics_is_reported_once_and_not_retried(&phoenix);
    with_the_apps_own_llm_spans_tokentaps_span_is_not_a_second_llm_call(&phoenix);
}

fn a_chat_and_an_agent_turn_have_the_right_span_kinds(phoenix: &Phoenix) {
    let mock = Mock::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir, phoenix, &format!("profile = \"phoenix\"\nproject = \"{PROJECT}\""));
    let tokentap = Tokentap::start(&mock.url, &["--config", &config]);
    let mut feed = tokentap.feed();

    // A plain streamed chat.
    let stream = json!({"include_usage": true});
    let chat = json!({"model": "mock-gpt", "stream": true, "stream_options": stream,
        "messages": [{"role": "user", "content": "Why is the sky blue?"}]});
    let headers = [
        ("content-type", "application/json"),
        ("x-mock-ttft-ms", "40"),
        ("x-mock-itl-ms", "5"),
        ("x-mock-tokens", "12"),
    ];
    let resp = http1::post(tokentap.addr, CHAT, &headers, &serde_json::to_vec(&chat).unwrap());
    assert_eq!(resp.status, 200);
    let chat_record = feed.next_record_for(CHAT);

    // An agent turn of two tool rounds: the model streams one tool call per round (the case in
    // which a phase span could name its one tool), the app runs it and sends the result, and
    // after the second round the model answers.
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
    ]);
    let agent_headers = [
        ("content-type", "application/json"),
        ("x-mock-agent", "1"),
        ("x-mock-agent-steps", "2"),
        ("x-mock-tool-fragments", "4"),
        ("x-mock-itl-ms", "5"),
        ("x-mock-tokens", "6"),
    ];
    let mut messages = vec![json!({"role": "user", "content": "Weather and time?"})];
    let mut calls = Vec::new();
    for _ in 0..3 {
        let body = json!({"model": "mock-gpt", "stream": true, "stream_options": stream, "messages": messages, "tools": tools});
        let resp = http1::post(tokentap.addr, CHAT, &agent_headers, &serde_json::to_vec(&body).unwrap());
        assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
        let round = streamed_tool_calls(&resp.body);
        if round.is_empty() {
            break;
        }
        assert_eq!(round.len(), 1, "one call per round: {round:?}");
        let tool_calls: Vec<Value> = round
            .iter()
            .map(|(id, name, arguments)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}))
            .collect();
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": tool_calls}));
        for (id, _, _) in &round {
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": "ok"}));
        }
        calls.extend(round);
    }
    assert_eq!(calls.len(), 2, "two tool rounds: {calls:?}");
    // The plain chat was a turn of its own (one step, no agent span); then the agent turn.
    let turn = loop {
        let turn = feed.next_turn();
        if turn["totals"]["tool_calls"] != 0 {
            break turn;
        }
    };
    assert_eq!(turn["totals"]["steps"], 3, "{turn}");
    assert_eq!(turn["totals"]["tool_calls"], 2, "{turn}");
    let trace = str_at(&turn, "/trace_id").to_string();
    let agent_span = str_at(&turn, "/agent_span_id").to_string();
    let step_records: Vec<Value> = turn["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let (status, record) = tokentap.admin_get(&format!("/_tokentap/api/requests/{}", str_at(s, "/request_id")));
            assert_eq!(status, 200, "{record}");
            record
        })
        .collect();

    // Phoenix has them all: the chat's LLM span, the agent span, three steps, two tool runs.
    let spans = Phoenix::wait_spans(phoenix, PROJECT, "the chat and the agent turn", WAIT, |spans| {
        let of_kind = |k: &str| spans.iter().filter(|s| s["span_kind"] == k).count();
        of_kind("LLM") >= 4 && of_kind("AGENT") >= 1 && of_kind("TOOL") >= 2
    });
    let by_id: BTreeMap<&str, &Value> = spans.iter().map(|s| (span_id(s), s)).collect();
    assert_eq!(by_id.len(), spans.len(), "no span twice");

    // One AGENT root for the turn, in the turn's trace, without token counts of its own (Phoenix
    // adds a parent's tokens to its children's: the steps carry them).
    let agents: Vec<&&Value> = by_id.values().filter(|s| kind(s) == "AGENT").collect();
    assert_eq!(agents.len(), 1, "one AGENT span");
    let agent = agents[0];
    assert_eq!(span_id(agent), agent_span);
    assert_eq!(str_at(agent, "/context/trace_id"), trace);
    assert!(agent["parent_id"].is_null(), "the AGENT span is the root: {agent}");
    assert_eq!(agent["name"], "invoke_agent");
    assert!(attribute(agent, "llm.token_count.total").is_null(), "no tokens on the AGENT span: {agent}");
    assert!(attribute(agent, "tokentap.turn.input_tokens").as_u64().is_some(), "{agent}");

    // LLM spans: the chat (a root of its own) and the three steps (children of the AGENT span).
    let llm: Vec<&&Value> = by_id.values().filter(|s| kind(s) == "LLM").collect();
    assert_eq!(llm.len(), 4, "{llm:?}");
    let chat_span = by_id.get(chat_record["span_id"].as_str().unwrap()).expect("the chat's span");
    check_llm_span(chat_span, &chat_record);
    assert!(chat_span["parent_id"].is_null());
    for record in &step_records {
        let span = by_id.get(record["span_id"].as_str().unwrap()).expect("a step's span");
        check_llm_span(span, record);
        assert_eq!(span["parent_id"], agent_span, "a step under the AGENT span: {span}");
        assert_eq!(str_at(span, "/context/trace_id"), trace);
    }
    // The tokens Phoenix counts over the project are tokentap's records', once each.
    let counted: u64 = by_id.values().filter_map(|s| attribute(s, "llm.token_count.total").as_u64()).sum();
    let recorded: u64 = step_records.iter().chain([&chat_record]).map(|r| usage(r).0 + usage(r).1).sum();
    assert_eq!(counted, recorded, "Phoenix's token total equals the records'");

    // TOOL spans are the tool runs, and only they.
    let tools: Vec<&&Value> = by_id.values().filter(|s| kind(s) == "TOOL").collect();
    assert_eq!(tools.len(), 2, "{tools:?}");
    let mut names: Vec<&str> = Vec::new();
    for tool in &tools {
        assert!(tool["name"].as_str().unwrap().starts_with("execute_tool "), "{tool}");
        assert_eq!(tool["parent_id"], agent_span, "{tool}");
        assert!(calls.iter().any(|(id, _, _)| attribute(tool, "gen_ai.tool.call.id") == id.as_str()), "{tool}");
        names.push(attribute(tool, "gen_ai.tool.name").as_str().unwrap());
    }
    names.sort_unstable();
    let mut called: Vec<&str> = calls.iter().map(|(_, name, _)| name.as_str()).collect();
    called.sort_unstable();
    assert_eq!(names, called);

    // The model streaming a call's arguments is a phase of that step's LLM span: shown as a
    // plain span under it, not as a tool run.
    for (record, (id, name, _)) in step_records.iter().zip(&calls) {
        let step_span = record["span_id"].as_str().unwrap();
        let streaming = by_id
            .values()
            .find(|s| s["name"] == "tool_call" && s["parent_id"] == step_span)
            .unwrap_or_else(|| panic!("no tool_call phase span under {step_span}"));
        assert_eq!(kind(streaming), "UNKNOWN", "{streaming}");
        assert_eq!(attribute(streaming, "tokentap.tool_call.name"), name.as_str(), "{streaming}");
        assert_eq!(attribute(streaming, "tokentap.tool_call.id"), id.as_str(), "{streaming}");
    }
    for phase in by_id.values().filter(|s| !s["attributes"]["tokentap.phase"].is_null()) {
        assert_eq!(kind(phase), "UNKNOWN", "phase spans are neither LLM nor TOOL: {phase}");
    }

    // Traces only: Phoenix refuses OTLP metrics, and the profile does not send them.
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    let otlp = &health["telemetry"]["otlp"];
    assert_eq!(otlp["profile"], "phoenix", "{otlp}");
    assert!(otlp["targets"]["metrics"].is_null(), "{otlp}");
    assert_eq!(otlp["refused"], json!({}), "{otlp}");
    assert_eq!(otlp["spans"]["dropped"]["rejected"], 0, "{otlp}");
}

fn poll_health(tokentap: &Tokentap, what: &str, condition: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let (status, health) = tokentap.admin_get("/_tokentap/api/health");
        assert_eq!(status, 200);
        if condition(&health) {
            return health;
        }
        assert!(std::time::Instant::now() < deadline, "{what} did not happen in time: {health}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn a_backend_that_refuses_metrics_is_reported_once_and_not_retried(phoenix: &Phoenix) {
    let mock = Mock::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    // No profile: metrics go to Phoenix's /v1/metrics every 50 ms, which answers 405.
    let config = config(&dir, phoenix, "metrics_interval_ms = 50");
    let tokentap = Tokentap::start(&mock.url, &["--config", &config]);
    let mut feed = tokentap.feed();
    let headers = [("content-type", "application/json"), ("x-mock-tokens", "4")];
    let body = json!({"model": "mock-gpt", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(http1::post(tokentap.addr, CHAT, &headers, &serde_json::to_vec(&body).unwrap()).status, 200);
    feed.next_record_for(CHAT);
    let health =
        poll_health(&tokentap, "the metrics refusal", |h| !h["telemetry"]["otlp"]["refused"]["metrics"].is_null());
    let otlp = &health["telemetry"]["otlp"];
    let reason = otlp["refused"]["metrics"].as_str().unwrap();
    assert!(reason.contains("405"), "{otlp}");
    let rejected = otlp["metric_points"]["dropped"]["rejected"].as_u64().unwrap();
    assert!(rejected > 0, "{otlp}");
    // The spans still go: a second request's spans arrive, many metric intervals later.
    let exported_before = otlp["spans"]["exported"].as_u64().unwrap_or(0);
    assert_eq!(http1::post(tokentap.addr, CHAT, &headers, &serde_json::to_vec(&body).unwrap()).status, 200);
    feed.next_record_for(CHAT);
    let health = poll_health(&tokentap, "the second request's spans exported", |h| {
        h["telemetry"]["otlp"]["spans"]["exported"].as_u64().unwrap_or(0) > exported_before
    });
    let otlp = &health["telemetry"]["otlp"];
    assert!(otlp["refused"]["traces"].is_null(), "{otlp}");
    assert_eq!(otlp["metric_points"]["dropped"]["rejected"].as_u64(), Some(rejected), "metrics not sent again: {otlp}");
    let stderr = tokentap.proc.stderr();
    let warnings = stderr.matches("does not take metrics").count();
    assert_eq!(warnings, 1, "one warning naming the fix:\n{stderr}");
    let line = stderr.lines().find(|l| l.contains("does not take metrics")).unwrap();
    assert!(line.contains(&format!("{}/v1/metrics", phoenix.url)) && line.contains("metrics = false"), "{line}");
}

/// `llm_span = "app"`: a request continuing the app's trace is shown as a plain span under the
/// app's span, without tokens; one without the app's trace is still an LLM span.
fn with_the_apps_own_llm_spans_tokentaps_span_is_not_a_second_llm_call(phoenix: &Phoenix) {
    const APP_PROJECT: &str = "tokentap-e2e-app";
    const APP_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const APP_SPAN: &str = "00f067aa0ba902b7";
    let mock = Mock::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("profile = \"phoenix\"\nproject = \"{APP_PROJECT}\"\nllm_span = \"app\"");
    let tokentap = Tokentap::start(&mock.url, &["--config", &config(&dir, phoenix, &extra)]);
    let mut feed = tokentap.feed();
    let body = json!({"model": "mock-gpt", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "hi"}]});
    let traceparent = format!("00-{APP_TRACE}-{APP_SPAN}-01");
    let mut records = Vec::new();
    for headers in [
        vec![("content-type", "application/json"), ("x-mock-tokens", "4"), ("traceparent", traceparent.as_str())],
        vec![("content-type", "application/json"), ("x-mock-tokens", "4")],
    ] {
        assert_eq!(http1::post(tokentap.addr, CHAT, &headers, &serde_json::to_vec(&body).unwrap()).status, 200);
        records.push(feed.next_record_for(CHAT));
    }
    let ids: Vec<&str> = records.iter().map(|r| r["span_id"].as_str().unwrap()).collect();
    let spans = Phoenix::wait_spans(phoenix, APP_PROJECT, "both requests' spans", WAIT, |spans| {
        ids.iter().all(|id| spans.iter().any(|s| s["context"]["span_id"] == *id))
    });
    let find = |id: &str| spans.iter().find(|s| span_id(s) == id).unwrap();
    let under_app = find(ids[0]);
    assert_eq!(str_at(under_app, "/context/trace_id"), APP_TRACE, "{under_app}");
    assert_eq!(under_app["parent_id"], APP_SPAN, "{under_app}");
    assert_eq!(under_app["name"], "tokentap chat mock-gpt", "{under_app}");
    assert_eq!(kind(under_app), "UNKNOWN", "not a second LLM call: {under_app}");
    assert!(attribute(under_app, "llm.token_count.total").is_null(), "{under_app}");
    assert_eq!(attribute(under_app, "tokentap.usage.output_tokens").as_u64(), Some(usage(&records[0]).1));
    assert!(spans.iter().any(|s| s["parent_id"] == ids[0] && s["name"] == "answer"), "its phases stay under it");
    check_llm_span(find(ids[1]), &records[1]);
}
