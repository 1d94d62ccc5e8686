use proptest::prelude::*;

use super::*;

fn ctx(method: &str, content_type: &str) -> McpContext {
    McpContext {
        http_method: method.to_string(),
        status: Some(200),
        response_content_type: Some(content_type.to_string()),
        ..McpContext::default()
    }
}

/// A tool call answered on an SSE stream as the Python SDK's server writes it: CRLF, a priming
/// event with empty data, two progress notifications, a log message, then the response.
const TOOL_CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"count","arguments":{"n":2},"_meta":{"progressToken":7,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}"#;
const TOOL_STREAM: &str = "id: 1\r\ndata: \r\n\r\n: ping\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":7,\"progress\":1,\"total\":2}}\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"7\",\"progress\":2,\"total\":2}}\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"7\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}],\"isError\":false}}\r\n\r\n";

/// Feeds `stream` split at `cuts` (offsets), the piece ending at offset o stamped o.
fn feed(analyzer: &mut McpAnalyzer, stream: &[u8], cuts: &[usize]) {
    let mut start = 0;
    let mut cuts: Vec<usize> = cuts.iter().copied().filter(|&c| c > 0 && c < stream.len()).collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts.push(stream.len());
    for cut in cuts {
        analyzer.push_response(&stream[start..cut], cut as u64);
        start = cut;
    }
}

fn tool_call(cuts: &[usize]) -> McpExchange {
    let mut c = ctx("POST", "text/event-stream");
    c.session_id = Some("abc".into());
    c.protocol_version = Some("2025-11-25".into());
    let mut a = McpAnalyzer::new(c, McpLimits::default());
    a.request_body(TOOL_CALL.as_bytes(), false);
    feed(&mut a, TOOL_STREAM.as_bytes(), cuts);
    a.finish(false)
}

#[test]
fn a_tool_call_on_a_stream_ends_at_its_response_event() {
    let x = tool_call(&[]);
    assert_eq!(x.era, Some(McpEra::Handshake));
    assert_eq!(x.session_id.as_deref(), Some("abc"));
    assert_eq!(x.protocol_version.as_deref(), Some("2025-11-25"));
    assert_eq!(x.operations.len(), 1);
    let op = &x.operations[0];
    assert_eq!(op.method, "tools/call");
    assert_eq!(op.name.as_deref(), Some("count"));
    assert_eq!(op.request_id, "7");
    assert_eq!(op.status, McpOperationStatus::Answered);
    assert_eq!(op.progress_notifications, 2);
    assert_eq!(op.traceparent.as_deref(), Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));
    assert_eq!(op.request_bytes, TOOL_CALL.len() as u64);
    assert!(!op.is_error);
    assert_eq!(x.server_notifications, McpNotifications { progress: 2, other: 1, ..Default::default() });
    assert!(x.all_answered());
    assert!(!x.skipped.any());
}

#[test]
fn stamps_are_those_of_the_pieces_that_completed_each_message() {
    let stream = TOOL_STREAM.as_bytes();
    let first_progress = TOOL_STREAM.find("\"progress\":1").unwrap();
    let response = TOOL_STREAM.find("\"result\"").unwrap();
    // Cut just after the first progress event's blank line and just after the response's.
    let after = |from: usize| TOOL_STREAM[from..].find("\r\n\r\n").unwrap() + from + 4;
    let x = tool_call(&[after(first_progress), after(response)]);
    let op = &x.operations[0];
    assert_eq!(op.first_progress_ns, Some(after(first_progress) as i64));
    assert_eq!(op.end_ns, Some(after(response) as u64));
    assert_eq!(op.duration_ns(), Some(after(response) as u64));
    assert!(after(response) <= stream.len());
}

#[test]
fn byte_by_byte_reads_the_same_as_whole() {
    let whole = tool_call(&[]);
    let cuts: Vec<usize> = (1..TOOL_STREAM.len()).collect();
    let split = tool_call(&cuts);
    let strip = |mut x: McpExchange| {
        for op in &mut x.operations {
            op.end_ns = None;
            op.first_progress_ns = None;
        }
        x
    };
    assert_eq!(strip(whole), strip(split));
}

