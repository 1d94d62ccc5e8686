//! `tokentap report`: its numbers equal a direct recomputation from the raw records.
//!
//! The expected values are computed here, independently of tokentap's report module, from the
//! records file read as plain JSON: the last line per request id, the time window, warm-up
//! exclusion, numpy's default percentile (linear interpolation between closest ranks), the goodput
//! rule of docs/metrics.md.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::{json, Value};
use tokentap_e2e::numeric::{close, numpy_percentile};
use tokentap_e2e::process::run_tokentap;
use tokentap_e2e::{http1, Mock, Tokentap};

const CHAT: &str = "/v1/chat/completions";
const METRICS: [&str; 5] = ["ttft_answer_ms", "time_to_first_paint_ms", "tpot_ms", "output_tps", "e2e_ms"];

/// The last line per request id, in file order of first appearance.
fn read_records(files: &[&Path]) -> Vec<Value> {
    let mut order = Vec::new();
    let mut by_id: HashMap<String, Value> = HashMap::new();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap().lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).unwrap();
            let id = v["request_id"].as_str().unwrap().to_string();
            if by_id.insert(id.clone(), v).is_none() {
                order.push(id);
            }
        }
    }
    order.into_iter().map(|id| by_id.remove(&id).unwrap()).collect()
}

fn metric(r: &Value, name: &str) -> Option<f64> {
    if name == "time_to_first_paint_ms" {
        return r["browser"]["time_to_first_paint_ms"].as_f64();
    }
    r["analysis"]["metrics"][name].as_f64()
}

struct Slo {
    ttft_answer_ms: Option<f64>,
    tpot_ms: Option<f64>,
    e2e_ms: Option<f64>,
    first_paint_ms: Option<f64>,
}

/// docs/metrics.md: good = succeeded and every configured objective met. An undefined value is
/// not met, except tpot of a response with fewer than two content events (not applicable).
fn is_good(r: &Value, slo: &Slo) -> bool {
    if r["outcome"] != "ok" {
        return false;
    }
    let within = |limit: Option<f64>, value: Option<f64>| limit.is_none_or(|l| value.is_some_and(|v| v <= l));
    let tpot_ok = match (slo.tpot_ms, metric(r, "tpot_ms")) {
        (None, _) => true,
        (Some(l), Some(v)) => v <= l,
        (Some(_), None) => r["analysis"].is_object() && r["analysis"]["flags"]["token_text_truncated"] != true,
    };
    within(slo.ttft_answer_ms, metric(r, "ttft_answer_ms"))
        && tpot_ok
        && within(slo.e2e_ms, metric(r, "e2e_ms"))
        && within(slo.first_paint_ms, metric(r, "time_to_first_paint_ms"))
}

/// Checks one group of the report against the records that belong to it.
fn check_group(group: &Value, records: &[&Value], slo: &Slo) {
    let label = group["label"].as_str().unwrap();
    assert_eq!(group["requests"], records.len() as u64, "{label}: request count");
    let ok: Vec<&Value> = records.iter().copied().filter(|r| r["outcome"] == "ok").collect();
    assert_eq!(group["outcomes"]["ok"].as_u64().unwrap_or(0), ok.len() as u64, "{label}: ok count");
    for name in METRICS {
        let samples: Vec<f64> = ok.iter().filter_map(|r| metric(r, name)).collect();
        let d = &group["metrics"][name];
        if samples.is_empty() {
            assert!(d.is_null(), "{label} {name}: no samples, but the report says {d}");
            continue;
        }
        assert_eq!(d["count"], samples.len() as u64, "{label} {name}: count");
        for (key, q) in [("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("max", 100.0)] {
            let expected = numpy_percentile(&samples, q);
            let got = d[key].as_f64().unwrap();
            assert!(close(got, expected), "{label} {name} {key}: report {got}, recomputed {expected}");
        }
    }
    let analysed: Vec<&Value> = ok.iter().copied().filter(|r| r["analysis"].is_object()).collect();
    let stalled = analysed.iter().filter(|r| r["analysis"]["stalls"]["count"].as_u64().unwrap() > 0).count();
    assert_eq!(group["stalls"]["analysed"], analysed.len() as u64, "{label}: analysed");
    assert_eq!(group["stalls"]["stalled"], stalled as u64, "{label}: stalled");

    let good: Vec<&Value> = records.iter().copied().filter(|r| is_good(r, slo)).collect();
    let g = &group["goodput"];
    assert_eq!(g["total"], records.len() as u64, "{label}: goodput total");
    assert_eq!(g["good"], good.len() as u64, "{label}: good");
    let tokens: u64 =
        good.iter().map(|r| r["analysis"]["metrics"]["output_tokens"]["total"].as_u64().unwrap_or(0)).sum();
    assert_eq!(g["good_output_tokens"], tokens, "{label}: good tokens");
    let start = records.iter().map(|r| r["timeline"]["t0_unix_ns"].as_u64().unwrap()).min().unwrap();
    let end = records
        .iter()
        .map(|r| r["timeline"]["t0_unix_ns"].as_u64().unwrap() + r["timeline"]["t_end_ns"].as_u64().unwrap_or(0))
        .max()
        .unwrap();
    let wall_s = (end - start) as f64 / 1e9;
    assert!(close(g["wall_s"].as_f64().unwrap(), wall_s), "{label}: wall {} vs {wall_s}", g["wall_s"]);
    assert!(close(g["good_tokens_per_s"].as_f64().unwrap(), tokens as f64 / wall_s), "{label}: good tokens/s");
    assert!(close(g["attainment"].as_f64().unwrap(), good.len() as f64 / records.len() as f64), "{label}: attainment");
}

fn report_json(args: &[&str]) -> Value {
    let mut all = vec!["report", "--json"];
    all.extend_from_slice(args);
    let (status, stdout, stderr) = run_tokentap(&all);
    assert!(status.success(), "tokentap report {args:?} failed:\n{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{stdout}"))
}

