use tokentap_analysis::mcp::{McpAnalyzer, McpContext, McpExchange, McpLimits, McpTransport};

use super::*;

/// The record of one exchange read by the MCP analysis: `response` split into `pieces` (each
/// stamped with its end offset), starting `t0_ms` after the epoch.
fn exchange(id: &str, t0_ms: u64, ctx: McpContext, request: &str, response: &str, cuts: &[usize]) -> Record {
    let mut a = McpAnalyzer::new(ctx, McpLimits::default());
    a.request_body(request.as_bytes(), false);
    let mut start = 0;
    for cut in cuts.iter().copied().chain([response.len()]).filter(|&c| c > 0 && c <= response.len()) {
        if cut > start {
            a.push_response(&response.as_bytes()[start..cut], cut as u64);
            start = cut;
        }
    }
    let mut r = crate::fixtures::stream_record(1);
    r.request_id = id.to_string();
    r.timeline.t0_unix_ns = t0_ms * 1_000_000;
    r.mcp = Some(a.finish(false));
    r
}

fn ctx(method: &str, path: &str, status: u16, content_type: &str) -> McpContext {
    McpContext {
        http_method: method.into(),
        status: Some(status),
        response_content_type: Some(content_type.into()),
        path: path.into(),
        ..McpContext::default()
    }
}

const ENDPOINT: &str = "event: endpoint\r\ndata: /messages/?session_id=abc123\r\n\r\n";
const PROGRESS: &str = "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":4,\"progress\":1}}\r\n\r\n";
const ANSWER_3: &str =
    "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[],\"isError\":false}}\r\n\r\n";
const ANSWER_4: &str =
    "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"content\":[],\"isError\":true}}\r\n\r\n";

fn post(id: &str, t0_ms: u64, body: &str) -> Record {
    exchange(id, t0_ms, ctx("POST", "/messages/?session_id=abc123", 202, ""), body, "", &[])
}

fn mcp(r: &Record) -> &McpExchange {
    r.mcp.as_ref().unwrap()
}

/// HTTP+SSE: the GET stream (t0 = 1000 ms) announces the endpoint; two POSTs (t0 = 1100 and
/// 1200 ms) are answered 202; their progress and responses come on the GET stream, whose record
/// arrives last (the stream ends with the session).
#[test]
fn http_sse_requests_pair_with_responses_on_the_get_stream() {
    let mut pending = McpPending::default();
    let mut p3 =
        post("post-3", 1_100, r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sleep_ms"}}"#);
    let mut p4 = post(
        "post-4",
        1_200,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"count","_meta":{"progressToken":4}}}"#,
    );
    for p in [&mut p3, &mut p4] {
        let x = mcp(p);
        assert_eq!((x.transport, x.session_id.as_deref()), (McpTransport::HttpSse, Some("abc123")));
        assert_eq!(x.operations[0].status, McpOperationStatus::Detached);
        assert_eq!(pending.observe(p), 0);
    }
    assert_eq!(pending.stats().waiting, 2);
    let stream = [ENDPOINT, PROGRESS, ANSWER_3, ANSWER_4].concat();
    // Stamps (ns since the GET's t0): the piece ends; the answers arrive ~300 and ~400 ms in.
    let ends: Vec<usize> = [ENDPOINT, PROGRESS, ANSWER_3]
        .iter()
        .scan(0, |n, e| {
            *n += e.len();
            Some(*n)
        })
        .collect();
    let mut get = exchange("get", 1_000, ctx("GET", "/sse", 200, "text/event-stream"), "", &stream, &ends);
    {
        let x = mcp(&get);
        assert_eq!(x.endpoint.as_deref(), Some("/messages/?session_id=abc123"));
        assert!(x.session_started && x.session_ended && x.get_stream);
        assert_eq!(x.skipped.unmatched_responses, 2);
        assert_eq!(x.foreign.len(), 3);
    }
    assert_eq!(pending.observe(&mut get), 2);
    let x = mcp(&get);
    assert_eq!(x.skipped.unmatched_responses, 0);
    assert!(x.foreign.is_empty());
    let (a, b) = (&x.operations[0], &x.operations[1]);
    assert_eq!((a.request_id.as_str(), a.name.as_deref()), ("3", Some("sleep_ms")));
    assert_eq!(a.request_record.as_deref(), Some("post-3"));
    // Started 100 ms after the GET's t0, ended when the piece carrying its response arrived.
    assert_eq!(a.start_ns, 100_000_000);
    assert_eq!(a.end_ns, Some(ends[2] as u64));
    assert_eq!(a.status, McpOperationStatus::Answered);
    assert_eq!(b.start_ns, 200_000_000);
    assert_eq!((b.is_error, b.progress_notifications), (true, 1));
    assert_eq!(b.first_progress_ns, Some(ends[1] as i64));
    assert_eq!(pending.stats(), PairingStats { paired: 2, ..PairingStats::default() });
    assert_eq!(pending.bytes(), 0);
}

