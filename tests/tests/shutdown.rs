//! SIGTERM and SIGINT (Ctrl-C) drain: streams in flight finish for the client, their records are
//! written, and the process exits once they are, well before the grace period ends. A second
//! signal exits at once.

use std::process::Command;
use std::time::Duration;

use tokentap_e2e::http1::{request_bytes, StreamedResponse};
use tokentap_e2e::{Mock, Tokentap};

/// 30 content events 100 ms apart: a stream of about 3 s.
const MOCK_ARGS: &[&str] = &["--tokens", "30", "--itl-ms", "100", "--ttft-ms", "100"];

fn chat() -> Vec<u8> {
    request_bytes(
        "POST",
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    )
}

fn signal(tokentap: &Tokentap, name: &str) {
    let status = Command::new("kill").arg(format!("-{name}")).arg(tokentap.proc.pid().to_string()).status();
    assert!(status.is_ok_and(|s| s.success()), "kill -{name} failed");
}

#[test]
fn sigterm_lets_streams_in_flight_finish_and_records_them() {
    let mock = Mock::start(MOCK_ARGS);
    let mut tokentap = Tokentap::start(&mock.url, &["--config", &grace_config(60)]);
    let mut streams: Vec<StreamedResponse> = (0..3).map(|_| StreamedResponse::open(tokentap.addr, &chat())).collect();
    // Every stream is under way (its head and first bytes arrived) before the signal.
    for s in &mut streams {
        s.read_head();
        s.read_body_until(1);
    }
    signal(&tokentap, "TERM");
    for s in streams {
        let mut s = s;
        while s.read_some() {}
        let response = s.into_response();
        assert_eq!(response.status, 200);
        assert!(response.complete, "a stream in flight was cut by SIGTERM");
        assert!(String::from_utf8_lossy(&response.body).contains("[DONE]"), "the stream did not end normally");
    }
    let status = tokentap.proc.wait_exit();
    assert!(status.success(), "tokentap exited with {status}: {}", tokentap.proc.stderr());
    // It left because every stream was recorded, not because the 60 s grace period ended.
    assert!(
        tokentap.proc.stderr().contains("drained: every request is recorded"),
        "tokentap did not drain: {}",
        tokentap.proc.stderr()
    );
    let records = std::fs::read_to_string(tokentap.records_file()).expect("records.jsonl");
    let ok = records.lines().filter(|l| l.contains("\"outcome\":\"ok\"")).count();
    assert_eq!(ok, 3, "every drained stream has its record:\n{records}");
}

#[test]
fn a_stream_cut_at_the_end_of_the_grace_period_is_recorded_as_shutdown() {
    // A stream of about 60 s, a grace period of 1 s.
    let mock = Mock::start(&["--tokens", "600", "--itl-ms", "100", "--ttft-ms", "100"]);
    let mut tokentap = Tokentap::start(&mock.url, &["--config", &grace_config(1)]);
    let mut stream = StreamedResponse::open(tokentap.addr, &chat());
    stream.read_head();
    stream.read_body_until(1);
    signal(&tokentap, "TERM");
    let status = tokentap.proc.wait_exit();
    assert!(status.success(), "tokentap exited with {status}: {}", tokentap.proc.stderr());
    while stream.read_some() {}
    assert!(!stream.into_response().complete, "the 60 s stream cannot have completed");
    let records = std::fs::read_to_string(tokentap.records_file()).expect("records.jsonl");
    let lines: Vec<serde_json::Value> = records.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "the cut stream has its record:\n{records}");
    let record = &lines[0];
    assert_eq!(record["outcome"], "shutdown", "{record}");
    assert_eq!(record["status"], 200, "{record}");
    assert!(record["timeline"]["chunk_count"].as_u64().unwrap() >= 1, "what was stamped is kept: {record}");
}

#[test]
fn a_second_signal_ends_the_drain_at_once() {
    let mock = Mock::start(&["--tokens", "600", "--itl-ms", "100", "--ttft-ms", "100"]);
    let mut tokentap = Tokentap::start(&mock.url, &["--config", &grace_config(600)]);
    let mut stream = StreamedResponse::open(tokentap.addr, &chat());
    stream.read_head();
    stream.read_body_until(1);
    signal(&tokentap, "TERM");
    tokentap.proc.wait_stderr("SIGTERM: draining", Duration::from_secs(30));
    signal(&tokentap, "INT");
    let status = tokentap.proc.wait_exit();
    assert!(!status.success(), "a second signal exits with a failure status, got {status}");
    while stream.read_some() {}
    assert!(!stream.into_response().complete, "the 60 s stream cannot have completed");
}