fn chat_body(model: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "model": model, "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Tell me about Paris."}],
    }))
    .unwrap()
}

/// Runs a small mixed workload through the real proxy; the processes (and the data directory)
/// live as long as the returned values.
fn scripted_run(config: &Path) -> (Mock, Tokentap) {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &["--config", config.to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("mock-a", &[("x-mock-tokens", "20"), ("x-mock-ttft-ms", "30")]),
        ("mock-a", &[("x-mock-tokens", "10"), ("x-mock-ttft-ms", "60")]),
        ("mock-b", &[("x-mock-tokens", "30"), ("x-mock-ttft-ms", "20"), ("x-mock-itl-ms", "2")]),
        ("mock-a", &[("x-mock-tokens", "15"), ("x-mock-ttft-ms", "400")]),
        ("mock-b", &[("x-mock-status", "500")]),
        ("mock-a", &[("x-mock-tokens", "1"), ("x-mock-ttft-ms", "10")]),
        (
            "mock-b",
            &[("x-mock-tokens", "12"), ("x-mock-itl-ms", "5"), ("x-mock-stall-at", "4"), ("x-mock-stall-ms", "1100")],
        ),
        ("mock-a", &[("x-mock-tokens", "25"), ("x-mock-reasoning-tokens", "8"), ("x-mock-ttft-ms", "40")]),
    ];
    for (model, extra) in cases {
        let mut headers = vec![("content-type", "application/json")];
        headers.extend_from_slice(extra);
        let resp = http1::post(tokentap.addr, CHAT, &headers, &chat_body(model));
        assert!(resp.status == 200 || resp.status == 500, "status {}", resp.status);
        feed.next_record_for(CHAT);
    }
    (mock, tokentap)
}

