//! The product's first promise: bytes through tokentap are the bytes from the upstream, and each
//! upstream piece reaches the client as it arrives.

use std::time::Duration;

use proptest::prelude::*;
use tokentap_e2e::{http1, Framing, Mock, Script, ScriptedUpstream, Tokentap};

/// Text fragments that stress framing: every SSE line ending, multi-byte UTF-8, lone CRs.
const FRAGMENTS: &[&[u8]] = &[
    b"data: {\"x\":1}\n\n",
    b"data: caf\xc3\xa9\r\n\r\n",
    b"event: ping\rdata: \xe6\xbc\xa2\xe5\xad\x97\r\r",
    b": heartbeat\r\n",
    b"data: \xf0\x9f\x99\x82 \xf0\x9f\x9a\x80\n",
    b"\r",
    b"\n",
    b"data: [DONE]\n\n",
];

fn body_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Binary garbage.
        prop::collection::vec(any::<u8>(), 0..3000),
        // Stream-like text: fragments, so multi-byte characters straddle piece boundaries below.
        prop::collection::vec(prop::sample::select(FRAGMENTS), 0..60).prop_map(|parts| parts.concat()),
        // A mix of both.
        (prop::collection::vec(any::<u8>(), 0..500), prop::collection::vec(prop::sample::select(FRAGMENTS), 0..30))
            .prop_map(|(a, b)| [a, b.concat()].concat()),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    body: Vec<u8>,
    cuts: Vec<usize>,
    delays_us: Vec<u64>,
    framing: Framing,
    request_body: Vec<u8>,
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        body_strategy(),
        prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        prop::collection::vec(0u64..1500, 9),
        prop_oneof![Just(Framing::Chunked), Just(Framing::ContentLength), Just(Framing::Close)],
        prop::collection::vec(any::<u8>(), 0..1500),
    )
        .prop_map(|(body, cut_idx, delays_us, framing, request_body)| {
            let mut cuts: Vec<usize> = cut_idx.iter().map(|i| i.index(body.len() + 1)).collect();
            cuts.sort_unstable();
            cuts.dedup();
            Case { body, cuts, delays_us, framing, request_body }
        })
}

fn script_for(case: &Case) -> Script {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut at = Duration::ZERO;
    for (i, &cut) in case.cuts.iter().chain(std::iter::once(&case.body.len())).enumerate() {
        at += Duration::from_micros(case.delays_us[i % case.delays_us.len()]);
        pieces.push((at, case.body[start..cut].to_vec()));
        start = cut;
    }
    Script {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into())],
        framing: case.framing,
        pieces,
    }
}

#[test]
fn forwarded_bytes_equal_upstream_bytes_for_1000_generated_streams() {
    let upstream = ScriptedUpstream::start();
    let tokentap = Tokentap::start(&upstream.url(), &[]);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let counter = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&case_strategy(), |case| {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let path = format!("/case/{n}");
            let script = script_for(&case);
            let expected = script.body();
            upstream.register(&path, script);
            let resp =
                http1::post(tokentap.addr, &path, &[("content-type", "application/octet-stream")], &case.request_body);
            prop_assert_eq!(resp.status, 200);
            prop_assert!(resp.complete, "response did not end cleanly");
            prop_assert_eq!(&resp.body, &expected, "response body differs ({:?})", case.framing);
            let received = upstream.received(&path);
            prop_assert_eq!(received.as_deref(), Some(&case.request_body[..]), "request body differs");
            Ok(())
        })
        .unwrap();
    assert!(counter.into_inner() >= 1000);
}

#[test]
fn fifty_events_forty_ms_apart_arrive_as_fifty_spaced_reads() {
    let upstream = ScriptedUpstream::start();
    let tokentap = Tokentap::start(&upstream.url(), &[]);
    let events: Vec<Vec<u8>> = (0..50)
        .map(|i| format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\" w{i}\"}}}}]}}\n\n").into_bytes())
        .collect();
    let gap = Duration::from_millis(40);
    let pieces: Vec<(Duration, Vec<u8>)> =
        events.iter().enumerate().map(|(i, e)| (Duration::from_millis(50) + gap * i as u32, e.clone())).collect();
    upstream.register(
        "/v1/chat/completions",
        Script {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            framing: Framing::Chunked,
            pieces,
        },
    );
    let feed_records = tokentap.feed();
    let resp = http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        b"{\"stream\":true}",
    );
    assert!(resp.complete);
    assert_eq!(resp.body, events.concat());

    // When did the client have each event complete?
    let mut end = 0;
    let mut arrivals = Vec::new();
    for e in &events {
        end += e.len();
        arrivals.push(resp.arrival_of_offset(end).unwrap());
    }
    let reads_with_events = resp.reads.len();
    let gaps: Vec<Duration> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
    let spaced = gaps.iter().filter(|g| **g >= gap / 2).count();
    assert!(
        spaced * 100 >= gaps.len() * 95,
        "only {spaced} of {} client gaps kept at least half the upstream gap: {gaps:?}",
        gaps.len()
    );
    assert!(reads_with_events >= 48, "{reads_with_events} client reads for 50 events: tokentap coalesced pieces");

    // The record has one chunk per event, each with a handoff stamp.
    let mut feed_records = feed_records;
    let record = feed_records.next_record_for("/v1/chat/completions");
    let chunks = record["timeline"]["chunks"].as_array().unwrap();
    assert_eq!(chunks.len(), 50, "{record}");
    assert!(chunks.iter().all(|c| c["t_handoff_ns"].as_u64().unwrap() >= c["t_up_ns"].as_u64().unwrap()));
}