proptest! {
    #[test]
    fn random_splits_read_the_same_as_whole(cuts in proptest::collection::vec(0usize..700, 0..40)) {
        let whole = tool_call(&[]);
        let split = tool_call(&cuts);
        prop_assert_eq!(whole.operations.len(), split.operations.len());
        let (w, s) = (&whole.operations[0], &split.operations[0]);
        prop_assert_eq!(w.status, s.status);
        prop_assert_eq!(w.progress_notifications, s.progress_notifications);
        prop_assert_eq!(&whole.server_notifications, &split.server_notifications);
        // The response is complete only once its blank line arrived.
        prop_assert!(s.end_ns.unwrap() as usize >= TOOL_STREAM.rfind("}}").unwrap());
    }

    #[test]
    fn arbitrary_bytes_are_counted_never_fatal_and_cuts_change_nothing(
        body in proptest::collection::vec(any::<u8>(), 0..300),
        stream in proptest::collection::vec(any::<u8>(), 0..300),
        step in 1usize..17,
    ) {
        for content_type in ["text/event-stream", "application/json"] {
            let mut whole = McpAnalyzer::new(ctx("POST", content_type), McpLimits::default());
            whole.request_body(&body, false);
            whole.push_response(&stream, 1);
            let mut cut = McpAnalyzer::new(ctx("POST", content_type), McpLimits::default());
            cut.request_body(&body, false);
            stream.chunks(step).for_each(|c| cut.push_response(c, 1));
            prop_assert_eq!(whole.finish(false), cut.finish(false));
        }
    }
}

