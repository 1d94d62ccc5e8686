//! Agent turns end to end: real SDK tool loops (openai by hand, anthropic by hand, openai-agents)
//! through tokentap in front of the mock in agent mode. tokentap rebuilds each user turn from the
//! wire alone — no client instrumentation, no `traceparent` — and the tests check the turn records
//! (live feed, admin API, `turns.jsonl`), the `turn` reference of each request record and the
//! OTLP spans against what the client scripts measured themselves.
//!
//! Timing: a tool run's `duration_ms` (tokentap: the call's last argument fragment handed to the
//! client → arrival of the request carrying its result) must contain the time the script held the
//! call (the SDK handed it the last fragment → the script started sending the result), since the
//! wire sees the fragment before the SDK does and the request after the script starts it; and it
//! must fit inside the script's outer bracket (the step that made the call was started → the
//! carrying request's response head came back). Both bounds hold however slow the machine is; the
//! lower one also catches two calls' times being swapped (the mock spaces their last fragments
//! ~160 ms apart).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;
use tokentap_e2e::otlp_receiver::{attr_f64, attr_str, hex, span, Received, Span};
use tokentap_e2e::process::run_sdk_script;
use tokentap_e2e::{Mock, OtlpReceiver, Tokentap};

const WAIT: Duration = Duration::from_secs(60);
/// Slack on the bounds of a tool run's `duration_ms` for rounding of the script's and tokentap's
/// times (both read `CLOCK_MONOTONIC`).
const TOOL_SLACK_MS: f64 = 1.0;
/// Totals and times are rounded when written: sums may differ by this much.
const ROUNDING_MS: f64 = 0.01;

/// A config file exporting to the receiver's HTTP endpoint with a short batch delay.
fn otel_config(dir: &tempfile::TempDir, receiver: &OtlpReceiver) -> String {
    let path = dir.path().join("tokentap.toml");
    let text = format!(
        "[otel]\nendpoint = \"{}\"\nprotocol = \"http/protobuf\"\nbatch_delay_ms = 50\nmetrics_interval_ms = 1000\n\
         retry_initial_ms = 50\nretry_max_ms = 200\nservice_name = \"tokentap-e2e\"\n",
        receiver.http_endpoint()
    );
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn f64_of(v: &Value, what: &str) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str().unwrap_or_else(|| panic!("{what} is not a string: {v}"))
}

fn strings(values: &[Value]) -> Vec<String> {
    values.iter().map(|v| str_of(v, "an id").to_string()).collect()
}

