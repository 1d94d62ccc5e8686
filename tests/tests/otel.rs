//! OpenTelemetry export end to end: tokentap → OTLP (HTTP/protobuf and gRPC) → the test receiver,
//! which decodes with the official protobuf definitions. Checks the spans' names, kinds,
//! attributes, links and times against the request's record, the metrics' names, units, bucket
//! boundaries and counts, and that a collector that is down costs traffic nothing: telemetry goes
//! to the spool and arrives once the collector is up.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokentap_e2e::otlp_receiver::{
    attr_bool, attr_f64, attr_str, hex, metric, span, KeyValue, Received, Span, TlsIdentity,
};
use tokentap_e2e::{http1, Framing, Mock, OtlpReceiver, ReservedReceiver, Script, ScriptedUpstream, Tokentap};

const CHAT: &str = "/v1/chat/completions";
const WAIT: Duration = Duration::from_secs(60);
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The GenAI conventions' duration and token buckets.
const DURATION_BUCKETS: [f64; 14] =
    [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
    67108864.0,
];

fn chat_body() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "model": "mock-gpt",
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": 300,
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
    }))
    .unwrap()
}

/// A config file that exports to `endpoint` quickly (short batch delay and metric interval).
fn config_file(dir: &tempfile::TempDir, endpoint: &str, protocol: &str, extra: &str) -> String {
    let path = dir.path().join("tokentap.toml");
    let text = format!(
        "[otel]\nendpoint = \"{endpoint}\"\nprotocol = \"{protocol}\"\nbatch_delay_ms = 50\nmetrics_interval_ms = 200\n\
         retry_initial_ms = 50\nretry_max_ms = 200\nservice_name = \"tokentap-e2e\"\n{extra}\n"
    );
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn spans_of_trace<'a>(received: &'a Received, trace_id: &str) -> Vec<&'a Span> {
    let mut seen = BTreeSet::new();
    received.spans().into_iter().filter(|s| hex(&s.trace_id) == trace_id && seen.insert(s.span_id.clone())).collect()
}

fn by_name<'a>(spans: &[&'a Span], name: &str) -> &'a Span {
    spans
        .iter()
        .copied()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no span {name:?} among {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>()))
}

fn f(attributes: &[KeyValue], key: &str) -> f64 {
    attr_f64(attributes, key).unwrap_or_else(|| panic!("attribute {key} missing"))
}

/// A test CA (written to `dir/ca.pem`) and a receiver certificate it signed for 127.0.0.1.
fn test_ca(dir: &tempfile::TempDir) -> (std::path::PathBuf, TlsIdentity) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "tokentap test collector CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    (ca_path, TlsIdentity { cert_pem: leaf.pem().into_bytes(), key_pem: leaf_key.serialize_pem().into_bytes() })
}

