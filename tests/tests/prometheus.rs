//! `GET /metrics` on the admin listener: valid for `promtool check metrics`, and a real Prometheus
//! (the Debian package; scripts/setup.sh installs it) scrapes it and answers a query for the TTFT
//! histogram with the number of requests sent; scraping a fleet of three, the shipped dashboard's
//! queries aggregate over all of them.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokentap_e2e::process::Proc;
use tokentap_e2e::{http1, Mock, Tokentap};

const CHAT: &str = "/v1/chat/completions";
const REQUESTS: usize = 3;

fn tool(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join(name)).find(|p| p.is_file()))
        .unwrap_or_else(|| PathBuf::from("/usr/bin").join(name));
    assert!(
        path.is_file(),
        "{name} not found: run scripts/setup.sh test, which installs the Debian prometheus package"
    );
    path
}

fn chat_body() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "model": "mock-gpt",
        "stream": true,
        "messages": [{"role": "user", "content": "Count to five."}],
    }))
    .unwrap()
}

/// tokentap in front of the mock, after `REQUESTS` streamed requests were recorded.
fn tokentap_with_traffic(mock: &Mock) -> Tokentap {
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    for _ in 0..REQUESTS {
        let headers = [
            ("content-type", "application/json"),
            ("x-mock-ttft-ms", "20"),
            ("x-mock-itl-ms", "2"),
            ("x-mock-tokens", "5"),
        ];
        let resp = http1::post(tokentap.addr, CHAT, &headers, &chat_body());
        assert_eq!(resp.status, 200);
        feed.next_record_for(CHAT);
    }
    tokentap
}

fn scrape(tokentap: &Tokentap) -> (String, String) {
    let resp = http1::get(tokentap.admin, "/metrics", &[]);
    assert_eq!(resp.status, 200);
    let content_type = resp.header("content-type").unwrap_or("").to_string();
    (content_type, String::from_utf8(resp.body).expect("UTF-8 exposition"))
}

#[test]
fn metrics_endpoint_passes_promtool_check() {
    let mock = Mock::start(&[]);
    let tokentap = tokentap_with_traffic(&mock);
    let (content_type, text) = scrape(&tokentap);
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    let count_line = text
        .lines()
        .find(|l| l.starts_with("tokentap_ttft_answer_seconds_count{"))
        .unwrap_or_else(|| panic!("no TTFT histogram in:\n{text}"));
    assert!(count_line.ends_with(&format!(" {REQUESTS}")), "{count_line}");
    assert!(count_line.contains("gen_ai_request_model=\"mock-gpt\""), "{count_line}");
    for family in [
        "gen_ai_client_operation_duration_seconds",
        "gen_ai_client_operation_time_to_first_chunk_seconds",
        "gen_ai_client_operation_time_per_output_chunk_seconds",
        "tokentap_requests_total",
        "tokentap_records_dropped_total",
        "tokentap_telemetry_dropped_total",
    ] {
        assert!(text.contains(&format!("# TYPE {family} ")), "{family} missing from:\n{text}");
    }
    assert!(
        text.contains("gen_ai_client_operation_duration_seconds_bucket{") && text.contains("le=\"81.92\""),
        "{text}"
    );

    let mut child = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool check metrics:\n{report}\n--- exposition ---\n{text}"
    );
}

