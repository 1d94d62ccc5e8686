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
use tokentap_e2e::records::{Outcome, SegmentKind, ToolRun, TurnLink, TurnRecord, TurnStatus};
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
fn step_request_ids(turn: &TurnRecord) -> Vec<String> {
    turn.steps.iter().map(|s| s.request_id.clone()).collect()
}

/// The turn's tool runs by call id.
fn tool_runs(turn: &TurnRecord) -> BTreeMap<String, &ToolRun> {
    turn.tool_runs
        .iter()
        .map(|r| (r.call_id.clone().unwrap_or_else(|| panic!("tool_runs[].call_id missing: {r:?}")), r))
        .collect()
}

/// The invariants every closed turn keeps: its totals add up and match its lists, steps are
/// numbered 1.. in time order, the critical path is ordered and inside the turn.
fn check_turn_shape(turn: &TurnRecord) {
    assert_eq!(turn.record_version, 1, "{turn:?}");
    for (key, value) in [
        ("turn_id", &turn.turn_id),
        ("conversation_id", &turn.conversation_id),
        ("trace_id", &turn.trace_id),
        ("started_at", &turn.started_at),
        ("route", &turn.route),
    ] {
        assert!(!value.is_empty(), "{key} missing: {turn:?}");
    }
    assert_eq!(turn.trace_id.len(), 32, "a W3C trace id: {turn:?}");
    assert!(turn.t0_unix_ns > 0, "{turn:?}");
    let totals = &turn.totals;
    let e2e = totals.e2e_ms;
    let parts = totals.model_ms + totals.tool_ms + totals.client_ms;
    assert!((parts - e2e).abs() <= ROUNDING_MS, "model_ms + tool_ms + client_ms = {parts}, e2e_ms = {e2e}: {totals:?}");
    for (key, value) in [("model_ms", totals.model_ms), ("tool_ms", totals.tool_ms), ("client_ms", totals.client_ms)] {
        assert!(value >= 0.0, "{key} negative: {totals:?}");
    }
    let (steps, runs) = (&turn.steps, &turn.tool_runs);
    assert_eq!(totals.steps as usize, steps.len(), "{turn:?}");
    assert_eq!(totals.tool_calls as usize, runs.len(), "{turn:?}");
    let unanswered = runs.iter().filter(|r| r.result_ms.is_none()).count();
    assert_eq!(totals.unanswered_tool_calls as usize, unanswered, "{turn:?}");
    let calls_in_steps: usize = steps.iter().map(|s| s.tool_calls as usize).sum();
    assert_eq!(calls_in_steps, runs.len(), "each step's tool_calls count its runs: {turn:?}");
    let mut previous_start = -1.0;
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s.step as usize, i + 1, "steps numbered from 1: {turn:?}");
        let (start, end) = (s.start_ms, s.end_ms);
        assert!(start >= previous_start && end >= start, "step {} out of order: {turn:?}", i + 1);
        previous_start = start;
        assert_eq!(s.span_id.len(), 16, "{s:?}");
    }
    assert_eq!(steps[0].start_ms, 0.0, "t0 is the first step's t0: {turn:?}");
    let mut previous_end = 0.0;
    // Each segment's kind is model, tool or client: `SegmentKind` reads no other.
    for seg in &turn.critical_path {
        let (start, end) = (seg.start_ms, seg.end_ms);
        assert!(start >= previous_end - ROUNDING_MS && end >= start, "critical path out of order: {turn:?}");
        assert!(end <= e2e + ROUNDING_MS, "critical path past e2e_ms: {turn:?}");
        previous_end = end;
    }
}