/// One streamed request with reasoning and answer through tokentap exporting to `receiver` over
/// `protocol` (over TLS with a test CA when `tls`); checks every span and metric, then that a
/// second request is exported too.
fn one_request_exports_the_expected_telemetry(protocol: &str, tls: bool) {
    let mock = Mock::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let (receiver, ca_line) = if tls {
        let (ca_path, identity) = test_ca(&dir);
        (OtlpReceiver::start_tls(identity), format!("ca_file = {:?}\n", ca_path.to_str().unwrap()))
    } else {
        (OtlpReceiver::start(), String::new())
    };
    let endpoint = if protocol == "grpc" { receiver.grpc_endpoint() } else { receiver.http_endpoint() };
    assert_eq!(endpoint.starts_with("https://"), tls);
    let config = config_file(&dir, &endpoint, protocol, &format!("{ca_line}[otel.headers]\nx-tenant = \"e2e\"\n"));
    let tokentap = Tokentap::start(&mock.url, &["--config", &config]);
    let mut feed = tokentap.feed();

    let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let headers = [
        ("content-type", "application/json"),
        ("traceparent", traceparent.as_str()),
        ("x-mock-ttft-ms", "40"),
        ("x-mock-itl-ms", "5"),
        ("x-mock-reasoning-tokens", "6"),
        ("x-mock-tokens", "12"),
    ];
    let resp = http1::post(tokentap.addr, CHAT, &headers, &chat_body());
    assert_eq!(resp.status, 200);
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["trace_id"], CLIENT_TRACE);

    let received = receiver.wait_for(WAIT, "the request's five spans", |r| spans_of_trace(r, CLIENT_TRACE).len() >= 5);
    let spans = spans_of_trace(&received, CLIENT_TRACE);
    let mut names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["answer", "chat mock-gpt", "delivery", "provider_wait", "reasoning"], "exactly these spans");

    // The request span continues the client's trace and is the record's span.
    let root = by_name(&spans, "chat mock-gpt");
    assert_eq!(root.kind, span::SpanKind::Client as i32);
    assert_eq!(hex(&root.span_id), record["span_id"].as_str().unwrap());
    assert_eq!(hex(&root.parent_span_id), CLIENT_SPAN);
    assert_eq!(root.start_time_unix_nano, record["timeline"]["t0_unix_ns"].as_u64().unwrap());
    let t_end = record["timeline"]["t_end_ns"].as_u64().unwrap();
    assert!(root.end_time_unix_nano >= root.start_time_unix_nano + t_end, "the request span ends with the last byte");
    let a = &root.attributes;
    assert_eq!(attr_str(a, "gen_ai.operation.name"), Some("chat"));
    assert_eq!(attr_str(a, "gen_ai.provider.name"), Some("openai"));
    assert_eq!(attr_str(a, "gen_ai.request.model"), Some("mock-gpt"));
    assert_eq!(attr_bool(a, "gen_ai.request.stream"), Some(true));
    assert_eq!(attr_f64(a, "gen_ai.request.max_tokens"), Some(300.0));
    assert_eq!(attr_str(a, "server.address"), Some("127.0.0.1"));
    assert_eq!(attr_f64(a, "server.port"), Some(f64::from(mock.addr.port())));
    assert_eq!(attr_str(a, "gen_ai.response.id"), record["analysis"]["response_id"].as_str());
    assert_eq!(attr_f64(a, "gen_ai.usage.output_tokens"), record["analysis"]["usage"]["output_tokens"].as_f64());
    assert!(attr_f64(a, "gen_ai.usage.input_tokens").is_some());
    let m = &record["analysis"]["metrics"];
    // Records round floats when written; compare to a relative 1e-9.
    let close = |key: &str, expected: f64| {
        let got = f(a, key);
        assert!((got - expected).abs() <= 1e-9 * expected.abs().max(1.0), "{key}: {got} vs the record's {expected}");
    };
    close("gen_ai.response.time_to_first_chunk", m["time_to_first_chunk_ms"].as_f64().unwrap() / 1e3);
    close("tokentap.ttft_answer_ms", m["ttft_answer_ms"].as_f64().unwrap());
    close("tokentap.ttft_reasoning_ms", m["ttft_reasoning_ms"].as_f64().unwrap());
    close("tokentap.output_tps", m["output_tps"].as_f64().unwrap());
    close("tokentap.itl.p50_ms", m["itl_ms"]["p50"].as_f64().unwrap());
    assert_eq!(f(a, "tokentap.stalls.count"), 0.0);
    assert_eq!(attr_str(a, "tokentap.outcome"), Some("ok"));
    assert_eq!(attr_str(a, "tokentap.request_id"), record["request_id"].as_str());
    assert!(attr_f64(a, "tokentap.self_overhead.hook_time_us").is_some());
    assert!(attr_str(a, "error.type").is_none());
    assert!(attr_str(a, "tokentap.content.request_body").is_none(), "content capture is off by default");

    // Children: INTERNAL, same trace, parented by the request span, inside it, events inside them.
    for s in &spans {
        assert_eq!(hex(&s.trace_id), CLIENT_TRACE);
        assert!(s.end_time_unix_nano >= s.start_time_unix_nano, "{} ends before it starts", s.name);
        for e in &s.events {
            assert!(
                (s.start_time_unix_nano..=s.end_time_unix_nano).contains(&e.time_unix_nano),
                "event {} outside span {}",
                e.name,
                s.name
            );
        }
        if s.span_id == root.span_id {
            continue;
        }
        assert_eq!(s.kind, span::SpanKind::Internal as i32, "{}", s.name);
        assert_eq!(s.parent_span_id, root.span_id, "{}", s.name);
        assert!(
            s.start_time_unix_nano >= root.start_time_unix_nano && s.end_time_unix_nano <= root.end_time_unix_nano,
            "{} outside the request span",
            s.name
        );
        assert_eq!(attr_str(&s.attributes, "tokentap.phase"), Some(s.name.as_str()));
    }
    let t0 = root.start_time_unix_nano;
    // Within a microsecond of the record's (rounded) milliseconds.
    let ms = |v: &serde_json::Value| t0 + (v.as_f64().unwrap() * 1e6).round() as u64;
    let near = |got: u64, want: u64, what: &str| assert!(got.abs_diff(want) <= 1_000, "{what}: {got} vs {want}");
    near(by_name(&spans, "reasoning").start_time_unix_nano, ms(&m["ttft_reasoning_ms"]), "reasoning start");
    near(by_name(&spans, "answer").start_time_unix_nano, ms(&m["ttft_answer_ms"]), "answer start");
    let wait = by_name(&spans, "provider_wait");
    assert_eq!(wait.start_time_unix_nano, t0 + record["timeline"]["t_upstream_sent_ns"].as_u64().unwrap());
    near(wait.end_time_unix_nano, ms(&m["ttft_reasoning_ms"]), "provider_wait end");
    assert!(by_name(&spans, "reasoning").end_time_unix_nano <= by_name(&spans, "answer").start_time_unix_nano);
    let delivery = by_name(&spans, "delivery");
    let chunks = record["timeline"]["chunks"].as_array().unwrap();
    assert_eq!(delivery.events.len(), chunks.len().min(64), "one event per chunk within the budget");
    assert!(delivery.events.windows(2).all(|w| w[0].time_unix_nano <= w[1].time_unix_nano));
    assert_eq!(delivery.events[0].time_unix_nano, t0 + chunks[0]["t_up_ns"].as_u64().unwrap());

    // The resource and the configured header.
    assert_eq!(attr_str(&received.trace_resource(), "service.name"), Some("tokentap-e2e"));
    assert!(received.headers.iter().any(|(k, v)| k == "x-tenant" && v == "e2e"), "configured header missing");

    // Metrics: names, units, the conventions' boundaries, counts.
    let received = receiver
        .wait_for(WAIT, "metrics of one request", |r| r.histogram_count("gen_ai.client.operation.duration") >= 1);
    let duration = received.metrics_named("gen_ai.client.operation.duration")[0];
    assert_eq!(duration.unit, "s");
    let Some(metric::Data::Histogram(h)) = &duration.data else { panic!("duration is not a histogram") };
    assert_eq!(h.data_points[0].explicit_bounds, DURATION_BUCKETS);
    assert_eq!(h.data_points[0].bucket_counts.len(), DURATION_BUCKETS.len() + 1);
    assert_eq!(h.aggregation_temporality, 2, "cumulative");
    let labels = &h.data_points[0].attributes;
    assert_eq!(attr_str(labels, "gen_ai.operation.name"), Some("chat"));
    assert_eq!(attr_str(labels, "gen_ai.request.model"), Some("mock-gpt"));
    assert_eq!(attr_str(labels, "tokentap.outcome"), Some("ok"));
    assert!(attr_str(labels, "tokentap.request_id").is_none(), "no per-request labels on metrics");
    assert_eq!(received.histogram_count("gen_ai.client.operation.time_to_first_chunk"), 1);
    // One value per content event after the first.
    let content_events = m["itl_ms"]["count"].as_u64().unwrap() + 1;
    assert_eq!(received.histogram_count("gen_ai.client.operation.time_per_output_chunk"), content_events - 1);
    let usage = received.metrics_named("gen_ai.client.token.usage")[0];
    assert_eq!(usage.unit, "{token}");
    let Some(metric::Data::Histogram(u)) = &usage.data else { panic!("token usage is not a histogram") };
    assert_eq!(u.data_points[0].explicit_bounds, TOKEN_BUCKETS);
    let token_types: BTreeSet<&str> =
        u.data_points.iter().filter_map(|p| attr_str(&p.attributes, "gen_ai.token.type")).collect();
    assert_eq!(token_types, BTreeSet::from(["input", "output"]));
    assert_eq!(received.histogram_count("tokentap.ttft.answer"), 1);
    assert_eq!(received.histogram_count("tokentap.ttft.reasoning"), 1);
    assert_eq!(received.counter_value("tokentap.requests"), 1);

    // Export keeps going: a second request (a new trace) arrives as well.
    let resp = http1::post(tokentap.addr, CHAT, &headers[..1], &chat_body());
    assert_eq!(resp.status, 200);
    let second = feed.next_record_for(CHAT);
    let second_trace = second["trace_id"].as_str().unwrap().to_string();
    assert_ne!(second_trace, CLIENT_TRACE);
    let received =
        receiver.wait_for(WAIT, "the second request's spans", |r| !spans_of_trace(r, &second_trace).is_empty());
    let root =
        spans_of_trace(&received, &second_trace).into_iter().find(|s| s.kind == span::SpanKind::Client as i32).unwrap();
    assert!(root.parent_span_id.is_empty(), "a trace tokentap started has no parent");
    receiver.wait_for(WAIT, "metrics of two requests", |r| r.counter_value("tokentap.requests") == 2);

    // The exporter counts a batch once the collector has answered for it.
    let health = poll_health(&tokentap, "both requests' spans counted as exported", |h| {
        h["telemetry"]["otlp"]["spans"]["exported"].as_u64().unwrap_or(0) >= 9
    });
    let otlp = &health["telemetry"]["otlp"];
    assert_eq!(otlp["collector_reachable"], true, "{health}");
    assert_eq!(otlp["spans"]["dropped"]["queue_full"], 0, "{health}");
    assert!(!health.to_string().contains("e2e\""), "header values never show in health: {health}");
}

