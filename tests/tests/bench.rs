//! `tokentap bench` against a scripted upstream with a known schedule.
//!
//! - Every statistic in `--json` equals a recomputation done here, independently of the bench
//!   crate, from the per-request `--jsonl` (numpy's linear percentiles, pooled gaps, throughput over
//!   the cell's wall time, the goodput rule of docs/metrics.md).
//! - The numbers match the schedule: exact where the schedule fixes them (o200k output tokens,
//!   content events); times are never before their scheduled moment (no upper bound: a loaded
//!   machine reads late, and tests never assert speed).
//! - The upstream saw exactly requests × cells + warm-up requests: nothing is retried, and the
//!   scripted failures (a 500 and a stream without its end marker) are counted in their cells.
//! - `--prefix unique` gives every request a prompt of its own, `--prefix shared` one per length.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokentap_e2e::numeric::{close, numpy_percentile};
use tokentap_e2e::process::{bin, Proc};
use tokentap_e2e::{Framing, Script, ScriptedUpstream};

const CHAT: &str = "/v1/chat/completions";
/// First reasoning event after the request arrived, and the gap between content events.
const TTFT_MS: u64 = 60;
const ITL_MS: u64 = 10;
/// Reasoning events before the answer; every content event carries two o200k tokens.
const REASONING_EVENTS: u64 = 2;
const TOKENS_PER_EVENT: u64 = 2;
/// Arrival indices (0-based, over the whole run) answered with a failure.
fn failure_at(index: usize) -> Option<&'static str> {
    match index % 7 {
        5 => Some("http_status"),
        6 => Some("truncated"),
        _ => None,
    }
}

fn chunk(delta: &str) -> Vec<u8> {
    format!("data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n")
        .into_bytes()
}

