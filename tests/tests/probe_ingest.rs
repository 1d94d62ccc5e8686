//! Abuse of the probe ingest is rejected with a reason, and never disturbs proxied streams.

use std::thread;

use tokentap_e2e::{http1, Mock, Tokentap};

const INGEST: &str = "/_tokentap/v1/probe";

fn report(trace_id: &str) -> String {
    serde_json::json!({
        "schema": "tokentap.probe/1", "trace_id": trace_id, "span_id": "b7ad6b7169203331",
        "clock": {"offset_ms": 0.0, "uncertainty_ms": 0.5, "samples": 5},
        "marks": [], "paints": [], "long_frames": [], "audio": []
    })
    .to_string()
}

fn post(tokentap: &Tokentap, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let resp = http1::post(tokentap.addr, INGEST, headers, body);
    (resp.status, String::from_utf8_lossy(&resp.body).into_owned())
}

#[test]
fn bad_reports_are_rejected_with_reasons() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let text = [("content-type", "text/plain")];
    // A trace tokentap proxied, so that only the named defect is wrong in each case.
    let mut feed = tokentap.feed();
    let ok = http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[]}"#,
    );
    assert_eq!(ok.status, 200);
    let trace_id = feed.next_record()["trace_id"].as_str().unwrap().to_string();

    // (request headers, body, expected status, expected error text)
    type Case<'a> = (Vec<(&'a str, &'a str)>, Vec<u8>, u16, &'a str);
    let cases: Vec<Case> = vec![
        (text.to_vec(), report("0af7651916cd43dd8448eb211c80319c").into_bytes(), 404, "unknown or expired trace id"),
        (text.to_vec(), b"{not json".to_vec(), 400, "not valid JSON"),
        (
            text.to_vec(),
            report(&trace_id).replace("tokentap.probe/1", "tokentap.probe/9").into_bytes(),
            400,
            "unsupported schema",
        ),
        (text.to_vec(), vec![b' '; 300 * 1024], 413, "larger than"),
        (
            text.to_vec(),
            report(&trace_id).replace("\"offset_ms\":0.0", "\"offset_ms\":1e308").into_bytes(),
            400,
            "clock.offset_ms is invalid",
        ),
        (
            text.to_vec(),
            report(&trace_id).replace("\"paints\":[]", "\"paints\":[{\"t_ms\":1e308,\"chars\":3}]").into_bytes(),
            400,
            "paints.t_ms is invalid",
        ),
        (
            text.to_vec(),
            report(&trace_id)
                .replace(
                    "\"audio\":[]",
                    &format!("\"audio\":[{{\"kind\":\"{}\",\"audible_ms\":1.0}}]", "k".repeat(200_000)),
                )
                .into_bytes(),
            400,
            "audio.kind is invalid",
        ),
        (
            vec![("content-type", "application/x-www-form-urlencoded")],
            report(&trace_id).into_bytes(),
            415,
            "content type",
        ),
        (
            vec![("content-type", "text/plain"), ("origin", "https://evil.example")],
            report(&trace_id).into_bytes(),
            403,
            "origin not allowed",
        ),
    ];
    for (headers, body, status, reason) in cases {
        let (got, text) = post(&tokentap, &headers, &body);
        assert_eq!(got, status, "{reason}: {text}");
        assert!(text.contains(reason), "{reason}: {text}");
    }
    // A cross-origin preflight from a page that is not allowed is refused too.
    let preflight = http1::send(
        tokentap.addr,
        &http1::request_bytes("OPTIONS", INGEST, &[("origin", "https://evil.example")], b""),
    );
    assert_eq!(preflight.status, 403);
    // A page on the proxy's own origin (the host it was reached as) may post; the report is accepted.
    let (got, text) = post(
        &tokentap,
        &[("content-type", "text/plain"), ("origin", "http://tokentap.test")],
        report(&trace_id).as_bytes(),
    );
    assert_eq!(got, 202, "{text}");
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(health["browser_reports"]["accepted"], 1, "{health}");
}

