//! The admin API: listing with filters, one record by id (and waiting for one not written yet),
//! health counters, CORS for the proxy origin, and its listener's own connection cap and head
//! deadline.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use tokentap_e2e::{http1, Mock, Tokentap};

fn start_with_config(text: &str) -> (Mock, Tokentap, tempfile::TempDir) {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    std::fs::write(&config, text).unwrap();
    let tokentap = Tokentap::start(&mock.url, &["--config", config.to_str().unwrap()]);
    (mock, tokentap, dir)
}

fn admin_connections(tokentap: &Tokentap) -> serde_json::Value {
    let (status, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(status, 200);
    health["admin_connections"].clone()
}

#[test]
fn admin_connections_over_the_cap_get_a_503_and_the_slots_come_back() {
    let (_mock, tokentap, _dir) = start_with_config("admin_max_connections = 3\nadmin_head_timeout_s = 600\n");
    let head = format!("GET /_tokentap/api/health HTTP/1.1\r\nhost: {}\r\n", tokentap.admin);
    let mut held: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(tokentap.admin).unwrap()).collect();
    for stream in &mut held {
        stream.write_all(head.as_bytes()).unwrap();
    }
    // A fourth is told why and closed (the three hold every slot, so the health request waits).
    let mut fourth = TcpStream::connect(tokentap.admin).unwrap();
    let answer = http1::read_to_close(&mut fourth, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    assert!(text.contains("too many open connections"), "{text}");
    // A held connection completes its request; closing the others frees their slots.
    held[0].write_all(b"connection: close\r\n\r\n").unwrap();
    let answer = http1::read_to_close(&mut held[0], Duration::from_secs(30));
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200 "));
    held.clear();
    for _ in 0..2_000 {
        let c = admin_connections(&tokentap);
        if c["open"] == 1 {
            assert_eq!(c["refused_over_cap"], 1, "{c}");
            assert_eq!(c["max_open"], 3, "{c}");
            return;
        }
    }
    panic!("admin slots never came back: {}", admin_connections(&tokentap));
}

#[test]
fn a_slow_or_idle_admin_connection_is_closed_at_the_head_deadline() {
    let (_mock, tokentap, _dir) = start_with_config("admin_head_timeout_s = 1\n");
    // Connected, and not one byte sent.
    let mut silent = TcpStream::connect(tokentap.admin).unwrap();
    let answer = http1::read_to_close(&mut silent, Duration::from_secs(60));
    assert!(answer.is_empty() || answer.starts_with(b"HTTP/1.1 4"), "{:?}", String::from_utf8_lossy(&answer));
    // Half a head, then nothing.
    let mut slow = TcpStream::connect(tokentap.admin).unwrap();
    slow.write_all(b"GET /_tokentap/api/health HTTP/1.1\r\nhost: 127.0.0.1\r\n").unwrap();
    let answer = http1::read_to_close(&mut slow, Duration::from_secs(60));
    assert!(answer.is_empty() || answer.starts_with(b"HTTP/1.1 4"), "{:?}", String::from_utf8_lossy(&answer));
    // One request on a kept-alive connection, then nothing.
    let mut idle = TcpStream::connect(tokentap.admin).unwrap();
    let request = format!("GET /_tokentap/api/health HTTP/1.1\r\nhost: {}\r\n\r\n", tokentap.admin);
    let response = http1::exchange(&mut idle, request.as_bytes());
    assert_eq!(response.status, 200);
    let rest = http1::read_to_close(&mut idle, Duration::from_secs(60));
    assert!(rest.is_empty() || rest.starts_with(b"HTTP/1.1 408"), "{:?}", String::from_utf8_lossy(&rest));
    // Others are served.
    assert_eq!(tokentap.admin_get("/_tokentap/api/health").0, 200);
}

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

/// An upstream that answers one streamed chat request with a first event, then holds the rest
/// until `finish` is told.
fn held_upstream() -> (String, std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (finish, finished) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        // The whole request, its body included (its length is the one the test sends).
        while !tokentap_e2e::http1::is_whole_request(&request) {
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "the request ended early");
            request.extend_from_slice(&buf[..n]);
        }
        let event = |text: &str| {
            let data = format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n");
            format!("{:x}\r\n{data}\r\n", data.len())
        };
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        conn.write_all(format!("{head}{}", event("Hello")).as_bytes()).unwrap();
        finished.recv().unwrap();
        let done = "data: [DONE]\n\n";
        let tail = format!("{}{:x}\r\n{done}\r\n0\r\n\r\n", event(" world"), done.len());
        conn.write_all(tail.as_bytes()).unwrap();
        // Done: the connection closes (kept, tokentap would pool it for a minute).
    });
    (url, finish, server)
}