/// A port that was free a moment ago (Prometheus cannot report the port it picked for `:0`).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts Prometheus on a free port and waits until it is ready. Another process can take the
/// port between the probe bind and Prometheus's own; Prometheus then exits saying so, and it is
/// started again on another port.
fn start_prometheus(config: &std::path::Path, dir: &std::path::Path) -> (Proc, std::net::SocketAddr) {
    for attempt in 0..5 {
        let port = free_port();
        let mut cmd = Command::new(tool("prometheus"));
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join(format!("data-{attempt}")).display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"));
        let mut prometheus = Proc::spawn(cmd);
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = prometheus.try_wait() {
                let stderr = prometheus.stderr();
                assert!(stderr.contains("address already in use"), "Prometheus exited ({status}):\n{stderr}");
                break;
            }
            let stream = std::net::TcpStream::connect(addr);
            if stream.is_ok() && http1::get(addr, "/-/ready", &[]).status == 200 {
                return (prometheus, addr);
            }
            assert!(Instant::now() < deadline, "Prometheus not ready after 60 s:\n{}", prometheus.stderr());
            // Polling readiness: Prometheus has no readiness signal but its endpoint.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("Prometheus could not bind a free port in five tries");
}

fn get_json(addr: std::net::SocketAddr, path: &str) -> Option<serde_json::Value> {
    let stream = std::net::TcpStream::connect(addr).ok()?;
    drop(stream);
    let resp = http1::get(addr, path, &[]);
    (resp.status == 200).then(|| serde_json::from_slice(&resp.body).ok()).flatten()
}

#[test]
fn real_prometheus_scrapes_the_ttft_histogram() {
    let mock = Mock::start(&[]);
    let tokentap = tokentap_with_traffic(&mock);

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: tokentap\n    metrics_path: /metrics\n    static_configs:\n      - targets: ['{}']\n",
            tokentap.admin
        ),
    )
    .unwrap();
    let (prometheus, addr) = start_prometheus(&config, dir.path());

    // Ask Prometheus until it has scraped the three requests' TTFTs, within a deadline.
    let query = "/api/v1/query?query=sum(tokentap_ttft_answer_seconds_count)";
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    loop {
        if let Some(answer) = get_json(addr, query) {
            let value = answer["data"]["result"][0]["value"][1].as_str().map(str::to_string);
            if value.as_deref() == Some(&REQUESTS.to_string()) {
                break;
            }
            last = Some(answer);
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never reported {REQUESTS} TTFT samples; last answer {last:?}; stderr:\n{}",
            prometheus.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The scrape itself was healthy.
    let targets = get_json(addr, "/api/v1/targets").expect("targets");
    assert_eq!(targets["data"]["activeTargets"][0]["health"], "up", "{targets}");
    // A histogram quantile works on the buckets (the answer is some finite number of seconds).
    let p95 = get_json(
        addr,
        "/api/v1/query?query=histogram_quantile(0.95,sum(rate(tokentap_ttft_answer_seconds_bucket[1m]))by(le))",
    );
    assert!(p95.is_some_and(|v| v["status"] == "success"));
}

/// Clients choose the model name: past 100 distinct names per metric, new ones are counted under
/// `_OTHER`, so a scrape stays small whatever they send.
#[test]
fn client_chosen_model_names_are_capped() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "0", "--tokens", "2"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let models = 150;
    for i in 0..models {
        let body = serde_json::to_vec(&serde_json::json!({
            "model": format!("client-model-{i}"), "stream": true, "messages": [],
        }))
        .unwrap();
        let resp = http1::post(tokentap.addr, CHAT, &[("content-type", "application/json")], &body);
        assert_eq!(resp.status, 200);
        feed.next_record_for(CHAT);
    }
    let (_, text) = scrape(&tokentap);
    let requests: Vec<&str> = text.lines().filter(|l| l.starts_with("tokentap_requests_total{")).collect();
    let names: std::collections::BTreeSet<&str> =
        requests.iter().filter_map(|l| l.split("gen_ai_request_model=\"").nth(1)?.split('"').next()).collect();
    assert_eq!(names.len(), 101, "{names:?}");
    assert!(names.contains("_OTHER") && names.contains("client-model-0"), "{names:?}");
    let other: u64 = requests
        .iter()
        .filter(|l| l.contains("gen_ai_request_model=\"_OTHER\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(other, 50, "{requests:?}");
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    assert!(health["telemetry"]["metric_series_folded"].as_u64().unwrap() >= 50, "{health}");
}

/// The scheduling lag probe starts with the first recorded request; its samples reach the health
/// answer and the exported histogram.
#[test]
fn the_runtime_scheduling_lag_is_sampled_once_traffic_starts() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    let lag = &health["self_overhead"]["scheduling_lag"];
    assert_eq!(lag["samples"], 0, "{health}");
    assert!(lag["p50_us"].is_null(), "{health}");

    let resp = http1::post(tokentap.addr, CHAT, &[("content-type", "application/json")], &chat_body());
    assert_eq!(resp.status, 200);
    // The probe samples every 25-75 ms: poll until a few samples are in.
    let deadline = Instant::now() + Duration::from_secs(30);
    let lag = loop {
        let (_, health) = tokentap.admin_get("/_tokentap/api/health");
        let lag = health["self_overhead"]["scheduling_lag"].clone();
        if lag["samples"].as_u64().unwrap_or(0) >= 3 {
            break lag;
        }
        assert!(Instant::now() < deadline, "no scheduling lag samples after 30 s: {health}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let (p50, p99) = (lag["p50_us"].as_u64().unwrap(), lag["p99_us"].as_u64().unwrap());
    let (recent_max, max) = (lag["recent_max_us"].as_u64().unwrap(), lag["max_us"].as_u64().unwrap());
    assert!(p50 <= p99 && p99 <= recent_max && recent_max <= max, "{lag}");
    assert!(lag["recent_samples"].as_u64().unwrap() >= 3, "{lag}");

    let (_, text) = scrape(&tokentap);
    let count = text
        .lines()
        .find(|l| l.starts_with("tokentap_self_overhead_scheduling_lag_seconds_count"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no scheduling lag histogram in:\n{text}"));
    assert!(count >= 3, "{count}");
}

/// The query string of a PromQL expression.
fn query_path(expr: &str) -> String {
    let mut encoded = String::new();
    for b in expr.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => encoded.push(b as char),
            _ => encoded.push_str(&format!("%{b:02X}")),
        }
    }
    format!("/api/v1/query?query={encoded}")
}

/// Asks Prometheus `expr` until `done` holds for its answer, within a minute.
fn query_until(addr: std::net::SocketAddr, expr: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = get_json(addr, &query_path(expr));
        if let Some(a) = answer.as_ref().filter(|a| done(a)) {
            return a.clone();
        }
        assert!(Instant::now() < deadline, "{expr}: last answer {answer:?}");
        // Polling: Prometheus scrapes on its own schedule.
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn scalar(answer: &serde_json::Value) -> Option<f64> {
    answer["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// A fleet: Prometheus scrapes three instances; the shipped dashboard's queries each return one
/// aggregate over all of them (never a series per instance), and the request count is the sum of
/// the instances' records.
#[test]
fn the_dashboard_aggregates_a_fleet_of_three() {
    let mock = Mock::start(&[]);
    let instances: Vec<Tokentap> = (0..3).map(|_| Tokentap::start(&mock.url, &[])).collect();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    let targets: Vec<String> = instances.iter().map(|t| format!("'{}'", t.admin)).collect();
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: tokentap\n    metrics_path: /metrics\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )
    .unwrap();
    let (_prometheus, addr) = start_prometheus(&config, dir.path());
    query_until(addr, "count(up{job=\"tokentap\"} == 1)", |a| scalar(a) == Some(3.0));

    // Instance k serves k + 1 requests.
    let mut recorded = 0;
    for (k, t) in instances.iter().enumerate() {
        let mut feed = t.feed();
        for _ in 0..=k {
            let headers = [("content-type", "application/json"), ("x-mock-ttft-ms", "5"), ("x-mock-tokens", "4")];
            assert_eq!(http1::post(t.addr, CHAT, &headers, &chat_body()).status, 200);
            feed.next_record_for(CHAT);
            recorded += 1;
        }
    }
    let total = "sum(tokentap_requests_total{job=~\"tokentap\"})";
    query_until(addr, total, |a| scalar(a) == Some(f64::from(recorded)));
    let per_instance = query_until(addr, "sum by (instance) (tokentap_requests_total)", |a| {
        a["data"]["result"].as_array().is_some_and(|r| r.len() == 3)
    });
    let mut counts: Vec<f64> = per_instance["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["value"][1].as_str().unwrap().parse().unwrap())
        .collect();
    counts.sort_by(f64::total_cmp);
    assert_eq!(counts, [1.0, 2.0, 3.0]);

    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../collector-config/grafana-dashboard.json"))
            .unwrap(),
    )
    .unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_owned))
        .collect();
    assert!(exprs.len() > 10, "{exprs:?}");
    for expr in &exprs {
        let filled = expr
            .replace("$job", "tokentap")
            .replace("$model", ".*")
            .replace("$route", ".*")
            .replace("$__rate_interval", "1m")
            .replace("$__range", "10m");
        let answer = get_json(addr, &query_path(&filled)).unwrap_or_else(|| panic!("{filled}: no answer"));
        assert_eq!(answer["status"], "success", "{filled}: {answer}");
        let series = answer["data"]["result"].as_array().map_or(0, Vec::len);
        // An aggregate without `by` is one series for the whole fleet; grouped ones never split
        // by instance.
        if !filled.contains(" by (") || filled.contains("sum by (le)") {
            assert!(series <= 1, "{filled}: {series} series (one per instance?): {answer}");
        }
        for s in answer["data"]["result"].as_array().into_iter().flatten() {
            assert!(s["metric"].get("instance").is_none(), "{filled} keeps the instance label: {s}");
        }
    }
}