/// Ctrl-C drains as SIGTERM does, and says so.
#[test]
fn sigint_lets_a_stream_in_flight_finish_and_records_it() {
    let mock = Mock::start(MOCK_ARGS);
    let mut tokentap = Tokentap::start(&mock.url, &["--config", &grace_config(60)]);
    let mut stream = StreamedResponse::open(tokentap.addr, &chat());
    stream.read_head();
    stream.read_body_until(1);
    signal(&tokentap, "INT");
    while stream.read_some() {}
    let response = stream.into_response();
    assert!(response.complete, "a stream in flight was cut by SIGINT: {}", tokentap.proc.stderr());
    assert!(String::from_utf8_lossy(&response.body).contains("[DONE]"), "the stream did not end normally");
    let status = tokentap.proc.wait_exit();
    assert!(status.success(), "tokentap exited with {status}: {}", tokentap.proc.stderr());
    let stderr = tokentap.proc.stderr();
    assert!(
        stderr.contains("SIGINT: draining 1 request(s) in flight for up to 60s")
            && stderr.contains("press Ctrl-C again to exit now"),
        "tokentap did not say it drains: {stderr}"
    );
    assert!(stderr.contains("drained: every request is recorded"), "{stderr}");
    let records = std::fs::read_to_string(tokentap.records_file()).expect("records.jsonl");
    assert_eq!(records.lines().filter(|l| l.contains("\"outcome\":\"ok\"")).count(), 1, "{records}");
}

#[test]
fn a_second_sigint_exits_at_once() {
    let mock = Mock::start(&["--tokens", "600", "--itl-ms", "100", "--ttft-ms", "100"]);
    let mut tokentap = Tokentap::start(&mock.url, &["--config", &grace_config(600)]);
    let mut stream = StreamedResponse::open(tokentap.addr, &chat());
    stream.read_head();
    stream.read_body_until(1);
    signal(&tokentap, "INT");
    tokentap.proc.wait_stderr("SIGINT: draining", Duration::from_secs(30));
    signal(&tokentap, "INT");
    let status = tokentap.proc.wait_exit();
    assert!(!status.success(), "a second Ctrl-C exits with a failure status, got {status}");
    assert!(tokentap.proc.stderr().contains("second signal: exiting now"), "{}", tokentap.proc.stderr());
    while stream.read_some() {}
    assert!(!stream.into_response().complete, "the 60 s stream cannot have completed");
}

#[test]
fn a_request_whose_head_was_partly_received_at_sigterm_is_still_answered() {
    use std::io::{Read, Write};
    let mock = Mock::start(&["--tokens", "3", "--itl-ms", "1", "--ttft-ms", "1"]);
    let mut tokentap = Tokentap::start_with_env(
        &["--upstream", &mock.url, "--config", &grace_config(60)],
        &[("TOKENTAP_LOG", "info")],
    );
    let raw = chat();
    let cut = 30;
    let mut conn = std::net::TcpStream::connect(tokentap.addr).expect("connect");
    conn.write_all(&raw[..cut]).expect("first part of the head");
    // tokentap has read the first part (its health says so) before the signal.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while tokentap.admin_get("/_tokentap/api/health").1["connections"]["heads_partial"] != 1 {
        assert!(std::time::Instant::now() < deadline, "the partial head never showed in health");
        std::thread::yield_now();
    }
    signal(&tokentap, "TERM");
    tokentap.proc.wait_stderr("shutdown: waiting for request heads partly received", Duration::from_secs(30));
    conn.write_all(&raw[cut..]).expect("rest of the request");
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let _ = conn.read_to_end(&mut got);
    let response = tokentap_e2e::http1::parse_response(&got);
    assert_eq!(response.status, 200, "{}", String::from_utf8_lossy(&got));
    assert!(response.complete && String::from_utf8_lossy(&response.body).contains("[DONE]"), "cut short");
    let status = tokentap.proc.wait_exit();
    assert!(status.success(), "tokentap exited with {status}: {}", tokentap.proc.stderr());
    let records = std::fs::read_to_string(tokentap.records_file()).expect("records.jsonl");
    assert_eq!(records.lines().filter(|l| l.contains("\"outcome\":\"ok\"")).count(), 1, "{records}");
}