/// The turn's steps' request ids, in step order.
fn step_request_ids(turn: &Value) -> Vec<String> {
    turn["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| str_of(&s["request_id"], "request_id").to_string())
        .collect()
}

/// The turn's tool runs by call id.
fn tool_runs(turn: &Value) -> BTreeMap<String, Value> {
    turn["tool_runs"]
        .as_array()
        .expect("tool_runs")
        .iter()
        .map(|r| (str_of(&r["call_id"], "tool_runs[].call_id").to_string(), r.clone()))
        .collect()
}

/// The invariants every closed turn keeps: its totals add up and match its lists, steps are
/// numbered 1.. in time order, the critical path is ordered and inside the turn.
fn check_turn_shape(turn: &Value) {
    assert_eq!(turn["record_version"], 1, "{turn}");
    for key in ["turn_id", "conversation_id", "trace_id", "started_at", "route"] {
        assert!(turn[key].as_str().is_some_and(|s| !s.is_empty()), "{key} missing: {turn}");
    }
    assert_eq!(str_of(&turn["trace_id"], "trace_id").len(), 32, "a W3C trace id: {turn}");
    assert!(turn["t0_unix_ns"].as_u64().is_some_and(|t| t > 0), "{turn}");
    let totals = &turn["totals"];
    let e2e = f64_of(&totals["e2e_ms"], "e2e_ms");
    let parts = f64_of(&totals["model_ms"], "model_ms")
        + f64_of(&totals["tool_ms"], "tool_ms")
        + f64_of(&totals["client_ms"], "client_ms");
    assert!((parts - e2e).abs() <= ROUNDING_MS, "model_ms + tool_ms + client_ms = {parts}, e2e_ms = {e2e}: {totals}");
    for key in ["model_ms", "tool_ms", "client_ms"] {
        assert!(f64_of(&totals[key], key) >= 0.0, "{key} negative: {totals}");
    }
    let steps = turn["steps"].as_array().expect("steps");
    let runs = turn["tool_runs"].as_array().expect("tool_runs");
    assert_eq!(totals["steps"], steps.len() as u64, "{turn}");
    assert_eq!(totals["tool_calls"], runs.len() as u64, "{turn}");
    let unanswered = runs.iter().filter(|r| r["result_ms"].is_null()).count() as u64;
    assert_eq!(totals["unanswered_tool_calls"], unanswered, "{turn}");
    let calls_in_steps: u64 = steps.iter().map(|s| s["tool_calls"].as_u64().expect("steps[].tool_calls")).sum();
    assert_eq!(calls_in_steps, runs.len() as u64, "each step's tool_calls count its runs: {turn}");
    let mut previous_start = -1.0;
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s["step"], i as u64 + 1, "steps numbered from 1: {turn}");
        let (start, end) = (f64_of(&s["start_ms"], "start_ms"), f64_of(&s["end_ms"], "end_ms"));
        assert!(start >= previous_start && end >= start, "step {} out of order: {turn}", i + 1);
        previous_start = start;
        assert!(s["span_id"].as_str().is_some_and(|id| id.len() == 16), "{s}");
    }
    assert_eq!(f64_of(&steps[0]["start_ms"], "start_ms"), 0.0, "t0 is the first step's t0: {turn}");
    let mut previous_end = 0.0;
    for seg in turn["critical_path"].as_array().expect("critical_path") {
        assert!(["model", "tool", "client"].contains(&str_of(&seg["kind"], "kind")), "{seg}");
        let (start, end) = (f64_of(&seg["start_ms"], "start_ms"), f64_of(&seg["end_ms"], "end_ms"));
        assert!(start >= previous_end - ROUNDING_MS && end >= start, "critical path out of order: {turn}");
        assert!(end <= e2e + ROUNDING_MS, "critical path past e2e_ms: {turn}");
        previous_end = end;
    }
}

/// A turn of tool loop(s) whose calls were all answered: `calls` are the script's calls (id, name,
/// step, held_ms). Checks the turn's tool runs against them one by one.
fn check_tool_runs(turn: &Value, calls: &[Value]) {
    let runs = tool_runs(turn);
    let expected: BTreeSet<String> = calls.iter().map(|c| str_of(&c["id"], "call id").to_string()).collect();
    assert_eq!(runs.keys().cloned().collect::<BTreeSet<_>>(), expected, "the SDK's call ids: {turn}");
    let steps = turn["steps"].as_array().unwrap();
    for call in calls {
        let id = str_of(&call["id"], "call id");
        let run = &runs[id];
        assert_eq!(run["name"], call["name"], "{run}");
        assert_eq!(run["step"], call["step"], "the step whose response made {id}: {run}");
        let result_step = run["result_step"].as_u64().unwrap_or_else(|| panic!("{id} unanswered: {run}"));
        assert_eq!(result_step, call["step"].as_u64().unwrap() + 1, "the results went in the next request: {run}");
        let (ready, result) = (f64_of(&run["ready_ms"], "ready_ms"), f64_of(&run["result_ms"], "result_ms"));
        let duration = f64_of(&run["duration_ms"], "duration_ms");
        assert!((duration - (result - ready)).abs() <= ROUNDING_MS, "duration_ms = result_ms - ready_ms: {run}");
        let maker = &steps[call["step"].as_u64().unwrap() as usize - 1];
        let carrier = &steps[result_step as usize - 1];
        assert!(
            (f64_of(&maker["start_ms"], "start_ms")..=f64_of(&maker["end_ms"], "end_ms") + ROUNDING_MS)
                .contains(&ready),
            "{id} ready outside the step that made it: {run} {maker}"
        );
        assert!(
            (result - f64_of(&carrier["start_ms"], "start_ms")).abs() <= ROUNDING_MS,
            "{id}'s result arrives with the request carrying it (its t0): {run} {carrier}"
        );
        let held = f64_of(&call["held_ms"], "held_ms");
        let outer = f64_of(&call["outer_ms"], "outer_ms");
        assert!(
            held - TOOL_SLACK_MS <= duration && duration <= outer + TOOL_SLACK_MS,
            "{id} ({}): tokentap measured {duration:.1} ms; the script held it {held:.1} ms within an outer bracket of {outer:.1} ms",
            call["name"]
        );
    }
}

