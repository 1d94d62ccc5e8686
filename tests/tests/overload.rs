//! Overload: when the record pipeline cannot keep up (here a worker slowed on purpose), tokentap
//! sheds analysis detail first and drops records only when its queue is full; every drop and shed
//! is counted, and the client's traffic is untouched.

use tokentap_e2e::{http1, Mock, Tokentap};

const BURST: u64 = 8;

fn chat(tokentap: &Tokentap) -> http1::HttpResponse {
    http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    )
}

#[test]
fn a_slow_worker_sheds_analysis_then_drops_and_counts_both() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    // Shedding starts at half the capacity (1 waiting), drops at 2 waiting.
    std::fs::write(&config, "[analysis]\nqueue_capacity = 2\n").unwrap();
    let tokentap = Tokentap::start_with_env(
        &["--upstream", &mock.url, "--config", config.to_str().unwrap()],
        // Each record waits 3 s in the worker: the first one of the burst holds it while the rest
        // of the burst (sent in well under 3 s) queues up.
        // (At the harness's normal priority: an idle-priority worker could wait for CPU while
        // other tests run, and the shedding shown here does not depend on the priority.)
        &[("TOKENTAP_TEST_WORKER_DELAY_MS", "3000")],
    );
    let mut feed = tokentap.feed();
    // One request on an idle pipeline is analysed as usual.
    assert_eq!(chat(&tokentap).status, 200);
    let first = feed.next_record();
    assert!(first.get("analysis").is_some() && first.get("analysis_shed").is_none(), "{first}");
    for _ in 0..BURST {
        let response = chat(&tokentap);
        assert_eq!(response.status, 200);
        assert!(response.complete, "forwarding is not affected by a backed-up pipeline");
    }
    // Every request ends up written or dropped; each loop turn waits for the next stored record.
    let mut records = Vec::new();
    let health = loop {
        let (_, health) = tokentap.admin_get("/_tokentap/api/health");
        let r = &health["records"];
        let accounted = r["written"].as_u64().unwrap() + r["dropped"].as_u64().unwrap();
        if r["submitted"] == BURST + 1
            && accounted == BURST + 1
            && records.len() as u64 + 1 == r["written"].as_u64().unwrap()
        {
            break health;
        }
        records.push(feed.next_record());
    };
    let r = &health["records"];
    assert!(r["shed"].as_u64().unwrap() >= 1, "{health}");
    assert!(r["dropped"].as_u64().unwrap() >= 1, "{health}");
    assert_eq!(r["shed"].as_u64().unwrap(), records.iter().filter(|x| x["analysis_shed"] == true).count() as u64);
    // A shed record keeps the stamps and loses only the analysis.
    let shed = records.iter().find(|x| x["analysis_shed"] == true).expect("a shed record");
    assert!(shed.get("analysis").is_none(), "{shed}");
    assert_eq!(shed["status"], 200);
    assert!(shed["timeline"]["chunk_count"].as_u64().unwrap() > 0, "{shed}");
    // And /metrics says the same.
    let metrics = http1::get(tokentap.admin, "/metrics", &[]);
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(text.contains(&format!("tokentap_records_shed_total {}", r["shed"])), "{text}");
}

/// Many large bodies at once cannot grow memory past `[timeline] max_kept_bytes`: a response
/// that would pass the budget of all requests is forwarded whole, analysed as a prefix, counted,
/// and the budget is whole again once its record is written.
#[test]
fn the_budget_of_kept_bytes_bounds_analysis_not_forwarding() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "200"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    std::fs::write(&config, "[timeline]\nmax_kept_bytes = 2000\n").unwrap();
    let tokentap = Tokentap::start(&mock.url, &["--config", config.to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let response = chat(&tokentap);
    assert!(response.status == 200 && response.complete, "forwarding is whole");
    assert!(response.body.len() > 2000, "the stream is larger than the budget: {}", response.body.len());
    let record = feed.next_record();
    assert_eq!(record["timeline"]["analysis_bytes_truncated"], true, "{}", record["timeline"]);
    assert_eq!(record["timeline"]["body_bytes"], response.body.len(), "counts go on");
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    assert!(health["records"]["kept_budget_hits"].as_u64().unwrap() >= 1, "{health}");
    assert_eq!(health["records"]["kept_bytes"], 0, "released once recorded: {health}");
}
