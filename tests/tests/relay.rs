//! tokentap's relay of an HTTP/1.1 exchange (one loop per exchange): the request body and the
//! answer travel at once, and the upstream connection is reused only when both ended whole.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use tokentap_e2e::http1::read_head;
use tokentap_e2e::Tokentap;

fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One message: its head and its `content-length` body.
fn read_message(conn: &mut TcpStream) -> (String, Vec<u8>) {
    let head = read_head(conn);
    let mut body = vec![0u8; content_length(&head)];
    conn.read_exact(&mut body).expect("the whole body before the deadline");
    (head, body)
}

/// An upstream that answers as soon as it has a request's head and reads the body after: the
/// answer reaches the client while the client is still sending its body, the rest of the body
/// still reaches the upstream, and the one upstream connection then serves the next request.
#[test]
fn an_answer_that_comes_before_the_request_body_ends_is_relayed_while_the_body_streams() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (bodies, received) = mpsc::channel::<Vec<u8>>();
    let server = std::thread::spawn(move || {
        // One connection only: the second request must come on it.
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        for _ in 0..2 {
            let head = read_head(&mut conn);
            let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}";
            conn.write_all(answer.as_bytes()).unwrap();
            let mut body = vec![0u8; content_length(&head)];
            conn.read_exact(&mut body).unwrap();
            bodies.send(body).unwrap();
        }
    });
    let tokentap = Tokentap::start(&url, &[]);
    let mut feed = tokentap.feed();
    let mut client = TcpStream::connect(tokentap.addr).unwrap();
    // Deadlines, so a relay that waits for the whole body before reading the answer fails the
    // test instead of hanging it.
    client.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).unwrap();
    client.write_all(&body[..1000]).unwrap();
    // The answer, with most of the body not sent yet.
    let (answer_head, answer) = read_message(&mut client);
    assert!(answer_head.starts_with("HTTP/1.1 200"), "{answer_head}");
    assert_eq!(answer, b"{\"ok\":true}");
    // An answer complete before the request's body: pingora's server session closes the client's
    // connection after it (the next request comes on another).
    assert!(answer_head.to_ascii_lowercase().contains("connection: close"), "{answer_head}");
    client.write_all(&body[1000..]).unwrap();
    let got = received.recv_timeout(Duration::from_secs(30)).expect("the whole body upstream");
    assert!(got == body, "the body differs upstream ({} bytes of {})", got.len(), body.len());
    // Recorded after the relay gave the upstream connection back: the next request, on a new
    // client connection, is sent on that same upstream connection (pooled, the body written whole).
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!((record["outcome"].as_str(), record["status"].as_u64()), (Some("ok"), Some(200)), "{record:#}");
    let mut client = TcpStream::connect(tokentap.addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let second = "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n\
                  content-length: 2\r\nconnection: close\r\n\r\n{}";
    client.write_all(second.as_bytes()).unwrap();
    let (answer_head, answer) = read_message(&mut client);
    assert!(answer_head.starts_with("HTTP/1.1 200"), "{answer_head}");
    assert_eq!(answer, b"{\"ok\":true}");
    assert_eq!(received.recv_timeout(Duration::from_secs(30)).expect("the second body"), b"{}");
    server.join().unwrap();
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!((record["outcome"].as_str(), record["status"].as_u64()), (Some("ok"), Some(200)), "{record:#}");
    assert_eq!(record["timeline"]["connection"]["reused"], true, "{record:#}");
    // The relay's pool counted the reuse. Request 2's connection was given back after its answer:
    // kept idle, or found closed by then (the upstream's thread ended and closed it).
    let (status, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(status, 200);
    let pool = &health["upstream"]["pool"];
    assert_eq!(pool["reused"], 1, "{pool}");
    let kept_or_closed = pool["idle"].as_u64().zip(pool["closed_by_upstream"].as_u64()).map(|(i, c)| i + c);
    assert_eq!(kept_or_closed, Some(1), "{pool}");
    assert_eq!((pool["closed_pool_full"].as_u64(), pool["closed_idle_timeout"].as_u64()), (Some(0), Some(0)), "{pool}");
    assert!(pool["max_idle"].as_u64() > Some(0), "{pool}");
}

/// An upstream that answers with a streamed head and the given pieces of a chunked body, each
/// after its delay, then (`end`) the body's end or (no end) silence until tokentap closes.
fn streaming_upstream(pieces: Vec<(Duration, &'static str)>, end: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let head = read_head(&mut conn);
        let mut body = vec![0u8; content_length(&head)];
        conn.read_exact(&mut body).unwrap();
        conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            .unwrap();
        for (delay, piece) in pieces {
            // The answer's pace is what the test is about (pieces apart by less, or more, than
            // the read timeout), not a wait for tokentap.
            std::thread::sleep(delay);
            conn.write_all(format!("{:x}\r\n{piece}\r\n", piece.len()).as_bytes()).unwrap();
        }
        if end {
            conn.write_all(b"0\r\n\r\n").unwrap();
        }
        // Holds the connection until tokentap closes it.
        let mut buf = [0u8; 1024];
        while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
    });
    url
}