/// Each step's request record carries its place in the turn.
fn check_request_records(tokentap: &Tokentap, turn: &Value) {
    for s in turn["steps"].as_array().unwrap() {
        let id = str_of(&s["request_id"], "request_id");
        let (status, record) = tokentap.admin_get(&format!("/_tokentap/api/requests/{id}"));
        assert_eq!(status, 200, "request record {id}: {record}");
        let r = &record["turn"];
        assert_eq!(r["turn_id"], turn["turn_id"], "{id}: {record}");
        assert_eq!(r["conversation_id"], turn["conversation_id"], "{id}: {r}");
        assert_eq!(r["step"], s["step"], "{id}: {r}");
        assert_eq!(r["link"], s["link"], "{id}: {r}");
        assert_eq!(r["trace_id"], turn["trace_id"], "{id}: {r}");
        assert_eq!(r["agent_span_id"], turn["agent_span_id"], "{id}: {r}");
        assert_eq!(record["span_id"], s["span_id"], "the step's span is the request's: {id}");
    }
}

/// The distinct spans received so far (exports may repeat one).
fn distinct_spans(received: &Received) -> Vec<Span> {
    let mut seen = BTreeSet::new();
    received.spans().into_iter().filter(|s| seen.insert(s.span_id.clone())).cloned().collect()
}

fn chat_span_of<'a>(spans: &'a [Span], request_id: &str) -> Option<&'a Span> {
    spans.iter().find(|s| {
        s.kind == span::SpanKind::Client as i32 && attr_str(&s.attributes, "tokentap.request_id") == Some(request_id)
    })
}

/// Starts the mock and a tokentap in front of it exporting to a fresh OTLP receiver.
fn with_otlp(extra: &[&str]) -> (Mock, OtlpReceiver, tempfile::TempDir, Tokentap) {
    let mock = Mock::start(&[]);
    let receiver = OtlpReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let config = otel_config(&dir, &receiver);
    let mut args = vec!["--config", config.as_str()];
    args.extend_from_slice(extra);
    let tokentap = Tokentap::start(&mock.url, &args);
    (mock, receiver, dir, tokentap)
}

fn openai_url(tokentap: &Tokentap) -> String {
    format!("http://{}/v1", tokentap.addr)
}

