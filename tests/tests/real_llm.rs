//! tokentap in front of a real inference server: llama.cpp's own HTTP server with SmolLM2-135M on
//! one CPU thread (`tokentap_e2e::llama`). Greedy decoding makes its answers repeatable, and its own
//! `timings` (prefill, decode, cached prompt tokens) are a second clock to check tokentap's against.
//!
//! Each test starts its own server (≈ 2 s): nextest runs every test in its own process.

use sha2::{Digest, Sha256};
use tokentap_e2e::browser::run_demo_page;
use tokentap_e2e::http1::{self, request_bytes, StreamedResponse};
use tokentap_e2e::llama::{self, answer_text, chat_body, server_timings, sse_events};
use tokentap_e2e::{LlamaServer, Tokentap, WireTap};

const CHAT: &str = "/v1/chat/completions";

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn post_chat(addr: std::net::SocketAddr, body: &[u8]) -> http1::HttpResponse {
    let resp = http1::post(addr, CHAT, &[("content-type", "application/json")], body);
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    assert!(resp.complete, "the stream ended cleanly");
    resp
}

/// The events with what differs between two runs of the same greedy request removed: the id, the
/// creation second, and llama.cpp's measured times.
fn without_run_fields(body: &[u8]) -> Vec<serde_json::Value> {
    sse_events(body)
        .into_iter()
        .map(|mut e| {
            if let Some(map) = e.as_object_mut() {
                map.remove("id");
                map.remove("created");
                map.remove("timings");
            }
            e
        })
        .collect()
}

fn f64_at(value: &serde_json::Value, pointer: &str) -> f64 {
    value.pointer(pointer).and_then(|v| v.as_f64()).unwrap_or_else(|| panic!("no number at {pointer} in {value}"))
}

#[test]
fn the_client_gets_the_servers_bytes_exactly() {
    let server = LlamaServer::start();
    // A wire tap between tokentap and the server witnesses what the server sent.
    let tap = WireTap::start(server.addr);
    let tokentap = Tokentap::start(&tap.url(), &[]);
    let mut feed = tokentap.feed();
    // No prompt cache: the direct run below then gets the same usage numbers.
    let body = chat_body("Write one sentence about rivers.", 16, serde_json::json!({"cache_prompt": false}));

    let proxied = post_chat(tokentap.addr, &body);
    let wire = tap.from_target();
    assert_eq!(wire.len(), 1, "one upstream connection");
    let sent = http1::parse_response(&wire[0]);
    assert!(sent.complete, "the tap saw a complete response");
    assert!(sse_events(&sent.body).len() > 3, "{}", String::from_utf8_lossy(&sent.body));
    assert_eq!(sha256(&proxied.body), sha256(&sent.body), "the de-chunked body differs from the server's");
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["outcome"], "ok", "{record}");
    assert_eq!(record["timeline"]["body_bytes"], sent.body.len() as u64);

    // The same greedy request straight to the server: the same stream, save the per-run fields.
    let direct = post_chat(server.addr, &body);
    let answer = answer_text(&direct.body);
    assert!(!answer.trim().is_empty(), "the model answered");
    assert_eq!(answer_text(&proxied.body), answer);
    let (a, b) = (without_run_fields(&proxied.body), without_run_fields(&direct.body));
    assert_eq!(
        sha256(serde_json::to_string(&a).unwrap().as_bytes()),
        sha256(serde_json::to_string(&b).unwrap().as_bytes())
    );
}

#[test]
fn the_openai_sdk_parses_the_same_through_tokentap() {
    let server = LlamaServer::start();
    let tokentap = Tokentap::start(&server.url, &[]);
    let mut feed = tokentap.feed();
    let direct =
        tokentap_e2e::process::run_sdk_script("openai_llama.py", &["--base-url", &format!("{}/v1", server.url)]);
    let proxied = tokentap_e2e::process::run_sdk_script(
        "openai_llama.py",
        &["--base-url", &format!("http://{}/v1", tokentap.addr)],
    );
    assert_eq!(direct, proxied);
    let content = direct["chat_stream"]["content"].as_str().unwrap_or_default();
    assert!(!content.trim().is_empty(), "{direct}");
    assert_eq!(direct["chat_stream"]["finish_reason"], "length", "{direct}");
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["outcome"], "ok", "{record}");
    assert_eq!(record["analysis"]["response_model"], llama::MODEL, "{record}");
    assert!(!record.to_string().contains("sk-test-SECRET"));
}

/// llama.cpp measures decode from the end of prefill to its last token; tokentap measures from the
/// first answer token's arrival to the last one's. They differ by the first token's sampling and
/// by when each side reads its clock, not by the decode itself.
const DECODE_TOLERANCE_MS: f64 = 15.0;
const DECODE_TOLERANCE_FRACTION: f64 = 0.05;

