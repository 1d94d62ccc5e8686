//! More MCP peers behind tokentap, each reached by the official Python SDK's client:
//! - the TypeScript SDK's server (`@modelcontextprotocol/sdk`, tests/mcp-ts/mcp_server.mjs),
//!   Streamable HTTP: every byte passes untouched both ways (two wire taps witness it) and every
//!   operation is recorded with its duration containing the server's own;
//! - the older HTTP+SSE transport, served by the Python SDK (`MCPServer.sse_app`) and by the
//!   TypeScript SDK (`SSEServerTransport`): requests `POST`ed and answered 202, their responses on
//!   the session's `GET` stream, paired across the exchanges;
//! - a resumed stream: the TypeScript server with an event store closes a tool call's stream after
//!   its first progress notification, the client resumes it with `Last-Event-ID`, and the
//!   operation is recorded whole on the resumed stream's record.
//!
//! Durations are checked as in tests/tests/mcp.rs: each contains the server's own time (request
//! in → answer out, from its log), and the median difference stays within two loopback hops.

use tokentap_e2e::mcp::{assert_forwarded, bodies, collect, excess_over_server, median, McpServer, Operations, Peer};
use tokentap_e2e::process::run_sdk_script;
use tokentap_e2e::records::{McpEra, McpExchange, McpOperation, McpOperationStatus, McpTransport, Outcome, Record};
use tokentap_e2e::{Tokentap, WireTap};

/// Most tokentap's operation may exceed the server's own time (two loopback hops; here with a
/// wire tap on the upstream side, two more relays).
const HOP_SLACK_NS: i64 = 5_000_000;

fn tokentap_for(upstream: &str, dir: &tempfile::TempDir) -> Tokentap {
    let path = dir.path().join("tokentap.toml");
    std::fs::write(&path, format!("[[route]]\nprefix = \"/\"\nupstream = \"{upstream}\"\nprovider = \"mcp\"\n"))
        .unwrap();
    Tokentap::start_with_args(&["--config", path.to_str().unwrap()])
}

/// The Python SDK's client calling the three tools at `url`; checks what it got back.
fn run_client(url: &str, transport: &str) {
    let out = run_sdk_script(
        "mcp_client.py",
        &["--url", url, "--mode", "legacy", "--sleep-ms", "150", "--transport", transport],
    );
    assert_eq!(out["tools"], serde_json::json!(["count", "fail", "sleep_ms"]), "{out}");
    assert_eq!(out["sleep_ms"]["is_error"], false, "{out}");
    assert_eq!(out["count"]["progress"], serde_json::json!([1.0, 2.0, 3.0]), "{out}");
    assert_eq!(out["fail"]["is_error"], true, "{out}");
}

fn tool<'a>(ops: &'a Operations, name: &str) -> &'a (McpOperation, Record) {
    ops.values().find(|(op, _)| op.method == "tools/call" && op.name.as_deref() == Some(name)).unwrap()
}

/// The record's MCP exchange (an MCP route's records all have one).
fn exchange(record: &Record) -> &McpExchange {
    record.mcp.as_ref().unwrap_or_else(|| panic!("no MCP exchange: {record:?}"))
}

fn check_median(excess: &[i64]) {
    let m = median(excess);
    eprintln!("tokentap − server per operation (ns): {excess:?}");
    assert!(m <= HOP_SLACK_NS, "median excess {m} ns over the server's own time: {excess:?}");
}

