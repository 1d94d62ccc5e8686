//! MCP servers behind tokentap: the official MCP Python SDK's Streamable HTTP server (three tools:
//! one sleeps, one streams progress, one fails) reached through a `provider = "mcp"` route by the
//! SDK's own client, in its legacy handshake mode and in its default 2026-07-28 mode.
//!
//! The server logs its own time per JSON-RPC request (the request reaching its ASGI app → the body
//! write carrying the response, `tests/sdk/mcp_server.py`). tokentap's operation runs from the
//! request head arriving at tokentap to the response message arriving from the server, so it
//! contains the server's time (checked for every operation), and the difference is two loopback
//! hops: the median difference must stay within 5 ms. (Not every single one: on a machine whose
//! two cores are shared with compilers, one request can wait a scheduler slice inside tokentap or
//! the server; that wait is real and tokentap records it, it is no error of the stamps. What the
//! bound catches is an operation ended at the wrong moment, e.g. at the end of the SSE stream,
//! which the server closes milliseconds after the response event.)

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tokentap_e2e::otlp_receiver::{attr_str, Received};
use tokentap_e2e::process::{run_sdk_script, sdk_python, Proc};
use tokentap_e2e::{Framing, OtlpReceiver, RecordFeed, Script, ScriptedUpstream, Tokentap};

/// Most tokentap's operation may exceed the server's own time (two loopback hops).
const HOP_SLACK_NS: i64 = 5_000_000;

struct McpServer {
    _proc: Proc,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

fn start_server() -> McpServer {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.jsonl");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk").join("mcp_server.py");
    let mut cmd = Command::new(sdk_python());
    cmd.arg(script).arg("--log").arg(&log);
    let mut proc = Proc::spawn(cmd);
    let line = proc.wait_line("mcp server listening on ", Duration::from_secs(60));
    let url = line.trim_start_matches("mcp server listening on ").trim().to_string();
    McpServer { _proc: proc, url, log, _dir: dir }
}

/// The server's log lines, keyed by (method, id).
fn server_log(path: &PathBuf) -> Logged {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let id = match &v["id"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            ((v["method"].as_str().unwrap().to_string(), id), v)
        })
        .collect()
}

fn start_tokentap(server: &McpServer, receiver: &OtlpReceiver, dir: &tempfile::TempDir) -> Tokentap {
    let upstream = server.url.trim_end_matches("/mcp");
    let path = dir.path().join("tokentap.toml");
    let text = format!(
        "[[route]]\nprefix = \"/\"\nupstream = \"{upstream}\"\nprovider = \"mcp\"\n\n\
         [otel]\nendpoint = \"{}\"\nprotocol = \"http/protobuf\"\nbatch_delay_ms = 50\nmetrics_interval_ms = 500\n\
         retry_initial_ms = 50\nretry_max_ms = 200\nservice_name = \"tokentap-e2e\"\n",
        receiver.http_endpoint()
    );
    std::fs::write(&path, text).unwrap();
    Tokentap::start_with_args(&["--config", path.to_str().unwrap()])
}

/// A request as (method, JSON-RPC id).
type Key = (String, String);
/// Recorded operations by key, each with its record.
type Operations = BTreeMap<Key, (Value, Value)>;
/// The server's log lines by key.
type Logged = BTreeMap<Key, Value>;

/// Reads records from the feed until every request the server logged has an answered operation;
/// returns the records with MCP operations and the operations by (method, id).
fn collect(feed: &mut RecordFeed, logged: &Logged) -> (Vec<Value>, Operations) {
    let mut records = Vec::new();
    let mut ops = BTreeMap::new();
    while !logged.keys().all(|k| ops.contains_key(k)) {
        let record = feed.next_record();
        let Some(list) = record["mcp"]["operations"].as_array().cloned() else {
            records.push(record);
            continue;
        };
        for op in list {
            let key = (op["method"].as_str().unwrap().to_string(), op["request_id"].as_str().unwrap().to_string());
            ops.insert(key, (op, record.clone()));
        }
        records.push(record);
    }
    (records, ops)
}

