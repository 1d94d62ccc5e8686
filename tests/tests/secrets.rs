//! Credentials never reach records, the admin API, or the logs.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tokentap_e2e::otlp_receiver::{hex, OtlpReceiver};
use tokentap_e2e::websocket::{frame, read_head};
use tokentap_e2e::{http1, Mock, Tokentap};

/// One place a client can put a credential, with a secret of its own (so that a failure names
/// the place).
struct Credential {
    place: &'static str,
    secret: &'static str,
}

/// Every header a client (an SDK, a browser, a gateway) sends a credential in.
const HEADER_CREDENTIALS: &[(&str, Credential)] = &[
    ("authorization", Credential { place: "Authorization: Bearer", secret: "sk-test-SECRET-authz-7f3a9c" }),
    ("proxy-authorization", Credential { place: "Proxy-Authorization", secret: "SECRET-proxy-authz-41d8e2" }),
    ("x-api-key", Credential { place: "x-api-key (Anthropic)", secret: "sk-ant-SECRET-xapikey-0b6e" }),
    ("api-key", Credential { place: "api-key (Azure OpenAI)", secret: "SECRET-azure-apikey-5d4c3a" }),
    ("x-goog-api-key", Credential { place: "x-goog-api-key (Gemini)", secret: "AIzaSECRET-googhdr-21b0" }),
    ("anthropic-api-key", Credential { place: "anthropic-api-key", secret: "SECRET-anthropic-hdr-9e8d" }),
    ("openai-api-key", Credential { place: "openai-api-key", secret: "SECRET-openai-hdr-7c6b" }),
    ("cookie", Credential { place: "Cookie", secret: "SECRET-cookie-session-5a49" }),
    ("x-auth-token", Credential { place: "x-auth-token (by rule)", secret: "SECRET-xauthtoken-3827" }),
    ("x-custom-secret", Credential { place: "x-custom-secret (by rule)", secret: "SECRET-custom-1605" }),
    ("openai-organization", Credential { place: "OpenAI-Organization", secret: "org-SECRET-openaiorg-93b1" }),
    ("openai-project", Credential { place: "OpenAI-Project", secret: "proj_SECRET-openaiproj-72a0" }),
    ("anthropic-organization-id", Credential { place: "anthropic-organization-id", secret: "SECRET-antorg-6f5e" }),
    ("x-goog-user-project", Credential { place: "x-goog-user-project (Vertex)", secret: "SECRET-googproj-4d3c" }),
    (
        "ocp-apim-subscription-key",
        Credential { place: "Ocp-Apim-Subscription-Key (Azure APIM)", secret: "SECRET-apim-2b1a" },
    ),
];

/// Every query parameter a client sends a credential in (Gemini's `?key=`, OAuth's
/// `access_token`, …), also percent-encoded as the upstream would decode it.
const QUERY_CREDENTIALS: &[(&str, Credential)] = &[
    ("key", Credential { place: "?key= (Gemini)", secret: "AIzaSECRET-querykey-f4e3" }),
    ("%6Bey", Credential { place: "?%6Bey= (key, percent-encoded)", secret: "AIzaSECRET-pctkey-d2c1" }),
    ("api_key", Credential { place: "?api_key=", secret: "SECRET-query-api_key-b0a9" }),
    ("api-key", Credential { place: "?api-key=", secret: "SECRET-query-api-key-8978" }),
    ("api%5Fkey", Credential { place: "?api%5Fkey=", secret: "SECRET-query-pct-api-6756" }),
    ("access_token", Credential { place: "?access_token=", secret: "SECRET-query-token-4534" }),
    ("apikey", Credential { place: "?apikey=", secret: "SECRET-query-apikey-1a2b" }),
    ("token", Credential { place: "?token=", secret: "SECRET-query-bare-token-3c4d" }),
    ("sig", Credential { place: "?sig= (Azure SAS)", secret: "SECRET-query-sas-sig-5e6f" }),
    ("X-Amz-Signature", Credential { place: "?X-Amz-Signature= (presigned)", secret: "SECRET-amz-sig-7a8b" }),
    ("X-Amz-Credential", Credential { place: "?X-Amz-Credential=", secret: "SECRET-amz-cred-9c0d" }),
];