#[test]
fn openai_sdk_tool_loop_is_one_turn_with_measured_tool_runs_and_one_trace() {
    let (_mock, receiver, _dir, tokentap) = with_otlp(&[]);
    let mut feed = tokentap.feed();
    let out = run_sdk_script("agent_openai_loop.py", &["--base-url", &openai_url(&tokentap)]);
    let script_turn = &out["clients"][0]["turns"][0];
    let calls = script_turn["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "two parallel tool calls: {out}");
    assert!(!script_turn["answer"].as_str().unwrap().is_empty(), "{out}");

    let turn = feed.next_turn();
    check_turn_shape(&turn);
    assert_eq!(turn["status"], "complete", "{turn}");
    assert_eq!(turn["turn_index"], 0, "{turn}");
    assert_eq!(step_request_ids(&turn), strings(script_turn["request_ids"].as_array().unwrap()), "{turn}");
    let steps = turn["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{turn}");
    assert_eq!(steps[0]["link"], "first", "{turn}");
    assert_eq!(steps[1]["link"], "tool_result", "{turn}");
    assert_eq!(steps[0]["tool_calls"], 2, "{turn}");
    assert_eq!(steps[1]["tool_calls"], 0, "{turn}");
    assert!(steps.iter().all(|s| s["outcome"] == "ok"), "{turn}");
    assert!(steps[0]["ttft_tool_ms"].as_f64().is_some(), "the first step streamed tool calls: {turn}");
    assert!(steps[1]["ttft_answer_ms"].as_f64().is_some(), "the second step streamed the answer: {turn}");
    check_tool_runs(&turn, calls);
    // The tools slept 0.3 s and 0.6 s in parallel: at least 0.6 s with both calls out and no model
    // call running.
    let tool_ms = f64_of(&turn["totals"]["tool_ms"], "tool_ms");
    assert!(tool_ms >= 600.0 - TOOL_SLACK_MS, "tool_ms {tool_ms}: {turn}");
    // The critical path names both calls on the tool stretch before step 2.
    let ids: BTreeSet<&str> = calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert!(
        turn["critical_path"].as_array().unwrap().iter().any(|seg| seg["kind"] == "tool"
            && seg["step"] == 2
            && seg["call_ids"]
                .as_array()
                .is_some_and(|c| c.iter().filter_map(Value::as_str).collect::<BTreeSet<_>>() == ids)),
        "no tool segment with both calls: {}",
        turn["critical_path"]
    );
    let agent_span = str_of(&turn["agent_span_id"], "agent_span_id").to_string();
    assert_eq!(agent_span.len(), 16, "{turn}");
    check_request_records(&tokentap, &turn);

    // The admin API and the journal have the same record.
    let turn_id = str_of(&turn["turn_id"], "turn_id");
    let (status, one) = tokentap.admin_get(&format!("/_tokentap/api/turns/{turn_id}"));
    assert_eq!(status, 200, "{one}");
    assert_eq!(one, turn);
    let (status, list) = tokentap.admin_get("/_tokentap/api/turns?limit=5");
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["turns"].as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list["turns"][0], turn);
    assert_eq!(tokentap.admin_get("/_tokentap/api/turns/no-such-turn").0, 404);
    let journal = std::fs::read_to_string(tokentap.data_dir.path().join("turns.jsonl")).expect("turns.jsonl");
    let lines: Vec<Value> =
        journal.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines, std::slice::from_ref(&turn), "turns.jsonl holds the turn once");

    // OTLP: one trace for the whole turn, although the client sent no traceparent.
    let trace = str_of(&turn["trace_id"], "trace_id").to_string();
    let request_ids = step_request_ids(&turn);
    let received = receiver.wait_for(WAIT, "the turn's chat, invoke_agent and execute_tool spans", |r| {
        let spans = distinct_spans(r);
        let tools =
            spans.iter().filter(|s| hex(&s.parent_span_id) == agent_span && s.name.starts_with("execute_tool")).count();
        spans.iter().any(|s| hex(&s.span_id) == agent_span)
            && tools >= 2
            && request_ids.iter().all(|id| chat_span_of(&spans, id).is_some())
    });
    let spans = distinct_spans(&received);
    let agent = spans.iter().find(|s| hex(&s.span_id) == agent_span).unwrap();
    assert!(agent.name.starts_with("invoke_agent"), "{}", agent.name);
    assert_eq!(agent.kind, span::SpanKind::Internal as i32);
    assert_eq!(hex(&agent.trace_id), trace);
    assert!(agent.parent_span_id.is_empty(), "no client span to hang under");
    let a = &agent.attributes;
    assert_eq!(attr_str(a, "gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(attr_str(a, "gen_ai.conversation.id"), turn["conversation_id"].as_str());
    assert_eq!(attr_str(a, "tokentap.turn.id"), Some(turn_id));
    assert_eq!(attr_f64(a, "tokentap.turn.steps"), Some(2.0));
    let mut chat_ids = BTreeSet::new();
    for (s, id) in steps.iter().zip(&request_ids) {
        let chat = chat_span_of(&spans, id).unwrap();
        assert!(chat.name.starts_with("chat "), "{}", chat.name);
        assert_eq!(hex(&chat.span_id), s["span_id"].as_str().unwrap(), "{id}");
        assert_eq!(hex(&chat.trace_id), trace, "chat span of {id} in the turn's trace");
        assert_eq!(hex(&chat.parent_span_id), agent_span, "chat span of {id} under invoke_agent");
        chat_ids.insert(chat.span_id.clone());
    }
    // The chat spans' own children (provider wait, delivery, …) are in the same trace.
    for child in spans.iter().filter(|s| chat_ids.contains(&s.parent_span_id)) {
        assert_eq!(hex(&child.trace_id), trace, "{} under a chat span", child.name);
    }
    let runs = tool_runs(&turn);
    let tools: Vec<&Span> =
        spans.iter().filter(|s| hex(&s.parent_span_id) == agent_span && s.name.starts_with("execute_tool")).collect();
    assert_eq!(tools.len(), 2, "one execute_tool span per tool run");
    let t0 = turn["t0_unix_ns"].as_u64().unwrap();
    for tool in tools {
        let a = &tool.attributes;
        let call_id = attr_str(a, "gen_ai.tool.call.id").expect("gen_ai.tool.call.id");
        let run = runs.get(call_id).unwrap_or_else(|| panic!("execute_tool for unknown call {call_id}"));
        assert_eq!(tool.kind, span::SpanKind::Internal as i32);
        assert_eq!(hex(&tool.trace_id), trace);
        assert_eq!(attr_str(a, "gen_ai.operation.name"), Some("execute_tool"));
        assert_eq!(attr_str(a, "gen_ai.tool.name"), run["name"].as_str());
        assert_eq!(attr_str(a, "gen_ai.tool.type"), Some("function"));
        assert_eq!(tool.name, format!("execute_tool {}", run["name"].as_str().unwrap()));
        // The span is the run: ready → result, to within a millisecond of the record's rounding.
        let ms = |key: &str| t0 + (f64_of(&run[key], key) * 1e6).round() as u64;
        assert!(tool.start_time_unix_nano.abs_diff(ms("ready_ms")) <= 1_000_000, "{call_id} start vs ready_ms");
        assert!(tool.end_time_unix_nano.abs_diff(ms("result_ms")) <= 1_000_000, "{call_id} end vs result_ms");
    }
    // Nothing of the turn is in another trace.
    for s in spans.iter().filter(|s| {
        hex(&s.span_id) == agent_span || hex(&s.parent_span_id) == agent_span || chat_ids.contains(&s.parent_span_id)
    }) {
        assert_eq!(hex(&s.trace_id), trace, "{}", s.name);
    }
}

#[test]
fn anthropic_sdk_tool_loop_is_one_turn_with_measured_tool_runs() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &["--provider", "anthropic"]);
    let mut feed = tokentap.feed();
    let out = run_sdk_script("agent_anthropic_loop.py", &["--base-url", &format!("http://{}", tokentap.addr)]);
    assert_eq!(out["stop_reason"], "end_turn", "{out}");
    let calls = out["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "two parallel tool_use blocks: {out}");

    let turn = feed.next_turn();
    check_turn_shape(&turn);
    assert_eq!(turn["status"], "complete", "{turn}");
    assert_eq!(step_request_ids(&turn), strings(out["request_ids"].as_array().unwrap()), "{turn}");
    let steps = turn["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{turn}");
    assert_eq!(steps[1]["link"], "tool_result", "tool_use_id links the results: {turn}");
    check_tool_runs(&turn, calls);
    check_request_records(&tokentap, &turn);
}

