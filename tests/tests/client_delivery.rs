//! Client delivery from TCP ACKs: a slow reader behind tokentap. Handoff stamps stay smooth (the
//! kernel takes the bytes), while ACK times show how long the client really took. A client that
//! stops reading long enough blocks tokentap's writes: the provider's bytes then wait in
//! tokentap's upstream socket, and are dated by their arrival there, not by tokentap's late read.

use std::net::TcpStream;
use std::time::Duration;

use tokentap_e2e::{http1, Mock, Tokentap};

#[test]
fn slow_reader_shows_in_ack_times_not_in_handoffs() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();

    // A client with a 4 KiB receive buffer that reads 4 KiB every 10 ms (about 400 KB/s).
    let total = http1::slow_read_chat(tokentap.addr);
    assert!(total > 900_000, "read {total} bytes");

    let record = feed.next_record_for("/v1/chat/completions");
    let delivery = &record["timeline"]["client_delivery"];
    assert_eq!(delivery["available"], true, "{delivery}");
    assert_eq!(delivery["drained"], true, "{delivery}");
    assert!(delivery["backlog_max_bytes"].as_u64().unwrap() > 200_000, "{delivery}");
    let chunks = record["timeline"]["chunks"].as_array().unwrap();
    let ms = |c: &serde_json::Value, k: &str| c[k].as_f64().unwrap() / 1e6;
    let handoff_lag_max = chunks.iter().map(|c| ms(c, "t_handoff_ns") - ms(c, "t_up_ns")).fold(0.0, f64::max);
    let ack_lag_max = chunks.iter().map(|c| ms(c, "t_acked_ns") - ms(c, "t_handoff_ns")).fold(0.0, f64::max);
    // The hold is after tokentap's handoff, in the kernel and the client.
    assert!(
        ack_lag_max > 4.0 * handoff_lag_max.max(5.0),
        "ack lag {ack_lag_max} ms vs handoff lag {handoff_lag_max} ms"
    );
    for pair in chunks.windows(2) {
        assert!(ms(&pair[0], "t_acked_ns") <= ms(&pair[1], "t_acked_ns"));
    }
}

#[test]
fn a_client_that_stops_reading_does_not_make_the_provider_look_stalled() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    // The provider sends every event 5 ms apart; the client reads nothing for 3 s, so tokentap's
    // write blocks and the provider's last bytes wait in tokentap's upstream socket.
    let total = http1::stalled_read_chat(tokentap.addr, Duration::from_secs(3));
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!(record["outcome"], "ok", "read {total} bytes");
    let chunks = record["timeline"]["chunks"].as_array().unwrap();
    let ms = |c: &serde_json::Value, k: &str| c[k].as_f64().unwrap() / 1e6;
    // The wait shows where it was: between the arrival and the handoff (back-pressure) ...
    let handoff_lag_max = chunks.iter().map(|c| ms(c, "t_handoff_ns") - ms(c, "t_up_ns")).fold(0.0, f64::max);
    assert!(handoff_lag_max > 1_000.0, "handoff lag {handoff_lag_max} ms");
    // ... and in the span in which tokentap's window was closed to the provider.
    let held = record["timeline"]["upstream_held"].as_array().expect("a held span");
    let held_ms: f64 = held.iter().map(|s| ms(s, "end_ns") - ms(s, "start_ns")).sum();
    assert!(held_ms > 1_000.0, "{held:?}");
    // ... not between the provider's events: no stall, no inter-token gap of a second.
    let analysis = &record["analysis"];
    assert_eq!(analysis["stalls"]["count"], 0, "{}", analysis["stalls"]);
    let itl_max = analysis["metrics"]["itl_ms"]["max"].as_f64().unwrap();
    assert!(itl_max < 1_000.0, "inter-token latency max {itl_max} ms");
    let d = &record["diagnosis"];
    assert_eq!(d["kind"], "client_backlog", "{d:#}");
}