/// Asks `condition` again until it holds; false after a minute of asking.
fn until(condition: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
    }
    false
}

#[test]
fn one_record_can_be_waited_for_until_it_is_written() {
    let (upstream, finish, server) = held_upstream();
    let tokentap = Tokentap::start(&upstream, &[]);
    let request = http1::request_bytes(
        "POST",
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[]}"#,
    );
    let mut response = http1::StreamedResponse::open(tokentap.addr, &request);
    response.read_head();
    let id = response.response.header("x-tokentap-request-id").expect("a request id").to_string();

    // Still streaming: no record yet, and without wait_ms no waiting.
    assert_eq!(tokentap.admin_get(&format!("/_tokentap/api/requests/{id}")).0, 404);
    assert_eq!(tokentap.admin_get(&format!("/_tokentap/api/requests/{id}?wait_ms=0")).0, 404);
    assert_eq!(tokentap.admin_get(&format!("/_tokentap/api/requests/{id}?wait_ms=30001")).0, 400);

    // A waiter, subscribed (the health answer counts it) before the stream ends.
    let admin = tokentap.admin;
    let path = format!("/_tokentap/api/requests/{id}?wait_ms=30000");
    let waiter = std::thread::spawn(move || http1::get(admin, &path, &[]));
    let subscribed = until(|| admin_connections(&tokentap)["feed_subscribers"] == 1);
    assert!(subscribed, "the waiter never subscribed: {}", admin_connections(&tokentap));
    finish.send(()).unwrap();
    while response.read_some() {}
    let answer = waiter.join().unwrap();
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
    let record: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(record["request_id"], id.as_str());
    assert_eq!(record["outcome"], "ok", "{record:#}");
    server.join().unwrap();
    // Its slot is given back; written, the record is there at once; an unknown one is a 404 after the wait.
    let released = until(|| admin_connections(&tokentap)["feed_subscribers"] == 0);
    assert!(released, "{}", admin_connections(&tokentap));
    assert_eq!(tokentap.admin_get(&format!("/_tokentap/api/requests/{id}?wait_ms=30000")).0, 200);
    let (status, body) = tokentap.admin_get("/_tokentap/api/requests/nope?wait_ms=1");
    assert_eq!(status, 404, "{body}");
    assert_eq!(tokentap.admin_get("/_tokentap/api/turns/nope?wait_ms=1").0, 404);
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

const ADMIN_TOKEN: &str = "e2e-admin-token-4f9c2a7b1d";

/// A GET with exactly the given Host header (the harness's own requests say `tokentap.test`).
fn get_with_host(admin: std::net::SocketAddr, path: &str, host: &str, headers: &[(&str, &str)]) -> http1::HttpResponse {
    let mut raw = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n");
    for (k, v) in headers {
        raw.push_str(&format!("{k}: {v}\r\n"));
    }
    raw.push_str("connection: close\r\n\r\n");
    http1::send(admin, raw.as_bytes())
}

fn assert_not_framable(resp: &http1::HttpResponse, what: &str) {
    assert_eq!(resp.header("x-frame-options"), Some("DENY"), "{what}");
    assert_eq!(resp.header("content-security-policy"), Some("frame-ancestors 'none'"), "{what}");
}

#[test]
fn a_non_loopback_admin_listener_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let args =
        ["check-config", "--upstream", "http://127.0.0.1:9", "--admin-listen", "0.0.0.0:0", "--data-dir", data_dir];
    let (status, _, stderr) = tokentap_e2e::process::run_tokentap(&args);
    assert!(!status.success());
    assert!(stderr.contains("admin_listen") && stderr.contains("admin_token"), "{stderr}");
    // With a token it is accepted, and the token is printed nowhere.
    let out = std::process::Command::new(tokentap_e2e::process::bin("tokentap"))
        .args(args)
        .env("TOKENTAP_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(!text.contains(ADMIN_TOKEN), "{text}");
    // A token too short to be one is refused.
    let out = std::process::Command::new(tokentap_e2e::process::bin("tokentap"))
        .args(args)
        .env("TOKENTAP_ADMIN_TOKEN", "short")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("admin_token"));
}