#[test]
fn openai_agents_sdk_run_is_one_turn() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let out = run_sdk_script("agent_openai_agents.py", &["--base-url", &openai_url(&tokentap)]);
    let calls = out["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "the agent called both tools: {out}");
    assert_eq!(out["output_call_ids"].as_array().unwrap().len(), 2, "{out}");
    assert!(out["final_output"].as_str().is_some_and(|s| !s.is_empty()), "{out}");

    let turn = feed.next_turn();
    check_turn_shape(&turn);
    assert_eq!(turn["status"], "complete", "{turn}");
    let steps = turn["steps"].as_array().unwrap();
    assert!(steps.len() >= 2, "{turn}");
    assert!(steps[1..].iter().all(|s| s["link"] == "tool_result"), "{turn}");
    let runs = tool_runs(&turn);
    let expected: BTreeSet<String> = calls.iter().map(|c| c["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(runs.keys().cloned().collect::<BTreeSet<_>>(), expected, "{turn}");
    for call in calls {
        let run = &runs[call["id"].as_str().unwrap()];
        assert_eq!(run["name"], call["name"], "{run}");
        assert!(run["duration_ms"].as_f64().is_some_and(|d| d > 0.0), "answered: {run}");
    }
    assert_eq!(turn["totals"]["unanswered_tool_calls"], 0, "{turn}");
    check_request_records(&tokentap, &turn);
}

#[test]
fn two_user_messages_are_two_turns_of_one_conversation() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let out = run_sdk_script("agent_openai_loop.py", &["--base-url", &openai_url(&tokentap), "--user-turns", "2"]);
    let script_turns = out["clients"][0]["turns"].as_array().unwrap();
    assert_eq!(script_turns.len(), 2, "{out}");

    let first = feed.next_turn();
    let second = feed.next_turn();
    for (turn, script_turn) in [(&first, &script_turns[0]), (&second, &script_turns[1])] {
        check_turn_shape(turn);
        assert_eq!(turn["status"], "complete", "{turn}");
        assert_eq!(step_request_ids(turn), strings(script_turn["request_ids"].as_array().unwrap()), "{turn}");
        check_tool_runs(turn, script_turn["calls"].as_array().unwrap());
        check_request_records(&tokentap, turn);
    }
    assert_eq!(first["conversation_id"], second["conversation_id"], "one conversation");
    assert_ne!(first["turn_id"], second["turn_id"]);
    assert_eq!(first["turn_index"], 0);
    assert_eq!(second["turn_index"], 1);
    assert_eq!(first["steps"][0]["link"], "first", "{first}");
    assert_eq!(second["steps"][0]["link"], "next_turn", "a new user message in a known conversation: {second}");
    assert_eq!(second["steps"][1]["link"], "tool_result", "{second}");
    let (status, list) = tokentap.admin_get("/_tokentap/api/turns?limit=1");
    assert_eq!(status, 200);
    assert_eq!(list["turns"].as_array().map(Vec::len), Some(1), "limit is honoured: {list}");
    assert_eq!(list["turns"][0]["turn_id"], second["turn_id"], "newest first: {list}");

    // `tokentap report` has turn percentiles, `tokentap explain` takes a turn id.
    let data_dir = tokentap.data_dir.path().to_str().unwrap().to_string();
    let (status, report, err) = tokentap_e2e::process::run_tokentap(&["report", "--data-dir", &data_dir, "--json"]);
    assert!(status.success(), "{err}");
    let report: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["turns"]["turns"], 2, "{}", report["turns"]);
    assert_eq!(report["turns"]["agent_turns"], 2);
    assert_eq!(report["turns"]["steps"]["p50"], 2.0, "{}", report["turns"]);
    let (status, markdown, err) = tokentap_e2e::process::run_tokentap(&["report", "--data-dir", &data_dir]);
    assert!(
        status.success() && markdown.contains("## Turns") && markdown.contains("| tool share |"),
        "{err}{markdown}"
    );
    let turn_id = second["turn_id"].as_str().unwrap();
    let (status, text, err) = tokentap_e2e::process::run_tokentap(&["explain", turn_id, "--data-dir", &data_dir]);
    assert!(status.success(), "{err}");
    assert!(text.starts_with(&format!("turn {turn_id} (complete)")), "{text}");
    assert!(text.contains("critical path:") && text.contains("get_weather"), "{text}");
    let (status, via_admin, err) =
        tokentap_e2e::process::run_tokentap(&["explain", turn_id, "--admin", &format!("http://{}", tokentap.admin)]);
    assert!(status.success(), "{err}");
    assert_eq!(via_admin, text, "the admin API and the store explain the same turn");
}