/// What an upstream answers with that names the account or sets a session: never recorded either.
const RESPONSE_CREDENTIALS: &[(&str, Credential)] = &[
    ("openai-organization", Credential { place: "response OpenAI-Organization", secret: "org-SECRET-resp-1e2f" }),
    (
        "anthropic-organization-id",
        Credential { place: "response anthropic-organization-id", secret: "SECRET-resp-ant-3a4b" },
    ),
    ("set-cookie", Credential { place: "response Set-Cookie", secret: "SECRET-resp-cookie-5c6d" }),
];

/// What a browser's WebSocket sends its key in: a subprotocol (the OpenAI Realtime pattern), and a
/// query parameter.
const SUBPROTOCOL_KEY: Credential =
    Credential { place: "Sec-WebSocket-Protocol openai-insecure-api-key.", secret: "sk-proj-SECRET-subproto-1f2e" };
const SUBPROTOCOL_ORGANIZATION: Credential =
    Credential { place: "Sec-WebSocket-Protocol openai-organization.", secret: "org-SECRET-subproto-org-8e7d" };
const SUBPROTOCOL_PROJECT: Credential =
    Credential { place: "Sec-WebSocket-Protocol openai-project.", secret: "proj_SECRET-subproto-proj-6c5b" };
const WEBSOCKET_QUERY_KEY: Credential = Credential { place: "WebSocket ?api_key=", secret: "SECRET-ws-query-3d4c" };

fn all_credentials() -> Vec<&'static Credential> {
    let mut all: Vec<&Credential> =
        HEADER_CREDENTIALS.iter().chain(QUERY_CREDENTIALS).chain(RESPONSE_CREDENTIALS).map(|(_, c)| c).collect();
    all.extend([&SUBPROTOCOL_KEY, &SUBPROTOCOL_ORGANIZATION, &SUBPROTOCOL_PROJECT, &WEBSOCKET_QUERY_KEY]);
    all
}

#[test]
fn secrets_appear_nowhere() {
    secrets_appear_nowhere_at("info", false);
}

/// At `trace`, pingora and hyper would print request heads with every header: tokentap caps them.
#[test]
fn secrets_appear_nowhere_even_at_the_most_verbose_log_level() {
    secrets_appear_nowhere_at("trace", false);
}

/// Content capture keeps bodies, never credentials.
#[test]
fn secrets_appear_nowhere_with_content_capture_on() {
    secrets_appear_nowhere_at("trace", true);
}