#[test]
fn with_a_token_every_admin_path_requires_it() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let tokentap = Tokentap::start_with_env(&["--upstream", &mock.url], &[("TOKENTAP_ADMIN_TOKEN", ADMIN_TOKEN)]);
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    for path in ["/_tokentap/api/health", "/_tokentap/api/requests", "/_tokentap/api/list", "/metrics", "/_tokentap/"] {
        let none = http1::get(tokentap.admin, path, &[]);
        assert_eq!(none.status, 401, "{path}");
        assert!(none.header("www-authenticate").is_some_and(|v| v.starts_with("Bearer")), "{path}");
        assert_not_framable(&none, path);
        let wrong = http1::get(tokentap.admin, path, &[("authorization", "Bearer e2e-admin-token-4f9c2a7b1X")]);
        assert_eq!(wrong.status, 401, "{path}");
        let right = http1::get(tokentap.admin, path, &[("authorization", bearer.as_str())]);
        assert_eq!(right.status, 200, "{path}");
        assert_not_framable(&right, path);
    }
    // The dashboard: one visit with ?token= sets an HttpOnly cookie and drops the token from the address.
    assert_eq!(http1::get(tokentap.admin, "/_tokentap/?token=wrong-wrong-wrong-wrong", &[]).status, 401);
    let login = http1::get(tokentap.admin, &format!("/_tokentap/?token={ADMIN_TOKEN}"), &[]);
    assert_eq!(login.status, 303);
    assert_eq!(login.header("location"), Some("/_tokentap/"));
    let cookie = login.header("set-cookie").unwrap().to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let cookie = cookie.split(';').next().unwrap().to_string();
    let page = http1::get(tokentap.admin, "/_tokentap/", &[("cookie", cookie.as_str())]);
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("app.js"));
    // The page's live feed (EventSource sends the cookie, not a header) is open to it too.
    let mut feed = http1::StreamedResponse::open(
        tokentap.admin,
        &http1::request_bytes("GET", "/_tokentap/api/stream", &[("cookie", cookie.as_str())], b""),
    );
    feed.read_head();
    assert_eq!(feed.response.status, 200);
    // `tokentap explain --admin` sends TOKENTAP_ADMIN_TOKEN.
    let chat = http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[]}"#,
    );
    let id = chat.header("x-tokentap-request-id").unwrap().to_string();
    while !String::from_utf8_lossy(&feed.response.body).contains(&id) {
        assert!(feed.read_some(), "the live feed ended before the record came");
    }
    feed.abort();
    let admin = format!("http://{}", tokentap.admin);
    let explain = |token: Option<&str>| {
        let mut cmd = std::process::Command::new(tokentap_e2e::process::bin("tokentap"));
        cmd.args(["explain", &id, "--admin", &admin]).env_remove("TOKENTAP_ADMIN_TOKEN");
        if let Some(t) = token {
            cmd.env("TOKENTAP_ADMIN_TOKEN", t);
        }
        cmd.output().unwrap()
    };
    let refused = explain(None);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("401"), "{}", String::from_utf8_lossy(&refused.stderr));
    let allowed = explain(Some(ADMIN_TOKEN));
    assert!(allowed.status.success(), "{}", String::from_utf8_lossy(&allowed.stderr));
    let logs = format!("{}{}", tokentap.proc.stdout(), tokentap.proc.stderr());
    assert!(!logs.contains(ADMIN_TOKEN), "the token was logged");
}

#[test]
fn only_local_host_names_are_answered() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let admin_host = tokentap.admin.to_string();
    for host in [admin_host.as_str(), "localhost:8788", "[::1]:8788"] {
        let resp = get_with_host(tokentap.admin, "/_tokentap/api/health", host, &[]);
        assert_eq!(resp.status, 200, "{host}");
        assert_not_framable(&resp, host);
    }
    // A page on a name that resolves to this machine (DNS rebinding) is refused.
    for host in ["evil.example", "evil.example:8788", "127.0.0.1.nip.io:8788"] {
        let resp = get_with_host(tokentap.admin, "/_tokentap/api/requests", host, &[]);
        assert_eq!(resp.status, 403, "{host}");
        assert!(String::from_utf8_lossy(&resp.body).contains("admin_allowed_hosts"), "{host}");
        assert_not_framable(&resp, host);
    }
    // A configured name is answered.
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "admin_allowed_hosts = [\"tokentap.internal\"]\n").unwrap();
    let named = Tokentap::start(&mock.url, &["--config", config.path().to_str().unwrap()]);
    let resp = get_with_host(named.admin, "/_tokentap/api/health", "tokentap.internal:8788", &[]);
    assert_eq!(resp.status, 200);
}