#[test]
fn an_explicit_turn_header_joins_steps_on_two_instances_into_one_trace() {
    let mock = Mock::start(&[]);
    let receiver = OtlpReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let config = otel_config(&dir, &receiver);
    let a = Tokentap::start(&mock.url, &["--config", &config]);
    let b = Tokentap::start(&mock.url, &["--config", &config]);
    let mut feed_b = b.feed();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let turn_id = format!("t-{nanos:x}-{:x}", std::process::id());
    let header = format!("x-tokentap-turn:{turn_id}");
    // Three tool rounds, then the answer: steps 1 and 3 through A, 2 and 4 through B.
    let out = run_sdk_script(
        "agent_openai_loop.py",
        &[
            "--base-url",
            &openai_url(&a),
            "--base-url",
            &openai_url(&b),
            "--header",
            &header,
            "--header",
            "x-mock-agent-steps:3",
        ],
    );
    let request_ids = strings(out["clients"][0]["turns"][0]["request_ids"].as_array().unwrap());
    assert_eq!(request_ids.len(), 4, "{out}");
    let served_by = |i: usize| if i.is_multiple_of(2) { &a } else { &b };

    // Each instance records its steps under the header's turn, in one trace.
    let mut traces = BTreeSet::new();
    for (i, id) in request_ids.iter().enumerate() {
        let (status, record) = served_by(i).admin_get(&format!("/_tokentap/api/requests/{id}"));
        assert_eq!(status, 200, "step {} ({id}) on instance {}: {record}", i + 1, if i % 2 == 0 { "A" } else { "B" });
        assert_eq!(record["turn"]["turn_id"], turn_id.as_str(), "step {}: {}", i + 1, record["turn"]);
        // Each instance's first request of the turn starts it there; its next one follows by the header.
        assert_eq!(
            record["turn"]["link"],
            if i < 2 { "first" } else { "header" },
            "step {}: {}",
            i + 1,
            record["turn"]
        );
        traces.insert(str_of(&record["turn"]["trace_id"], "turn.trace_id").to_string());
    }
    assert_eq!(traces.len(), 1, "both instances derive the same trace from the header: {traces:?}");
    let trace = traces.into_iter().next().unwrap();

    // B saw the final answer: it closes the turn, with its own two steps.
    let turn = feed_b.next_turn();
    assert_eq!(turn["turn_id"], turn_id.as_str(), "{turn}");
    assert_eq!(turn["trace_id"], trace.as_str(), "{turn}");
    assert_eq!(turn["status"], "complete", "{turn}");
    assert_eq!(step_request_ids(&turn), [request_ids[1].clone(), request_ids[3].clone()], "{turn}");

    // Every chat span, from either instance, is in that one trace.
    let received = receiver.wait_for(WAIT, "the four steps' chat spans", |r| {
        let spans = distinct_spans(r);
        request_ids.iter().all(|id| chat_span_of(&spans, id).is_some())
    });
    let spans = distinct_spans(&received);
    for id in &request_ids {
        let chat = chat_span_of(&spans, id).unwrap();
        assert_eq!(hex(&chat.trace_id), trace, "chat span of {id}");
    }
}

