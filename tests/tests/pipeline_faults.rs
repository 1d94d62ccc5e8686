//! A panic in the record pipeline drops that one item, is counted, and recording goes on; the
//! client's traffic never notices. A worker that makes no progress while items wait is shown in
//! health (`degraded`), and one whose loop panicked anyway is started again.

use tokentap_e2e::{http1, Mock, Tokentap};

const PANIC_PATH: &str = "/v1/chat/completions/panic";

fn chat(tokentap: &Tokentap, path: &str) -> http1::HttpResponse {
    http1::post(
        tokentap.addr,
        path,
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[]}"#,
    )
}

#[test]
fn a_worker_panic_drops_one_record_and_recording_goes_on() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let tokentap = Tokentap::start_with_env(
        &["--upstream", &mock.url],
        &[("TOKENTAP_TEST_WORKER_PANIC_PATH", PANIC_PATH), ("TOKENTAP_LOG", "info")],
    );
    let mut feed = tokentap.feed();
    let poisoned = chat(&tokentap, PANIC_PATH);
    assert!(poisoned.complete, "the client's response is untouched by a pipeline panic");
    let before = chat(&tokentap, "/v1/chat/completions");
    assert_eq!(before.status, 200);
    // The next record on the feed is the healthy request: the panicking one was dropped.
    let record = feed.next_record();
    assert_eq!(record["path"], "/v1/chat/completions");
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(health["records"]["worker_panics"], 1, "{health}");
    assert_eq!(health["records"]["written"], 1, "{health}");
    // And the worker keeps going.
    assert_eq!(chat(&tokentap, "/v1/chat/completions").status, 200);
    assert_eq!(feed.next_record()["path"], "/v1/chat/completions");
    assert!(tokentap.proc.stderr().contains("the record pipeline panicked"), "the panic is logged");
}

/// Asks health until `done` says yes (each answer is a fresh look; at most 30 s).
fn health_until(tokentap: &Tokentap, what: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, health) = tokentap.admin_get("/_tokentap/api/health");
        if done(&health) {
            return health;
        }
        assert!(std::time::Instant::now() < deadline, "health never showed {what}: {health}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_stuck_worker_makes_health_degraded_until_it_catches_up() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    std::fs::write(&config, "[analysis]\nworker_stuck_s = 1\n").unwrap();
    // Each request holds the worker 4 s: with a second request queued behind the first, the
    // worker makes no progress for longer than `worker_stuck_s`.
    let tokentap = Tokentap::start_with_env(
        &["--upstream", &mock.url, "--config", config.to_str().unwrap()],
        &[("TOKENTAP_TEST_WORKER_DELAY_MS", "4000")],
    );
    let mut feed = tokentap.feed();
    for _ in 0..2 {
        let response = chat(&tokentap, "/v1/chat/completions");
        assert!(response.complete && response.status == 200, "traffic is untouched by a stuck worker");
    }
    let stuck = health_until(&tokentap, "the worker stuck", |h| h["status"] == "degraded");
    assert_eq!(stuck["records"]["worker"]["state"], "stuck", "{stuck}");
    assert!(stuck["problem"].as_str().unwrap().contains("record worker is stuck"), "{stuck}");
    // While it is stuck, forwarding goes on.
    assert_eq!(chat(&tokentap, "/v1/chat/completions").status, 200);
    for _ in 0..3 {
        assert_eq!(feed.next_record()["path"], "/v1/chat/completions");
    }
    // Once it has caught up (nothing waiting), health is ok again.
    let recovered = health_until(&tokentap, "ok after the worker caught up", |h| h["status"] == "ok");
    assert_eq!(recovered["records"]["worker"]["state"], "running", "{recovered}");
    assert_eq!(recovered["records"]["written"], 3, "{recovered}");
}

#[test]
fn a_panic_outside_an_item_restarts_the_worker_and_recording_goes_on() {
    const ESCAPE_PATH: &str = "/v1/chat/completions/escape";
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let tokentap = Tokentap::start_with_env(
        &["--upstream", &mock.url],
        &[("TOKENTAP_TEST_WORKER_ESCAPE_PATH", ESCAPE_PATH), ("TOKENTAP_LOG", "info")],
    );
    let mut feed = tokentap.feed();
    let poisoned = chat(&tokentap, ESCAPE_PATH);
    assert!(poisoned.complete, "the client's response is untouched by a worker panic");
    let restarted = health_until(&tokentap, "a worker restart", |h| h["records"]["worker"]["restarts"] == 1);
    let worker = &restarted["records"]["worker"];
    assert!(worker["last_restart"].as_str().unwrap().contains("injected panic"), "{restarted}");
    assert_eq!(worker["state"], "running", "{restarted}");
    assert_eq!(restarted["status"], "ok", "{restarted}");
    // The restarted worker records the next request.
    assert_eq!(chat(&tokentap, "/v1/chat/completions").status, 200);
    assert_eq!(feed.next_record()["path"], "/v1/chat/completions");
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(health["records"]["written"], 1, "{health}");
    assert_eq!(health["records"]["worker_panics"], 1, "{health}");
    assert!(tokentap.proc.stderr().contains("it starts again"), "the restart is logged");
}

#[test]
fn a_panic_while_closing_idle_turns_is_counted_and_recording_goes_on() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let tokentap = Tokentap::start_with_env(
        &["--upstream", &mock.url],
        &[("TOKENTAP_TEST_WORKER_TICK_PANIC", "1"), ("TOKENTAP_LOG", "info")],
    );
    let mut feed = tokentap.feed();
    // The idle tick runs every second and panics each time.
    let health = health_until(&tokentap, "tick panics counted", |h| h["records"]["worker_panics"].as_u64() >= Some(2));
    assert_eq!(health["records"]["worker"]["restarts"], 0, "{health}");
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(chat(&tokentap, "/v1/chat/completions").status, 200);
    assert_eq!(feed.next_record()["path"], "/v1/chat/completions");
    assert!(tokentap.proc.stderr().contains("closing idle turns"), "the panic is logged with its step");
}
