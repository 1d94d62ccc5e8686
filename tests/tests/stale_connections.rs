//! A pooled upstream connection the server closed while idle (without `Connection: close`) is
//! retried once on a fresh connection when the request provably never reached the server; a
//! server that read the request and closed without answering is still a 502.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

use tokentap_e2e::{http1, Tokentap};

const CHAT: &str = "/v1/chat/completions";
const BODY: &[u8] = br#"{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}"#;
const ANSWER: &[u8] = br#"{"choices":[{"message":{"role":"assistant","content":"ok"}}]}"#;

/// Reads one request (head and `content-length` body) off `conn`; false when the peer closed first.
fn read_request(conn: &mut TcpStream) -> bool {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length: usize =
                head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap());
            if got.len() >= end + 4 + length {
                return true;
            }
        }
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn answer(conn: &mut TcpStream) {
    let head = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", ANSWER.len());
    conn.write_all(&[head.as_bytes(), ANSWER].concat()).unwrap();
}

/// Like llama.cpp's server at times: answers one request per connection with a keep-alive
/// response (no `Connection: close`) and closes the connection right after writing it.
fn closes_after_each_response() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            if read_request(&mut conn) {
                answer(&mut conn);
            }
        }
    });
    addr
}

/// Answers the first request on each connection, keeps the connection, reads the second request
/// in full and closes without answering it. Counts the requests it read.
fn reads_the_second_request_and_closes() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let read = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = read.clone();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            if read_request(&mut conn) {
                counter.fetch_add(1, Ordering::SeqCst);
                answer(&mut conn);
                if read_request(&mut conn) {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    });
    (addr, read)
}

fn stale_retries(tokentap: &Tokentap) -> serde_json::Value {
    let (status, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(status, 200);
    health["upstream"]["stale_connection_retries"].clone()
}

#[test]
fn sequential_requests_over_a_server_that_closes_after_each_response_all_succeed() {
    let upstream = closes_after_each_response();
    let tokentap = Tokentap::start(&format!("http://{upstream}"), &[]);
    let mut feed = tokentap.feed();
    let mut client = TcpStream::connect(tokentap.addr).unwrap();
    let request = http1::keep_alive_request("POST", CHAT, &[("content-type", "application/json")], BODY);
    let mut retried = 0;
    for i in 0..40 {
        let response = http1::exchange(&mut client, &request);
        assert_eq!(response.status, 200, "request {i}: {:?}", String::from_utf8_lossy(&response.body));
        let record = feed.next_record_for(CHAT);
        assert_eq!(record["outcome"], "ok", "{record}");
        if record["timeline"]["connection"]["retried_stale_connection"] == true {
            retried += 1;
        }
    }
    assert_eq!(stale_retries(&tokentap), retried);
}

#[test]
fn a_server_that_read_the_request_and_closed_without_answering_is_a_502_not_a_retry() {
    let (upstream, read) = reads_the_second_request_and_closes();
    let tokentap = Tokentap::start(&format!("http://{upstream}"), &[]);
    let mut feed = tokentap.feed();
    let mut client = TcpStream::connect(tokentap.addr).unwrap();
    let request = http1::keep_alive_request("POST", CHAT, &[("content-type", "application/json")], BODY);
    let first = http1::exchange(&mut client, &request);
    assert_eq!(first.status, 200);
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["timeline"]["connection"]["reused"], false, "{record}");
    let second = http1::exchange(&mut client, &request);
    assert_eq!(second.status, 502, "{:?}", String::from_utf8_lossy(&second.body));
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["outcome"], "upstream_error", "{record}");
    assert_eq!(record["timeline"]["connection"]["reused"], true, "{record}");
    assert!(record["timeline"]["connection"].get("retried_stale_connection").is_none(), "{record}");
    // The server read both requests, and none a third time: the second was not sent again.
    assert_eq!(read.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(stale_retries(&tokentap), 0);
}