#[test]
fn concurrent_tool_loops_are_separate_turns() {
    const CLIENTS: usize = 4;
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let out = run_sdk_script(
        "agent_openai_loop.py",
        &["--base-url", &openai_url(&tokentap), "--clients", &CLIENTS.to_string()],
    );
    let clients = out["clients"].as_array().unwrap();
    assert_eq!(clients.len(), CLIENTS);

    let turns: Vec<Value> = (0..CLIENTS).map(|_| feed.next_turn()).collect();
    let turn_ids: BTreeSet<&str> = turns.iter().map(|t| t["turn_id"].as_str().unwrap()).collect();
    assert_eq!(turn_ids.len(), CLIENTS, "distinct turns");
    let conversations: BTreeSet<&str> = turns.iter().map(|t| t["conversation_id"].as_str().unwrap()).collect();
    assert_eq!(conversations.len(), CLIENTS, "each client is its own conversation");
    for (i, client) in clients.iter().enumerate() {
        let script_turn = &client["turns"][0];
        let ids = strings(script_turn["request_ids"].as_array().unwrap());
        assert_eq!(ids.len(), 2, "client {i}: {script_turn}");
        let turn = turns.iter().find(|t| step_request_ids(t) == ids).unwrap_or_else(|| {
            panic!(
                "no turn has exactly client {i}'s steps {ids:?}.\nTheir records: {}\nThe turns: {}",
                step_records_summary(&tokentap, &ids),
                turns_summary(&turns)
            )
        });
        check_turn_shape(turn);
        assert_eq!(turn["status"], "complete", "{turn}");
        assert_eq!(turn["steps"][1]["link"], "tool_result", "{turn}");
        let expected: BTreeSet<String> =
            script_turn["calls"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap().to_string()).collect();
        assert_eq!(tool_runs(turn).keys().cloned().collect::<BTreeSet<_>>(), expected, "client {i}'s calls: {turn}");
        check_request_records(&tokentap, turn);
    }
}