#[test]
fn fast_client_acks_follow_handoffs() {
    let mock = Mock::start(&["--ttft-ms", "5", "--itl-ms", "5", "--tokens", "20"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let resp = http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[]}"#,
    );
    assert!(resp.complete);
    let record = feed.next_record_for("/v1/chat/completions");
    let delivery = &record["timeline"]["client_delivery"];
    assert_eq!(delivery["available"], true, "{delivery}");
    for c in record["timeline"]["chunks"].as_array().unwrap() {
        assert!(c["t_acked_ns"].as_u64().unwrap() >= c["t_handoff_ns"].as_u64().unwrap(), "{c}");
    }
}

/// On a kept-alive connection the tail watch runs beside the connection (one watcher task for
/// all of them): each response is served at once and each record still has its tail
/// acknowledged.
#[test]
fn responses_on_a_kept_alive_connection_each_have_their_tail_acknowledged() {
    let mock = Mock::start(&["--ttft-ms", "5", "--itl-ms", "5", "--tokens", "10"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let mut conn = TcpStream::connect(tokentap.addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let request = http1::keep_alive_request(
        "POST",
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[]}"#,
    );
    let mut ids = Vec::new();
    for _ in 0..3 {
        let resp = http1::exchange(&mut conn, &request);
        assert!(resp.complete && resp.status == 200, "{} {:?}", resp.status, resp.headers);
        assert_ne!(resp.header("connection"), Some("close"), "the connection is kept: {:?}", resp.headers);
        ids.push(resp.header("x-tokentap-request-id").expect("request id").to_string());
    }
    // The connection stays open while the records arrive: the client's last ACK needs it.
    for _ in 0..3 {
        let record = feed.next_record_for("/v1/chat/completions");
        let id = record["request_id"].as_str().unwrap().to_string();
        assert!(ids.contains(&id), "{id} not among {ids:?}");
        let delivery = &record["timeline"]["client_delivery"];
        assert_eq!((&delivery["available"], &delivery["drained"]), (&true.into(), &true.into()), "{delivery}");
        let chunks = record["timeline"]["chunks"].as_array().unwrap();
        let last = chunks.last().expect("chunks");
        assert!(last["t_acked_ns"].as_u64().unwrap() >= last["t_handoff_ns"].as_u64().unwrap(), "{last}");
    }
    drop(conn);
}

/// Across a stall, the chunk before it is dated by its own ACK (loopback acknowledges at once),
/// not by the next reading of the socket, which is the handoff after the stall.
#[test]
fn the_chunk_before_a_stall_is_not_shown_acknowledged_after_it() {
    const STALL_MS: u64 = 400;
    let mock = Mock::start(&["--ttft-ms", "5", "--itl-ms", "5", "--tokens", "10"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let stall = STALL_MS.to_string();
    let resp = http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json"), ("x-mock-stall-at", "5"), ("x-mock-stall-ms", &stall)],
        br#"{"model":"m","stream":true,"messages":[]}"#,
    );
    assert!(resp.complete);
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!(record["timeline"]["client_delivery"]["available"], true, "{record}");
    let chunks = record["timeline"]["chunks"].as_array().unwrap();
    let ns = |c: &serde_json::Value, k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{k}: {c}"));
    // The chunk handed off last before the longest gap between handoffs.
    let (before, gap) = chunks
        .windows(2)
        .map(|w| (&w[0], ns(&w[1], "t_handoff_ns") - ns(&w[0], "t_handoff_ns")))
        .max_by_key(|(_, gap)| *gap)
        .unwrap();
    assert!(gap >= STALL_MS * 1_000_000 / 2, "the stall is in the stream: {gap} ns");
    let late = ns(before, "t_acked_ns") - ns(before, "t_handoff_ns");
    assert!(late < gap / 2, "acknowledged {late} ns after its handoff, across a {gap} ns stall: {before}");
}