#[test]
fn a_burst_of_reports_is_rate_limited_while_streams_stay_byte_exact() {
    let mock = Mock::start(&["--ttft-ms", "5", "--itl-ms", "2", "--tokens", "200"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let chat = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let headers = [("content-type", "application/json")];
    let direct = http1::post(mock.addr, "/v1/chat/completions", &headers, chat);
    let streams = thread::scope(|scope| {
        let streams: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| http1::post(tokentap.addr, "/v1/chat/completions", &headers, chat)))
            .collect();
        let body = report("0af7651916cd43dd8448eb211c80319c");
        let mut statuses = std::collections::BTreeMap::new();
        for _ in 0..1000 {
            let (status, _) = post(&tokentap, &[("content-type", "text/plain")], body.as_bytes());
            *statuses.entry(status).or_insert(0) += 1;
        }
        // Every report is refused: the first ones for their unknown trace, the rest by the rate limit.
        assert_eq!(statuses.values().sum::<i32>(), 1000);
        assert!(statuses.get(&429).copied().unwrap_or(0) >= 800, "{statuses:?}");
        assert_eq!(statuses.keys().filter(|s| **s != 429 && **s != 404).count(), 0, "{statuses:?}");
        streams.into_iter().map(|s| s.join().unwrap()).collect::<Vec<_>>()
    });
    for s in streams {
        assert!(s.complete);
        assert_eq!(s.body, direct.body);
    }
}

/// Posts a report from a socket bound to `source` (any 127.0.0.x is loopback): (status, body).
fn post_from(tokentap: &Tokentap, source: std::net::Ipv4Addr, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&std::net::SocketAddr::from((source, 0)).into()).unwrap();
    socket.connect(&tokentap.addr.into()).unwrap();
    let mut stream: std::net::TcpStream = socket.into();
    stream
        .write_all(&http1::request_bytes("POST", INGEST, &[("content-type", "text/plain")], body.as_bytes()))
        .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

/// Proxies one chat request and returns its trace id.
fn one_trace(tokentap: &Tokentap, feed: &mut tokentap_e2e::RecordFeed) -> String {
    let ok = http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[]}"#,
    );
    assert_eq!(ok.status, 200);
    feed.next_record()["trace_id"].as_str().unwrap().to_string()
}

#[test]
fn reports_per_trace_are_capped_whatever_address_they_come_from() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let trace_id = one_trace(&tokentap, &mut feed);
    let body = report(&trace_id);
    let mut statuses = std::collections::BTreeMap::new();
    for i in 0..20u8 {
        let (status, text) = post_from(&tokentap, std::net::Ipv4Addr::new(127, 0, 0, 2 + i), &body);
        if status == 429 {
            assert!(text.contains("max_reports_per_request"), "{text}");
        }
        *statuses.entry(status).or_insert(0) += 1;
    }
    // The default is two reports per proxied request of the trace.
    assert_eq!(statuses, [(202, 2), (429, 18)].into_iter().collect(), "{statuses:?}");
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(health["browser_reports"]["accepted"], 2, "{health}");
    assert_eq!(health["browser_reports"]["refused_trace_full"], 18, "{health}");
}