#[test]
fn the_record_agrees_with_the_servers_own_timings() {
    let server = LlamaServer::start();
    let tokentap = Tokentap::start(&server.url, &[]);
    let mut feed = tokentap.feed();
    // ignore_eos: exactly max_tokens answer tokens, the last one content too.
    let body = chat_body("Describe a forest in detail.", 32, serde_json::json!({"ignore_eos": true}));
    let resp = post_chat(tokentap.addr, &body);
    let timings = server_timings(&resp.body);
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["outcome"], "ok", "{record}");
    let m = &record["analysis"]["metrics"];
    let prompt_ms = f64_at(&timings, "/prompt_ms");
    let predicted_ms = f64_at(&timings, "/predicted_ms");
    assert_eq!(timings["predicted_n"], 32, "{timings}");
    // The first byte can only leave the server after its prefill, which starts after t0.
    let ttft = f64_at(m, "/ttft_answer_ms");
    assert!(f64_at(m, "/time_to_first_chunk_ms") >= prompt_ms, "first chunk before prefill ended: {m} {timings}");
    assert!(ttft >= prompt_ms, "TTFT {ttft} ms < the server's prefill {prompt_ms} ms");
    let decode = f64_at(m, "/to_last_content_ms") - ttft;
    let tolerance = DECODE_TOLERANCE_MS + DECODE_TOLERANCE_FRACTION * predicted_ms;
    assert!(
        (decode - predicted_ms).abs() <= tolerance,
        "tokentap's first-to-last answer time {decode:.1} ms vs the server's decode {predicted_ms:.1} ms (± {tolerance:.1})"
    );
    // The server's own report is in the record, as reported, and split against the wire.
    let reported = &record["server"];
    assert_eq!(reported["source"], "llama_cpp", "{record}");
    assert!((f64_at(reported, "/prefill_ms") - prompt_ms).abs() < 0.01, "{reported} {timings}");
    assert!((f64_at(reported, "/decode_ms") - predicted_ms).abs() < 0.01, "{reported} {timings}");
    let split = &record["server_split"];
    assert_eq!(split["compared_at"], "first_token", "{split}");
    assert!((f64_at(split, "/server_ms") - prompt_ms).abs() < 0.01, "the server's time to first token: {split}");
    assert!((f64_at(split, "/wire_ms") - ttft).abs() < 0.01, "{split} {m}");
    let gap = f64_at(split, "/network_and_proxy_ms");
    assert!((gap - (ttft - prompt_ms)).abs() < 0.01, "{split}");
    assert_eq!(split["check"], "consistent", "the server's prefill fits inside the wire's TTFT: {split}");
    // The provider's numbers pass through unchanged.
    assert_eq!(record["analysis"]["usage"]["output_tokens"], 32, "{record}");
    assert_eq!(
        record["analysis"]["usage"]["input_tokens"],
        timings["prompt_n"].as_u64().unwrap() + timings["cache_n"].as_u64().unwrap()
    );
    eprintln!(
        "prefill {prompt_ms:.1} ms, ttft {ttft:.1} ms; decode: server {predicted_ms:.1} ms, tokentap {decode:.1} ms (diff {:+.1} ms)",
        decode - predicted_ms
    );
}