/// A turn of tool loop(s) whose calls were all answered: `calls` are the script's calls (id, name,
/// step, held_ms). Checks the turn's tool runs against them one by one.
fn check_tool_runs(turn: &TurnRecord, calls: &[Value]) {
    let runs = tool_runs(turn);
    let expected: BTreeSet<String> = calls.iter().map(|c| str_of(&c["id"], "call id").to_string()).collect();
    assert_eq!(runs.keys().cloned().collect::<BTreeSet<_>>(), expected, "the SDK's call ids: {turn:?}");
    let steps = &turn.steps;
    for call in calls {
        let id = str_of(&call["id"], "call id");
        let run = runs[id];
        assert_eq!(run.name.as_deref(), Some(str_of(&call["name"], "call name")), "{run:?}");
        let call_step = call["step"].as_u64().unwrap();
        assert_eq!(u64::from(run.step), call_step, "the step whose response made {id}: {run:?}");
        let result_step = run.result_step.unwrap_or_else(|| panic!("{id} unanswered: {run:?}"));
        assert_eq!(u64::from(result_step), call_step + 1, "the results went in the next request: {run:?}");
        let ready = run.ready_ms;
        let result = run.result_ms.unwrap_or_else(|| panic!("result_ms is not a number: {run:?}"));
        let duration = run.duration_ms.unwrap_or_else(|| panic!("duration_ms is not a number: {run:?}"));
        assert!((duration - (result - ready)).abs() <= ROUNDING_MS, "duration_ms = result_ms - ready_ms: {run:?}");
        let maker = &steps[call_step as usize - 1];
        let carrier = &steps[result_step as usize - 1];
        assert!(
            (maker.start_ms..=maker.end_ms + ROUNDING_MS).contains(&ready),
            "{id} ready outside the step that made it: {run:?} {maker:?}"
        );
        assert!(
            (result - carrier.start_ms).abs() <= ROUNDING_MS,
            "{id}'s result arrives with the request carrying it (its t0): {run:?} {carrier:?}"
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
fn check_request_records(tokentap: &Tokentap, turn: &TurnRecord) {
    for s in &turn.steps {
        let id = &s.request_id;
        let record = tokentap.request_record(id);
        let r = record.turn.as_ref().unwrap_or_else(|| panic!("{id} has no turn: {record:?}"));
        assert_eq!(r.turn_id, turn.turn_id, "{id}: {record:?}");
        assert_eq!(r.conversation_id, turn.conversation_id, "{id}: {r:?}");
        assert_eq!(r.step, s.step, "{id}: {r:?}");
        assert_eq!(r.link, s.link, "{id}: {r:?}");
        assert_eq!(r.trace_id, turn.trace_id, "{id}: {r:?}");
        assert_eq!(r.agent_span_id, turn.agent_span_id, "{id}: {r:?}");
        assert_eq!(record.span_id, s.span_id, "the step's span is the request's: {id}");
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

    let turn = feed.turn();
    check_turn_shape(&turn);
    assert_eq!(turn.status, TurnStatus::Complete, "{turn:?}");
    assert_eq!(turn.turn_index, 0, "{turn:?}");
    assert_eq!(step_request_ids(&turn), strings(script_turn["request_ids"].as_array().unwrap()), "{turn:?}");
    let steps = &turn.steps;
    assert_eq!(steps.len(), 2, "{turn:?}");
    assert_eq!(steps[0].link, TurnLink::First, "{turn:?}");
    assert_eq!(steps[1].link, TurnLink::ToolResult, "{turn:?}");
    assert_eq!(steps[0].tool_calls, 2, "{turn:?}");
    assert_eq!(steps[1].tool_calls, 0, "{turn:?}");
    assert!(steps.iter().all(|s| s.outcome == Outcome::Ok), "{turn:?}");
    assert!(steps[0].ttft_tool_ms.is_some(), "the first step streamed tool calls: {turn:?}");
    assert!(steps[1].ttft_answer_ms.is_some(), "the second step streamed the answer: {turn:?}");
    check_tool_runs(&turn, calls);
    // The tools slept 0.3 s and 0.6 s in parallel: at least 0.6 s with both calls out and no model
    // call running.
    let tool_ms = turn.totals.tool_ms;
    assert!(tool_ms >= 600.0 - TOOL_SLACK_MS, "tool_ms {tool_ms}: {turn:?}");
    // The critical path names both calls on the tool stretch before step 2.
    let ids: BTreeSet<&str> = calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert!(
        turn.critical_path.iter().any(|seg| seg.kind == SegmentKind::Tool
            && seg.step == Some(2)
            && seg.call_ids.iter().map(String::as_str).collect::<BTreeSet<_>>() == ids),
        "no tool segment with both calls: {:?}",
        turn.critical_path
    );
    let agent_span = turn.agent_span_id.clone().unwrap_or_else(|| panic!("agent_span_id missing: {turn:?}"));
    assert_eq!(agent_span.len(), 16, "{turn:?}");
    check_request_records(&tokentap, &turn);

    // The admin API and the journal have the same record.
    let turn_id = turn.turn_id.as_str();
    assert_eq!(tokentap.turn_record(turn_id), turn);
    let list = tokentap.turn_records("limit=5");
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0], turn);
    assert_eq!(tokentap.admin_get("/_tokentap/api/turns/no-such-turn").0, 404);
    assert_eq!(tokentap.journal_turns(), std::slice::from_ref(&turn), "turns.jsonl holds the turn once");

    // OTLP: one trace for the whole turn, although the client sent no traceparent.
    let trace = turn.trace_id.clone();
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
    assert_eq!(attr_str(a, "gen_ai.conversation.id"), Some(turn.conversation_id.as_str()));
    assert_eq!(attr_str(a, "tokentap.turn.id"), Some(turn_id));
    assert_eq!(attr_f64(a, "tokentap.turn.steps"), Some(2.0));
    let mut chat_ids = BTreeSet::new();
    for (s, id) in steps.iter().zip(&request_ids) {
        let chat = chat_span_of(&spans, id).unwrap();
        assert!(chat.name.starts_with("chat "), "{}", chat.name);
        assert_eq!(hex(&chat.span_id), s.span_id, "{id}");
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
    let t0 = turn.t0_unix_ns;
    for tool in tools {
        let a = &tool.attributes;
        let call_id = attr_str(a, "gen_ai.tool.call.id").expect("gen_ai.tool.call.id");
        let run = runs.get(call_id).unwrap_or_else(|| panic!("execute_tool for unknown call {call_id}"));
        assert_eq!(tool.kind, span::SpanKind::Internal as i32);
        assert_eq!(hex(&tool.trace_id), trace);
        assert_eq!(attr_str(a, "gen_ai.operation.name"), Some("execute_tool"));
        assert_eq!(attr_str(a, "gen_ai.tool.name"), run.name.as_deref());
        assert_eq!(attr_str(a, "gen_ai.tool.type"), Some("function"));
        assert_eq!(tool.name, format!("execute_tool {}", run.name.as_deref().unwrap()));
        // The span is the run: ready → result, to within a millisecond of the record's rounding.
        let ms = |value: f64| t0 + (value * 1e6).round() as u64;
        let result_ms = run.result_ms.unwrap_or_else(|| panic!("result_ms is not a number: {run:?}"));
        assert!(tool.start_time_unix_nano.abs_diff(ms(run.ready_ms)) <= 1_000_000, "{call_id} start vs ready_ms");
        assert!(tool.end_time_unix_nano.abs_diff(ms(result_ms)) <= 1_000_000, "{call_id} end vs result_ms");
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

    let turn = feed.turn();
    check_turn_shape(&turn);
    assert_eq!(turn.status, TurnStatus::Complete, "{turn:?}");
    assert_eq!(step_request_ids(&turn), strings(out["request_ids"].as_array().unwrap()), "{turn:?}");
    let steps = &turn.steps;
    assert_eq!(steps.len(), 2, "{turn:?}");
    assert_eq!(steps[1].link, TurnLink::ToolResult, "tool_use_id links the results: {turn:?}");
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

    let turn = feed.turn();
    check_turn_shape(&turn);
    assert_eq!(turn.status, TurnStatus::Complete, "{turn:?}");
    let steps = &turn.steps;
    assert!(steps.len() >= 2, "{turn:?}");
    assert!(steps[1..].iter().all(|s| s.link == TurnLink::ToolResult), "{turn:?}");
    let runs = tool_runs(&turn);
    let expected: BTreeSet<String> = calls.iter().map(|c| c["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(runs.keys().cloned().collect::<BTreeSet<_>>(), expected, "{turn:?}");
    for call in calls {
        let run = runs[call["id"].as_str().unwrap()];
        assert_eq!(run.name.as_deref(), Some(str_of(&call["name"], "call name")), "{run:?}");
        assert!(run.duration_ms.is_some_and(|d| d > 0.0), "answered: {run:?}");
    }
    assert_eq!(turn.totals.unanswered_tool_calls, 0, "{turn:?}");
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

    let first = feed.turn();
    let second = feed.turn();
    for (turn, script_turn) in [(&first, &script_turns[0]), (&second, &script_turns[1])] {
        check_turn_shape(turn);
        assert_eq!(turn.status, TurnStatus::Complete, "{turn:?}");
        assert_eq!(step_request_ids(turn), strings(script_turn["request_ids"].as_array().unwrap()), "{turn:?}");
        check_tool_runs(turn, script_turn["calls"].as_array().unwrap());
        check_request_records(&tokentap, turn);
    }
    assert_eq!(first.conversation_id, second.conversation_id, "one conversation");
    assert_ne!(first.turn_id, second.turn_id);
    assert_eq!(first.turn_index, 0);
    assert_eq!(second.turn_index, 1);
    assert_eq!(first.steps[0].link, TurnLink::First, "{first:?}");
    assert_eq!(second.steps[0].link, TurnLink::NextTurn, "a new user message in a known conversation: {second:?}");
    assert_eq!(second.steps[1].link, TurnLink::ToolResult, "{second:?}");
    let list = tokentap.turn_records("limit=1");
    assert_eq!(list.len(), 1, "limit is honoured: {list:?}");
    assert_eq!(list[0].turn_id, second.turn_id, "newest first: {list:?}");

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
    let turn_id = second.turn_id.as_str();
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
        eprintln!("step {} ({id}) on instance {}", i + 1, if i % 2 == 0 { "A" } else { "B" });
        let record = served_by(i).request_record(id);
        let r = record.turn.as_ref().unwrap_or_else(|| panic!("step {}: no turn: {record:?}", i + 1));
        assert_eq!(r.turn_id, turn_id, "step {}: {r:?}", i + 1);
        // Each instance's first request of the turn starts it there; its next one follows by the header.
        assert_eq!(r.link, if i < 2 { TurnLink::First } else { TurnLink::Header }, "step {}: {r:?}", i + 1);
        traces.insert(r.trace_id.clone());
    }
    assert_eq!(traces.len(), 1, "both instances derive the same trace from the header: {traces:?}");
    let trace = traces.into_iter().next().unwrap();

    // B saw the final answer: it closes the turn, with its own two steps.
    let turn = feed_b.turn();
    assert_eq!(turn.turn_id, turn_id, "{turn:?}");
    assert_eq!(turn.trace_id, trace, "{turn:?}");
    assert_eq!(turn.status, TurnStatus::Complete, "{turn:?}");
    assert_eq!(step_request_ids(&turn), [request_ids[1].clone(), request_ids[3].clone()], "{turn:?}");

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

    let turns: Vec<TurnRecord> = (0..CLIENTS).map(|_| feed.turn()).collect();
    let turn_ids: BTreeSet<&str> = turns.iter().map(|t| t.turn_id.as_str()).collect();
    assert_eq!(turn_ids.len(), CLIENTS, "distinct turns");
    let conversations: BTreeSet<&str> = turns.iter().map(|t| t.conversation_id.as_str()).collect();
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
        assert_eq!(turn.status, TurnStatus::Complete, "{turn:?}");
        assert_eq!(turn.steps[1].link, TurnLink::ToolResult, "{turn:?}");
        let expected: BTreeSet<String> =
            script_turn["calls"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap().to_string()).collect();
        assert_eq!(tool_runs(turn).keys().cloned().collect::<BTreeSet<_>>(), expected, "client {i}'s calls: {turn:?}");
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
fn turns_summary(turns: &[TurnRecord]) -> String {
    let lines: Vec<String> = turns
        .iter()
        .map(|t| {
            let steps: Vec<String> = t.steps.iter().map(|s| format!("{}({})", s.request_id, s.link.as_str())).collect();
            format!(
                "turn {} conversation {} status {} steps [{}] calls {:?}",
                t.turn_id,
                t.conversation_id,
                t.status.as_str(),
                steps.join(", "),
                tool_runs(t).keys().collect::<Vec<_>>()
            )
        })
        .collect();
    lines.join("\n")
}