/// A config file with `[shutdown] grace_period_s`, kept next to the test binary's temp files.
fn grace_config(seconds: u64) -> String {
    let dir = std::env::temp_dir().join(format!("tokentap-shutdown-{}-{seconds}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokentap.toml");
    std::fs::write(&path, format!("[shutdown]\ngrace_period_s = {seconds}\n")).unwrap();
    path.display().to_string()
}

#[test]
fn sigterm_exports_the_telemetry_still_queued() {
    let receiver = tokentap_e2e::otlp_receiver::OtlpReceiver::start();
    let mock = Mock::start(&["--tokens", "3", "--itl-ms", "1", "--ttft-ms", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    // Spans wait a minute for their batch and metrics ten: only the shutdown flush sends them.
    std::fs::write(
        &config,
        format!(
            "[otel]\nendpoint = \"{}\"\nbatch_delay_ms = 60000\nmetrics_interval_ms = 600000\n[shutdown]\ngrace_period_s = 60\n",
            receiver.http_endpoint()
        ),
    )
    .unwrap();
    let mut tokentap = Tokentap::start(&mock.url, &["--config", config.to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let resp = tokentap_e2e::http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[]}"#,
    );
    assert_eq!(resp.status, 200);
    let record = feed.next_record();
    assert!(receiver.received().spans().is_empty(), "nothing is exported before the batch delay");
    signal(&tokentap, "TERM");
    let status = tokentap.proc.wait_exit();
    assert!(status.success(), "{status}: {}", tokentap.proc.stderr());
    let received = receiver.received();
    let trace = record["trace_id"].as_str().unwrap();
    assert!(
        received.spans().iter().any(|s| tokentap_e2e::otlp_receiver::hex(&s.trace_id) == trace),
        "the queued spans were flushed at shutdown"
    );
    assert_eq!(received.histogram_count("tokentap.ttft.answer"), 1, "the metrics were flushed too");
}

/// A kept-alive connection waiting for its next request is closed at the signal (the client opens
/// a new one elsewhere), with tokentap's connection loop and with pingora's proxy serving it, while
/// a stream in flight on another connection keeps the process draining: the close comes from the
/// shutdown itself, not from the process's exit.
#[test]
fn an_idle_kept_alive_connection_is_closed_at_sigterm() {
    use std::io::{Read, Write};
    let mock = Mock::start(MOCK_ARGS);
    for relay in ["tokentap", "pingora"] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("tokentap.toml");
        std::fs::write(&config, format!("[shutdown]\ngrace_period_s = 60\n\n[connections]\nrelay = \"{relay}\"\n"))
            .unwrap();
        let mut tokentap = Tokentap::start(&mock.url, &["--config", config.to_str().unwrap()]);
        let mut conn = std::net::TcpStream::connect(tokentap.addr).expect("connect");
        conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        conn.write_all(&[head.as_bytes(), body].concat()).expect("request");
        // The whole streamed answer (chunked), and the connection kept.
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"0\r\n\r\n") {
            let n = conn.read(&mut buf).expect("the answer before the read timeout");
            assert!(n > 0, "{relay}: closed after the answer: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        assert!(!String::from_utf8_lossy(&got).to_ascii_lowercase().contains("connection: close"), "{relay}");
        // A stream in flight (about 3 s) keeps the process draining after the signal.
        let mut stream = StreamedResponse::open(tokentap.addr, &chat());
        stream.read_head();
        stream.read_body_until(1);
        signal(&tokentap, "TERM");
        match conn.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("{relay}: the idle connection was not closed at the signal: {other:?}"),
        }
        let state = std::fs::read_to_string(format!("/proc/{}/stat", tokentap.proc.pid())).unwrap_or_default();
        let state = state.rsplit_once(") ").map(|(_, rest)| rest.chars().next()).unwrap_or_default();
        assert!(
            matches!(state, Some('R' | 'S' | 'D')),
            "{relay}: closed only when the process ended (state {state:?})"
        );
        while stream.read_some() {}
        let response = stream.into_response();
        assert!(response.complete && String::from_utf8_lossy(&response.body).contains("[DONE]"), "{relay}: cut");
        let status = tokentap.proc.wait_exit();
        assert!(status.success(), "{relay}: tokentap exited with {status}: {}", tokentap.proc.stderr());
        assert!(
            tokentap.proc.stderr().contains("drained: every request is recorded"),
            "{relay}: {}",
            tokentap.proc.stderr()
        );
    }
}
