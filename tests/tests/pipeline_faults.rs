//! A panic in the record pipeline drops that one item, is counted, and recording goes on; the
//! client's traffic never notices.

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
