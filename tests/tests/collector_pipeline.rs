//! tokentap → a real OpenTelemetry Collector running collector-config/otelcol.yaml unmodified →
//! a real Jaeger v2 (in memory), all on free ports. Both Go programs are built from their pinned
//! modules by `scripts/setup.sh test`.
//!
//! The shipped tail sampling decides per trace: with `SAMPLE_PERCENT=0` only the policies keep a
//! trace, so a plain fast answer is dropped while an error and a slow first answer reach Jaeger
//! whole, with their GenAI attributes. The span metrics are computed before sampling, from every
//! trace, and served by the Collector's Prometheus exporter with tokentap's own OTLP metrics.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokentap_e2e::collector::{sample_sum, spans_named, tag};
use tokentap_e2e::{http1, Collector, Jaeger, Mock, Tokentap};

const CHAT: &str = "/v1/chat/completions";
/// Generous: the Collector decides a trace a few seconds after its root span arrives, batches for
/// 2 s, and flushes span metrics every 15 s; two shared cores run many tests at once.
const WAIT: Duration = Duration::from_secs(120);

fn chat_body() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "model": "mock-gpt",
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
    }))
    .unwrap()
}

/// tokentap in front of `upstream`, exporting OTLP/HTTP to `collector` with a short batch delay.
fn tokentap_exporting_to(upstream: &str, collector: &Collector, dir: &tempfile::TempDir) -> Tokentap {
    let path = dir.path().join("tokentap.toml");
    let text = format!(
        "[otel]\nendpoint = \"{}\"\nprotocol = \"http/protobuf\"\nbatch_delay_ms = 50\nmetrics_interval_ms = 500\n\
         retry_initial_ms = 50\nretry_max_ms = 200\nservice_name = \"tokentap-e2e\"\n",
        collector.http_endpoint()
    );
    std::fs::write(&path, text).unwrap();
    Tokentap::start(upstream, &["--config", path.to_str().unwrap()])
}

/// Sends one chat request with the mock's `headers`; returns the status and the record's trace id.
fn chat(tokentap: &Tokentap, feed: &mut tokentap_e2e::RecordFeed, headers: &[(&str, &str)]) -> (u16, String) {
    let (status, record) = chat_record(tokentap, feed, headers);
    (status, record["trace_id"].as_str().expect("the record's trace id").to_string())
}

/// Like [`chat`], returning the whole record.
fn chat_record(tokentap: &Tokentap, feed: &mut tokentap_e2e::RecordFeed, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    let resp = http1::post(tokentap.addr, CHAT, &all, &chat_body());
    (resp.status, feed.next_record_for(CHAT))
}

/// Whether one of otelcol.yaml's keep policies other than keep-errors applies to a request that
/// answered in time: it stalled, or some hop re-buffered (on a loaded machine tokentap itself may
/// hold a chunk long enough), as tokentap exports them (`tokentap.stalls.count`,
/// `tokentap.rebuffered`).
fn kept_by_a_policy(record: &Value) -> bool {
    let stalls = record["analysis"]["stalls"]["count"].as_u64().unwrap_or(0);
    let rebuffered = match record["diagnosis"]["kind"].as_str() {
        Some(kind) => kind != "no_rebuffering",
        None => record["self_overhead"]["handoff_lag_max_us"].as_f64().is_some_and(|lag| lag >= 100_000.0),
    };
    stalls > 0 || rebuffered
}