#[test]
fn spans_and_metrics_arrive_over_http_protobuf() {
    one_request_exports_the_expected_telemetry("http/protobuf", false);
}

#[test]
fn spans_and_metrics_arrive_over_grpc() {
    one_request_exports_the_expected_telemetry("grpc", false);
}

#[test]
fn spans_and_metrics_arrive_over_https_with_a_private_ca() {
    one_request_exports_the_expected_telemetry("http/protobuf", true);
}

#[test]
fn spans_and_metrics_arrive_over_grpc_tls_with_a_private_ca() {
    one_request_exports_the_expected_telemetry("grpc", true);
}

#[test]
fn standard_environment_variables_configure_export() {
    let mock = Mock::start(&[]);
    let receiver = OtlpReceiver::start();
    let endpoint = receiver.grpc_endpoint();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_SERVICE_NAME", "from-env"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_METRICS_EXPORTER", "none"),
    ];
    let tokentap = Tokentap::start_with_env(&["--upstream", &mock.url], &env);
    let mut feed = tokentap.feed();
    let resp =
        http1::post(tokentap.addr, CHAT, &[("content-type", "application/json"), ("x-mock-tokens", "3")], &chat_body());
    assert_eq!(resp.status, 200);
    let record = feed.next_record_for(CHAT);
    let trace = record["trace_id"].as_str().unwrap().to_string();
    let received =
        receiver.wait_for(WAIT, "spans configured by OTEL_* variables", |r| !spans_of_trace(r, &trace).is_empty());
    assert_eq!(attr_str(&received.trace_resource(), "service.name"), Some("from-env"));
    assert!(received.metrics.is_empty(), "OTEL_METRICS_EXPORTER=none");
}

