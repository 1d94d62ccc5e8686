//! The re-buffering verdict for holds that are not a proxy's: a slow-reading client behind
//! tokentap (the kernel's send buffer holds the text) and a page whose main thread is blocked
//! (reading and painting wait). Each scenario runs three times and must give the same verdict
//! every time (the slow reader once more, stalled before its first read); each run prints its numbers (`--nocapture`) for the margins in docs/metrics.md.
//! `tokentap explain` is checked on the slow reader's record, from the admin API and the store.

use std::time::Duration;

use serde_json::Value;
use tokentap_e2e::browser::{run_page, PageRun};
use tokentap_e2e::diagnosis::{page_query, summary};
use tokentap_e2e::process::run_tokentap;
use tokentap_e2e::{http1, Mock, Tokentap};

const RUNS: usize = 3;

/// One response read by a slow client (see `http1::slow_read_chat`), which first reads nothing for
/// `stall`.
fn slow_read(tokentap: &Tokentap, stall: Duration) {
    let total = http1::slow_read_chat_after(tokentap.addr, stall);
    assert!(total > 900_000, "read {total} bytes");
}

#[test]
fn slow_reader_is_named_client_backlog() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let mut last: Option<Value> = None;
    // The last run's client reads nothing for 2 s first: every event waits about as long, so none
    // is held beyond the first, and the backlog names the client all the same.
    for run in 0..=RUNS {
        slow_read(&tokentap, if run == RUNS { Duration::from_secs(2) } else { Duration::ZERO });
        let record = feed.next_record_for("/v1/chat/completions");
        eprintln!("[slow reader #{run}] {}", summary(&record));
        let d = &record["diagnosis"];
        assert_eq!(d["kind"], "client_backlog", "run {run}: {d:#}");
        assert!(
            d["verdict"].as_str().unwrap().starts_with("after tokentap's handoff: client/kernel backlog up to "),
            "{d:#}"
        );
        // No browser here: the record says which hops it could not see.
        let unobserved: Vec<&str> =
            d["unobserved"].as_array().unwrap().iter().map(|u| u["hop"].as_str().unwrap()).collect();
        assert_eq!(unobserved, ["browser_arrival", "paint"]);
        last = Some(record);
    }

    // `tokentap explain` prints the same verdict, from the admin API and from the store.
    let record = last.unwrap();
    let request_id = record["request_id"].as_str().unwrap();
    let verdict = record["diagnosis"]["verdict"].as_str().unwrap();
    let admin = format!("http://{}", tokentap.admin);
    let data_dir = tokentap.data_dir.path().to_str().unwrap();
    for source in [["--admin", admin.as_str()], ["--data-dir", data_dir]] {
        let (status, stdout, stderr) = run_tokentap(&["explain", request_id, source[0], source[1]]);
        assert!(status.success(), "explain {source:?}: {stderr}");
        assert!(stdout.contains(&format!("verdict: {verdict}")), "explain {source:?}:\n{stdout}");
        for hop in ["handoff", "client_ack", "browser_arrival", "client backlog high-water mark"] {
            assert!(stdout.contains(hop), "{hop} missing from:\n{stdout}");
        }
    }
    let (status, stdout, _) = run_tokentap(&["explain", request_id, "--admin", &admin, "--json"]);
    assert!(status.success());
    let json: Value = serde_json::from_str(&stdout).expect("explain --json prints JSON");
    assert_eq!(json["kind"], "client_backlog");
    let (status, _, stderr) = run_tokentap(&["explain", "000000000000000000000000", "--admin", &admin]);
    assert!(!status.success() && stderr.contains("404"), "{stderr}");
}

#[test]
fn blocked_main_thread_is_named_rendering() {
    const BLOCK_MS: f64 = 300.0;
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    // Events every 20 ms; the page busy-waits 300 ms on the main thread at delta 2 and every 20th
    // delta after it, so text keeps arriving while the page cannot read or paint it.
    let schedule = [("x-mock-tokens", "80"), ("x-mock-itl-ms", "20"), ("x-mock-ttft-ms", "100")];
    let query = page_query(&schedule, &format!("&block_at_delta=2&block_every=20&block_ms={BLOCK_MS}"));
    let origin = format!("http://{}", tokentap.addr);
    for run in 0..RUNS {
        let out = run_page(&PageRun::test_page(&origin, "stream.html", &query));
        assert!(out["error"].is_null(), "browser run failed: {out:#}");
        assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
        assert!(out["result"]["blocks"].as_array().unwrap().len() >= 3, "{out:#}");
        let request_id = out["result"]["request_id"].as_str().expect("request id").to_string();
        let record = loop {
            let record = feed.next_record();
            if record["request_id"] == request_id.as_str() && !record["browser"].is_null() {
                break record;
            }
        };
        eprintln!("[blocked main thread #{run}] {}", summary(&record));
        let d = &record["diagnosis"];
        assert_eq!(d["kind"], "browser_main_thread", "run {run}: {d:#}");
        assert!(d["verdict"].as_str().unwrap().starts_with("in the browser: "), "{d:#}");
        assert!(d["verdict"].as_str().unwrap().contains("delayed by long tasks"), "{d:#}");
        for hop in &d["hops"].as_array().unwrap()[..2] {
            assert_eq!(hop["rebuffers"], false, "tokentap and the socket kept up: {hop:#}");
        }
    }
}
