//! Client connections under `[connections]`: a slow request head is closed at its deadline (the
//! slow-header attack, on the first request and on later ones of a kept-alive connection), a
//! kept-alive connection that stays silent is closed after the idle timeout, connections over the
//! cap get a 503 and are closed, and all are counted in health and `/metrics`. Serving goes on for
//! everyone else.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tokentap_e2e::{http1, Mock, Tokentap};

fn start(config_text: &str) -> (Mock, Tokentap, tempfile::TempDir) {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    std::fs::write(&config, config_text).unwrap();
    let tokentap = Tokentap::start_with_args(&["--upstream", &mock.url, "--config", config.to_str().unwrap()]);
    (mock, tokentap, dir)
}

fn chat_ok(tokentap: &Tokentap) {
    let response = http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(response.status, 200);
    assert!(response.complete);
}

fn connections(tokentap: &Tokentap) -> serde_json::Value {
    let (status, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(status, 200);
    health["connections"].clone()
}

/// Polls health (each poll is a round trip to the admin API) until `open` connections are counted.
/// The count follows the proxy's own accept and close, which a loaded machine can delay: the
/// bound is a generous time, not a number of polls (2,000 polls took under a second and failed
/// under load).
fn wait_open(tokentap: &Tokentap, open: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if connections(tokentap)["open"] == open {
            return;
        }
    }
    panic!("never {open} open in 30 s: {}", connections(tokentap));
}

/// tokentap connects to its own port once to see that pingora accepts before it announces the
/// address; that connection holds a slot (and its address's place) from pingora's accept, which may
/// come after the announcement, until pingora has seen it close. Waits for both.
fn wait_announcement_gone(tokentap: &Tokentap) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let c = connections(tokentap);
        if c["accepted"] == 1 && c["open"] == 0 {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the announcement's connection never came and went: {c}");
    }
}

/// `/metrics` counts one connection refused for `reason`.
fn assert_refused_once(tokentap: &Tokentap, reason: &str) {
    let metrics = http1::get(tokentap.admin, "/metrics", &[]);
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.lines()
            .any(|l| l.starts_with("tokentap_connections_refused_total") && l.contains(reason) && l.ends_with(" 1")),
        "{text}"
    );
}

