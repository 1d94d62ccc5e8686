//! Failures reach the client as they are, and the record says what happened.

use std::time::Duration;

use tokentap_e2e::{http1, Framing, Mock, Script, ScriptedUpstream, StreamedResponse, Tokentap};

const CHAT: &str = "/v1/chat/completions";
const BODY: &[u8] = br#"{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"hello"}]}"#;

#[test]
fn client_disconnect_cancels_the_upstream_and_is_recorded() {
    let mock = Mock::start(&[]);
    let mut tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let raw = http1::request_bytes(
        "POST",
        CHAT,
        &[
            ("content-type", "application/json"),
            ("x-mock-tokens", "500"),
            ("x-mock-ttft-ms", "10"),
            ("x-mock-itl-ms", "20"),
        ],
        BODY,
    );
    let mut streamed = StreamedResponse::open(tokentap.addr, &raw);
    streamed.read_head();
    assert_eq!(streamed.response.status, 200);
    streamed.read_body_until(600);
    streamed.abort();

    // The mock sees the upstream request cancelled long before its 10 s stream would end.
    let stats = mock.wait_stats("cancelled=1");
    assert_eq!(stats["completed"], 0, "{stats}");
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["outcome"], "client_cancelled", "{record}");
    assert_eq!(record["error"]["side"], "client");
    assert_eq!(record["analysis"]["flags"]["client_closed_after_end"], false, "{record}");
    // The log says it calmly, in tokentap's own words, and in plain text (stderr is a pipe here).
    tokentap.proc.wait_stderr("client went away after", std::time::Duration::from_secs(10));
    let stderr = tokentap.proc.stderr();
    assert!(!stderr.contains("Fail to proxy") && !stderr.contains("ERROR"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "colour codes in a log that is not a terminal: {stderr:?}");
}

/// Official SDKs close the response as soon as they read the stream's end marker (the openai SDK
/// on `[DONE]`), often before the upstream's own end of body: the answer was whole, so `ok`.
#[test]
fn a_client_that_closes_after_the_end_marker_got_a_whole_answer() {
    let cases: [(&str, &str, &[u8]); 2] = [
        (
            "/v1/chat/completions",
            "data: [DONE]",
            b"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: [DONE]\n\n",
        ),
        (
            "/v1/messages",
            "message_stop",
            b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"c\",\"content\":[],\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ),
    ];
    for (path, marker, body) in cases {
        let upstream = ScriptedUpstream::start();
        // The end marker now; the body's own end (the chunked terminator) only a minute later.
        upstream.register(
            path,
            Script {
                status: 200,
                headers: vec![("content-type".into(), "text/event-stream".into())],
                framing: Framing::Chunked,
                pieces: vec![(Duration::ZERO, body.to_vec()), (Duration::from_secs(60), Vec::new())],
            },
        );
        let tokentap = Tokentap::start(&upstream.url(), &[]);
        let mut feed = tokentap.feed();
        let raw = http1::request_bytes("POST", path, &[("content-type", "application/json")], BODY);
        let mut streamed = StreamedResponse::open(tokentap.addr, &raw);
        streamed.read_head();
        streamed.read_body_until(body.len());
        assert!(String::from_utf8_lossy(&streamed.response.body).contains(marker), "{path}");
        streamed.abort();
        let record = feed.next_record_for(path);
        assert_eq!(record["outcome"], "ok", "{path}: {record}");
        assert!(record["error"].is_null(), "{path}: {record}");
        assert_eq!(record["analysis"]["flags"]["client_closed_after_end"], true, "{path}: {record}");
        assert_eq!(record["analysis"]["flags"]["body_incomplete"], true, "{path}: {record}");
        assert_eq!(record["analysis"]["metrics"]["output_tokens"]["answer"], 1, "{path}: {record}");
    }
}

#[test]
fn upstream_reset_mid_stream_ends_the_client_response_abnormally() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let resp = http1::post(
        tokentap.addr,
        CHAT,
        &[
            ("content-type", "application/json"),
            ("x-mock-reset-at", "5"),
            ("x-mock-ttft-ms", "5"),
            ("x-mock-itl-ms", "5"),
        ],
        BODY,
    );
    assert_eq!(resp.status, 200);
    assert!(!resp.complete, "the client saw a clean end although the upstream reset");
    assert!(!resp.body.is_empty());
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["outcome"], "upstream_error", "{record}");
    assert_eq!(record["error"]["side"], "upstream");
    assert_eq!(mock.control("/_mock/stats").1["reset"], 1);
}

#[test]
fn upstream_429_and_500_pass_through_unchanged_without_retry() {
    for status in ["429", "500"] {
        let mock = Mock::start(&[]);
        let tokentap = Tokentap::start(&mock.url, &[]);
        let mut feed = tokentap.feed();
        let headers = [("content-type", "application/json"), ("x-mock-status", status)];
        let direct = http1::post(mock.addr, CHAT, &headers, BODY);
        let proxied = http1::post(tokentap.addr, CHAT, &headers, BODY);
        assert_eq!(proxied.status.to_string(), status);
        assert_eq!(proxied.status, direct.status);
        assert_eq!(proxied.body, direct.body, "error body changed");
        if status == "429" {
            assert_eq!(proxied.header("retry-after"), direct.header("retry-after"));
        }
        // Exactly one request each: the direct one and the proxied one. No retries.
        let stats = mock.control("/_mock/stats").1;
        assert_eq!(stats["requests"], 2, "status {status}: {stats}");
        let record = feed.next_record_for(CHAT);
        assert_eq!(record["outcome"], "http_error");
        assert_eq!(record["status"].to_string(), status);
    }
}

#[test]
fn connect_failure_is_a_clear_502_and_recorded() {
    let down = tokentap_e2e::upstream::RefusingPort::new();
    let tokentap = Tokentap::start(&format!("http://{}", down.addr()), &[]);
    let mut feed = tokentap.feed();
    let resp = http1::post(tokentap.addr, CHAT, &[("content-type", "application/json")], BODY);
    assert_eq!(resp.status, 502);
    let body = String::from_utf8_lossy(&resp.body);
    assert!(body.contains("tokentap_upstream_error"), "{body}");
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["outcome"], "upstream_connect_error", "{record}");
}

#[test]
fn unknown_dns_name_is_an_error_not_a_crash() {
    let tokentap = Tokentap::start("http://no-such-host.invalid", &[]);
    let mut feed = tokentap.feed();
    let resp = http1::post(tokentap.addr, CHAT, &[("content-type", "application/json")], BODY);
    assert_eq!(resp.status, 502);
    assert!(String::from_utf8_lossy(&resp.body).contains("DNS"), "{}", String::from_utf8_lossy(&resp.body));
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["outcome"], "upstream_connect_error", "{record}");
    // tokentap is still serving.
    let again = http1::post(tokentap.addr, CHAT, &[("content-type", "application/json")], BODY);
    assert_eq!(again.status, 502);
}

#[test]
fn malformed_stream_is_forwarded_untouched() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    // Huge padded events plus a mid-stream error: analysis must cope, forwarding must not change.
    let headers = [
        ("content-type", "application/json"),
        ("x-mock-event-bytes", "70000"),
        ("x-mock-tokens", "5"),
        ("x-mock-error-at", "3"),
        ("x-mock-ttft-ms", "1"),
        ("x-mock-itl-ms", "1"),
    ];
    let direct = http1::post(mock.addr, CHAT, &headers, BODY);
    let proxied = http1::post(tokentap.addr, CHAT, &headers, BODY);
    assert_eq!(direct.body, proxied.body);
    assert!(proxied.complete);
}