fn run_mode(mode: &str, server: &McpServer, tokentap: &Tokentap) -> (Vec<Value>, Operations, Logged) {
    std::fs::write(&server.log, "").unwrap();
    let mut feed = tokentap.feed();
    let url = format!("http://{}/mcp", tokentap.addr);
    let out = run_sdk_script("mcp_client.py", &["--url", &url, "--mode", mode, "--sleep-ms", "150"]);
    assert_eq!(out["tools"], serde_json::json!(["count", "fail", "sleep_ms"]), "{out}");
    assert_eq!(out["sleep_ms"]["is_error"], false, "{out}");
    assert_eq!(out["count"]["progress"], serde_json::json!([1.0, 2.0, 3.0]), "{out}");
    assert_eq!(out["fail"]["is_error"], true, "{out}");
    let logged = server_log(&server.log);
    assert!(logged.len() >= 5, "the server logged {logged:?}");
    let (records, ops) = collect(&mut feed, &logged);
    (records, ops, logged)
}

/// Every logged request: recorded, answered, its duration containing the server's. Returns how
/// much longer tokentap's duration is, per operation.
fn check_operations(ops: &Operations, logged: &Logged) -> Vec<i64> {
    let mut excess = Vec::new();
    for (key, line) in logged {
        let (op, record) = &ops[key];
        assert_eq!(op["status"], "answered", "{key:?}: {op}");
        assert_ne!(record["outcome"], "client_cancelled", "{key:?}: {record}");
        assert_eq!(record["outcome"], "ok", "{key:?}: {record}");
        let server_ns = line["out_ns"].as_i64().unwrap() - line["in_ns"].as_i64().unwrap();
        let ours = op["end_ns"].as_i64().unwrap() - op["start_ns"].as_i64().unwrap();
        let diff = ours - server_ns;
        assert!(diff >= 0, "{key:?}: tokentap {ours} ns, server {server_ns} ns: {op}");
        assert_eq!(op["name"].as_str(), line["name"].as_str(), "{key:?}: {op}");
        assert_eq!(op["is_error"].as_bool().unwrap_or(false), line["is_error"].as_bool().unwrap(), "{key:?}: {op}");
        excess.push(diff);
    }
    let tool = |name: &str| {
        ops.values().map(|(op, _)| op).find(|op| op["method"] == "tools/call" && op["name"] == name).unwrap().clone()
    };
    let count = tool("count");
    assert_eq!(count["progress_notifications"], 3, "{count}");
    assert!(count["first_progress_ns"].as_u64().unwrap() < count["end_ns"].as_u64().unwrap(), "{count}");
    assert_eq!(tool("fail")["is_error"], true);
    assert!(tool("sleep_ms")["end_ns"].as_u64().unwrap() >= 150_000_000);
    excess
}

fn mcp_spans(received: &Received) -> Vec<(String, BTreeMap<String, String>)> {
    received
        .spans()
        .into_iter()
        .filter(|s| attr_str(&s.attributes, "mcp.method.name").is_some())
        .map(|s| {
            let attrs = s
                .attributes
                .iter()
                .filter_map(|kv| attr_str(&s.attributes, &kv.key).map(|v| (kv.key.clone(), v.to_string())))
                .collect();
            (s.name.clone(), attrs)
        })
        .collect()
}