/// An OpenAI chat stream: a role chunk, `n` content chunks 2 ms apart, usage, `[DONE]`.
fn scripted_stream(n: usize) -> Script {
    let chunk = |delta: &str, extra: &str| {
        format!("data: {{\"id\":\"chatcmpl-s\",\"object\":\"chat.completion.chunk\",\"model\":\"scripted\",\"choices\":[{{\"index\":0,\"delta\":{delta}{extra}}}]}}\n\n")
            .into_bytes()
    };
    let mut pieces = vec![(Duration::from_millis(5), chunk("{\"role\":\"assistant\",\"content\":\"\"}", ""))];
    for i in 0..n {
        pieces.push((Duration::from_millis(10 + 2 * i as u64), chunk(&format!("{{\"content\":\"word{i} \"}}"), "")));
    }
    let end = Duration::from_millis(12 + 2 * n as u64);
    pieces.push((end, chunk("{}", ",\"finish_reason\":\"stop\"")));
    pieces.push((
        end,
        b"data: {\"id\":\"chatcmpl-s\",\"object\":\"chat.completion.chunk\",\"model\":\"scripted\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":5,\"total_tokens\":12}}\n\ndata: [DONE]\n\n"
            .to_vec(),
    ));
    Script {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into())],
        framing: Framing::Chunked,
        pieces,
    }
}