/// The scripted answer to a request asking for `max_tokens`: a role chunk at once, two reasoning
/// events from `TTFT_MS`, then answer events every `ITL_MS`, two tokens each, `max_tokens` in all.
fn answer(index: usize, body: &[u8]) -> Script {
    let request: Value = serde_json::from_slice(body).unwrap();
    let max_tokens = request["max_tokens"].as_u64().unwrap();
    let events = max_tokens / TOKENS_PER_EVENT;
    let ms = Duration::from_millis;
    let headers = vec![("content-type".to_string(), "text/event-stream".to_string())];
    if failure_at(index) == Some("http_status") {
        return Script {
            status: 500,
            headers: vec![("content-type".into(), "application/json".into())],
            framing: Framing::ContentLength,
            pieces: vec![(ms(5), br#"{"error":{"message":"scripted failure","type":"server_error"}}"#.to_vec())],
        };
    }
    let mut pieces = vec![(ms(0), chunk(r#"{"role":"assistant","content":""}"#))];
    for k in 0..events {
        let at = ms(TTFT_MS + k * ITL_MS);
        let delta =
            if k < REASONING_EVENTS { r#"{"reasoning_content":" red blue"}"# } else { r#"{"content":" red blue"}"# };
        pieces.push((at, chunk(delta)));
    }
    let last = ms(TTFT_MS + (events - 1) * ITL_MS);
    if failure_at(index) != Some("truncated") {
        let usage = format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{{\"prompt_tokens\":70,\"completion_tokens\":{max_tokens},\"total_tokens\":{}}}}}\n\ndata: [DONE]\n\n",
            70 + max_tokens
        );
        pieces.push((last, usage.into_bytes()));
    }
    Script { status: 200, headers, framing: Framing::Chunked, pieces }
}

/// Runs `tokentap bench` to completion; its stdout (the markdown report).
fn run_bench(args: &[&str]) -> String {
    let mut cmd = std::process::Command::new(bin("tokentap"));
    cmd.arg("bench").args(args).env_remove("TOKENTAP_LOG");
    let mut proc = Proc::spawn(cmd);
    let status = proc.wait_exit();
    assert!(
        status.success(),
        "tokentap bench failed ({status}):\nstdout:\n{}\nstderr:\n{}",
        proc.stdout(),
        proc.stderr()
    );
    proc.stdout()
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Checks a distribution in the JSON against the values it summarizes.
fn check_distribution(json: &Value, values: &[f64], what: &str) {
    if values.is_empty() {
        assert!(json.is_null(), "{what}: expected absent, got {json}");
        return;
    }
    assert_eq!(json["count"].as_u64(), Some(values.len() as u64), "{what} count");
    for (key, q) in [("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("max", 100.0)] {
        let got = json[key].as_f64().unwrap_or_else(|| panic!("{what}.{key} missing: {json}"));
        let want = numpy_percentile(values, q);
        assert!(close(got, want), "{what}.{key}: JSON {got}, recomputed {want}");
    }
}

fn opt(r: &Value, key: &str) -> Option<f64> {
    r[key].as_f64()
}

/// Recomputes one cell's statistics from its JSON lines and compares them with the JSON.
fn check_cell(stats: &Value, lines: &[&Value], slo: &[(&str, f64)]) {
    let ok: Vec<&&Value> = lines.iter().filter(|r| r["ok"] == true).collect();
    assert_eq!(stats["requests"].as_u64(), Some(lines.len() as u64));
    assert_eq!(stats["ok"].as_u64(), Some(ok.len() as u64));
    assert_eq!(stats["failures"].as_u64(), Some((lines.len() - ok.len()) as u64));
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for r in lines.iter().filter(|r| r["ok"] == false) {
        *kinds.entry(r["failure"]["kind"].as_str().unwrap().to_string()).or_default() += 1;
    }
    let json_kinds: BTreeMap<String, u64> =
        stats["failure_kinds"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap())).collect();
    assert_eq!(json_kinds, kinds);
    for (metric, key) in [
        ("ttft_answer_ms", "ttft_answer_ms"),
        ("ttft_reasoning_ms", "ttft_reasoning_ms"),
        ("tpot_ms", "tpot_ms"),
        ("e2e_ms", "e2e_ms"),
        ("output_tps", "output_tps"),
        ("output_tokens", "output_tokens"),
    ] {
        let values: Vec<f64> = ok.iter().filter_map(|r| opt(r, key)).collect();
        check_distribution(&stats[metric], &values, metric);
    }
    let gaps: Vec<f64> =
        ok.iter().flat_map(|r| r["itl_ms"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap())).collect();
    check_distribution(&stats["itl_ms"], &gaps, "itl_ms");
    let start = lines.iter().map(|r| opt(r, "start_ms").unwrap()).fold(f64::INFINITY, f64::min);
    let end = lines.iter().map(|r| opt(r, "end_ms").unwrap()).fold(f64::NEG_INFINITY, f64::max);
    let duration_s = (end - start) / 1000.0;
    assert!(close(stats["duration_s"].as_f64().unwrap(), duration_s));
    let tokens: f64 = ok.iter().filter_map(|r| opt(r, "output_tokens")).sum();
    assert!(close(stats["total_output_tps"].as_f64().unwrap(), tokens / duration_s));
    assert!(close(stats["request_throughput"].as_f64().unwrap(), ok.len() as f64 / duration_s));
    let good: Vec<&&&Value> =
        ok.iter().filter(|r| slo.iter().all(|(key, limit)| opt(r, key).is_some_and(|v| v <= *limit))).collect();
    let g = &stats["goodput"];
    assert_eq!(g["good"].as_u64(), Some(good.len() as u64));
    assert!(close(g["attainment"].as_f64().unwrap(), good.len() as f64 / lines.len() as f64));
    assert!(close(g["good_requests_per_s"].as_f64().unwrap(), good.len() as f64 / duration_s));
    let good_tokens: f64 = good.iter().filter_map(|r| opt(r, "output_tokens")).sum();
    assert!(close(g["good_output_tps"].as_f64().unwrap(), good_tokens / duration_s));
}

/// A time can never come before the upstream sent it (its schedule starts when the request
/// arrives, after the client started the clock). There is no upper bound: how late a loaded
/// machine reads is not the bench's error, and tests never assert speed.
fn within_schedule(got: f64, scheduled_ms: f64, what: &str) {
    assert!(got >= scheduled_ms - 1.0, "{what}: {got} ms, before its scheduled {scheduled_ms} ms");
}

#[test]
fn bench_statistics_equal_a_recomputation_and_match_the_schedule() {
    let upstream = ScriptedUpstream::start();
    upstream.register_with(CHAT, answer);
    let dir = tempfile::tempdir().unwrap();
    let (json, jsonl, report) = (dir.path().join("a.json"), dir.path().join("a.jsonl"), dir.path().join("a.md"));
    let records_dir = dir.path().join("records");
    let (requests, warmup) = (6usize, 2usize);
    let slo = [("ttft_answer_ms", 2000.0), ("e2e_ms", 170.0)];
    let stdout = run_bench(&[
        "--target",
        &upstream.url(),
        "--model",
        "scripted",
        "--concurrency",
        "1,3",
        "--output-tokens",
        "16,32",
        "--prompt-tokens",
        "64",
        "--requests",
        &requests.to_string(),
        "--warmup",
        &warmup.to_string(),
        "--slo",
        "ttft_answer=2s,e2e=170ms",
        "--seed",
        "11",
        "--json",
        json.to_str().unwrap(),
        "--jsonl",
        jsonl.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
        "--records-dir",
        records_dir.to_str().unwrap(),
    ]);
    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let lines = read_jsonl(&jsonl);
    let cells = results["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);

    // Nothing retried: the upstream saw the plan, no more.
    let seen = upstream.history(CHAT);
    assert_eq!(seen.len(), requests * cells.len() + warmup);
    assert_eq!(lines.len(), seen.len());
    assert_eq!(results["warmup"]["requests"].as_u64(), Some(warmup as u64));
    // Cells run one after the other, so the scripted failures fall into known cells.
    let total_failures: u64 = cells.iter().map(|c| c["stats"]["failures"].as_u64().unwrap()).sum();
    let scripted = (0..seen.len()).filter(|&i| failure_at(i).is_some()).count() as u64;
    assert_eq!(total_failures, scripted);
    for (n, cell) in cells.iter().enumerate() {
        let arrivals = warmup + n * requests..warmup + (n + 1) * requests;
        let mut want: BTreeMap<String, u64> = BTreeMap::new();
        for i in arrivals {
            if let Some(kind) = failure_at(i) {
                *want.entry(kind.to_string()).or_default() += 1;
            }
        }
        let got: BTreeMap<String, u64> = cell["stats"]["failure_kinds"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
            .collect();
        assert_eq!(got, want, "cell {n}");
    }

    // Every statistic equals the recomputation from the JSON lines.
    for cell in cells {
        let index = cell["cell"]["index"].as_u64().unwrap();
        let mine: Vec<&Value> = lines.iter().filter(|r| r["cell"].as_u64() == Some(index)).collect();
        assert_eq!(mine.len(), requests);
        check_cell(&cell["stats"], &mine, &slo);
    }
    let warm: Vec<&Value> = lines.iter().filter(|r| r["warmup"] == true).collect();
    assert_eq!(warm.len(), warmup);

    // And the schedule: exact counts, times within the stated bounds.
    for cell in cells {
        let max_tokens = cell["cell"]["output_tokens"].as_u64().unwrap();
        let events = max_tokens / TOKENS_PER_EVENT;
        let index = cell["cell"]["index"].as_u64();
        for r in lines.iter().filter(|r| r["cell"].as_u64() == index && r["ok"] == true) {
            assert_eq!(r["output_tokens"].as_u64(), Some(max_tokens), "{r}");
            assert_eq!(r["reasoning_tokens"].as_u64(), Some(REASONING_EVENTS * TOKENS_PER_EVENT));
            assert_eq!(r["content_events"].as_u64(), Some(events));
            assert_eq!(r["usage_output_tokens"].as_u64(), Some(max_tokens));
            assert!(r["tokentap_request_id"].is_string(), "went through the embedded tokentap: {r}");
            within_schedule(opt(r, "ttft_reasoning_ms").unwrap(), TTFT_MS as f64, "ttft_reasoning");
            within_schedule(
                opt(r, "ttft_answer_ms").unwrap(),
                (TTFT_MS + REASONING_EVENTS * ITL_MS) as f64,
                "ttft_answer",
            );
            within_schedule(opt(r, "e2e_ms").unwrap(), (TTFT_MS + (events - 1) * ITL_MS) as f64, "e2e");
            assert!(opt(r, "time_to_first_chunk_ms").unwrap() <= opt(r, "ttft_reasoning_ms").unwrap());
        }
        // TPOT and ITL against the schedule would be speed assertions (a loaded machine coalesces
        // reads); their values are checked exactly against the recomputation above.
    }
    let failed: Vec<&Value> = lines.iter().filter(|r| r["ok"] == false).collect();
    assert!(failed.iter().any(|r| r["status"] == 500 && r["failure"]["kind"] == "http_status"));
    assert!(failed.iter().any(|r| r["status"] == 200 && r["failure"]["kind"] == "truncated"));

    // The embedded tokentap recorded every request.
    let records = std::fs::read_to_string(records_dir.join("records.jsonl")).unwrap();
    assert_eq!(records.lines().count(), seen.len());

    // The report: its tables, the regressions, the reproducibility section; on stdout too.
    let md = std::fs::read_to_string(&report).unwrap();
    for needle in ["## Environment", "## Conditions", "## Latency", "## Throughput", "## Reproduce", "--seed 11"] {
        assert!(md.contains(needle), "report lacks {needle:?}:\n{md}");
    }
    assert!(stdout.contains("## Latency"));
    // Regressions are changes beyond the noise band, worded by the levels measured (1 → 4 users
    // is two doublings, not "doubling concurrency").
    let regressions = results["regressions"].as_array().unwrap();
    assert_eq!(md.contains("## Regressions"), !regressions.is_empty(), "{md}");
    for r in regressions {
        let sentence = r["sentence"].as_str().unwrap();
        assert!(!sentence.contains("doubling concurrency"), "{sentence}");
        if r["kind"] == "per_concurrency_doubling" {
            assert!(sentence.contains(" users"), "{sentence}");
        }
    }
    // A run compared with itself: same conditions, so no refusal.
    let cmp = std::process::Command::new(bin("tokentap"))
        .args(["bench", "compare", json.to_str().unwrap(), json.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(cmp.status.success(), "{}", String::from_utf8_lossy(&cmp.stderr));
    assert!(String::from_utf8_lossy(&cmp.stdout).contains("TTFT p95 ms"));
}

#[test]
fn prefix_mode_changes_the_prompts_and_compare_refuses_mismatched_runs() {
    let upstream = ScriptedUpstream::start();
    upstream.register_with(CHAT, |_, body| answer(0, body));
    let dir = tempfile::tempdir().unwrap();
    let run = |prefix: &str| -> (Vec<Value>, std::path::PathBuf) {
        let json = dir.path().join(format!("{prefix}.json"));
        let html = dir.path().join(format!("{prefix}.html"));
        let before = upstream.history(CHAT).len();
        run_bench(&[
            "--target",
            &upstream.url(),
            "--direct",
            "--prefix",
            prefix,
            "--concurrency",
            "2",
            "--output-tokens",
            "8",
            "--prompt-tokens",
            "64,128",
            "--requests",
            "3",
            "--warmup",
            "1",
            "--json",
            json.to_str().unwrap(),
            "--report",
            html.to_str().unwrap(),
        ]);
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(
            page.starts_with("<!doctype html>") && page.contains("<svg"),
            "{prefix}: not an HTML report with plots"
        );
        let bodies = upstream.history(CHAT)[before..].iter().map(|b| serde_json::from_slice(b).unwrap()).collect();
        (bodies, json)
    };
    let prompt = |b: &Value| b["messages"][0]["content"].as_str().unwrap().to_string();
    let (unique, unique_json) = run("unique");
    let (shared, shared_json) = run("shared");
    assert_eq!(unique.len(), 1 + 2 * 3);
    assert_eq!(shared.len(), 1 + 2 * 3);
    // unique: every prompt differs, from its first characters.
    let mut prompts: Vec<String> = unique.iter().map(prompt).collect();
    prompts.sort();
    prompts.dedup();
    assert_eq!(prompts.len(), unique.len(), "unique prompts repeat");
    // shared: one prompt per length (the warm-up uses the first length's).
    let mut by_length: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for b in &shared {
        by_length.entry(prompt(b).split(' ').count()).or_default().push(prompt(b));
    }
    let distinct: Vec<usize> =
        by_length.values().map(|p| p.iter().collect::<std::collections::BTreeSet<_>>().len()).collect();
    assert_eq!(distinct, vec![1, 1], "shared prompts: {by_length:?}");
    assert_eq!(by_length.values().map(Vec::len).sum::<usize>(), shared.len());

    // The two runs differ in cache mode: compare refuses, unless asked.
    let compare = |extra: &[&str]| {
        std::process::Command::new(bin("tokentap"))
            .args(["bench", "compare", unique_json.to_str().unwrap(), shared_json.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = compare(&[]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("prefix"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let allowed = compare(&["--allow-mismatch"]);
    assert!(allowed.status.success());
    assert!(String::from_utf8_lossy(&allowed.stdout).contains("The conditions differ"));
}

#[test]
fn open_loop_sends_on_schedule_and_counts_late_sends() {
    let upstream = ScriptedUpstream::start();
    upstream.register_with(CHAT, |_, body| answer(0, body));
    let dir = tempfile::tempdir().unwrap();
    let (json, jsonl) = (dir.path().join("open.json"), dir.path().join("open.jsonl"));
    run_bench(&[
        "--target",
        &upstream.url(),
        "--direct",
        "--rate",
        "50",
        "--arrivals",
        "constant",
        "--output-tokens",
        "8",
        "--prompt-tokens",
        "64",
        "--requests",
        "6",
        "--warmup",
        "1",
        "--json",
        json.to_str().unwrap(),
        "--jsonl",
        jsonl.to_str().unwrap(),
    ]);
    assert_eq!(upstream.history(CHAT).len(), 1 + 6);
    let results: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let stats = &results["cells"][0]["stats"];
    let lines: Vec<Value> = read_jsonl(&jsonl).into_iter().filter(|r| r["warmup"] == false).collect();
    // Constant arrivals at 50/s: scheduled exactly 20 ms apart, whatever the answers do.
    let mut scheduled: Vec<f64> = lines.iter().map(|r| opt(r, "scheduled_ms").unwrap()).collect();
    scheduled.sort_by(f64::total_cmp);
    for w in scheduled.windows(2) {
        assert!((w[1] - w[0] - 20.0).abs() < 1e-6, "scheduled {scheduled:?}");
    }
    let lateness: Vec<f64> =
        lines.iter().map(|r| (opt(r, "start_ms").unwrap() - opt(r, "scheduled_ms").unwrap()).max(0.0)).collect();
    assert_eq!(stats["late_sends"].as_u64(), Some(lateness.iter().filter(|&&l| l > 10.0).count() as u64));
    check_distribution(&stats["send_lateness_ms"], &lateness, "send_lateness_ms");
    // Answers take longer than the gaps, so several were in flight at once (an open loop).
    assert!(lines.iter().any(|r| r["in_flight_at_start"].as_u64().unwrap() > 1));
}

/// A target that is down: every request fails as `connect` (through the embedded tokentap, whose
/// 502 is its own, not the target's), and the bench exits non-zero saying no request succeeded.
#[test]
fn a_dead_target_is_a_connect_failure_and_a_failed_run() {
    let down = tokentap_e2e::upstream::RefusingPort::new();
    let dir = tempfile::tempdir().unwrap();
    for direct in [false, true] {
        let jsonl = dir.path().join(format!("dead-{direct}.jsonl"));
        let records_dir = dir.path().join(format!("records-{direct}"));
        let target = format!("http://{}", down.addr());
        let mut args = vec![
            "bench",
            "--target",
            &target,
            "--model",
            "m",
            "--concurrency",
            "1",
            "--output-tokens",
            "16",
            "--prompt-tokens",
            "64",
            "--requests",
            "2",
            "--warmup",
            "0",
            "--jsonl",
            jsonl.to_str().unwrap(),
            "--records-dir",
            records_dir.to_str().unwrap(),
            "--quiet",
        ];
        if direct {
            args.push("--direct");
        }
        let mut cmd = std::process::Command::new(bin("tokentap"));
        cmd.args(&args).env_remove("TOKENTAP_LOG");
        let mut proc = Proc::spawn(cmd);
        let status = proc.wait_exit();
        assert!(!status.success(), "direct={direct}: a run where nothing succeeded exited 0:\n{}", proc.stdout());
        assert!(
            proc.stderr().contains("no request succeeded") && proc.stderr().contains("connect"),
            "{}",
            proc.stderr()
        );
        let lines = read_jsonl(&jsonl);
        assert_eq!(lines.len(), 2, "direct={direct}");
        for line in &lines {
            assert_eq!(line["failure"]["kind"], "connect", "direct={direct}: {line}");
            assert!(line["failure"]["detail"].as_str().unwrap().to_lowercase().contains("refused"), "{line}");
        }
    }
}