#[test]
fn reports_from_all_clients_share_one_budget() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "[probe]\ntotal_reports_per_second = 0.001\ntotal_burst = 3\n").unwrap();
    let tokentap = Tokentap::start(&mock.url, &["--config", config.path().to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let traces: Vec<String> = (0..5).map(|_| one_trace(&tokentap, &mut feed)).collect();
    let statuses: Vec<u16> = traces
        .iter()
        .enumerate()
        .map(|(i, t)| post_from(&tokentap, std::net::Ipv4Addr::new(127, 0, 0, 2 + i as u8), &report(t)).0)
        .collect();
    assert_eq!(statuses, [202, 202, 202, 429, 429]);
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(health["browser_reports"]["refused_over_budget"], 2, "{health}");
    // A report refused by the budget is not counted against its trace.
    assert_eq!(health["browser_reports"]["refused_trace_full"], 0, "{health}");
}

/// A page on another origin (an app's) that `[probe] allowed_origins` lists gets the probe, the
/// clock and the ingest across origins, preflights included; an origin not listed gets none.
#[test]
fn cross_origin_pages_are_served_only_when_their_origin_is_allowed() {
    const APP: &str = "http://app.test:3000";
    const OTHER: &str = "http://other.test:3000";
    let mock = Mock::start(&["--tokens", "3"]);
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), format!("[probe]\nallowed_origins = [\"{APP}\"]\n")).unwrap();
    let tokentap = Tokentap::start(&mock.url, &["--config", config.path().to_str().unwrap()]);
    let allowed = |resp: &http1::HttpResponse| resp.header("access-control-allow-origin") == Some(APP);

    // The probe's three files, imported by a module script across origins (a CORS request).
    for file in ["probe.js", "tokentap_probe.js", "tokentap_probe_bg.wasm"] {
        let path = format!("/_tokentap/probe/{file}");
        let resp = http1::get(tokentap.addr, &path, &[("origin", APP)]);
        assert_eq!(resp.status, 200, "{path}");
        assert!(allowed(&resp), "{path}: {:?}", resp.headers);
        let refused = http1::get(tokentap.addr, &path, &[("origin", OTHER)]);
        assert_eq!(refused.header("access-control-allow-origin"), None, "{path}: the browser must block it");
    }

    // Preflights of the clock and the ingest: allowed, and refused for an origin not listed.
    for path in ["/_tokentap/v1/clock", INGEST] {
        let preflight = |origin| {
            http1::send(
                tokentap.addr,
                &http1::request_bytes(
                    "OPTIONS",
                    path,
                    &[
                        ("origin", origin),
                        ("access-control-request-method", "POST"),
                        ("access-control-request-headers", "content-type"),
                    ],
                    b"",
                ),
            )
        };
        let ok = preflight(APP);
        assert_eq!(ok.status, 204, "{path}");
        assert!(allowed(&ok), "{path}: {:?}", ok.headers);
        assert!(ok.header("access-control-allow-methods").is_some_and(|m| m.contains("POST") && m.contains("GET")));
        assert!(ok.header("access-control-allow-headers").is_some_and(|h| h.contains("content-type")));
        assert_eq!(preflight(OTHER).status, 403, "{path}");
    }

    // The clock answers the allowed origin, and refuses the other.
    let clock = http1::get(tokentap.addr, "/_tokentap/v1/clock", &[("origin", APP)]);
    assert_eq!(clock.status, 200);
    assert!(allowed(&clock));
    let time: serde_json::Value = serde_json::from_slice(&clock.body).unwrap();
    assert!(time["server_time_ms"].as_f64().is_some_and(|t| t > 1e12), "{time}");
    assert_eq!(http1::get(tokentap.addr, "/_tokentap/v1/clock", &[("origin", OTHER)]).status, 403);

    // A report for a trace tokentap proxied (the app's model call carried the page's trace): the
    // allowed origin's is accepted and readable by the page; the other's is refused.
    let trace_id = "5b7ae4dacb7de318bdb19beab126ea8b";
    let traceparent = format!("00-{trace_id}-1111111111111111-01");
    let chat = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let proxied = http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json"), ("traceparent", &traceparent)],
        chat,
    );
    assert_eq!(proxied.status, 200);
    let body = report(trace_id);
    let refused =
        http1::post(tokentap.addr, INGEST, &[("content-type", "text/plain"), ("origin", OTHER)], body.as_bytes());
    assert_eq!(refused.status, 403, "{}", String::from_utf8_lossy(&refused.body));
    let accepted =
        http1::post(tokentap.addr, INGEST, &[("content-type", "text/plain"), ("origin", APP)], body.as_bytes());
    assert_eq!(accepted.status, 202, "{}", String::from_utf8_lossy(&accepted.body));
    assert!(allowed(&accepted));
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(health["browser_reports"]["accepted"], 1, "{health}");
}