#[test]
fn headers_pass_through_except_hop_by_hop() {
    let upstream = ScriptedUpstream::start();
    let tokentap = Tokentap::start(&upstream.url(), &[]);
    upstream.register(
        "/v1/x",
        Script {
            status: 200,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-ratelimit-remaining-requests".into(), "99".into()),
                ("content-encoding".into(), "identity".into()),
            ],
            framing: Framing::ContentLength,
            pieces: vec![(Duration::ZERO, b"{\"ok\":true}".to_vec())],
        },
    );
    let resp = http1::post(
        tokentap.addr,
        "/v1/x",
        &[("content-type", "application/json"), ("x-custom", "kept"), ("accept-encoding", "gzip")],
        b"{}",
    );
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("x-ratelimit-remaining-requests"), Some("99"));
    assert_eq!(resp.header("content-encoding"), Some("identity"));
    assert_eq!(resp.body, b"{\"ok\":true}");
    assert!(resp.header("x-tokentap-request-id").is_some());
}

#[test]
fn http_1_0_clients_get_a_close_delimited_body_not_chunked() {
    let upstream = ScriptedUpstream::start();
    let tokentap = Tokentap::start(&upstream.url(), &[]);
    let pieces: Vec<(Duration, Vec<u8>)> =
        (0..5).map(|i| (Duration::from_millis(i), format!("data: {i}\n\n").into_bytes())).collect();
    let script = Script {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into())],
        framing: Framing::Chunked,
        pieces,
    };
    let expected = script.body();
    upstream.register("/v1/old", script);
    let raw = b"GET /v1/old HTTP/1.0\r\nhost: tokentap.test\r\n\r\n";
    let resp = http1::send(tokentap.addr, raw);
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("transfer-encoding"), None, "an HTTP/1.0 client cannot read chunked encoding");
    assert!(resp.complete, "the body ends when the connection closes");
    assert_eq!(resp.body, expected);
}

#[test]
fn a_compressed_event_stream_is_forwarded_as_is_and_flagged_not_analysed() {
    let upstream = ScriptedUpstream::start();
    let tokentap = Tokentap::start(&upstream.url(), &[]);
    let mut feed = tokentap.feed();
    // Bytes as a gzip stream would look (tokentap must neither decode nor alter them).
    let body: Vec<u8> = (0..600u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let script = Script {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into()), ("content-encoding".into(), "gzip".into())],
        framing: Framing::Chunked,
        pieces: vec![(Duration::ZERO, body[..300].to_vec()), (Duration::from_millis(5), body[300..].to_vec())],
    };
    upstream.register("/v1/chat/completions", script);
    let resp = http1::post(tokentap.addr, "/v1/chat/completions", &[("content-type", "application/json")], b"{}");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, body);
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!(record["outcome"], "ok");
    assert_eq!(record["analysis"]["flags"]["encoded_body"], "gzip", "{record}");
}

/// Sends `body` to `path` with `connection: close` and reads to the end of the connection: by then
/// tokentap has run the request's `logging`, where a recorded request is submitted.
fn post_and_read_to_close(addr: std::net::SocketAddr, path: &str, body: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: tokentap.test\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut out = Vec::new();
    stream.read_to_end(&mut out).unwrap();
    out
}

