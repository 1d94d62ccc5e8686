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
use std::time::Duration;

use serde_json::Value;
use tokentap_e2e::mcp::{collect, excess_over_server, median, McpServer, Operations, Peer};
use tokentap_e2e::otlp_receiver::{attr_str, hex, Received};
use tokentap_e2e::process::run_sdk_script;
use tokentap_e2e::records::{JoinedBy, McpEra, McpExchange, McpOperationStatus, Outcome, Record, TurnStatus};
use tokentap_e2e::{Framing, OtlpReceiver, Script, ScriptedUpstream, Tokentap};

/// Most tokentap's operation may exceed the server's own time (two loopback hops).
const HOP_SLACK_NS: i64 = 5_000_000;

fn start_tokentap(server: &McpServer, receiver: &OtlpReceiver, dir: &tempfile::TempDir) -> Tokentap {
    let upstream = server.base();
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

fn run_mode(
    mode: &str,
    server: &McpServer,
    tokentap: &Tokentap,
) -> (Vec<Record>, Operations, tokentap_e2e::mcp::Logged) {
    server.clear_log();
    let mut feed = tokentap.feed();
    let url = format!("http://{}/mcp", tokentap.addr);
    let out = run_sdk_script("mcp_client.py", &["--url", &url, "--mode", mode, "--sleep-ms", "150"]);
    assert_eq!(out["tools"], serde_json::json!(["count", "fail", "sleep_ms"]), "{out}");
    assert_eq!(out["sleep_ms"]["is_error"], false, "{out}");
    assert_eq!(out["count"]["progress"], serde_json::json!([1.0, 2.0, 3.0]), "{out}");
    assert_eq!(out["fail"]["is_error"], true, "{out}");
    let logged = server.logged();
    assert!(logged.len() >= 5, "the server logged {logged:?}");
    let (records, ops) = collect(&mut feed, &logged);
    (records, ops, logged)
}

/// Every logged request: recorded, answered, its duration containing the server's; the tools'
/// own results right. Returns how much longer tokentap's duration is, per operation.
fn check_operations(ops: &Operations, logged: &tokentap_e2e::mcp::Logged) -> Vec<i64> {
    for key in logged.keys() {
        assert_ne!(ops[key].1.outcome, Outcome::ClientCancelled, "{key:?}");
    }
    let excess = excess_over_server(ops, logged);
    let tool = |name: &str| {
        ops.values()
            .map(|(op, _)| op)
            .find(|op| op.method == "tools/call" && op.name.as_deref() == Some(name))
            .unwrap()
            .clone()
    };
    let count = tool("count");
    assert_eq!(count.progress_notifications, 3, "{count:?}");
    let end_ns = count.end_ns.and_then(|e| i64::try_from(e).ok()).unwrap();
    assert!(count.first_progress_ns.unwrap() < end_ns, "{count:?}");
    assert!(tool("fail").is_error);
    assert!(tool("sleep_ms").end_ns.unwrap() >= 150_000_000);
    excess
}

/// The record's MCP exchange (an MCP route's records all have one).
fn exchange(record: &Record) -> &McpExchange {
    record.mcp.as_ref().unwrap_or_else(|| panic!("no MCP exchange: {record:?}"))
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
    let server = McpServer::start(Peer::Python);
    let receiver = OtlpReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let tokentap = start_tokentap(&server, &receiver, &dir);

    // The handshake era: initialize, a session, the GET stream.
    let (records, ops, logged) = run_mode("legacy", &server, &tokentap);
    let excess_legacy = check_operations(&ops, &logged);
    let (init, init_record) = &ops[&("initialize".to_string(), "1".to_string())];
    assert!(exchange(init_record).session_started, "{init_record:?}");
    let session = exchange(init_record).session_id.clone().expect("a session id");
    assert_eq!(init.status, McpOperationStatus::Answered);
    for (op, record) in ops.values() {
        let mcp = exchange(record);
        assert_eq!(mcp.session_id.as_deref(), Some(session.as_str()), "{op:?}");
        assert_eq!(mcp.era, Some(McpEra::Handshake), "{record:?}");
        assert!(mcp.protocol_version.as_deref().is_some_and(|v| v.starts_with("2025-")), "{record:?}");
    }
    // Notifications (initialized) and the GET stream are recorded as exchanges without operations.
    assert!(
        records
            .iter()
            .any(|r| r.mcp.as_ref().is_some_and(|m| m.client_notifications.other == 1) && r.status == Some(202)),
        "no notifications/initialized record"
    );

    // The 2026-07-28 revision: server/discover, no session.
    let (_, ops, logged) = run_mode("auto", &server, &tokentap);
    let excess_modern = check_operations(&ops, &logged);
    assert!(ops.contains_key(&("server/discover".to_string(), "1".to_string())), "{:?}", ops.keys());
    for (op, record) in ops.values() {
        let mcp = exchange(record);
        assert_eq!(mcp.era, Some(McpEra::Modern), "{op:?}: {record:?}");
        assert_eq!(mcp.protocol_version.as_deref(), Some("2026-07-28"), "{record:?}");
        assert!(mcp.session_id.is_none(), "{record:?}");
    }
    eprintln!("tokentap − server per operation (ns): legacy {excess_legacy:?}, modern {excess_modern:?}");
    let all: Vec<i64> = excess_legacy.iter().chain(&excess_modern).copied().collect();
    let median = median(&all);
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
    let record = feed.record_for("/batch");
    let mcp = exchange(&record);
    assert!(mcp.batch, "{mcp:?}");
    assert_eq!(mcp.operations.len(), 256, "{mcp:?}");
    assert_eq!(mcp.operations[0].status, McpOperationStatus::Answered);
    let skipped = &mcp.skipped;
    assert_eq!(skipped.operations_not_recorded, 4096 - 256, "{skipped:?}");
    // Everything past the first 4,096 elements is counted, not read (or cut at the request keep
    // limit, which the record says).
    let not_read = skipped.messages_not_read;
    assert!(not_read == 100_000 - 4096 || skipped.request_truncated, "{skipped:?}");
    assert_eq!(skipped.unmatched_responses, 1, "{skipped:?}");

    // Malformed JSON-RPC, answered by a parse error without an id.
    let error = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#.to_vec();
    upstream.register("/bad", script("application/json", 400, vec![error.clone()]));
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"#;
    let resp = tokentap_e2e::http1::post(tokentap.addr, "/bad", &headers, body);
    assert_eq!((resp.status, &resp.body), (400, &error));
    assert_eq!(upstream.received("/bad").unwrap(), body);
    let record = feed.record_for("/bad");
    let mcp = exchange(&record);
    assert_eq!(mcp.skipped.malformed, 1, "{record:?}");
    assert_eq!(mcp.skipped.unmatched_responses, 1, "{record:?}");
    assert!(mcp.operations.is_empty(), "{record:?}");

    // A GET stream of 10,000 server notifications in 100 pieces.
    let event = b"event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\r\n\r\n";
    let pieces: Vec<Vec<u8>> = (0..100).map(|_| event.repeat(100)).collect();
    let stream: Vec<u8> = pieces.concat();
    upstream.register("/stream", script("text/event-stream", 200, pieces));
    let resp = tokentap_e2e::http1::get(tokentap.addr, "/stream", &[("accept", "text/event-stream")]);
    assert_eq!((resp.status, resp.body.len()), (200, stream.len()));
    assert!(resp.body == stream, "the stream reached the client changed");
    let record = feed.record_for("/stream");
    let mcp = exchange(&record);
    assert!(mcp.get_stream, "{mcp:?}");
    assert_eq!(mcp.server_notifications.other, 4096, "{mcp:?}");
    assert_eq!(mcp.skipped.messages_not_read, 10_000 - 4096, "{mcp:?}");
}

/// openai-agents (unmodified) running a turn whose two tool calls execute on the MCP server, the
/// model being tokentap's mock: the turn's tool runs are joined to the MCP calls (by name, window
/// and arguments) and split into the tool server's time and the harness's, the server time
/// containing the server's own. Neither the model requests nor the MCP requests carry trace
/// context, so the MCP spans go in the turn's trace, under their `execute_tool` spans. The
/// dashboard's turn page shows each run's MCP call.
#[test]
fn an_agent_turn_splits_tool_runs_into_mcp_server_and_harness_time() {
    let server = McpServer::start(Peer::Python);
    let mock = tokentap_e2e::Mock::start(&[]);
    let receiver = OtlpReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokentap.toml");
    std::fs::write(
        &path,
        format!(
            "[[route]]\nprefix = \"/v1\"\nupstream = \"{}/v1\"\nprovider = \"openai\"\n\n\
             [[route]]\nprefix = \"/\"\nupstream = \"{}\"\nprovider = \"mcp\"\n\n\
             [otel]\nendpoint = \"{}\"\nprotocol = \"http/protobuf\"\nbatch_delay_ms = 50\n\
             retry_initial_ms = 50\nretry_max_ms = 200\nservice_name = \"tokentap-e2e\"\n",
            mock.url,
            server.base(),
            receiver.http_endpoint()
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
    let turn = feed.turn();
    assert_eq!(turn.status, TurnStatus::Complete, "{turn:?}");
    let runs = &turn.tool_runs;
    assert_eq!(runs.len(), 2, "{turn:?}");
    let logged = server.logged();
    let mut server_ms_total = 0.0;
    for run in runs {
        let mcp = run.mcp.as_ref().unwrap_or_else(|| panic!("no MCP call joined: {run:?}"));
        assert_eq!(Some(&mcp.tool), run.name.as_ref(), "{run:?}");
        assert_eq!(mcp.joined_by, [JoinedBy::NameExact, JoinedBy::Arguments, JoinedBy::Window], "{run:?}");
        let (server_ms, before, after) = (mcp.server_ms, mcp.harness_before_ms, mcp.harness_after_ms);
        assert!(before >= 0.0 && after >= 0.0, "{run:?}");
        let sum = server_ms + before + after;
        assert!((sum - run.duration_ms.unwrap()).abs() < 0.01, "the split adds up: {run:?}");
        // The MCP server's own time for that request, from its log.
        let line = &logged[&("tools/call".to_string(), mcp.jsonrpc_id.clone())];
        let own_ms = (line["out_ns"].as_i64().unwrap() - line["in_ns"].as_i64().unwrap()) as f64 / 1e6;
        assert!(server_ms >= own_ms, "{run:?}: the server's own time {own_ms} ms");
        eprintln!(
            "{:?}: server {server_ms:.3} ms (its own {own_ms:.3}), harness {before:.3} + {after:.3} ms",
            run.name
        );
        server_ms_total += server_ms;
    }
    let total = turn.totals.tool_server_ms.unwrap();
    assert!((total - server_ms_total).abs() < 0.01, "{turn:?}");

    // `tokentap explain` lays the split out per run; `tokentap report` has its percentiles.
    let data_dir = tokentap.data_dir.path().to_str().unwrap().to_string();
    let turn_id = turn.turn_id.as_str();
    let (status, text, err) = tokentap_e2e::process::run_tokentap(&["explain", turn_id, "--data-dir", &data_dir]);
    assert!(status.success(), "{err}");
    assert_eq!(text.matches("over MCP (tools/call ").count(), 2, "{text}");
    assert!(text.contains("joined by name_exact, arguments, window"), "{text}");
    let (status, markdown, err) =
        tokentap_e2e::process::run_tokentap(&["report", "--data-dir", &data_dir, "--include-warmup"]);
    assert!(status.success(), "{err}");
    assert!(markdown.contains("| tool run over MCP: tool server (ms) | 2 |"), "{markdown}");
    assert!(markdown.contains("| tool run over MCP: harness (ms) | 2 |"), "{markdown}");

    // The trace: each tools/call CLIENT span is the child of its run's execute_tool span, in the
    // turn's trace.
    let trace = turn.trace_id.clone();
    let received = receiver.wait_for(Duration::from_secs(30), "the turn's execute_tool and MCP spans", |r| {
        let in_turn =
            |prefix: &str| r.spans().iter().filter(|s| hex(&s.trace_id) == trace && s.name.starts_with(prefix)).count();
        in_turn("execute_tool ") == 2 && in_turn("tools/call ") == 2
    });
    let spans = received.spans();
    let in_turn: Vec<_> = spans.iter().filter(|s| hex(&s.trace_id) == trace).collect();
    for call in in_turn.iter().filter(|s| s.name.starts_with("tools/call ")) {
        let parent = in_turn.iter().find(|s| s.span_id == call.parent_span_id).expect("its parent in the turn");
        assert!(parent.name.starts_with("execute_tool "), "{} under {}", call.name, parent.name);
        assert_eq!(attr_str(&parent.attributes, "gen_ai.tool.name"), attr_str(&call.attributes, "gen_ai.tool.name"));
        assert!(call.start_time_unix_nano >= parent.start_time_unix_nano, "{}", call.name);
        assert!(call.end_time_unix_nano <= parent.end_time_unix_nano, "{}", call.name);
    }

    // The dashboard's turn page: the MCP part of each run in the gantt and the table.
    let out = tokentap_e2e::browser::run_dashboard(&serde_json::json!({
        "admin": format!("http://{}", tokentap.admin),
        "turn_ids": [turn_id],
    }));
    assert!(out["error"].is_null() && out["page_errors"] == serde_json::json!([]), "{out:#}");
    let page = &out["turn_pages"][turn_id];
    assert_eq!(page["mcp_bars"].as_array().map(Vec::len), Some(2), "{page}");
    assert_eq!(page["mcp_rows"], serde_json::json!(["joined", "joined"]), "{page}");
    for run in runs {
        let link = format!("#/r/{}", run.mcp.as_ref().unwrap().request_id);
        assert!(page["mcp_links"].as_array().unwrap().contains(&Value::String(link.clone())), "{link}: {page}");
    }
}