/// The answer's record may reach the worker first (the GET stream ended before the POST's exchange
/// was complete): the answer waits, and the POST's record, when it comes, has the whole operation,
/// naming the exchange that carried the answer. Nothing is left waiting.
#[test]
fn an_answer_whose_request_comes_later_completes_it_on_the_request_record() {
    let mut pending = McpPending::default();
    let stream = [ENDPOINT, ANSWER_3].concat();
    let mut get = exchange("get", 1_000, ctx("GET", "/sse", 200, "text/event-stream"), "", &stream, &[ENDPOINT.len()]);
    assert_eq!(pending.observe(&mut get), 0);
    assert_eq!(pending.early_answers(), 1);
    assert!(mcp(&get).operations.is_empty());
    // Waiting for its request is not unmatched (the same count as when the request came first).
    assert_eq!(mcp(&get).skipped.unmatched_responses, 0);
    let mut p3 =
        post("post-3", 1_100, r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sleep_ms"}}"#);
    assert_eq!(pending.observe(&mut p3), 1);
    let op = &mcp(&p3).operations[0];
    assert_eq!(op.status, McpOperationStatus::Answered);
    assert_eq!(op.answer_record.as_deref(), Some("get"));
    // The answer arrived at the GET's t0 + the stream's length in ns; the POST began 100 ms later
    // than the GET, so its end, relative to the POST, is clamped at 0 when it would be negative.
    let end_unix = 1_000_000_000 + stream.len() as u64;
    assert_eq!(op.end_ns, Some(end_unix.saturating_sub(1_100_000_000)));
    let stats = pending.stats();
    assert_eq!((stats.paired, stats.answered_first, stats.waiting), (1, 1, 0));
    assert_eq!((pending.early_answers(), pending.bytes()), (0, 0));
}

/// Answers nobody asked for are dropped after their time, counted.
#[test]
fn answers_without_requests_expire() {
    let mut pending = McpPending::default();
    let stream = [ENDPOINT, ANSWER_3].concat();
    let mut get = exchange("get", 1_000, ctx("GET", "/sse", 200, "text/event-stream"), "", &stream, &[]);
    pending.observe(&mut get);
    assert_eq!(pending.early_answers(), 1);
    pending.expire(1_000_000_000 + EARLY_ANSWER_TTL_NS + 1_000_000);
    assert_eq!((pending.early_answers(), pending.bytes(), pending.stats().answers_dropped), (0, 0, 1));
}

/// Streamable HTTP resumption: the POST's stream (t0 = 0) carries a priming event with an id and
/// one progress notification, then ends; the client resumes with a GET carrying Last-Event-ID
/// (t0 = 500 ms), on which more progress and the response arrive. The operation is recorded
/// whole on the GET's record, its start before that record's t0.
#[test]
fn a_resumed_stream_completes_the_request_of_the_stream_it_resumes() {
    let mut pending = McpPending::default();
    let mut c = ctx("POST", "/mcp", 200, "text/event-stream");
    c.session_id = Some("s-1".into());
    c.protocol_version = Some("2025-11-25".into());
    let first = "id: 0\nretry: 10\ndata: \n\nid: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":4,\"progress\":1}}\n\n";
    let body =
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"count","_meta":{"progressToken":4}}}"#;
    let mut post = exchange("post", 0, c.clone(), body, first, &[]);
    let op = &mcp(&post).operations[0];
    assert_eq!((op.status, op.progress_notifications), (McpOperationStatus::Detached, 1));
    assert_eq!(op.first_progress_ns, Some(first.len() as i64));
    pending.observe(&mut post);

    let mut g = ctx("GET", "/mcp", 200, "text/event-stream");
    g.session_id = Some("s-1".into());
    g.last_event_id = Some("1".into());
    let rest = [PROGRESS.replace("\r\n", "\n").replacen("event", "id: 2\nevent", 1), ANSWER_4.into()].concat();
    let mut get = exchange("get", 500, g, "", &rest, &[]);
    assert_eq!(mcp(&get).resumed_after.as_deref(), Some("1"));
    assert_eq!(pending.observe(&mut get), 1);
    let op = &mcp(&get).operations[0];
    assert_eq!(op.request_record.as_deref(), Some("post"));
    assert_eq!(op.start_ns, -500_000_000);
    assert_eq!(op.first_progress_ns, Some(first.len() as i64 - 500_000_000));
    assert_eq!(op.progress_notifications, 2);
    assert_eq!(op.end_ns, Some(rest.len() as u64));
    assert_eq!(op.duration_ns(), Some(500_000_000 + rest.len() as u64));
}