#[test]
fn typescript_sdk_server_byte_exact_and_timed() {
    let server = McpServer::start(Peer::TypeScript);
    // client → tap → tokentap → tap → server: both taps keep what each side sent.
    let upstream_tap = WireTap::start(server.base().trim_start_matches("http://").parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let tokentap = tokentap_for(&upstream_tap.url(), &dir);
    let client_tap = WireTap::start(tokentap.addr);
    let mut feed = tokentap.feed();
    server.clear_log();
    run_client(&format!("{}{}", client_tap.url(), server.path()), "streamable");
    let logged = server.logged();
    assert!(logged.len() >= 5, "the server logged {logged:?}");
    let (_, ops) = collect(&mut feed, &logged);
    check_median(&excess_over_server(&ops, &logged));

    let (_, init_record) = &ops[&("initialize".to_string(), "1".to_string())];
    let session = exchange(init_record).session_id.clone().expect("a session id");
    for (op, record) in ops.values() {
        assert_eq!(exchange(record).session_id.as_deref(), Some(session.as_str()), "{op:?}");
        assert_eq!(exchange(record).era, Some(McpEra::Handshake), "{record:?}");
        assert_eq!(record.outcome, Outcome::Ok, "{record:?}");
    }
    let (count, _) = tool(&ops, "count");
    assert_eq!(count.progress_notifications, 3, "{count:?}");
    assert!(tool(&ops, "fail").0.is_error);

    // Byte-exact: the bodies the client sent are those the server received, and the bodies the
    // server sent are those the client received (streams the client closed: a prefix).
    let (sent, sent_cut) = bodies(&client_tap.from_client(), false);
    let (received, received_cut) = bodies(&upstream_tap.from_client(), false);
    assert!(sent_cut.is_empty(), "requests cut short");
    assert_forwarded(&sent, &received, &received_cut, "client → server");
    assert!(sent.iter().any(|b| b.windows(9).any(|w| w == b"tools/cal")), "no tools/call seen");
    // Streams the server had not ended when the client closed them (the GET stream, never; a
    // request's stream the client left once it had its answer) count as cut on both sides.
    let (served, served_cut) = bodies(&upstream_tap.from_target(), true);
    let (got, got_cut) = bodies(&client_tap.from_target(), true);
    let served_all: Vec<Vec<u8>> = served.iter().chain(&served_cut).cloned().collect();
    assert_forwarded(&served_all, &got, &got_cut, "server → client");
    assert!(served.iter().any(|b| b.windows(11).any(|w| w == b"counted to ")), "no count result seen");
}

/// HTTP+SSE: the session's operations are recorded on its `GET` stream's record, each naming the
/// `POST` that carried its request, which says the answer comes elsewhere.
#[test]
fn http_sse_transport_pairs_requests_with_answers_on_the_get_stream() {
    for peer in [Peer::PythonSse, Peer::TypeScriptSse] {
        let server = McpServer::start(peer);
        let dir = tempfile::tempdir().unwrap();
        let tokentap = tokentap_for(server.base(), &dir);
        let mut feed = tokentap.feed();
        server.clear_log();
        run_client(&format!("http://{}{}", tokentap.addr, server.path()), "sse");
        let logged = server.logged();
        assert!(logged.len() >= 5, "{peer:?}: the server logged {logged:?}");
        let (records, ops) = collect(&mut feed, &logged);
        check_median(&excess_over_server(&ops, &logged));
        let (sleep, stream) = tool(&ops, "sleep_ms");
        let x = exchange(stream);
        assert_eq!((x.transport, x.get_stream), (McpTransport::HttpSse, true), "{x:?}");
        let session = x.session_id.as_deref().expect("the session from the endpoint event");
        assert!(x.endpoint.as_deref().is_some_and(|e| e.contains(session)), "{x:?}");
        assert_eq!(x.skipped.unmatched_responses, 0, "{peer:?}: {x:?}");
        // Every answer came on the one stream: the operation is on the stream's record, or, when
        // that record reached the worker before the request's, on the request's record naming it.
        for (op, record) in ops.values() {
            match op.answer_record.as_deref() {
                Some(answer) => assert_eq!(answer, stream.request_id, "{peer:?}: {op:?}"),
                None => assert_eq!(record.request_id, stream.request_id, "{peer:?}: {op:?}"),
            }
        }
        // The POST that carried the request: answered 202, its operation detached.
        let post_id = sleep.request_record.as_deref().expect("the request's exchange");
        let post = records.iter().find(|r| r.request_id == post_id).expect("the POST's record");
        assert_eq!((post.method.as_str(), post.status), ("POST", Some(202)), "{post:?}");
        assert_eq!(exchange(post).session_id.as_deref(), Some(session), "{post:?}");
        assert_eq!(exchange(post).operations[0].status, McpOperationStatus::Detached, "{post:?}");
        assert!(sleep.start_ns > 0, "the stream began before the POST: {sleep:?}");
        let (count, _) = tool(&ops, "count");
        assert_eq!(count.progress_notifications, 3, "{peer:?}: {count:?}");
        assert!(count.first_progress_ns.unwrap() > count.start_ns, "{count:?}");
        let (status, health) = tokentap.admin_get("/_tokentap/api/health");
        assert_eq!(status, 200);
        assert!(health["mcp_pairing"]["paired"].as_u64().unwrap() >= 5, "{}", health["mcp_pairing"]);
        assert_eq!(health["mcp_pairing"]["waiting"], 0, "{}", health["mcp_pairing"]);
    }
}

/// Resumption: the `count` call's stream ends after its first progress notification; the client
/// comes back with `Last-Event-ID` and the rest arrives on that `GET`. The operation is recorded
/// whole there: started on the `POST` (before the `GET` began), its three progress notifications,
/// its end on the resumed stream.
#[test]
fn a_resumed_stream_completes_the_operation_it_resumes() {
    let server = McpServer::start(Peer::TypeScriptResumable);
    let dir = tempfile::tempdir().unwrap();
    let tokentap = tokentap_for(server.base(), &dir);
    let mut feed = tokentap.feed();
    server.clear_log();
    run_client(&format!("http://{}{}", tokentap.addr, server.path()), "streamable");
    let logged = server.logged();
    let (records, ops) = collect(&mut feed, &logged);
    check_median(&excess_over_server(&ops, &logged));
    let (count, resumed) = tool(&ops, "count");
    assert_eq!(resumed.method, "GET", "{resumed:?}");
    assert!(exchange(resumed).resumed_after.is_some(), "{resumed:?}");
    assert!(count.start_ns < 0, "the request came before the GET: {count:?}");
    assert_eq!(count.progress_notifications, 3, "{count:?}");
    let post_id = count.request_record.as_deref().expect("the request's exchange");
    let post = records.iter().find(|r| r.request_id == post_id).expect("the POST's record");
    let op = &exchange(post).operations[0];
    assert_eq!((op.status, op.progress_notifications), (McpOperationStatus::Detached, 1), "{post:?}");
    assert_eq!(exchange(post).session_id, exchange(resumed).session_id);
    // The other calls were answered on their own streams.
    for name in ["sleep_ms", "fail"] {
        let (op, record) = tool(&ops, name);
        assert!(op.request_record.is_none() && record.method == "POST", "{op:?}");
    }
}
