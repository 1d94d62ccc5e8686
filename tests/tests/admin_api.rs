//! The admin API: listing with filters, one record by id, health counters, CORS for the proxy origin.

use tokentap_e2e::{http1, Mock, Tokentap};

#[test]
fn lists_filters_and_fetches_records() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let ok = http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"a","stream":true,"messages":[]}"#,
    );
    let failed = http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json"), ("x-mock-status", "500")],
        br#"{"model":"b","stream":true,"messages":[]}"#,
    );
    let ok_id = ok.header("x-tokentap-request-id").unwrap().to_string();
    let failed_id = failed.header("x-tokentap-request-id").unwrap().to_string();
    feed.next_record();
    feed.next_record();

    let (status, all) = tokentap.admin_get("/_tokentap/api/requests");
    assert_eq!(status, 200);
    let ids: Vec<&str> = all["records"].as_array().unwrap().iter().map(|r| r["request_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [failed_id.as_str(), ok_id.as_str()], "newest first");

    let (_, only_ok) = tokentap.admin_get("/_tokentap/api/requests?outcome=ok");
    assert_eq!(only_ok["records"].as_array().unwrap().len(), 1);
    assert_eq!(only_ok["records"][0]["request_id"], ok_id.as_str());
    let (_, model_b) = tokentap.admin_get("/_tokentap/api/requests?model=b&limit=5");
    assert_eq!(model_b["records"][0]["status"], 500);
    let (_, one) = tokentap.admin_get("/_tokentap/api/requests?limit=1");
    assert_eq!(one["records"].as_array().unwrap().len(), 1);

    let (status, record) = tokentap.admin_get(&format!("/_tokentap/api/requests/{ok_id}"));
    assert_eq!(status, 200);
    assert_eq!(record["conditions"]["model"], "a");
    assert_eq!(tokentap.admin_get("/_tokentap/api/requests/nope").0, 404);
    assert_eq!(tokentap.admin_get("/_tokentap/api/requests?limit=0").0, 400);
    assert_eq!(tokentap.admin_get("/_tokentap/api/requests?colour=red").0, 400);

    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(health["records"]["written"], 2, "{health}");
    assert_eq!(health["records"]["dropped"], 0);

    // The proxy's own origin may read the API from a browser; others may not.
    let origin = format!("http://{}", tokentap.addr);
    let allowed = http1::get(tokentap.admin, "/_tokentap/api/health", &[("origin", origin.as_str())]);
    assert_eq!(allowed.header("access-control-allow-origin"), Some(origin.as_str()));
    let other = http1::get(tokentap.admin, "/_tokentap/api/health", &[("origin", "http://evil.example")]);
    assert_eq!(other.header("access-control-allow-origin"), None);
}

#[test]
fn unknown_route_path_is_a_recorded_404() {
    let config = {
        use std::io::Write;
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(f, "[[route]]\nprefix = \"/openai\"\nupstream = \"http://127.0.0.1:9\"").unwrap();
        f
    };
    let tokentap = Tokentap::start_with_args(&["--config", config.path().to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let resp = http1::post(tokentap.addr, "/v1/chat/completions", &[("content-type", "application/json")], b"{}");
    assert_eq!(resp.status, 404);
    assert!(String::from_utf8_lossy(&resp.body).contains("no route"));
    assert_eq!(feed.next_record()["outcome"], "no_route");
}

#[test]
fn environment_variables_configure_tokentap() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(tokentap_e2e::process::bin("tokentap"))
        .arg("check-config")
        .env("TOKENTAP_UPSTREAM", "https://api.anthropic.com")
        .env("TOKENTAP_PROVIDER", "anthropic")
        .env("TOKENTAP_LISTEN", "127.0.0.1:0")
        .env("TOKENTAP_DATA_DIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("https://api.anthropic.com") && stdout.contains("provider=anthropic"), "{stdout}");
    // A flag wins over the environment.
    let out = std::process::Command::new(tokentap_e2e::process::bin("tokentap"))
        .args(["check-config", "--upstream", "http://flag.example"])
        .env("TOKENTAP_UPSTREAM", "https://env.example")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("flag.example") && !stdout.contains("env.example"), "{stdout}");
}