/// Sends a streaming chat request and reads the answer until tokentap closes the connection or
/// the answer's chunked body ends.
fn stream_answer(tokentap: &Tokentap) -> String {
    let mut client = TcpStream::connect(tokentap.addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    client.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"\r\n0\r\n\r\n") {
        match client.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the answer neither ended nor was cut: {e}"),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn read_timeout_config(seconds: u64) -> tempfile::NamedTempFile {
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), format!("[timeouts]\nread_s = {seconds}\n")).unwrap();
    config
}

/// A streamed answer that stops coming ends at `timeouts.read_s` after its last piece: the client
/// has what came and a cut body (no chunked end), the record says the upstream timed out.
#[test]
fn an_answer_whose_pieces_stop_coming_ends_at_the_read_timeout() {
    let first = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n";
    let url = streaming_upstream(vec![(Duration::ZERO, first)], false);
    let config = read_timeout_config(1);
    let tokentap = Tokentap::start(&url, &["--config", config.path().to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let asked = std::time::Instant::now();
    let got = stream_answer(&tokentap);
    // A timer cannot fire early: the exchange lasted at least the read timeout.
    assert!(asked.elapsed() >= Duration::from_secs(1), "cut after {:?}", asked.elapsed());
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains(first), "{got}");
    assert!(!got.ends_with("\r\n0\r\n\r\n"), "a cut answer must not look complete: {got}");
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!(record["outcome"], "upstream_timeout", "{record}");
    assert_eq!(record["error"]["kind"], "ReadTimedout", "{record}");
    assert_eq!(record["timeline"]["chunk_count"], 1, "{record}");
}

/// The read timeout is per wait, not per answer: pieces 400 ms apart for 2 s pass a 1 s timeout
/// whole.
#[test]
fn an_answer_whose_pieces_keep_coming_outlives_the_read_timeout() {
    let piece = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
    let url = streaming_upstream(vec![(Duration::from_millis(400), piece); 5], true);
    let config = read_timeout_config(1);
    let tokentap = Tokentap::start(&url, &["--config", config.path().to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let got = stream_answer(&tokentap);
    assert!(got.ends_with("\r\n0\r\n\r\n"), "{got}");
    assert_eq!(got.matches(piece).count(), 5, "{got}");
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!(record["outcome"], "ok", "{record}");
    assert_eq!(record["timeline"]["chunk_count"], 5, "{record}");
}

/// An HTTP/1.0 client (nginx's `proxy_pass` by default, ApacheBench) is relayed too, and gets
/// what HTTP/1.0 can read: an answer with a length keeps the connection it asked to keep; a
/// chunked answer arrives as its payload with no transfer coding and ends with the connection;
/// an informational head (`103 Early Hints`) is not passed on. Both requests go through the
/// relay: the second is sent on the upstream connection the first gave back to its pool.
#[test]
fn an_http10_client_gets_no_transfer_coding_and_no_informational_head() {
    const EVENTS: [&str; 3] = ["data: {\"n\":1}\n\n", "data: {\"n\":2}\n\n", "data: [DONE]\n\n"];
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (heads, received) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        for n in 0..2 {
            let head = read_head(&mut conn);
            let mut body = vec![0u8; content_length(&head)];
            conn.read_exact(&mut body).unwrap();
            heads.send(head).unwrap();
            if n == 0 {
                conn.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}",
                )
                .unwrap();
                continue;
            }
            let mut answer = String::from(
                "HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n\
                 HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
            );
            for event in EVENTS {
                answer.push_str(&format!("{:x}\r\n{event}\r\n", event.len()));
            }
            answer.push_str("0\r\n\r\n");
            conn.write_all(answer.as_bytes()).unwrap();
        }
        let mut buf = [0u8; 1024];
        while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
    });
    let tokentap = Tokentap::start(&url, &[]);
    let mut feed = tokentap.feed();
    let mut client = TcpStream::connect(tokentap.addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let request = |body: &str| {
        format!(
            "POST /v1/chat/completions HTTP/1.0\r\nhost: t\r\nconnection: keep-alive\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    };

    client.write_all(request(r#"{"model":"m","messages":[]}"#).as_bytes()).unwrap();
    let (head, body) = read_message(&mut client);
    let lower = head.to_ascii_lowercase();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(lower.contains("connection: keep-alive") && !lower.contains("transfer-encoding"), "{head}");
    assert_eq!(body, b"{\"ok\":true}");
    let upstream_head = received.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(upstream_head.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"), "{upstream_head}");
    feed.next_record_for("/v1/chat/completions");

    // The same client connection, kept as asked.
    client.write_all(request(r#"{"model":"m","stream":true,"messages":[]}"#).as_bytes()).unwrap();
    let answer = tokentap_e2e::http1::read_to_close(&mut client, Duration::from_secs(60));
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
    let lower = head.to_ascii_lowercase();
    assert!(head.starts_with("HTTP/1.1 200"), "no informational head first: {answer}");
    assert!(!lower.contains("transfer-encoding") && !lower.contains("content-length"), "{head}");
    assert!(lower.contains("connection: close"), "{head}");
    assert_eq!(body, EVENTS.concat(), "the payload, without chunk framing");
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!((record["outcome"].as_str(), record["status"].as_u64()), (Some("ok"), Some(200)), "{record:#}");

    let (status, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(status, 200);
    assert_eq!(health["upstream"]["pool"]["reused"], 1, "{health}");
}