#[test]
fn collector_down_spools_and_replays_without_slowing_traffic() {
    collector_down_spools_and_replays("http/protobuf");
}

#[test]
fn collector_down_over_grpc_spools_and_replays() {
    collector_down_spools_and_replays("grpc");
}

fn collector_down_spools_and_replays(protocol: &str) {
    const REQUESTS: usize = 200;
    const SPANS_PER_REQUEST: usize = 4; // request, provider_wait, answer, delivery
    let upstream = ScriptedUpstream::start();
    let script = scripted_stream(5);
    let expected_body = script.body();
    upstream.register(CHAT, script);

    // The collector's port is taken but refuses connections: a collector that is down.
    let reserved = ReservedReceiver::reserve();
    let dir = tempfile::tempdir().unwrap();
    let endpoint = if protocol == "grpc" { reserved.grpc_endpoint() } else { reserved.http_endpoint() };
    let config = config_file(&dir, &endpoint, protocol, "");
    let tokentap = Tokentap::start(&upstream.url(), &["--config", &config]);

    // 200 streamed requests from 4 clients: all succeed, byte for byte.
    let body = chat_body();
    let request_ids: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    (0..REQUESTS / 4)
                        .map(|_| {
                            let resp = http1::post(tokentap.addr, CHAT, &[("content-type", "application/json")], &body);
                            assert_eq!(resp.status, 200);
                            assert!(resp.complete, "body ended early");
                            assert_eq!(resp.body, expected_body, "bytes changed on the way");
                            resp.header("x-tokentap-request-id").expect("request id header").to_string()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(request_ids.iter().collect::<BTreeSet<_>>().len(), REQUESTS);

    // Their telemetry is in the spool, none of it dropped.
    let health = poll_health(&tokentap, "every span spooled", |h| {
        h["telemetry"]["otlp"]["spans"]["spooled"].as_u64() == Some((REQUESTS * SPANS_PER_REQUEST) as u64)
    });
    let otlp = &health["telemetry"]["otlp"];
    assert_eq!(otlp["collector_reachable"], false, "{otlp}");
    assert_eq!(otlp["spans"]["exported"], 0, "{otlp}");
    assert_eq!(
        otlp["spans"]["dropped"],
        serde_json::json!({"queue_full": 0, "spool_full": 0, "rejected": 0}),
        "{otlp}"
    );
    assert!(otlp["spool"]["entries"].as_u64().unwrap() > 0, "{otlp}");
    let spool_dir = tokentap.data_dir.path().join("otlp-spool");
    let files = std::fs::read_dir(&spool_dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pb"))
        .count();
    assert!(files > 0, "no spool files in {}", spool_dir.display());

    // The collector comes up: everything arrives.
    let receiver = reserved.start();
    receiver.wait_for(WAIT, "every request's spans", |r| {
        let ids: BTreeSet<&str> =
            r.spans().iter().filter_map(|s| attr_str(&s.attributes, "tokentap.request_id")).collect();
        ids.len() == REQUESTS
    });
    let received = receiver.wait_for(WAIT, "every span", |r| distinct_spans(r).len() == REQUESTS * SPANS_PER_REQUEST);
    let by_id = distinct_spans(&received);
    let roots: BTreeSet<String> =
        by_id.values().filter_map(|s| attr_str(&s.attributes, "tokentap.request_id").map(str::to_string)).collect();
    assert_eq!(roots, request_ids.iter().cloned().collect::<BTreeSet<_>>(), "spans of exactly the requests sent");
    // At least once: a span received twice is the same span both times.
    let all = received.spans();
    for s in &all {
        assert_eq!(&by_id[&s.span_id], *s, "a duplicate differs from the first copy");
    }
    eprintln!("received {} spans for {} distinct ({} duplicates)", all.len(), by_id.len(), all.len() - by_id.len());

    // Metrics caught up too (they are cumulative: the latest export counts all requests).
    receiver.wait_for(WAIT, "metrics counting every request", |r| {
        r.histogram_count("gen_ai.client.operation.duration") == REQUESTS as u64
            && r.counter_value("tokentap.requests") == REQUESTS as i64
    });
    let health = poll_health(&tokentap, "the spool drained", |h| h["telemetry"]["otlp"]["spool"]["entries"] == 0);
    let otlp = &health["telemetry"]["otlp"];
    assert_eq!(otlp["collector_reachable"], true, "{otlp}");
    assert!(otlp["spans"]["exported"].as_u64().unwrap() >= (REQUESTS * SPANS_PER_REQUEST) as u64, "{otlp}");
}

fn distinct_spans(received: &Received) -> BTreeMap<Vec<u8>, Span> {
    let mut map = BTreeMap::new();
    for s in received.spans() {
        map.entry(s.span_id.clone()).or_insert_with(|| s.clone());
    }
    map
}

/// Reads the health answer until `condition` holds, within a deadline.
fn poll_health(tokentap: &Tokentap, what: &str, condition: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
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

#[test]
fn an_untrusted_collector_certificate_is_refused_and_the_spans_are_spooled() {
    let mock = Mock::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let (_, identity) = test_ca(&dir);
    let receiver = OtlpReceiver::start_tls(identity);
    // No CA file: only the public roots, which did not sign the receiver's certificate.
    let config = config_file(&dir, &receiver.http_endpoint(), "http/protobuf", "");
    let tokentap = Tokentap::start(&mock.url, &["--config", &config]);
    let resp = http1::post(tokentap.addr, CHAT, &[("content-type", "application/json")], &chat_body());
    assert_eq!(resp.status, 200);
    let health = poll_health(&tokentap, "the spans spooled", |h| {
        h["telemetry"]["otlp"]["spans"]["spooled"].as_u64().unwrap_or(0) > 0
    });
    let otlp = &health["telemetry"]["otlp"];
    assert_eq!(otlp["collector_reachable"], false, "{otlp}");
    assert!(otlp["last_error"].as_str().unwrap_or("").contains("TLS"), "{otlp}");
    assert!(receiver.received().traces.is_empty(), "nothing may arrive over an unverified connection");
}