/// What a failure needs to see of some requests' records: outcome, whether the analysis was shed,
/// the tool calls the analysis found, and the record's turn reference.
fn step_records_summary(tokentap: &Tokentap, ids: &[String]) -> String {
    let lines: Vec<String> = ids
        .iter()
        .map(|id| {
            let (status, r) = tokentap.admin_get(&format!("/_tokentap/api/requests/{id}"));
            let calls: Vec<&Value> = r["analysis"]["tool_calls"]
                .as_array()
                .map(|c| c.iter().map(|c| &c["id"]).collect())
                .unwrap_or_default();
            format!(
                "{id}: HTTP {status}, outcome {}, analysis_shed {}, last_input {}, tool calls {calls:?}, turn {}",
                r["outcome"], r["analysis_shed"], r["request"]["last_input"], r["turn"]
            )
        })
        .collect();
    lines.join("\n")
}

/// One line per turn: id, conversation, steps (request id and link) and tool-run call ids.
fn turns_summary(turns: &[Value]) -> String {
    let lines: Vec<String> = turns
        .iter()
        .map(|t| {
            let steps: Vec<String> = t["steps"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| format!("{}({})", s["request_id"].as_str().unwrap_or("?"), s["link"].as_str().unwrap_or("?")))
                .collect();
            format!(
                "turn {} conversation {} status {} steps [{}] calls {:?}",
                t["turn_id"],
                t["conversation_id"],
                t["status"],
                steps.join(", "),
                tool_runs(t).keys().collect::<Vec<_>>()
            )
        })
        .collect();
    lines.join("\n")
}
