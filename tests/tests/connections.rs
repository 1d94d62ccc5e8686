//! Client connections under `[connections]`: a slow first request head is closed at its deadline
//! (the slow-header attack), connections over the cap get a 503 and are closed, and both are
//! counted in health and `/metrics`. Serving goes on for everyone else.

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

/// Reads until the peer closes; returns what it sent. Fails after `limit` of silence.
fn read_to_close(stream: &mut TcpStream, limit: Duration) -> Vec<u8> {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return out,
            Err(e) => panic!("the connection was not closed: {e} (got {:?})", String::from_utf8_lossy(&out)),
        }
    }
}

fn connections(tokentap: &Tokentap) -> serde_json::Value {
    let (status, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(status, 200);
    health["connections"].clone()
}

/// Polls health (each poll is a round trip to the admin API) until `open` connections are counted.
fn wait_open(tokentap: &Tokentap, open: u64) {
    for _ in 0..2_000 {
        if connections(tokentap)["open"] == open {
            return;
        }
    }
    panic!("never {open} open: {}", connections(tokentap));
}

#[test]
fn a_request_head_sent_too_slowly_is_closed_at_the_deadline() {
    let (_mock, tokentap, _dir) = start("[connections]\nhead_timeout_s = 1\n");
    let mut slow = TcpStream::connect(tokentap.addr).unwrap();
    // Half a head, then nothing: the deadline runs from the accept, whatever the client sends.
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n").unwrap();
    let answer = read_to_close(&mut slow, Duration::from_secs(30));
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

#[test]
fn connections_over_the_cap_get_a_503_and_the_slot_comes_back_on_close() {
    let (_mock, tokentap, _dir) = start("[connections]\nmax_open = 2\nhead_timeout_s = 600\n");
    // tokentap connects to its own port once to see that pingora accepts before it announces the
    // address; that connection holds a slot until pingora has seen it close.
    wait_open(&tokentap, 0);
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n";
    let mut a = TcpStream::connect(tokentap.addr).unwrap();
    a.write_all(head).unwrap();
    let mut b = TcpStream::connect(tokentap.addr).unwrap();
    b.write_all(head).unwrap();
    wait_open(&tokentap, 2);
    assert_eq!(connections(&tokentap)["max_open"], 2);

    // The third is told why and closed.
    let mut third = TcpStream::connect(tokentap.addr).unwrap();
    let answer = read_to_close(&mut third, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    assert!(text.contains("tokentap_over_capacity"), "{text}");
    assert_eq!(connections(&tokentap)["refused_over_cap"], 1);

    // A held connection still completes its request.
    let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    a.write_all(format!("content-length: {}\r\nconnection: close\r\n\r\n", body.len()).as_bytes()).unwrap();
    a.write_all(body).unwrap();
    let answer = read_to_close(&mut a, Duration::from_secs(30));
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
    let metrics = http1::get(tokentap.admin, "/metrics", &[]);
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.lines().any(|l| l.starts_with("tokentap_connections_refused_total")
            && l.contains("over_capacity")
            && l.ends_with(" 1")),
        "{text}"
    );
}

#[test]
fn bad_connection_limits_are_config_errors() {
    for (text, key) in [
        ("[connections]\nmax_open = 0\n", "connections.max_open"),
        ("[connections]\nhead_timeout_s = 0\n", "connections.head_timeout_s"),
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