#[test]
fn with_recording_off_bytes_pass_unchanged_and_nothing_is_recorded() {
    let upstream = ScriptedUpstream::start();
    let body = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n".to_vec();
    upstream.register(
        "/v1/chat/completions",
        Script {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            framing: Framing::ContentLength,
            pieces: vec![(Duration::ZERO, body.clone())],
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let off = dir.path().join("off.toml");
    std::fs::write(&off, "[timeline]\nenabled = false\n").unwrap();
    // The same request through a recording tokentap (the control) and one with recording off.
    for (args, recorded) in [
        (vec!["--upstream", &upstream.url()], 1),
        (vec!["--upstream", &upstream.url(), "--config", off.to_str().unwrap()], 0),
    ] {
        let tokentap = Tokentap::start_with_args(&args);
        let response = post_and_read_to_close(tokentap.addr, "/v1/chat/completions", b"{}");
        assert!(response.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&response));
        assert!(response.ends_with(&body), "{}", String::from_utf8_lossy(&response));
        let (_, health) = tokentap.admin_get("/_tokentap/api/health");
        assert_eq!(health["records"]["submitted"], recorded, "{health}");
        if recorded == 0 {
            assert_eq!(health["records"]["open"], 0, "{health}");
        }
    }
}

/// A client that pipelines two requests in one write gets both answers, in order, on the same
/// connection (RFC 9112 §9.3.2), and both requests are recorded.
#[test]
fn pipelined_requests_are_answered_in_order() {
    use std::io::{Read, Write};
    let upstream = ScriptedUpstream::start();
    let tokentap = Tokentap::start(&upstream.url(), &[]);
    let mut feed = tokentap.feed();
    for (path, body) in [("/v1/first", "{\"n\":1}"), ("/v1/second", "{\"n\":2}")] {
        upstream.register(
            path,
            Script {
                status: 200,
                headers: vec![("content-type".into(), "application/json".into())],
                framing: Framing::ContentLength,
                pieces: vec![(Duration::ZERO, body.as_bytes().to_vec())],
            },
        );
    }
    let mut conn = std::net::TcpStream::connect(tokentap.addr).unwrap();
    let both = "POST /v1/first HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}\
                POST /v1/second HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
    conn.write_all(both.as_bytes()).unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(answer.matches("HTTP/1.1 200").count(), 2, "{answer}");
    let (first, second) = (answer.find("{\"n\":1}"), answer.find("{\"n\":2}"));
    assert!(first.is_some() && second.is_some() && first < second, "answers in request order: {answer}");
    let paths = [feed.next_record()["path"].clone(), feed.next_record()["path"].clone()];
    assert!(
        paths.contains(&serde_json::json!("/v1/first")) && paths.contains(&serde_json::json!("/v1/second")),
        "{paths:?}"
    );
}

#[test]
fn bytes_pass_unchanged_with_any_client_read_buffer_and_either_runtime() {
    // The client read buffer (`[connections] read_buffer_bytes`, none by default), a runtime per thread
    // (`work_stealing = false`) and pingora's proxy as the relay instead of tokentap's loop change
    // how bytes are read, never what is forwarded.
    let upstream = ScriptedUpstream::start();
    for (name, text) in [
        ("4 KiB buffer", "[connections]\nread_buffer_bytes = 4096\n"),
        ("7-byte buffer", "[connections]\nread_buffer_bytes = 7\n"),
        ("no work stealing", "work_stealing = false\nthreads = 2\n"),
        ("pingora relay", "[connections]\nrelay = \"pingora\"\n"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("tokentap.toml");
        std::fs::write(&config, text).unwrap();
        let tokentap = Tokentap::start(&upstream.url(), &["--config", config.to_str().unwrap()]);
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 60,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let counter = std::sync::atomic::AtomicU64::new(0);
        let big = prop::collection::vec(any::<u8>(), 0..200_000);
        runner
            .run(&(case_strategy(), big), |(case, big)| {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                let path = format!("/{}/case/{n}", name.replace(' ', "-"));
                let script = script_for(&case);
                let expected = script.body();
                upstream.register(&path, script);
                // Request bodies larger than any read buffer.
                let request_body = [case.request_body.clone(), big].concat();
                let resp =
                    http1::post(tokentap.addr, &path, &[("content-type", "application/octet-stream")], &request_body);
                prop_assert_eq!(resp.status, 200);
                prop_assert!(resp.complete, "response did not end cleanly");
                prop_assert_eq!(&resp.body, &expected, "{}: response body differs ({:?})", name, case.framing);
                let received = upstream.received(&path);
                prop_assert_eq!(received.as_deref(), Some(&request_body[..]), "{}: request body", name);
                Ok(())
            })
            .unwrap();
        assert_eq!(counter.into_inner(), 60, "{name}");
    }
}

/// A client configured to use tokentap as a forward proxy sends the absolute form
/// (`POST http://api.example/v1/…`): it is forwarded to the route's upstream, as the same request in
/// origin form would be, and recorded under its path.
#[test]
fn an_absolute_form_target_is_forwarded_to_the_route_and_recorded_by_its_path() {
    let mock = tokentap_e2e::Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let request = [
        format!(
            "POST http://api.example:443/v1/chat/completions?x=1 HTTP/1.1\r\nhost: api.example:443\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes(),
        body.to_vec(),
    ]
    .concat();
    let response = http1::send(tokentap.addr, &request);
    assert_eq!(response.status, 200, "{}", String::from_utf8_lossy(&response.body));
    assert!(response.complete);
    let record = feed.next_record();
    assert_eq!(record["path"], "/v1/chat/completions?x=1", "{record}");
    assert_eq!(record["outcome"], "ok", "{record}");
}

/// A client that sends `Expect: 100-continue` waits for the upstream's `100 Continue` before it
/// sends its body: the interim head is passed on while the request body has not come, then the
/// answer streams.
#[test]
fn a_client_expecting_100_continue_gets_it_before_it_sends_the_body() {
    use std::io::{Read, Write};
    let mock = Mock::start(&["--tokens", "5"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut conn = std::net::TcpStream::connect(tokentap.addr).unwrap();
    // A deadline, so a missing interim head fails the test instead of hanging it.
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    let interim = http1::read_head(&mut conn);
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");
    conn.write_all(body).unwrap();
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest).unwrap();
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.starts_with("HTTP/1.1 200"), "{rest}");
    assert!(rest.contains("data: [DONE]"), "{rest}");
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!(record["outcome"], "ok", "{record:#}");
    assert_eq!(record["status"], 200, "{record:#}");
}