#[test]
fn report_over_a_real_run_equals_the_recomputation() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    std::fs::write(
        &config,
        "[analysis]\nwarmup_requests = 2\n[slo]\nttft_answer_ms = 250\ntpot_ms = 30\ne2e_ms = 2000\n",
    )
    .unwrap();
    let slo = Slo { ttft_answer_ms: Some(250.0), tpot_ms: Some(30.0), e2e_ms: Some(2000.0), first_paint_ms: None };
    let (_mock, tokentap) = scripted_run(&config);
    let data_dir = tokentap.data_dir.path().to_str().unwrap().to_string();
    let records = read_records(&[&tokentap.records_file()]);
    assert_eq!(records.len(), 8);

    for include_warmup in [false, true] {
        let mut args = vec!["--data-dir", &data_dir, "--config", config.to_str().unwrap(), "--group-by", "model"];
        if include_warmup {
            args.push("--include-warmup");
        }
        let report = report_json(&args);
        let used: Vec<&Value> =
            records.iter().filter(|r| include_warmup || r["conditions"]["warm_up"] != true).collect();
        assert_eq!(report["records_total"], 8);
        assert_eq!(report["warm_up_excluded"], if include_warmup { 0 } else { 2 }, "{}", report["warm_up_excluded"]);
        assert_eq!(report["records_used"], used.len() as u64);
        check_group(&report["overall"], &used, &slo);
        let mut by_model: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
        for r in &used {
            by_model.entry(r["conditions"]["model"].as_str().unwrap().to_string()).or_default().push(r);
        }
        let groups = report["groups"].as_array().unwrap();
        assert_eq!(groups.len(), by_model.len());
        for (group, (model, rs)) in groups.iter().zip(&by_model) {
            assert_eq!(group["label"], format!("model={model}"));
            check_group(group, rs, &slo);
        }
        // The reproducibility section states the conditions.
        let c = &report["conditions"];
        assert_eq!(
            c["output_tokens"]["count"],
            used.iter().filter(|r| r["analysis"]["metrics"]["output_tokens"].is_object()).count() as u64
        );
        assert_eq!(c["concurrency_at_t0"]["count"], used.len() as u64);
        assert!(c["record_versions"].as_object().unwrap().contains_key(env!("CARGO_PKG_VERSION")), "{c}");
    }

    // Markdown: the same sample counts, stated next to the numbers.
    let (status, markdown, stderr) =
        run_tokentap(&["report", "--data-dir", &data_dir, "--config", config.to_str().unwrap()]);
    assert!(status.success(), "{stderr}");
    let used: Vec<&Value> = records.iter().filter(|r| r["conditions"]["warm_up"] != true).collect();
    let ttft_n = used.iter().filter(|r| r["outcome"] == "ok" && metric(r, "ttft_answer_ms").is_some()).count();
    assert!(markdown.contains(&format!("| all | ttft_answer_ms | {ttft_n} |")), "{markdown}");
    assert!(markdown.contains("warm-up excluded (2 left out)"), "{markdown}");
    assert!(markdown.contains("## Conditions (reproducibility)"), "{markdown}");
}

