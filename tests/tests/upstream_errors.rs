//! A hostile upstream's bytes never reach the client's 502 or the record.

use tokentap_e2e::{http1, Tokentap};

const CHAT: &str = "/v1/chat/completions";
const BODY: &[u8] = br#"{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"hello"}]}"#;

/// An upstream that answers every connection with `head` and closes. It reads the whole request
/// first (head and `content-length` body, which may come in separate writes): a socket closed
/// with bytes unread sends a reset instead of an end, and tokentap would then see a read error
/// rather than the close the test is about.
fn hostile_upstream(head: &'static [u8]) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(30)));
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !http1::is_whole_request(&request) {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = conn.write_all(head);
        }
    });
    addr
}

#[test]
fn a_garbage_response_head_is_a_502_that_quotes_none_of_it() {
    let heads: [&'static [u8]; 4] = [
        b"HTTP/1.1 200 OK\r\nX-Leak UPSTREAM-SECRET-1 no colon\r\n\r\n",
        b"SSH-2.0-UPSTREAM-SECRET-2\r\n\r\n",
        b"HTTP/1.1 2\xc3\xa9\xc3\xa9 UPSTREAM-SECRET-3 \xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: UPSTREAM-SECRET-4\r\n\r\n",
    ];
    for head in heads {
        let upstream = hostile_upstream(head);
        let tokentap = Tokentap::start(&format!("http://{upstream}"), &[]);
        let mut feed = tokentap.feed();
        let resp = http1::post(tokentap.addr, CHAT, &[("content-type", "application/json")], BODY);
        let body = String::from_utf8_lossy(&resp.body).into_owned();
        let record = feed.next_record_for(CHAT);
        assert_eq!(resp.status, 502, "{body}");
        {
            let error: serde_json::Value = serde_json::from_str(&body).unwrap();
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.starts_with("tokentap: upstream error "), "{message}");
            assert!(message.len() < 120, "{message}");
        }
        assert!(!body.contains("UPSTREAM-SECRET"), "{body}");
        assert!(!record.to_string().contains("UPSTREAM-SECRET"), "{record}");
    }
}

#[test]
fn an_unsolicited_switch_of_protocols_is_a_502_not_a_tunnel() {
    let upstream = hostile_upstream(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nTUNNELLED-BYTES",
    );
    let tokentap = Tokentap::start(&format!("http://{upstream}"), &[]);
    let mut feed = tokentap.feed();
    let resp = http1::post(tokentap.addr, CHAT, &[("content-type", "application/json")], BODY);
    let body = String::from_utf8_lossy(&resp.body).into_owned();
    assert_eq!(resp.status, 502, "{body}");
    assert!(!body.contains("TUNNELLED-BYTES"), "{body}");
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["outcome"], "upstream_error", "{record}");
    assert_ne!(record["status"], 101, "{record}");
}

/// An upstream that answers with informational heads without end gets a 502 after a few, with
/// the reason recorded, not an endless relay of them (the same cap as a WebSocket handshake's).
#[test]
fn endless_informational_heads_on_a_plain_request_are_a_502_after_a_few() {
    use std::io::{Read, Write};
    let heads: &'static [u8] = b"HTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\n".repeat(1000).leak();
    let upstream = hostile_upstream(heads);
    let tokentap = Tokentap::start(&format!("http://{upstream}"), &[]);
    let mut feed = tokentap.feed();
    let mut client = std::net::TcpStream::connect(tokentap.addr).unwrap();
    client.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let request = format!(
        "POST {CHAT} HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        BODY.len()
    );
    client.write_all(request.as_bytes()).unwrap();
    client.write_all(BODY).unwrap();
    let mut got = Vec::new();
    let _ = client.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    let heads: Vec<&str> = got.split("\r\n\r\n").filter_map(|part| part.lines().next()).collect();
    let early = heads.iter().filter(|h| h.starts_with("HTTP/1.1 103")).count();
    assert!((1..=16).contains(&early), "{early} informational heads passed on");
    assert!(heads.iter().any(|h| h.starts_with("HTTP/1.1 502")), "{got}");
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["outcome"], "upstream_error", "{record}");
    let message = record["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("informational"), "{record}");
}

/// A body whose framing breaks mid-answer: the client gets what came before, then an abnormal
/// end (never a clean one, never the bytes after the break), and the record names the break.
#[test]
fn a_broken_body_framing_ends_the_answer_abnormally_after_what_came_before() {
    const HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n";
    const EVENT: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
    let cases: [(String, &str); 4] = [
        // A chunk size that is no number.
        (
            format!(
                "{HEAD}transfer-encoding: chunked\r\n\r\n{:x}\r\n{EVENT}\r\nzz\r\nUPSTREAM-SECRET\r\n",
                EVENT.len()
            ),
            "InvalidChunk",
        ),
        // A chunk's data not followed by CRLF.
        (
            format!("{HEAD}transfer-encoding: chunked\r\n\r\n{:x}\r\n{EVENT}UPSTREAM-SECRET\r\n", EVENT.len()),
            "InvalidChunk",
        ),
        // A size line without end.
        (
            format!("{HEAD}transfer-encoding: chunked\r\n\r\n{:x}\r\n{EVENT}\r\n1;{}", EVENT.len(), "x".repeat(20_000)),
            "InvalidChunk",
        ),
        // Fewer bytes than the length said, then the close.
        (format!("{HEAD}content-length: {}\r\n\r\n{EVENT}", EVENT.len() + 100), "ConnectionClosed"),
    ];
    for (answer, kind) in cases {
        let upstream = hostile_upstream(answer.into_bytes().leak());
        let tokentap = Tokentap::start(&format!("http://{upstream}"), &[]);
        let mut feed = tokentap.feed();
        let resp = http1::post(tokentap.addr, CHAT, &[("content-type", "application/json")], BODY);
        assert_eq!(resp.status, 200, "{kind}");
        assert!(!resp.complete, "{kind}: the client saw a clean end");
        assert_eq!(resp.body, EVENT.as_bytes(), "{kind}");
        let record = feed.next_record_for(CHAT);
        assert_eq!(record["outcome"], "upstream_error", "{kind}: {record}");
        assert_eq!(record["error"]["kind"], kind, "{record}");
        assert_eq!(record["error"]["side"], "upstream", "{record}");
        assert!(!record.to_string().contains("UPSTREAM-SECRET"), "{record}");
    }
}

/// An upstream that answers with more bytes than its answer's framing says (here a whole second
/// response) and keeps the connection open: those bytes are never the answer to the client's
/// next request. The connection is not reused; the next request gets its own answer.
#[test]
fn bytes_after_an_answer_never_answer_the_next_request() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for (n, mut conn) in listener.incoming().map_while(Result::ok).enumerate() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let body = format!("{{\"answer\":{n}}}");
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}\
                 HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nSMUGGLED",
                body.len()
            );
            let _ = conn.write_all(answer.as_bytes());
            open.push(conn);
        }
    });
    let tokentap = Tokentap::start(&format!("http://{upstream}"), &[]);
    let mut client = std::net::TcpStream::connect(tokentap.addr).unwrap();
    client.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let request = http1::keep_alive_request("POST", CHAT, &[("content-type", "application/json")], BODY);
    for n in 0..3 {
        let resp = http1::exchange(&mut client, &request);
        assert_eq!(resp.status, 200);
        assert_eq!(String::from_utf8_lossy(&resp.body), format!("{{\"answer\":{n}}}"), "request {n}");
    }
    let (status, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(status, 200);
    assert_eq!(health["upstream"]["pool"]["reused"], 0, "{health}");
}