#[test]
fn python_sdk_through_an_mcp_route_in_both_eras() {
    let server = start_server();
    let receiver = OtlpReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let tokentap = start_tokentap(&server, &receiver, &dir);

    // The handshake era: initialize, a session, the GET stream.
    let (records, ops, logged) = run_mode("legacy", &server, &tokentap);
    let excess_legacy = check_operations(&ops, &logged);
    let (init, init_record) = &ops[&("initialize".to_string(), "1".to_string())];
    assert_eq!(init_record["mcp"]["session_started"], true, "{init_record}");
    let session = init_record["mcp"]["session_id"].as_str().expect("a session id").to_string();
    assert_eq!(init["status"], "answered");
    for (op, record) in ops.values() {
        assert_eq!(record["mcp"]["session_id"], session.as_str(), "{op}");
        assert_eq!(record["mcp"]["era"], "handshake", "{record}");
        assert!(record["mcp"]["protocol_version"].as_str().is_some_and(|v| v.starts_with("2025-")), "{record}");
    }
    // Notifications (initialized) and the GET stream are recorded as exchanges without operations.
    assert!(
        records.iter().any(|r| r["mcp"]["client_notifications"]["other"] == 1 && r["status"] == 202),
        "no notifications/initialized record"
    );

    // The 2026-07-28 revision: server/discover, no session.
    let (_, ops, logged) = run_mode("auto", &server, &tokentap);
    let excess_modern = check_operations(&ops, &logged);
    assert!(ops.contains_key(&("server/discover".to_string(), "1".to_string())), "{:?}", ops.keys());
    for (op, record) in ops.values() {
        assert_eq!(record["mcp"]["era"], "modern", "{op}: {record}");
        assert_eq!(record["mcp"]["protocol_version"], "2026-07-28", "{record}");
        assert!(record["mcp"]["session_id"].is_null(), "{record}");
    }
    eprintln!("tokentap − server per operation (ns): legacy {excess_legacy:?}, modern {excess_modern:?}");
    let mut all: Vec<i64> = excess_legacy.iter().chain(&excess_modern).copied().collect();
    all.sort_unstable();
    let median = all[all.len() / 2];
    assert!(median <= HOP_SLACK_NS, "median excess {median} ns over the server's own time: {all:?}");

    // Spans per the MCP conventions, the operation histogram, and the legacy session's duration
    // (its client ends it with a DELETE).
    let received = receiver.wait_for(Duration::from_secs(30), "MCP spans and metrics", |r| {
        mcp_spans(r).iter().filter(|(name, _)| name == "tools/call sleep_ms").count() == 2
            && r.histogram_count("mcp.client.operation.duration") >= 10
            && r.histogram_count("mcp.client.session.duration") >= 1
    });
    let spans = mcp_spans(&received);
    let (_, sleep) =
        spans.iter().find(|(n, a)| n == "tools/call sleep_ms" && a.contains_key("mcp.session.id")).unwrap();
    assert_eq!(sleep["mcp.method.name"], "tools/call");
    assert_eq!(sleep["gen_ai.tool.name"], "sleep_ms");
    assert_eq!(sleep["gen_ai.operation.name"], "execute_tool");
    assert_eq!(sleep["jsonrpc.request.id"], "3");
    assert_eq!(sleep["mcp.session.id"], session);
    let (_, fail) = spans.iter().find(|(n, _)| n == "tools/call fail").unwrap();
    assert_eq!(fail["error.type"], "tool_error");
    assert!(spans.iter().any(|(n, _)| n == "initialize"), "{spans:?}");

    // MCP-only traffic in `tokentap report`: per-tool latency percentiles.
    let data_dir = tokentap.data_dir.path().to_str().unwrap().to_string();
    let (status, report, err) =
        tokentap_e2e::process::run_tokentap(&["report", "--data-dir", &data_dir, "--include-warmup", "--json"]);
    assert!(status.success(), "{err}");
    let report: Value = serde_json::from_str(&report).unwrap();
    let rows = report["mcp"]["rows"].as_array().unwrap_or_else(|| panic!("no MCP section: {report}"));
    let row = |method: &str, name: Option<&str>| {
        rows.iter()
            .find(|r| r["method"] == method && r["name"].as_str() == name)
            .unwrap_or_else(|| panic!("no row {method} {name:?}: {rows:?}"))
    };
    let sleep = row("tools/call", Some("sleep_ms"));
    assert_eq!((sleep["operations"].as_u64(), sleep["duration_ms"]["count"].as_u64()), (Some(2), Some(2)), "{sleep}");
    assert!(sleep["duration_ms"]["p50"].as_f64().unwrap() >= 150.0, "{sleep}");
    assert_eq!(row("tools/call", Some("fail"))["errors"], 2);
    assert_eq!(row("initialize", None)["operations"], 1);
    assert_eq!(report["mcp"]["sessions"], 1, "{}", report["mcp"]);
    let (status, markdown, err) =
        tokentap_e2e::process::run_tokentap(&["report", "--data-dir", &data_dir, "--include-warmup"]);
    assert!(
        status.success()
            && markdown.contains("## MCP operations")
            && markdown.contains("| tools/call | sleep\\_ms | 2 | 0 | 0 | 2 |"),
        "{err}{markdown}"
    );
}