/// Scrapes until `condition` holds on the text; panics with the last scrape after `WAIT`.
fn wait_scrape(what: &str, scrape: impl Fn() -> String, condition: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = scrape();
        if condition(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "{what} did not happen within {WAIT:?}; last scrape:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn names(trace: &Value) -> BTreeSet<String> {
    trace["spans"].as_array().unwrap().iter().map(|s| s["operationName"].as_str().unwrap().to_string()).collect()
}

#[test]
fn the_shipped_collector_keeps_errors_and_slow_answers_in_jaeger_and_drops_the_rest() {
    let jaeger = Jaeger::start();
    let collector = Collector::start(
        "otelcol.yaml",
        &[
            ("TRACES_BACKEND_ENDPOINT", jaeger.otlp_grpc_endpoint().as_str()),
            ("SAMPLE_PERCENT", "0"),
            ("SLOW_TTFT_MS", "500"),
        ],
    );
    let health = http1::get(collector.health, "/", &[]);
    assert_eq!(health.status, 200, "health check: {}", String::from_utf8_lossy(&health.body));
    let health: Value = serde_json::from_slice(&health.body).expect("health check answers JSON");
    assert_eq!(health["status"], "Server available", "{health}");

    let mock = Mock::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let tokentap = tokentap_exporting_to(&mock.url, &collector, &dir);
    let mut feed = tokentap.feed();

    let (status, fast_record) = chat_record(&tokentap, &mut feed, &[("x-mock-ttft-ms", "5"), ("x-mock-tokens", "20")]);
    assert_eq!(status, 200);
    let fast = fast_record["trace_id"].as_str().unwrap().to_string();
    let (status, failed) = chat(&tokentap, &mut feed, &[("x-mock-status", "500")]);
    assert_eq!(status, 500);
    let (status, slow) = chat(&tokentap, &mut feed, &[("x-mock-ttft-ms", "800"), ("x-mock-tokens", "4")]);
    assert_eq!(status, 200);
    assert_eq!([&fast, &failed, &slow].into_iter().collect::<BTreeSet<_>>().len(), 3, "three traces");

    // The slow first answer: every span of the request, with its GenAI attributes.
    let trace = jaeger.wait_trace(&slow, 4, WAIT);
    assert_eq!(
        names(&trace),
        BTreeSet::from(["chat mock-gpt", "provider_wait", "answer", "delivery"].map(String::from)),
        "{trace}"
    );
    let root = spans_named(&trace, "chat mock-gpt")[0];
    assert_eq!(tag(root, "span.kind"), Some(&Value::from("client")), "{root}");
    assert_eq!(tag(root, "gen_ai.operation.name"), Some(&Value::from("chat")), "{root}");
    assert_eq!(tag(root, "gen_ai.provider.name"), Some(&Value::from("openai")), "{root}");
    assert_eq!(tag(root, "gen_ai.request.model"), Some(&Value::from("mock-gpt")), "{root}");
    assert_eq!(tag(root, "gen_ai.request.stream"), Some(&Value::from(true)), "{root}");
    assert_eq!(tag(root, "tokentap.outcome"), Some(&Value::from("ok")), "{root}");
    let ttft = tag(root, "tokentap.ttft_answer_ms").and_then(Value::as_f64).expect("tokentap.ttft_answer_ms");
    assert!(ttft > 500.0, "kept as a slow first answer: {ttft} ms");
    assert!(tag(root, "gen_ai.usage.output_tokens").is_some(), "{root}");
    let process = &trace["processes"][root["processID"].as_str().unwrap()];
    assert_eq!(process["serviceName"], "tokentap-e2e", "{trace}");

    // The error: kept by keep-errors, ERROR status and the HTTP status as error.type.
    let trace = jaeger.wait_trace(&failed, 1, WAIT);
    let root = spans_named(&trace, "chat mock-gpt")[0];
    assert_eq!(tag(root, "otel.status_code"), Some(&Value::from("ERROR")), "{root}");
    assert_eq!(tag(root, "error"), Some(&Value::from(true)), "{root}");
    assert_eq!(tag(root, "error.type"), Some(&Value::from("500")), "{root}");
    assert_eq!(tag(root, "gen_ai.operation.name"), Some(&Value::from("chat")), "{root}");

    // The plain fast answer: decided, and sampled out unless it stalled or re-buffered.
    let decisions = "otelcol_processor_tail_sampling_global_count_traces_sampled";
    let telemetry = wait_scrape(
        "three sampling decisions",
        || collector.telemetry_scrape(),
        |t| sample_sum(t, decisions, &[]) >= 3.0,
    );
    if kept_by_a_policy(&fast_record) {
        eprintln!("the fast answer stalled or re-buffered on this machine, so it is kept: {fast_record}");
        assert_eq!(sample_sum(&telemetry, decisions, &[("sampled", "true")]), 3.0, "{telemetry}");
        jaeger.wait_trace(&fast, 4, WAIT);
    } else {
        assert_eq!(sample_sum(&telemetry, decisions, &[("sampled", "true")]), 2.0, "{telemetry}");
        assert_eq!(sample_sum(&telemetry, decisions, &[("sampled", "false")]), 1.0, "{telemetry}");
        assert!(jaeger.trace(&fast).is_none(), "the fast plain answer was sampled out, yet Jaeger has it");
    }

    // Span metrics: from every trace, before sampling; tokentap's own metrics beside them.
    let calls = "traces_span_metrics_calls_total";
    let chat_calls = [("span_name", "chat mock-gpt"), ("gen_ai_operation_name", "chat")];
    let scrape = wait_scrape(
        "span metrics of the three requests",
        || collector.prometheus_scrape(),
        |t| sample_sum(t, calls, &chat_calls) >= 3.0,
    );
    assert_eq!(sample_sum(&scrape, calls, &chat_calls), 3.0, "{scrape}");
    let errors = [("span_name", "chat mock-gpt"), ("status_code", "STATUS_CODE_ERROR")];
    assert_eq!(sample_sum(&scrape, calls, &errors), 1.0, "{scrape}");
    let scrape = wait_scrape(
        "tokentap's request durations",
        || collector.prometheus_scrape(),
        |t| sample_sum(t, "gen_ai_client_operation_duration_seconds_count", &[]) >= 3.0,
    );
    assert!(scrape.contains("gen_ai_client_operation_duration_seconds_bucket{"), "{scrape}");

    // tokentap counted its batches as exported: the Collector answered for them.
    let (status, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(status, 200);
    assert_eq!(health["telemetry"]["otlp"]["collector_reachable"], true, "{health}");
}

/// Reads tokentap's health answer until `condition` holds; panics with the last answer after `WAIT`.
fn poll_health(tokentap: &Tokentap, what: &str, condition: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, health) = tokentap.admin_get("/_tokentap/api/health");
        assert_eq!(status, 200);
        if condition(&health) {
            return health;
        }
        assert!(Instant::now() < deadline, "{what} did not happen within {WAIT:?}: {health}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_collector_killed_mid_run_costs_traffic_nothing_and_its_restart_gets_the_spooled_spans() {
    const DOWN_REQUESTS: usize = 10;
    let jaeger = Jaeger::start();
    let env = [("TRACES_BACKEND_ENDPOINT", jaeger.otlp_grpc_endpoint()), ("SAMPLE_PERCENT", "100".to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let collector = Collector::start("otelcol.yaml", &env);
    let mock = Mock::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let tokentap = tokentap_exporting_to(&mock.url, &collector, &dir);
    let mut feed = tokentap.feed();

    let (status, before) = chat(&tokentap, &mut feed, &[("x-mock-tokens", "4")]);
    assert_eq!(status, 200);
    jaeger.wait_trace(&before, 4, WAIT);
    poll_health(&tokentap, "the first request's spans exported", |h| {
        h["telemetry"]["otlp"]["spans"]["exported"].as_u64().unwrap_or(0) >= 4
    });

    // SIGKILL mid-run: the requests that follow are served as before.
    let stopped = collector.kill();
    let down: Vec<String> = (0..DOWN_REQUESTS)
        .map(|_| {
            let (status, trace) = chat(&tokentap, &mut feed, &[("x-mock-tokens", "4")]);
            assert_eq!(status, 200, "a request failed while the Collector was down");
            trace
        })
        .collect();
    let health = poll_health(&tokentap, "the down requests' spans spooled", |h| {
        let otlp = &h["telemetry"]["otlp"];
        otlp["collector_reachable"] == false && otlp["spans"]["spooled"].as_u64().unwrap_or(0) >= 4
    });
    let otlp = &health["telemetry"]["otlp"];
    assert_eq!(
        otlp["spans"]["dropped"],
        serde_json::json!({"queue_full": 0, "spool_full": 0, "rejected": 0}),
        "{otlp}"
    );
    assert!(!otlp["last_error"].as_str().unwrap_or("").is_empty(), "the failure is reported: {otlp}");

    // The Collector comes back on its address: the spool drains into it and on to Jaeger.
    let _collector = stopped.restart();
    for trace in &down {
        jaeger.wait_trace(trace, 4, WAIT);
    }
    let health = poll_health(&tokentap, "the spool drained", |h| h["telemetry"]["otlp"]["spool"]["entries"] == 0);
    assert_eq!(health["telemetry"]["otlp"]["collector_reachable"], true, "{health}");
}

/// A fleet: two tokentap instances export to the routing tier (otelcol-loadbalancer.yaml), which
/// sends each trace id to one of two sampling replicas (otelcol.yaml). Each turn has one step on
/// each tokentap: a fine answer on the first, an error on the second. Only keep-errors keeps
/// traces here, so a turn arrives in Jaeger with its fine step only if both steps met on one
/// replica.
#[test]
fn the_routing_tier_brings_a_turn_served_by_two_tokentaps_to_one_sampling_replica() {
    // The client's trace ids: their roots stay in the client, so each trace is decided
    // TURN_DECISION_WAIT after its first span, by then both steps are in. Which replica a trace id
    // goes to depends on the replicas' (free) ports: with 24 turns, one replica gets none with a
    // chance of 2 in 2^24.
    const TURNS: usize = 24;
    let traces: Vec<String> = (0..TURNS as u64)
        .map(|i| format!("{:016x}{:016x}", 0x7e57_0000 + i, (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect();
    let jaeger = Jaeger::start();
    let backend = jaeger.otlp_grpc_endpoint();
    let sampling_env =
        [("TRACES_BACKEND_ENDPOINT", backend.as_str()), ("SAMPLE_PERCENT", "0"), ("TURN_DECISION_WAIT", "15s")];
    let replicas = [Collector::start("otelcol.yaml", &sampling_env), Collector::start("otelcol.yaml", &sampling_env)];
    let tier2 = format!("[{},{}]", replicas[0].grpc, replicas[1].grpc);
    let router = Collector::start("otelcol-loadbalancer.yaml", &[("SAMPLING_TIER_ENDPOINTS", tier2.as_str())]);
    let mock = Mock::start(&[]);
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let tokentaps =
        [tokentap_exporting_to(&mock.url, &router, &dirs[0]), tokentap_exporting_to(&mock.url, &router, &dirs[1])];
    let mut feeds = [tokentaps[0].feed(), tokentaps[1].feed()];

    for (i, trace) in traces.iter().enumerate() {
        let step1 = format!("00-{trace}-{:016x}-01", 0x1000 + i);
        let (status, id) =
            chat(&tokentaps[0], &mut feeds[0], &[("traceparent", step1.as_str()), ("x-mock-tokens", "4")]);
        assert_eq!((status, &id), (200, trace));
        let step2 = format!("00-{trace}-{:016x}-01", 0x2000 + i);
        let (status, id) =
            chat(&tokentaps[1], &mut feeds[1], &[("traceparent", step2.as_str()), ("x-mock-status", "500")]);
        assert_eq!((status, &id), (500, trace));
    }

    for trace in &traces {
        let found = jaeger.wait_trace(trace, 5, WAIT);
        let steps = spans_named(&found, "chat mock-gpt");
        assert_eq!(steps.len(), 2, "both steps of turn {trace}: {found}");
        let errors = steps.iter().filter(|s| tag(s, "otel.status_code") == Some(&Value::from("ERROR"))).count();
        assert_eq!(errors, 1, "{found}");
        assert!(names(&found).contains("answer"), "the fine step's phases too: {found}");
    }
    // Both replicas had a share of the turns.
    let decisions = "otelcol_processor_tail_sampling_global_count_traces_sampled";
    let shares: Vec<f64> = replicas.iter().map(|r| sample_sum(&r.telemetry_scrape(), decisions, &[])).collect();
    assert_eq!(shares.iter().sum::<f64>(), TURNS as f64, "one decision per turn: {shares:?}");
    assert!(shares.iter().all(|&n| n > 0.0), "every replica decided some turns: {shares:?}");
}

fn weather_tools() -> Value {
    serde_json::json!([{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }])
}

/// A trace is a turn: an agent turn's steps leave first, as children of the turn's `invoke_agent`
/// span, which leaves when the final answer closes the turn, here more than 10 s later (a slow
/// final step; the Collector's old 10 s decision wait had dropped the first step by then). The
/// only policy that keeps the turn (`keep-slow-turn`) sees `invoke_agent` alone, yet the whole
/// turn reaches Jaeger: the trace is decided when its root arrives, with every step held.
#[test]
fn a_turn_is_kept_whole_by_a_policy_that_only_its_late_agent_span_matches() {
    let jaeger = Jaeger::start();
    let backend = jaeger.otlp_grpc_endpoint();
    let collector = Collector::start(
        "otelcol.yaml",
        &[
            ("TRACES_BACKEND_ENDPOINT", backend.as_str()),
            ("SAMPLE_PERCENT", "0"),
            ("SLOW_TURN_MS", "10000"),
            ("SLOW_TTFT_MS", "600000"),
        ],
    );
    let mock = Mock::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let tokentap = tokentap_exporting_to(&mock.url, &collector, &dir);
    let mut feed = tokentap.feed();
    let user = serde_json::json!({"role": "user", "content": "What is the weather in Paris?"});
    let headers = [("content-type", "application/json"), ("x-mock-agent", "1"), ("x-mock-ttft-ms", "5")];

    // Step 1: the model calls the tool.
    let body = serde_json::json!({"model": "mock-gpt", "stream": true, "messages": [user], "tools": weather_tools()});
    let resp = http1::post(tokentap.addr, CHAT, &headers, &serde_json::to_vec(&body).unwrap());
    assert_eq!(resp.status, 200);
    let step1 = feed.next_record_for(CHAT);
    let trace = step1["turn"]["trace_id"].as_str().unwrap_or_else(|| panic!("step 1 has no turn: {step1}")).to_string();
    let call = &step1["analysis"]["tool_calls"][0];
    let call_id = call["id"].as_str().unwrap_or_else(|| panic!("no tool call in step 1: {}", step1["analysis"]));

    // Step 2 carries the tool's result; the final answer takes 11 s to start.
    let body = serde_json::json!({
        "model": "mock-gpt",
        "stream": true,
        "tools": weather_tools(),
        "messages": [
            user,
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            ]},
            {"role": "tool", "tool_call_id": call_id, "content": "sunny, 24 °C"},
        ],
    });
    let slow = [("content-type", "application/json"), ("x-mock-agent", "1"), ("x-mock-ttft-ms", "11000")];
    let resp = http1::post(tokentap.addr, CHAT, &slow, &serde_json::to_vec(&body).unwrap());
    assert_eq!(resp.status, 200);
    let step2 = feed.next_record_for(CHAT);
    assert_eq!(step2["turn"]["trace_id"], trace.as_str(), "both steps are in the turn's trace: {}", step2["turn"]);
    assert_eq!(step2["turn"]["link"], "tool_result", "{}", step2["turn"]);

    let found = jaeger.wait_trace(&trace, 4, WAIT);
    let found = {
        // The steps' phase spans and the turn's spans may land in Jaeger in more than one write.
        let deadline = Instant::now() + WAIT;
        let mut found = found;
        while spans_named(&found, "chat mock-gpt").len() < 2
            || spans_named(&found, "execute_tool get_weather").is_empty()
        {
            assert!(Instant::now() < deadline, "the whole turn never reached Jaeger: {found}");
            std::thread::sleep(Duration::from_millis(100));
            found = jaeger.trace(&trace).unwrap();
        }
        found
    };
    let agent = spans_named(&found, "invoke_agent");
    assert_eq!(agent.len(), 1, "{found}");
    let e2e = tag(agent[0], "tokentap.turn.e2e_ms").and_then(Value::as_f64).expect("tokentap.turn.e2e_ms");
    assert!(e2e > 10_000.0, "kept as a slow turn: {e2e} ms");
    assert_eq!(tag(agent[0], "tokentap.turn.status"), Some(&Value::from("complete")), "{found}");
    let agent_id = agent[0]["spanID"].as_str().unwrap();
    for step in spans_named(&found, "chat mock-gpt") {
        let parent = step["references"].as_array().unwrap().iter().find(|r| r["refType"] == "CHILD_OF");
        assert_eq!(parent.map(|r| &r["spanID"]), Some(&Value::from(agent_id)), "a step's parent is the agent span");
    }
    // keep-slow-turn matched (on the agent span); no error did.
    let telemetry = collector.telemetry_scrape();
    let by_policy = "otelcol_processor_tail_sampling_count_traces_sampled";
    assert_eq!(sample_sum(&telemetry, by_policy, &[("policy", "keep-slow-turn"), ("sampled", "true")]), 1.0);
    assert_eq!(sample_sum(&telemetry, by_policy, &[("policy", "keep-errors"), ("sampled", "true")]), 0.0);
}
