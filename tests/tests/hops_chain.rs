//! Multi-hop chains: browser → tokentap (ingress route) → app → tokentap (egress route) → mock
//! provider, one tokentap serving both routes. The app is a tiny HTTP/1.1 server in the test
//! process: it forwards the ingress request to the egress route with the `traceparent` tokentap
//! injected, reads the provider's SSE stream and re-emits the same events to its client — either
//! each at once, or held and written together `burst` events at a time (counting events, not
//! timers). tokentap joins the two records of one turn and diagnoses the whole chain: a bursting
//! app is named; an app that streams is "no re-buffering". Each scenario runs three times with the
//! same verdict; each run prints its numbers (`--nocapture`) for the margins in docs/metrics.md.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

use serde_json::Value;
use tokentap_e2e::diagnosis::summary;
use tokentap_e2e::http1::{self, request_bytes, StreamedResponse};
use tokentap_e2e::{Mock, Tokentap};

const RUNS: usize = 3;
/// Events the bursting app holds before writing them together.
const BURST: usize = 8;

fn serve(mut client: TcpStream, tokentap: SocketAddr, burst: usize) {
    client.set_nodelay(true).unwrap();
    // The request: head, then a Content-Length body.
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let mut tmp = [0u8; 16384];
        let n = client.read(&mut tmp).unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut body = buf[head_end + 4..].to_vec();
    let mut length = 0;
    let mut forward: Vec<(String, String)> = Vec::new();
    for line in head.split("\r\n").skip(1) {
        let Some((k, v)) = line.split_once(':') else { continue };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
        if k == "content-length" {
            length = v.parse().unwrap();
        } else if k == "traceparent" || k == "content-type" || k.starts_with("x-mock-") {
            forward.push((k, v));
        }
    }
    while body.len() < length {
        let mut tmp = [0u8; 16384];
        let n = client.read(&mut tmp).unwrap();
        assert!(n > 0, "client went away mid-body");
        body.extend_from_slice(&tmp[..n]);
    }
    assert!(forward.iter().any(|(k, _)| k == "traceparent"), "tokentap injects traceparent: {head}");

    // The provider call, through tokentap's egress route, with the trace propagated.
    let headers: Vec<(&str, &str)> = forward.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut upstream =
        StreamedResponse::open(tokentap, &request_bytes("POST", "/provider/v1/chat/completions", &headers, &body));
    upstream.read_head();
    assert_eq!(upstream.response.status, 200);
    client
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut consumed = 0;
    let mut held: Vec<u8> = Vec::new();
    let mut held_events = 0;
    let write_chunk = |client: &mut TcpStream, data: &[u8]| {
        if !data.is_empty() {
            client.write_all(format!("{:x}\r\n", data.len()).as_bytes()).unwrap();
            client.write_all(data).unwrap();
            client.write_all(b"\r\n").unwrap();
        }
    };
    loop {
        let more = upstream.read_some();
        let body = &upstream.response.body;
        while let Some(end) = body[consumed..].windows(2).position(|w| w == b"\n\n") {
            held.extend_from_slice(&body[consumed..consumed + end + 2]);
            consumed += end + 2;
            held_events += 1;
            if held_events == burst {
                write_chunk(&mut client, &held);
                held.clear();
                held_events = 0;
            }
        }
        if !more {
            break;
        }
    }
    assert!(upstream.response.complete, "the provider stream ended cleanly");
    held.extend_from_slice(&upstream.response.body[consumed..]);
    write_chunk(&mut client, &held);
    client.write_all(b"0\r\n\r\n").unwrap();
}