#[test]
fn a_json_answer_with_a_tool_error_and_a_jsonrpc_error() {
    let mut a = McpAnalyzer::new(ctx("POST", "application/json"), McpLimits::default());
    a.request_body(br#"{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"fail"}}"#, false);
    a.push_response(br#"{"jsonrpc":"2.0","id":"a-1","result":{"content":[],"isEr"#, 10);
    a.push_response(br#"ror":true}}"#, 20);
    let x = a.finish(false);
    let op = &x.operations[0];
    assert_eq!((op.is_error, op.end_ns, op.error_type().as_deref()), (true, Some(20), Some("tool_error")));
    assert_eq!(op.request_id, "a-1");

    let mut a = McpAnalyzer::new(ctx("POST", "application/json"), McpLimits::default());
    a.request_body(br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope"}}"#, false);
    a.push_response(br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Unknown tool: nope"}}"#, 5);
    let op = a.finish(false).operations.remove(0);
    assert_eq!(op.error, Some(JsonRpcError { code: Some(-32602), message: "Unknown tool: nope".into() }));
    assert_eq!(op.error_type().as_deref(), Some("-32602"));
}

#[test]
fn initialize_sets_the_session_and_the_negotiated_version() {
    let mut c = ctx("POST", "text/event-stream");
    c.response_session_id = Some("s-1".into());
    let mut a = McpAnalyzer::new(c, McpLimits::default());
    a.request_body(
        br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        false,
    );
    a.push_response(
        b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}\n\n",
        9,
    );
    let x = a.finish(false);
    assert!(x.session_started);
    assert_eq!(x.session_id.as_deref(), Some("s-1"));
    // The request's offer is read first; the header or _meta would win over both.
    assert_eq!(x.protocol_version.as_deref(), Some("2025-11-25"));
    assert_eq!(x.era, Some(McpEra::Handshake));
}

#[test]
fn the_2026_revision_reads_the_version_from_meta() {
    let mut a = McpAnalyzer::new(ctx("POST", "application/json"), McpLimits::default());
    a.request_body(
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        false,
    );
    a.push_response(br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"resultType":"complete"}}"#, 3);
    let x = a.finish(false);
    assert_eq!(x.era, Some(McpEra::Modern));
    assert_eq!(x.protocol_version.as_deref(), Some("2026-07-28"));
    assert_eq!(x.operations[0].result_type, None);
}

#[test]
fn notifications_and_responses_posted_by_the_client() {
    let mut c = ctx("POST", "");
    c.status = Some(202);
    let mut a = McpAnalyzer::new(c, McpLimits::default());
    a.request_body(
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4,"reason":"x"}}"#,
        false,
    );
    let x = a.finish(false);
    assert_eq!(x.client_notifications.cancelled, 1);
    assert_eq!(x.cancelled_request_ids, vec!["4".to_string()]);
    assert!(!x.all_answered());

    let mut a = McpAnalyzer::new(ctx("POST", ""), McpLimits::default());
    a.request_body(br#"{"jsonrpc":"2.0","id":0,"result":{}}"#, false);
    assert_eq!(a.finish(false).client_responses, 1);
}

#[test]
fn a_get_stream_counts_server_requests_and_list_changes() {
    let mut a = McpAnalyzer::new(ctx("GET", "text/event-stream"), McpLimits::default());
    a.push_response(
        b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"roots/list\"}\n\n",
        4,
    );
    let x = a.finish(false);
    assert!(x.get_stream);
    assert_eq!(x.server_notifications.list_changed, 1);
    assert_eq!(x.operations[0].direction, McpDirection::ServerToClient);
    assert_eq!(x.operations[0].start_ns, 4);
}

#[test]
fn a_batch_of_100000_requests_is_read_up_to_the_bounds() {
    let mut body = String::from("[");
    for i in 0..100_000 {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"ping"}}"#));
    }
    body.push(']');
    let mut a = McpAnalyzer::new(ctx("POST", "application/json"), McpLimits::default());
    a.request_body(body.as_bytes(), false);
    a.push_response(br#"[{"jsonrpc":"2.0","id":0,"result":{}},{"jsonrpc":"2.0","id":99999,"result":{}}]"#, 8);
    let x = a.finish(false);
    let limits = McpLimits::default();
    assert!(x.batch);
    assert_eq!(x.operations.len(), limits.max_operations);
    assert_eq!(x.skipped.operations_not_recorded as usize, limits.max_messages - limits.max_operations);
    assert_eq!(x.skipped.messages_not_read as usize, 100_000 - limits.max_messages);
    assert_eq!(x.operations[0].status, McpOperationStatus::Answered);
    assert_eq!(x.skipped.unmatched_responses, 1);
    assert!(!x.all_answered());
}

#[test]
fn an_endless_stream_is_bounded_and_malformed_input_counted() {
    let limits = McpLimits { max_message_bytes: 64, max_messages: 10, max_operations: 5 };
    let mut a = McpAnalyzer::new(ctx("GET", "text/event-stream"), limits);
    for i in 0..1000u64 {
        a.push_response(b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n", i);
    }
    a.push_response(b"data: not json\n\n", 1000);
    a.push_response(format!("data: {}\n\n", "x".repeat(100)).as_bytes(), 1001);
    let x = a.finish(true);
    assert_eq!(x.server_notifications.other, 10);
    assert_eq!(x.skipped.messages_not_read, 990);
    assert_eq!((x.skipped.malformed, x.skipped.oversized), (1, 1));
    assert!(x.skipped.response_truncated);

    let mut a = McpAnalyzer::new(ctx("POST", "application/json"), McpLimits::default());
    a.request_body(br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#, false);
    a.push_response(br#"{"jsonrpc":"2.0","id":99,"result":{}}"#, 1);
    let x = a.finish(false);
    assert_eq!((x.skipped.malformed, x.skipped.unmatched_responses), (1, 1));
}

#[test]
fn detection_by_header_or_by_path_and_body() {
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    assert!(looks_like_mcp("/x/mcp", [], body));
    assert!(looks_like_mcp("/x/mcp/", [], body));
    assert!(!looks_like_mcp("/v1/chat/completions", [], body));
    assert!(!looks_like_mcp("/mcp", [], br#"{"model":"x"}"#));
    assert!(looks_like_mcp("/anything", [("Mcp-Session-Id", "s")], b""));
}

/// An HTTP+SSE `GET` stream as the Python SDK's server writes it: the `endpoint` event, then the
/// answers to requests `POST`ed elsewhere (a progress notification, two responses).
const SSE_SESSION: &str = "event: endpoint\r\ndata: /messages/?session_id=9f8e7d\r\n\r\n: ping - 2026-01-01\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2024-11-05\",\"capabilities\":{}}}\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p-2\",\"progress\":1}}\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"2\",\"error\":{\"code\":-32602,\"message\":\"bad\"}}\r\n\r\n";

fn sse_session(cuts: &[usize]) -> McpExchange {
    let mut a = McpAnalyzer::new(ctx("GET", "text/event-stream"), McpLimits::default());
    feed(&mut a, SSE_SESSION.as_bytes(), cuts);
    a.finish(false)
}

fn without_stamps(mut x: McpExchange) -> McpExchange {
    for m in &mut x.foreign {
        match m {
            ForeignMessage::Response { t_ns, .. } | ForeignMessage::Progress { t_ns, .. } => *t_ns = 0,
        }
    }
    x
}

#[test]
fn an_http_sse_stream_names_its_session_and_hands_its_answers_over() {
    let x = sse_session(&[]);
    assert_eq!(x.transport, McpTransport::HttpSse);
    assert_eq!(x.endpoint.as_deref(), Some("/messages/?session_id=9f8e7d"));
    assert_eq!(x.session_id.as_deref(), Some("9f8e7d"));
    assert!(x.session_started && x.session_ended && x.get_stream);
    assert_eq!((x.skipped.malformed, x.skipped.unmatched_responses), (0, 2));
    let ends = |needle: &str| {
        (SSE_SESSION.find(needle).unwrap()
            + SSE_SESSION[SSE_SESSION.find(needle).unwrap()..].find("\r\n\r\n").unwrap()
            + 3) as u64
    };
    assert_eq!(
        x.foreign,
        vec![
            ForeignMessage::Response {
                request_id: "1".into(),
                t_ns: SSE_SESSION.len() as u64,
                is_error: false,
                error: None,
                result_type: None,
                bytes: 84,
            },
            ForeignMessage::Progress { token: "s:p-2".into(), t_ns: SSE_SESSION.len() as u64 },
            ForeignMessage::Response {
                request_id: "2".into(),
                t_ns: SSE_SESSION.len() as u64,
                is_error: false,
                error: Some(JsonRpcError { code: Some(-32602), message: "bad".into() }),
                result_type: None,
                bytes: 66,
            },
        ]
    );
    // Each message is stamped by the piece that completed its event.
    let every: Vec<usize> = (1..SSE_SESSION.len()).collect();
    let split = sse_session(&every);
    let stamps: Vec<u64> = split
        .foreign
        .iter()
        .map(|m| match m {
            ForeignMessage::Response { t_ns, .. } | ForeignMessage::Progress { t_ns, .. } => *t_ns,
        })
        .collect();
    assert_eq!(stamps, vec![ends("\"id\":1"), ends("p-2"), ends("\"id\":\"2\"")]);
    assert_eq!(without_stamps(split), without_stamps(x));
}

proptest! {
    #[test]
    fn an_http_sse_stream_reads_the_same_at_random_splits(cuts in proptest::collection::vec(0usize..400, 0..30)) {
        prop_assert_eq!(without_stamps(sse_session(&cuts)), without_stamps(sse_session(&[])));
    }
}

#[test]
fn requests_answered_202_or_on_a_broken_resumable_stream_are_detached() {
    // HTTP+SSE: the POST to the announced endpoint, answered 202.
    let mut c = ctx("POST", "");
    c.status = Some(202);
    c.path = "/messages?sessionId=0b1c".into();
    let mut a = McpAnalyzer::new(c, McpLimits::default());
    a.request_body(
        br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":5}}}"#,
        false,
    );
    let x = a.finish(false);
    assert_eq!((x.transport, x.session_id.as_deref()), (McpTransport::HttpSse, Some("0b1c")));
    assert_eq!(x.operations[0].status, McpOperationStatus::Detached);
    assert_eq!(x.operations[0].progress_token.as_deref(), Some("5"));
    assert_eq!(x.operations[0].error_type(), None);

    // Streamable HTTP: a stream with event ids that ends before the response; then the GET that
    // resumes it.
    let mut c = ctx("POST", "text/event-stream");
    c.session_id = Some("s".into());
    let mut a = McpAnalyzer::new(c, McpLimits::default());
    a.request_body(TOOL_CALL.as_bytes(), false);
    let cut = TOOL_STREAM.find("event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\"").unwrap();
    a.push_response(&TOOL_STREAM.as_bytes()[..cut], 9);
    let x = a.finish(false);
    assert_eq!(x.operations[0].status, McpOperationStatus::Detached);
    assert_eq!(x.operations[0].progress_notifications, 2);
    assert!(!x.all_answered());

    let mut c = ctx("GET", "text/event-stream");
    c = c.with_request_headers([("Mcp-Session-Id", "s"), ("Last-Event-ID", "1")]);
    let mut a = McpAnalyzer::new(c, McpLimits::default());
    a.push_response(&TOOL_STREAM.as_bytes()[cut..], 4);
    let x = a.finish(false);
    assert_eq!(x.resumed_after.as_deref(), Some("1"));
    assert_eq!(x.transport, McpTransport::StreamableHttp);
    assert!(matches!(&x.foreign[..], [ForeignMessage::Response { request_id, t_ns: 4, .. }] if request_id == "7"));
}

#[test]
fn sessions_in_query_strings() {
    assert_eq!(session_in_query("/messages/?session_id=abc").as_deref(), Some("abc"));
    assert_eq!(session_in_query("http://h/messages?x=1&sessionId=u-1#f").as_deref(), Some("u-1"));
    assert_eq!(session_in_query("/messages/?session_id="), None);
    assert_eq!(session_in_query("/messages/"), None);
    assert_eq!(id_key("7"), id_key("7"));
    assert_eq!(id_key("007"), "7");
}