#[test]
fn a_repeated_prompt_is_recorded_with_its_cached_tokens() {
    let server = LlamaServer::start();
    // The second request on a new upstream connection. llama.cpp's server closes the connection
    // after every streamed answer although it says `Keep-Alive`; on a loaded machine its FIN can
    // come after the next request was written on the pooled connection, and the server then
    // drains that request and closes without an answer: a 502 no TCP counter proves safe to
    // retry (ARCHITECTURE.md, "One retry"; `stale_connections` tests that race with an upstream
    // of its own). This test is about the prompt cache, so nothing is pooled.
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "[timeouts]\nidle_pool_s = 0\n").unwrap();
    let tokentap = Tokentap::start(&server.url, &["--config", config.path().to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let body = chat_body("What is the capital of France? Answer in one word.", 8, serde_json::json!({}));
    let first = post_chat(tokentap.addr, &body);
    let cold = feed.next_record_for(CHAT);
    let second = post_chat(tokentap.addr, &body);
    let warm = feed.next_record_for(CHAT);
    let (t1, t2) = (server_timings(&first.body), server_timings(&second.body));
    assert_eq!(t1["cache_n"], 0, "a fresh server has nothing cached: {t1}");
    // The whole prompt but its last token comes from the cache the second time.
    let prompt_tokens = t2["cache_n"].as_u64().unwrap() + t2["prompt_n"].as_u64().unwrap();
    assert_eq!(t2["prompt_n"], 1, "{t2}");
    assert!(prompt_tokens > 10, "{t2}");
    assert_eq!(warm["timeline"]["connection"]["reused"], false, "nothing pooled: {warm}");
    assert_eq!(cold["conditions"]["cached_prompt_tokens"], 0, "{cold}");
    assert_eq!(warm["conditions"]["cached_prompt_tokens"], t2["cache_n"], "{warm}");
    assert_eq!(cold["conditions"]["prompt_cache"], "cold", "{cold}");
    assert_eq!(warm["conditions"]["prompt_cache"], "warm", "{warm}");
    assert_eq!(warm["server"]["cached_prompt_tokens"], t2["cache_n"], "{warm}");
    assert_eq!(warm["analysis"]["usage"]["cached_tokens"], t2["cache_n"], "{warm}");
    assert_eq!(warm["analysis"]["usage"]["input_tokens"], prompt_tokens, "{warm}");
    assert_eq!(answer_text(&first.body), answer_text(&second.body), "greedy decoding repeats itself");
}

#[test]
fn a_client_that_goes_away_cancels_the_servers_task() {
    let server = LlamaServer::start();
    let tokentap = Tokentap::start(&server.url, &[]);
    let mut feed = tokentap.feed();
    let before = server.metrics()["llamacpp:n_decode_total"];
    // About half a minute of decoding on one thread, unless it is cancelled.
    const LONG: u64 = 1500;
    let long = chat_body("Tell me a very long story.", LONG as u32, serde_json::json!({"ignore_eos": true}));
    let mut stream = StreamedResponse::open(
        tokentap.addr,
        &request_bytes("POST", CHAT, &[("content-type", "application/json")], &long),
    );
    stream.read_head();
    // Some answer tokens arrive: the server is decoding.
    let answer_events = |body: &[u8]| body.windows(11).filter(|w| *w == b"\"content\":\"").count();
    while answer_events(&stream.response.body) < 3 {
        assert!(stream.read_some(), "the stream ended early");
    }
    stream.abort();
    let record = feed.next_record_for(CHAT);
    assert_eq!(record["outcome"], "client_cancelled", "{record}");

    // The server has one slot, so this request is served only once that slot is free again.
    let next = post_chat(server.addr, &chat_body("Say hi.", 4, serde_json::json!({})));
    assert!(!answer_text(&next.body).is_empty());
    let decoded = server.metrics()["llamacpp:n_decode_total"] - before;
    assert!(
        decoded < (LONG / 2) as f64,
        "the server went on decoding after the client left: {decoded} decode steps for a cancelled {LONG}-token request"
    );
}

#[test]
fn the_demo_runs_in_front_of_the_real_model() {
    let server = LlamaServer::start();
    let data_dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = std::process::Command::new(tokentap_e2e::process::bin("tokentap"));
    cmd.env("TOKENTAP_LOG", "info").args(["demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
    cmd.arg("--data-dir").arg(data_dir.path()).args(["--upstream", &server.url, "--model", llama::MODEL]);
    let mut demo = tokentap_e2e::process::Proc::spawn(cmd);
    let line = demo.wait_line("  chat page ", std::time::Duration::from_secs(30));
    let page = line.split_whitespace().nth(2).expect("chat page URL").to_string();
    let addr: std::net::SocketAddr =
        page.trim_start_matches("http://").split('/').next().unwrap().parse().expect("demo address");
    demo.wait_line(&format!("  upstream       {}", server.url), std::time::Duration::from_secs(5));
    // The page learns the model from its config, and then offers no mock scenarios.
    let config = http1::get(addr, "/_tokentap/demo/config.json", &[]);
    let config: serde_json::Value = serde_json::from_slice(&config.body).expect("config json");
    assert_eq!(config["model"], llama::MODEL, "{config}");
    // What the page sends: the answer comes from the model, and the summary line follows.
    let resp = post_chat(addr, &chat_body("Say hello.", 8, serde_json::json!({})));
    assert!(!answer_text(&resp.body).is_empty());
    server_timings(&resp.body);
    let summary = demo.wait_line("[tokentap] 200 POST /v1/chat/completions", std::time::Duration::from_secs(30));
    assert!(summary.contains(&format!("model={}", llama::MODEL)), "{summary}");

    // The page itself in headless Chromium: the server's prefill is split out of the wait.
    let out = run_demo_page(&format!("http://{addr}"), SEND_AND_WAIT, 90_000);
    let result = &out["result"];
    assert_eq!(result["scenario_hidden"], true, "{result}");
    assert!(!result["answer"].as_str().unwrap_or_default().is_empty(), "{result}");
    assert!(result["legend"].to_string().contains("server prefill"), "{result}");
    assert!(result["rows"].to_string().contains("server decode (llama.cpp"), "{result}");
}

/// Asks a short question on the demo page and waits until it shows the breakdown (or 60 s pass).
const SEND_AND_WAIT: &str = r##"(async () => {
  const wait = async (cond, ms) => { const end = Date.now() + ms; while (!cond()) { if (Date.now() > end) return false; await new Promise(r => setTimeout(r, 20)); } return true; };
  if (!await wait(() => window.tokentapProbe, 10000)) return { error: "probe did not load" };
  if (!await wait(() => document.querySelector("#scenario-label").hidden, 10000)) return { error: "config not loaded" };
  document.querySelector("#prompt").value = "Say hello in three words.";
  document.querySelector("#send").click();
  const shown = await wait(() => !document.querySelector("#breakdown").hidden, 60000);
  return {
    shown,
    scenario_hidden: document.querySelector("#scenario-label").hidden,
    answer: document.querySelector("#answer").textContent,
    legend: [...document.querySelectorAll("#legend span")].map(s => s.textContent),
    rows: [...document.querySelectorAll("#metrics tbody tr")].map(r => r.textContent),
  };
})()"##;