fn secrets_appear_nowhere_at(log_level: &str, capture: bool) {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let receiver = OtlpReceiver::start();
    let endpoint = receiver.grpc_endpoint();
    let env = [
        ("TOKENTAP_LOG", log_level),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_METRICS_EXPORTER", "none"),
    ];
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("tokentap.toml");
    // The mock's control header carries the response's secrets in the request: redacted by
    // configuration, so that only the response side could leak them.
    std::fs::write(
        &config,
        format!("[privacy]\ncapture_content = {capture}\nredact_headers = [\"x-mock-response-header\"]\n"),
    )
    .unwrap();
    let tokentap = Tokentap::start_with_env(&["--upstream", &mock.url, "--config", config.to_str().unwrap()], &env);
    let mut feed = tokentap.feed();

    // One request with every credential header, and every credential query parameter.
    let bearer = format!("Bearer {}", HEADER_CREDENTIALS[0].1.secret);
    let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
    for (name, credential) in HEADER_CREDENTIALS {
        headers.push((name, if *name == "authorization" { bearer.as_str() } else { credential.secret }));
    }
    // The upstream answers with account headers and a cookie of its own.
    let answered: Vec<String> =
        RESPONSE_CREDENTIALS.iter().map(|(name, credential)| format!("{name}: {}", credential.secret)).collect();
    for header in &answered {
        headers.push(("x-mock-response-header", header));
    }
    let query: Vec<String> =
        QUERY_CREDENTIALS.iter().map(|(name, credential)| format!("{name}={}", credential.secret)).collect();
    let body = br#"{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let resp = http1::post(tokentap.addr, &format!("/v1/chat/completions?{}", query.join("&")), &headers, body);
    assert_eq!(resp.status, 200);
    // The upstream still gets the credentials: redaction is for records, not for traffic.
    let last = mock.control("/_mock/last_request").1.to_string();
    assert!(last.contains(HEADER_CREDENTIALS[0].1.secret), "authorization was not forwarded: {last}");
    // Gemini: the key in the query of a streaming call.
    let gemini = format!("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&{}", query.join("&"));
    let resp = http1::post(
        tokentap.addr,
        &gemini,
        &[("content-type", "application/json"), ("x-goog-api-key", HEADER_CREDENTIALS[4].1.secret)],
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
    // A browser's Realtime WebSocket: the key as a subprotocol, next to harmless ones.
    let subprotocols = format!(
        "realtime, openai-insecure-api-key.{}, openai-organization.{}, openai-project.{}, openai-beta.realtime-v1",
        SUBPROTOCOL_KEY.secret, SUBPROTOCOL_ORGANIZATION.secret, SUBPROTOCOL_PROJECT.secret
    );
    let head = websocket_session(
        tokentap.addr,
        &format!("/v1/realtime?model=gpt-realtime&api_key={}", WEBSOCKET_QUERY_KEY.secret),
        &subprotocols,
    );
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");

    let mut records = Vec::new();
    while records.len() < 4 {
        records.push(feed.next_record());
    }
    let websocket = records.iter().find(|r| r["status"] == 101).expect("the WebSocket session's record");
    let kept = websocket["request_headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h[0] == "sec-websocket-protocol")
        .map(|h| h[1].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no subprotocols recorded: {websocket}"));
    assert_eq!(
        kept,
        "realtime, openai-insecure-api-key.[redacted], openai-organization.[redacted], \
         openai-project.[redacted], openai-beta.realtime-v1"
    );

    // Every record's spans arrive at the collector.
    let trace_ids: Vec<String> = records.iter().map(|r| r["trace_id"].as_str().unwrap().to_string()).collect();
    let received = receiver.wait_for(Duration::from_secs(30), "a span for every record", |r| {
        let seen: Vec<String> = r.spans().iter().map(|s| hex(&s.trace_id)).collect();
        trace_ids.iter().all(|t| seen.contains(t))
    });

    let mut places: Vec<(String, String)> = vec![
        ("feed".into(), records.iter().map(|r| r.to_string()).collect()),
        ("admin API listing".into(), tokentap.admin_get("/_tokentap/api/requests?limit=100").1.to_string()),
        ("spans".into(), format!("{received:?}")),
    ];
    for record in &records {
        let id = record["request_id"].as_str().unwrap();
        places.push((
            format!("admin API {id}"),
            tokentap.admin_get(&format!("/_tokentap/api/requests/{id}")).1.to_string(),
        ));
        let data_dir = tokentap.data_dir.path().to_str().unwrap();
        let (status, out, err) = tokentap_e2e::process::run_tokentap(&["explain", id, "--data-dir", data_dir]);
        assert!(status.success(), "explain {id}: {err}");
        places.push((format!("tokentap explain {id}"), format!("{out}{err}")));
    }
    let data_dir = tokentap.data_dir.path().to_str().unwrap().to_string();
    for args in [vec!["report", "--data-dir", &data_dir], vec!["report", "--json", "--data-dir", &data_dir]] {
        let (status, out, err) = tokentap_e2e::process::run_tokentap(&args);
        assert!(status.success(), "{args:?}: {err}");
        places.push((args.join(" "), format!("{out}{err}")));
    }
    // Every file tokentap wrote: records.jsonl, turns.jsonl, spools…
    for entry in std::fs::read_dir(tokentap.data_dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            places.push((path.display().to_string(), String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into()));
        }
    }
    places.push(("logs".into(), format!("{}{}", tokentap.proc.stdout(), tokentap.proc.stderr())));
    for (name, text) in &places {
        for credential in all_credentials() {
            assert!(!text.contains(credential.secret), "the secret sent in {} was found in {name}", credential.place);
        }
    }
    let records_text = std::fs::read_to_string(tokentap.records_file()).unwrap();
    assert!(records_text.contains("[redacted]"), "records should show that a value was redacted");
    assert_eq!(records_text.lines().count(), 4);
}

/// Opens a WebSocket session through `proxy` asking for `subprotocols`, closes it at once (a close
/// frame, then the end of the stream) and reads until the proxy closes; returns the answer's head.
fn websocket_session(proxy: std::net::SocketAddr, path: &str, subprotocols: &str) -> String {
    let mut stream = TcpStream::connect(proxy).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {proxy}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: {subprotocols}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let head = read_head(&mut stream);
    stream.write_all(&frame(true, false, 0x8, Some([1, 2, 3, 4]), &1000u16.to_be_bytes())).unwrap();
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut rest = [0u8; 4096];
    while let Ok(n) = stream.read(&mut rest) {
        if n == 0 {
            break;
        }
    }
    head
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