fn script(content_type: &str, status: u16, pieces: Vec<Vec<u8>>) -> Script {
    Script {
        status,
        headers: vec![("content-type".into(), content_type.into())],
        framing: Framing::Chunked,
        pieces: pieces.into_iter().map(|p| (Duration::ZERO, p)).collect(),
    }
}

/// Bad input on an MCP route: a batch of 100,000 requests, malformed JSON-RPC, a long GET stream.
/// Every byte passes untouched both ways; the analysis reads up to its bounds and counts the rest.
#[test]
fn bad_input_is_forwarded_untouched_and_counted() {
    let upstream = ScriptedUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokentap.toml");
    std::fs::write(
        &path,
        format!("[[route]]\nprefix = \"/\"\nupstream = \"{}\"\nprovider = \"mcp\"\n", upstream.url()),
    )
    .unwrap();
    let tokentap = Tokentap::start_with_args(&["--config", path.to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let headers = [("content-type", "application/json"), ("accept", "application/json, text/event-stream")];

    // 100,000 requests in one batch (the 2025-03-26 revision allowed arrays).
    let mut batch = String::from("[");
    for i in 0..100_000 {
        batch.push_str(if i == 0 { "" } else { "," });
        batch.push_str(&format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"ping"}}"#));
    }
    batch.push(']');
    let answer = br#"[{"jsonrpc":"2.0","id":0,"result":{}},{"jsonrpc":"2.0","id":99999,"result":{}}]"#.to_vec();
    upstream.register("/batch", script("application/json", 200, vec![answer.clone()]));
    let resp = tokentap_e2e::http1::post(tokentap.addr, "/batch", &headers, batch.as_bytes());
    assert_eq!((resp.status, &resp.body), (200, &answer));
    assert!(upstream.received("/batch").unwrap() == batch.as_bytes(), "the batch reached the server changed");
    let record = feed.next_record_for("/batch");
    let mcp = &record["mcp"];
    assert_eq!(mcp["batch"], true, "{mcp}");
    assert_eq!(mcp["operations"].as_array().unwrap().len(), 256, "{mcp}");
    assert_eq!(mcp["operations"][0]["status"], "answered");
    let skipped = &mcp["skipped"];
    assert_eq!(skipped["operations_not_recorded"], 4096 - 256, "{skipped}");
    // Everything past the first 4,096 elements is counted, not read (or cut at the request keep
    // limit, which the record says).
    let not_read = skipped["messages_not_read"].as_u64().unwrap_or(0);
    assert!(not_read == 100_000 - 4096 || skipped["request_truncated"] == true, "{skipped}");
    assert_eq!(skipped["unmatched_responses"], 1, "{skipped}");

    // Malformed JSON-RPC, answered by a parse error without an id.
    let error = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#.to_vec();
    upstream.register("/bad", script("application/json", 400, vec![error.clone()]));
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"#;
    let resp = tokentap_e2e::http1::post(tokentap.addr, "/bad", &headers, body);
    assert_eq!((resp.status, &resp.body), (400, &error));
    assert_eq!(upstream.received("/bad").unwrap(), body);
    let record = feed.next_record_for("/bad");
    assert_eq!(record["mcp"]["skipped"]["malformed"], 1, "{record}");
    assert_eq!(record["mcp"]["skipped"]["unmatched_responses"], 1, "{record}");
    assert_eq!(record["mcp"]["operations"], serde_json::json!([]));

    // A GET stream of 10,000 server notifications in 100 pieces.
    let event = b"event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\r\n\r\n";
    let pieces: Vec<Vec<u8>> = (0..100).map(|_| event.repeat(100)).collect();
    let stream: Vec<u8> = pieces.concat();
    upstream.register("/stream", script("text/event-stream", 200, pieces));
    let resp = tokentap_e2e::http1::get(tokentap.addr, "/stream", &[("accept", "text/event-stream")]);
    assert_eq!((resp.status, resp.body.len()), (200, stream.len()));
    assert!(resp.body == stream, "the stream reached the client changed");
    let record = feed.next_record_for("/stream");
    let mcp = &record["mcp"];
    assert_eq!(mcp["get_stream"], true, "{mcp}");
    assert_eq!(mcp["server_notifications"]["other"], 4096, "{mcp}");
    assert_eq!(mcp["skipped"]["messages_not_read"], 10_000 - 4096, "{mcp}");
}

/// openai-agents (unmodified) running a turn whose two tool calls execute on the MCP server, the
/// model being tokentap's mock: the turn's tool runs are joined to the MCP calls and split into
/// the tool server's time and the harness's, the server time containing the server's own.
#[test]
fn an_agent_turn_splits_tool_runs_into_mcp_server_and_harness_time() {
    let server = start_server();
    let mock = tokentap_e2e::Mock::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokentap.toml");
    std::fs::write(
        &path,
        format!(
            "[[route]]\nprefix = \"/v1\"\nupstream = \"{}/v1\"\nprovider = \"openai\"\n\n\
             [[route]]\nprefix = \"/\"\nupstream = \"{}\"\nprovider = \"mcp\"\n",
            mock.url,
            server.url.trim_end_matches("/mcp")
        ),
    )
    .unwrap();
    let tokentap = Tokentap::start_with_args(&["--config", path.to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let out = run_sdk_script(
        "agent_mcp_openai_agents.py",
        &["--base-url", &format!("http://{}/v1", tokentap.addr), "--mcp-url", &format!("http://{}/mcp", tokentap.addr)],
    );
    let calls = out["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{out}");
    let turn = feed.next_turn();
    assert_eq!(turn["status"], "complete", "{turn}");
    let runs = turn["tool_runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{turn}");
    let logged = server_log(&server.log);
    let mut server_ms_total = 0.0;
    for run in runs {
        let mcp = &run["mcp"];
        assert_eq!(mcp["tool"], run["name"], "{run}");
        assert_eq!(mcp["joined_by"], serde_json::json!(["name_exact", "window"]), "{run}");
        let (server_ms, before, after) = (
            mcp["server_ms"].as_f64().unwrap(),
            mcp["harness_before_ms"].as_f64().unwrap(),
            mcp["harness_after_ms"].as_f64().unwrap(),
        );
        assert!(before >= 0.0 && after >= 0.0, "{run}");
        let sum = server_ms + before + after;
        assert!((sum - run["duration_ms"].as_f64().unwrap()).abs() < 0.01, "the split adds up: {run}");
        // The MCP server's own time for that request, from its log.
        let line = &logged[&("tools/call".to_string(), mcp["jsonrpc_id"].as_str().unwrap().to_string())];
        let own_ms = (line["out_ns"].as_i64().unwrap() - line["in_ns"].as_i64().unwrap()) as f64 / 1e6;
        assert!(server_ms >= own_ms, "{run}: the server's own time {own_ms} ms");
        eprintln!(
            "{}: server {server_ms:.3} ms (its own {own_ms:.3}), harness {before:.3} + {after:.3} ms",
            run["name"]
        );
        server_ms_total += server_ms;
    }
    let total = turn["totals"]["tool_server_ms"].as_f64().unwrap();
    assert!((total - server_ms_total).abs() < 0.01, "{turn}");

    // `tokentap explain` lays the split out per run; `tokentap report` has its percentiles.
    let data_dir = tokentap.data_dir.path().to_str().unwrap().to_string();
    let turn_id = turn["turn_id"].as_str().unwrap();
    let (status, text, err) = tokentap_e2e::process::run_tokentap(&["explain", turn_id, "--data-dir", &data_dir]);
    assert!(status.success(), "{err}");
    assert_eq!(text.matches("over MCP (tools/call ").count(), 2, "{text}");
    assert!(text.contains("joined by name_exact, window"), "{text}");
    let (status, markdown, err) =
        tokentap_e2e::process::run_tokentap(&["report", "--data-dir", &data_dir, "--include-warmup"]);
    assert!(status.success(), "{err}");
    assert!(markdown.contains("| tool run over MCP: tool server (ms) | 2 |"), "{markdown}");
    assert!(markdown.contains("| tool run over MCP: harness (ms) | 2 |"), "{markdown}");
}
