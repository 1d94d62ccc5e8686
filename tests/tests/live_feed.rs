//! The live feed: a capped number of subscribers, and one that never reads holds up nobody.

use std::io::{Read, Write};

use tokentap_e2e::{http1, Mock, Tokentap};

/// Subscribes with a tiny receive buffer, reads the head and the opening comment, then never reads again.
fn stalled_subscriber(tokentap: &Tokentap) -> std::net::TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&tokentap.admin.into()).unwrap();
    let mut stream: std::net::TcpStream = socket.into();
    stream.write_all(&http1::request_bytes("GET", "/_tokentap/api/stream", &[], b"")).unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("tokentap live feed") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "the feed closed: {}", String::from_utf8_lossy(&seen));
        seen.push(byte[0]);
    }
    assert!(seen.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&seen));
    stream
}

#[test]
fn subscribers_are_capped_and_a_stalled_one_holds_up_nobody() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "0", "--tokens", "2000"]);
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "admin_max_feed_subscribers = 3\n").unwrap();
    let tokentap = Tokentap::start(&mock.url, &["--config", config.path().to_str().unwrap()]);
    let stalled = stalled_subscriber(&tokentap);
    let mut reader = tokentap.feed();
    let _third = tokentap.feed();
    let over = http1::get(tokentap.admin, "/_tokentap/api/stream", &[]);
    assert_eq!(over.status, 503);
    assert!(String::from_utf8_lossy(&over.body).contains("admin_max_feed_subscribers"));

    let chat = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    for i in 0..20 {
        let resp = http1::post(tokentap.addr, "/v1/chat/completions", &[("content-type", "application/json")], chat);
        assert_eq!(resp.status, 200, "request {i}");
        let record = reader.next_record();
        assert_eq!(record["request_id"], resp.header("x-tokentap-request-id").unwrap(), "request {i}");
    }
    // The API still answers while the stalled subscriber holds its connection.
    assert_eq!(tokentap.admin_get("/_tokentap/api/health").0, 200);
    drop(stalled);
}
