//! Credentials never reach records, the admin API, or the logs.

use tokentap_e2e::{http1, Mock, Tokentap};

const SECRET: &str = "sk-test-SECRET-7f3a9c2e41d8";
const API_KEY: &str = "ak-test-SECRET-0b6e5d4c3a21";
const QUERY_KEY: &str = "AIzaSECRET-5e4d3c2b1a09";

#[test]
fn secrets_appear_nowhere() {
    secrets_appear_nowhere_at("info");
}

/// At `trace`, pingora and hyper would print request heads with every header: tokentap caps them.
#[test]
fn secrets_appear_nowhere_even_at_the_most_verbose_log_level() {
    secrets_appear_nowhere_at("trace");
}

fn secrets_appear_nowhere_at(log_level: &str) {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let tokentap = Tokentap::start_with_env(&["--upstream", &mock.url], &[("TOKENTAP_LOG", log_level)]);
    let mut feed = tokentap.feed();
    let bearer = format!("Bearer {SECRET}");
    let cookie = format!("session={SECRET}");
    let headers = [
        ("content-type", "application/json"),
        ("authorization", bearer.as_str()),
        ("x-api-key", API_KEY),
        ("api-key", API_KEY),
        ("cookie", cookie.as_str()),
        ("x-auth-token", API_KEY),
        ("x-custom-secret", API_KEY),
        ("proxy-authorization", bearer.as_str()),
    ];
    let body = br#"{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let resp = http1::post(tokentap.addr, "/v1/chat/completions", &headers, body);
    assert_eq!(resp.status, 200);
    // The upstream still gets the credentials: redaction is for records, not for traffic.
    let last = mock.control("/_mock/last_request").1;
    assert!(last.to_string().contains(SECRET), "authorization was not forwarded: {last}");
    // `%6Bey` is `key`, percent-encoded: the upstream reads it as the key, so tokentap redacts it too.
    let gemini = format!(
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&%6Bey={QUERY_KEY}&api%5Fkey={QUERY_KEY}"
    );
    let resp = http1::post(
        tokentap.addr,
        &gemini,
        &[("content-type", "application/json"), ("x-goog-api-key", API_KEY)],
        br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
    );
    assert_eq!(resp.status, 200);
    // A failing upstream call puts an error into logs and records: still nothing secret.
    let dead = http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("authorization", bearer.as_str()), ("x-mock-status", "500")],
        body,
    );
    assert_eq!(dead.status, 500);

    let first = feed.next_record();
    let second = feed.next_record();
    let third = feed.next_record();
    let api = tokentap.admin_get("/_tokentap/api/requests?limit=100").1.to_string();
    let records = std::fs::read_to_string(tokentap.records_file()).unwrap();
    let logs = format!("{}{}", tokentap.proc.stdout(), tokentap.proc.stderr());
    for (name, text) in [
        ("records.jsonl", records.as_str()),
        ("admin API", api.as_str()),
        ("logs", logs.as_str()),
        ("feed", &format!("{first}{second}{third}")),
    ] {
        for secret in [SECRET, API_KEY, QUERY_KEY] {
            assert!(!text.contains(secret), "{secret} found in {name}");
        }
    }
    assert!(records.contains("[redacted]"), "records should show that a value was redacted");
    assert_eq!(records.lines().count(), 3);
}

/// A config error quoting a URL with credentials shows neither the user nor the password.
#[test]
fn config_errors_do_not_print_url_credentials() {
    for (args, key) in [
        (vec!["check-config", "--upstream", "http://alice:hunter2-SECRET@127.0.0.1:9"], "upstream"),
        (vec!["check-config", "--upstream", "ftp://alice:hunter2-SECRET@127.0.0.1:9"], "upstream"),
    ] {
        let (status, stdout, stderr) = tokentap_e2e::process::run_tokentap(&args);
        assert!(!status.success(), "{args:?} should fail");
        assert!(stderr.contains(key), "{stderr}");
        for text in [&stdout, &stderr] {
            assert!(!text.contains("hunter2") && !text.contains("alice"), "credentials printed: {text}");
        }
    }
    let out = std::process::Command::new(tokentap_e2e::process::bin("tokentap"))
        .args(["check-config", "--upstream", "http://127.0.0.1:9"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://alice:hunter2-SECRET@collector:4317")
        .output()
        .expect("run tokentap");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success());
    assert!(text.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}