#[test]
fn a_request_head_sent_too_slowly_is_closed_at_the_deadline() {
    let (_mock, tokentap, _dir) = start("[connections]\nhead_timeout_s = 1\n");
    let mut slow = TcpStream::connect(tokentap.addr).unwrap();
    // Half a head, then nothing: the deadline runs from the accept, whatever the client sends.
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n").unwrap();
    let answer = http1::read_to_close(&mut slow, Duration::from_secs(30));
    assert!(answer.is_empty() || answer.starts_with(b"HTTP/1.1 4"), "{:?}", String::from_utf8_lossy(&answer));
    let c = connections(&tokentap);
    assert_eq!(c["head_timeouts"], 1, "{c}");
    // A client that sends its head at once is served, before and after.
    chat_ok(&tokentap);
    assert_eq!(connections(&tokentap)["head_timeouts"], 1);
    let metrics = http1::get(tokentap.admin, "/metrics", &[]);
    let text = String::from_utf8_lossy(&metrics.body);
    let line = text
        .lines()
        .find(|l| l.starts_with("tokentap_connections_refused_total") && l.contains("head_timeout"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.ends_with(" 1"), "{line}");
}

fn chat_request() -> Vec<u8> {
    http1::keep_alive_request(
        "POST",
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    )
}

#[test]
fn a_kept_alive_connection_that_stays_silent_is_closed_after_the_idle_timeout() {
    let (_mock, tokentap, _dir) = start("[connections]\nkeepalive_idle_s = 1\nhead_timeout_s = 600\n");
    let mut idle = TcpStream::connect(tokentap.addr).unwrap();
    // Two requests in a row on the connection: both served (kept alive between them).
    for _ in 0..2 {
        let response = http1::exchange(&mut idle, &chat_request());
        assert_eq!(response.status, 200);
        assert!(response.complete);
    }
    // Then nothing: without an idle timeout the connection would stay open for good.
    let rest = http1::read_to_close(&mut idle, Duration::from_secs(60));
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    let c = connections(&tokentap);
    assert_eq!(c["idle_closed"], 1, "{c}");
    assert_eq!(c["head_timeouts"], 0, "{c}");
    wait_open(&tokentap, 0);
    chat_ok(&tokentap);
}

#[test]
fn a_trickled_second_request_head_is_closed_at_the_head_deadline() {
    let (_mock, tokentap, _dir) = start("[connections]\nkeepalive_idle_s = 600\nhead_timeout_s = 1\n");
    let mut slow = TcpStream::connect(tokentap.addr).unwrap();
    let response = http1::exchange(&mut slow, &chat_request());
    assert_eq!(response.status, 200);
    // The second head, a byte at a time, each sent once the connection has been silent for a
    // moment: within the idle timeout, and never complete. The head deadline (from its first
    // byte) closes the connection whatever the pace.
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-pad: ";
    slow.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut buf = [0u8; 1024];
    let mut sent = 0;
    let mut closed = false;
    // At most two minutes of 200 ms waits.
    for _ in 0..600 {
        if sent < head.len() {
            if slow.write_all(&head[sent..sent + 1]).is_err() {
                closed = true;
                break;
            }
            sent += 1;
        }
        match slow.read(&mut buf) {
            Ok(0) => closed = true,
            Ok(n) => {
                let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
                assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed = true,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("{e}"),
        }
        if closed {
            break;
        }
    }
    assert!(closed, "the trickled head kept the connection open");
    assert!(sent < head.len(), "the whole trickled head ({sent} bytes) went in before the close");
    let c = connections(&tokentap);
    assert_eq!(c["head_timeouts"], 1, "{c}");
    assert_eq!(c["idle_closed"], 0, "{c}");
    chat_ok(&tokentap);
}

#[test]
fn connections_over_the_cap_get_a_503_and_the_slot_comes_back_on_close() {
    let (_mock, tokentap, _dir) = start("[connections]\nmax_open = 2\nhead_timeout_s = 600\n");
    wait_announcement_gone(&tokentap);
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n";
    let mut a = TcpStream::connect(tokentap.addr).unwrap();
    a.write_all(head).unwrap();
    let mut b = TcpStream::connect(tokentap.addr).unwrap();
    b.write_all(head).unwrap();
    wait_open(&tokentap, 2);
    assert_eq!(connections(&tokentap)["max_open"], 2);

    // The third is told why and closed.
    let mut third = TcpStream::connect(tokentap.addr).unwrap();
    let answer = http1::read_to_close(&mut third, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    assert!(text.contains("tokentap_over_capacity"), "{text}");
    assert_eq!(connections(&tokentap)["refused_over_cap"], 1);

    // A held connection still completes its request.
    let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    a.write_all(format!("content-length: {}\r\nconnection: close\r\n\r\n", body.len()).as_bytes()).unwrap();
    a.write_all(body).unwrap();
    let answer = http1::read_to_close(&mut a, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(text.contains("[DONE]"), "{text}");

    // Closing gives the slots back; new connections are served.
    drop(b);
    wait_open(&tokentap, 0);
    chat_ok(&tokentap);
    let c = connections(&tokentap);
    assert_eq!(c["refused_over_cap"], 1, "{c}");
    assert_eq!(c["head_timeouts"], 0, "{c}");
    assert_refused_once(&tokentap, "over_capacity");
}

/// A client connection from `source` (any 127.x address reaches loopback).
fn connect_from(source: [u8; 4], to: std::net::SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&std::net::SocketAddr::from((source, 0)).into()).unwrap();
    socket.connect(&to.into()).unwrap();
    socket.into()
}

#[test]
fn one_client_address_cannot_take_more_than_its_share() {
    let (_mock, tokentap, _dir) = start("[connections]\nmax_open_per_client = 2\nhead_timeout_s = 600\n");
    wait_announcement_gone(&tokentap);
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n";
    let mut a = connect_from([127, 0, 0, 1], tokentap.addr);
    a.write_all(head).unwrap();
    let mut b = connect_from([127, 0, 0, 1], tokentap.addr);
    b.write_all(head).unwrap();
    wait_open(&tokentap, 2);

    // A third from the same address is told why and closed...
    let mut third = connect_from([127, 0, 0, 1], tokentap.addr);
    let answer = http1::read_to_close(&mut third, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    let c = connections(&tokentap);
    assert_eq!((c["refused_over_client_share"].as_u64(), c["refused_over_cap"].as_u64()), (Some(1), Some(0)), "{c}");

    // ...while another address is served.
    let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let request = [
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes(),
        body.to_vec(),
    ]
    .concat();
    let mut other = connect_from([127, 0, 0, 2], tokentap.addr);
    other.write_all(&request).unwrap();
    let answer = http1::read_to_close(&mut other, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200 ") && text.contains("[DONE]"), "{text}");

    // A place of the address comes back when one of its connections closes.
    drop(b);
    wait_open(&tokentap, 1);
    let mut again = connect_from([127, 0, 0, 1], tokentap.addr);
    again.write_all(&request).unwrap();
    let answer = http1::read_to_close(&mut again, Duration::from_secs(30));
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200 "));
    drop(a);
    assert_refused_once(&tokentap, "over_client_share");
}

#[test]
fn bad_connection_limits_are_config_errors() {
    for (text, key) in [
        ("[connections]\nmax_open = 0\n", "connections.max_open"),
        ("[connections]\nmax_open_per_client = 0\n", "connections.max_open_per_client"),
        ("[connections]\nhead_timeout_s = 0\n", "connections.head_timeout_s"),
        ("[connections]\nkeepalive_idle_s = 0\n", "connections.keepalive_idle_s"),
        ("[connections]\nkeepalive_idle_s = 100000\n", "connections.keepalive_idle_s"),
        ("[connections]\nmax_opened = 5\n", "max_opened"),
        ("[connections]\nread_buffer_bytes = 2000000\n", "connections.read_buffer_bytes"),
        ("work_stealing = 1\n", "work_stealing"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("tokentap.toml");
        std::fs::write(&config, text).unwrap();
        let (status, _out, err) =
            tokentap_e2e::process::run_tokentap(&["check-config", "--config", config.to_str().unwrap()]);
        assert!(!status.success(), "{text}");
        assert!(err.contains(key), "{text}: {err}");
    }
}