/// A deterministic pseudo-random sequence (no dependency needed for this).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Many records with controlled values, built from a real record: last line per request id wins
/// (browser reports rewrite records), time window, grouping by route, model and concurrency, and
/// every objective including first paint.
#[test]
fn report_over_a_synthetic_store_equals_the_recomputation() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    std::fs::write(&config, "[slo]\nttft_answer_ms = 500\ntpot_ms = 25\ne2e_ms = 3000\nfirst_paint_ms = 700\n")
        .unwrap();
    let plain = dir.path().join("plain.toml");
    std::fs::write(&plain, "").unwrap();
    let (_mock, tokentap) = scripted_run(&plain);
    let template = read_records(&[&tokentap.records_file()]).into_iter().find(|r| r["outcome"] == "ok").unwrap();

    let mut rng = Lcg(7);
    let base_t0 = 1_800_000_000_000_000_000u64;
    let mut lines = Vec::new();
    for i in 0..300u64 {
        let mut r = template.clone();
        r["request_id"] = json!(format!("{i:024x}"));
        r["route"] = json!(if i % 3 == 0 { "/anthropic" } else { "/" });
        r["conditions"]["model"] = json!(["m-small", "m-large"][(i % 2) as usize]);
        r["conditions"]["concurrency_at_t0"] = json!((rng.next() * 12.0) as u64);
        r["conditions"]["warm_up"] = json!(i % 50 < 2);
        r["timeline"]["t0_unix_ns"] = json!(base_t0 + i * 1_000_000_000);
        let e2e = 200.0 + rng.next() * 4000.0;
        r["timeline"]["t_end_ns"] = json!((e2e * 1e6) as u64);
        let m = &mut r["analysis"]["metrics"];
        m["ttft_answer_ms"] = json!(20.0 + rng.next() * 900.0);
        m["e2e_ms"] = json!(e2e);
        let tps = 5.0 + rng.next() * 100.0;
        m["output_tps"] = json!(tps);
        m["tpot_ms"] = json!(1000.0 / tps);
        m["output_tokens"]["total"] = json!((rng.next() * 500.0) as u64);
        if i % 17 == 0 {
            // A single content event: no rate, no tpot (the objective does not apply).
            m.as_object_mut().unwrap().remove("output_tps");
            m.as_object_mut().unwrap().remove("tpot_ms");
        }
        if i % 13 == 0 {
            m.as_object_mut().unwrap().remove("ttft_answer_ms");
        }
        r["analysis"]["stalls"]["count"] = json!(u64::from(rng.next() < 0.2));
        if i % 11 == 0 {
            r["outcome"] = json!("http_error");
            r["status"] = json!(500);
        }
        lines.push(r.clone());
        if i % 2 == 0 {
            // The browser report joins later: a second line for the same request, with a paint.
            let mut joined = r.clone();
            joined["browser"] = json!({
                "probe_span_id": "00f067aa0ba902b7", "clock": {"offset_ms": 0.0, "uncertainty_ms": 0.5, "samples": 3},
                "marks": [], "chunks": [], "long_frames": [], "audio": [], "browser_bytes": 0, "bytes_match": true,
                "painted_chars": 0, "answer_chars": 0, "chunks_dropped": 0, "paints_dropped": 0,
                "time_to_first_paint_ms": 100.0 + rng.next() * 1000.0, "time_to_first_paint_from": "user_send"
            });
            lines.push(joined);
        }
    }
    // Two files, like a rotated store: the rewrite of an early record lands in the newer file.
    let split = lines.len() / 2;
    let older = dir.path().join("records.1.jsonl");
    let newer = dir.path().join("records.jsonl");
    let text = |ls: &[Value]| ls.iter().map(|l| l.to_string() + "\n").collect::<String>();
    let mut newer_lines = lines[split..].to_vec();
    let mut moved = lines[0].clone();
    moved["browser"] = json!({
        "probe_span_id": "00f067aa0ba902b7", "clock": {"offset_ms": 0.0, "uncertainty_ms": 0.5, "samples": 3},
        "marks": [], "chunks": [], "long_frames": [], "audio": [], "browser_bytes": 0, "bytes_match": true,
        "painted_chars": 0, "answer_chars": 0, "chunks_dropped": 0, "paints_dropped": 0, "time_to_first_paint_ms": 1.5
    });
    newer_lines.push(moved);
    std::fs::write(&older, text(&lines[..split])).unwrap();
    std::fs::write(&newer, text(&newer_lines)).unwrap();
    let records = read_records(&[&older, &newer]);
    assert_eq!(records.len(), 300);
    assert_eq!(records[0]["browser"]["time_to_first_paint_ms"], 1.5, "the last line wins");

    let slo =
        Slo { ttft_answer_ms: Some(500.0), tpot_ms: Some(25.0), e2e_ms: Some(3000.0), first_paint_ms: Some(700.0) };
    let since_ns = base_t0 + 40 * 1_000_000_000;
    let until_ns = base_t0 + 260 * 1_000_000_000;
    let (since, until) = (rfc3339(since_ns), rfc3339(until_ns));
    let report = report_json(&[
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--since",
        &since,
        "--until",
        &until,
        "--group-by",
        "route,model,concurrency",
    ]);
    let in_window: Vec<&Value> = records
        .iter()
        .filter(|r| (since_ns..until_ns).contains(&r["timeline"]["t0_unix_ns"].as_u64().unwrap()))
        .collect();
    let used: Vec<&Value> = in_window.iter().copied().filter(|r| r["conditions"]["warm_up"] != true).collect();
    assert_eq!(report["records_total"], 300);
    assert_eq!(report["records_in_window"], in_window.len() as u64);
    assert_eq!(report["records_used"], used.len() as u64);
    check_group(&report["overall"], &used, &slo);

    let bucket = |n: u64| match n {
        0 | 1 => n.to_string(),
        _ => {
            let low = 1u64 << (63 - n.leading_zeros());
            format!("{low}-{}", 2 * low - 1)
        }
    };
    let mut groups: BTreeMap<(String, String, String), Vec<&Value>> = BTreeMap::new();
    for r in &used {
        let key = (
            r["route"].as_str().unwrap().to_string(),
            r["conditions"]["model"].as_str().unwrap().to_string(),
            bucket(r["conditions"]["concurrency_at_t0"].as_u64().unwrap()),
        );
        groups.entry(key).or_default().push(r);
    }
    let reported: HashMap<String, &Value> =
        report["groups"].as_array().unwrap().iter().map(|g| (g["label"].as_str().unwrap().to_string(), g)).collect();
    assert_eq!(reported.len(), groups.len());
    for ((route, model, conc), rs) in &groups {
        let label = format!("route={route} model={model} concurrency={conc}");
        let group = reported.get(&label).unwrap_or_else(|| panic!("no group {label}: {:?}", reported.keys()));
        check_group(group, rs, &slo);
    }

    // --records reads the same files; --html writes one self-contained file.
    let html = dir.path().join("report.html");
    let from_files = report_json(&[
        "--records",
        older.to_str().unwrap(),
        newer.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--since",
        &since,
        "--until",
        &until,
        "--html",
        html.to_str().unwrap(),
    ]);
    assert_eq!(from_files["overall"]["metrics"], report["overall"]["metrics"]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!doctype html>") && page.contains("<svg") && page.contains("ttft_answer_ms"));
    assert!(!page.contains("<script") && !page.contains("src=\"http"), "the HTML report is self-contained");
}

/// RFC 3339 for Unix nanoseconds, written here without tokentap's code.
fn rfc3339(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let nanos = unix_ns % 1_000_000_000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}