/// The same answer in another session, or without a session, pairs with nothing; a stream
/// without event ids leaves its request unanswered (not resumable); the 2026 revision never
/// resumes.
#[test]
fn only_the_same_session_pairs_and_only_resumable_streams_detach() {
    let mut pending = McpPending::default();
    let mut p = post("p", 0, r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#);
    pending.observe(&mut p);
    let other = ENDPOINT.replace("abc123", "zzz");
    let mut get = exchange("g", 0, ctx("GET", "/sse", 200, "text/event-stream"), "", &(other + ANSWER_3), &[]);
    assert_eq!(pending.observe(&mut get), 0);
    // The answer waits for a request of its own session (counted there, not as unmatched)...
    assert_eq!(mcp(&get).skipped.unmatched_responses, 0);
    assert_eq!(pending.early_answers(), 1);
    // ...and the other session's stream ended: this session's request still waits.
    assert_eq!(pending.stats().waiting, 1);

    let mut c = ctx("POST", "/mcp", 200, "text/event-stream");
    c.session_id = Some("s".into());
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#;
    let no_ids = exchange("n", 0, c.clone(), body, "data: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n", &[]);
    assert_eq!(mcp(&no_ids).operations[0].status, McpOperationStatus::Unanswered);
    c.protocol_version = Some("2026-07-28".into());
    let modern = exchange("m", 0, c, body, "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n", &[]);
    assert_eq!(mcp(&modern).operations[0].status, McpOperationStatus::Unanswered);
}

/// Bounded: a session that ends drops its waiting requests, old ones expire, and the bytes stay
/// under the bound however many requests wait.
#[test]
fn waiting_requests_are_bounded_in_bytes_and_time() {
    let mut pending = McpPending::default();
    let name = "n".repeat(200);
    for i in 0..20_000u64 {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"{name}"}}}}"#);
        let mut p = post(&format!("p{i}"), i, &body);
        pending.observe(&mut p);
        assert!(pending.bytes() <= MAX_PENDING_BYTES);
    }
    let stats = pending.stats();
    assert!(stats.evicted > 0 && stats.waiting + stats.evicted == 20_000, "{stats:?}");
    assert!(pending.order.len() <= 4 * pending.waiting.len() + 1025);
    pending.expire(19_999 * 1_000_000 + PENDING_TTL_NS - 1);
    assert!(pending.stats().expired > 0 && pending.stats().waiting > 0);
    // The session's stream ends: everything else it had waiting goes.
    let mut get = exchange("g", 0, ctx("GET", "/sse", 200, "text/event-stream"), "", ENDPOINT, &[]);
    pending.observe(&mut get);
    assert_eq!((pending.stats().waiting, pending.bytes()), (0, 0));
    assert!(pending.stats().session_ended > 0);
}