/// One tokentap with an ingress route to the app and an egress route to the mock.
fn start(mock: &Mock, burst: usize) -> (Tokentap, tempfile::TempDir) {
    // The app needs tokentap's address and tokentap needs the app's: the app listens first on a
    // port it is given, tokentap's address is handed to it once tokentap is up.
    let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let app = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let tokentap = rx.recv().unwrap();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || serve(stream, tokentap, burst));
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    std::fs::write(
        &config,
        format!(
            "[[route]]\nprefix = \"/app\"\nupstream = \"http://{app}\"\nprovider = \"openai\"\nrole = \"ingress\"\n\n\
             [[route]]\nprefix = \"/provider\"\nupstream = \"{}\"\nprovider = \"openai\"\nrole = \"egress\"\n",
            mock.url
        ),
    )
    .unwrap();
    let tokentap = Tokentap::start_with_args(&["--config", config.to_str().unwrap()]);
    tx.send(tokentap.addr).unwrap();
    (tokentap, dir)
}

/// Runs one user turn through the chain and returns the ingress record once the chain is joined.
fn turn(tokentap: &Tokentap, feed: &mut tokentap_e2e::RecordFeed) -> Value {
    let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let schedule = [
        ("content-type", "application/json"),
        ("x-mock-tokens", "64"),
        ("x-mock-itl-ms", "30"),
        ("x-mock-ttft-ms", "100"),
    ];
    let response = http1::post(tokentap.addr, "/app/v1/chat/completions", &schedule, body);
    assert_eq!(response.status, 200);
    assert!(response.complete && String::from_utf8_lossy(&response.body).contains("[DONE]"));
    loop {
        let record = feed.next_record();
        if !record["chain"].is_null() {
            return record;
        }
    }
}

fn check_chain(record: &Value) {
    assert_eq!(record["route_role"], "ingress", "{record:#}");
    let hops: Vec<&str> =
        record["diagnosis"]["hops"].as_array().unwrap().iter().map(|h| h["hop"].as_str().unwrap()).collect();
    assert_eq!(hops, ["egress_handoff", "app", "handoff", "client_ack"], "{:#}", record["diagnosis"]);
    assert!(record["chain"]["aligned_events"].as_u64().unwrap() >= 60, "{:#}", record["chain"]);
}

#[test]
fn app_that_buffers_in_bursts_is_named() {
    let mock = Mock::start(&[]);
    let (tokentap, _dir) = start(&mock, BURST);
    let mut feed = tokentap.feed();
    for run in 0..RUNS {
        let record = turn(&tokentap, &mut feed);
        eprintln!("[bursting app #{run}] {}", summary(&record));
        check_chain(&record);
        let d = &record["diagnosis"];
        assert_eq!(d["kind"], "in_app", "run {run}: {d:#}");
        assert_eq!(d["hop"], "app");
        assert!(
            d["verdict"]
                .as_str()
                .unwrap()
                .starts_with("in the app (between tokentap's egress handoff and its ingress arrival): "),
            "{d:#}"
        );
        let hops = d["hops"].as_array().unwrap();
        assert_eq!(hops[0]["rebuffers"], false, "tokentap's egress handoff kept up: {:#}", hops[0]);
        assert!(hops[1]["bursts"].as_u64().unwrap() >= 6, "{:#}", hops[1]);

        // The egress record is stored too, a child of the ingress span.
        let egress_id = record["chain"]["egress_request_id"].as_str().unwrap();
        let (status, egress) = tokentap.admin_get(&format!("/_tokentap/api/requests/{egress_id}"));
        assert_eq!(status, 200);
        assert_eq!(egress["route_role"], "egress");
        assert_eq!(egress["trace_id"], record["trace_id"]);
        assert_eq!(egress["parent_span_id"], record["span_id"]);
    }
}

#[test]
fn app_that_streams_has_no_rebuffering() {
    let mock = Mock::start(&[]);
    let (tokentap, _dir) = start(&mock, 1);
    let mut feed = tokentap.feed();
    for run in 0..RUNS {
        let record = turn(&tokentap, &mut feed);
        eprintln!("[streaming app #{run}] {}", summary(&record));
        check_chain(&record);
        let d = &record["diagnosis"];
        assert_eq!(d["kind"], "no_rebuffering", "run {run}: {d:#}");
    }
}
