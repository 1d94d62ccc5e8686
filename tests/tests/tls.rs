//! HTTPS upstreams: verified against a configured CA with SNI = the upstream host, over HTTP/2.

use std::io::Write;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use tokentap_e2e::process::run_sdk_script;
use tokentap_e2e::{http1, Mock, Tokentap};

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A CA and a leaf certificate for `leaf_name`, written as PEM files.
    fn new(leaf_name: &str) -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "tokentap test CA");
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let leaf_key = KeyPair::generate().unwrap();
        let leaf =
            CertificateParams::new(vec![leaf_name.to_string()]).unwrap().signed_by(&leaf_key, &ca, &ca_key).unwrap();
        let write = |name: &str, text: String| {
            std::fs::File::create(dir.path().join(name)).unwrap().write_all(text.as_bytes()).unwrap()
        };
        write("ca.pem", ca.pem());
        write("leaf.pem", leaf.pem());
        write("leaf.key", leaf_key.serialize_pem());
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_string()
    }

    fn mock(&self) -> Mock {
        Mock::start(&[
            "--tls-cert",
            &self.path("leaf.pem"),
            "--tls-key",
            &self.path("leaf.key"),
            "--ttft-ms",
            "1",
            "--itl-ms",
            "1",
            "--tokens",
            "5",
        ])
    }

    /// The mock behind tokentap, whose one route trusts this CA (the config file must outlive
    /// tokentap's start, so it is returned too).
    fn tokentap(&self) -> (Mock, tempfile::NamedTempFile, Tokentap) {
        let mock = self.mock();
        let config = self.config(mock.addr.port());
        let tokentap = Tokentap::start_with_args(&["--config", config.path().to_str().unwrap()]);
        (mock, config, tokentap)
    }

    fn config(&self, port: u16) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        write!(
            f,
            "[[route]]\nprefix = \"/\"\nupstream = \"https://localhost:{port}\"\nca_file = \"{}\"\n",
            self.path("ca.pem")
        )
        .unwrap();
        f
    }
}

const BODY: &[u8] = br#"{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

#[test]
fn https_upstream_with_test_ca_works_over_http2() {
    let pki = Pki::new("localhost");
    let (mock, _config, tokentap) = pki.tokentap();
    assert!(mock.url.starts_with("https://"));
    let mut feed = tokentap.feed();
    let resp = http1::post(tokentap.addr, "/v1/chat/completions", &[("content-type", "application/json")], BODY);
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    assert!(resp.complete);
    assert!(String::from_utf8_lossy(&resp.body).contains("[DONE]"));
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!(record["outcome"], "ok");
    let connection = &record["timeline"]["connection"];
    assert_eq!(connection["protocol"], "h2", "{record}");
    assert!(connection["tls_ms"].as_f64().is_some(), "{record}");
}

/// A realtime session (the official openai SDK's client) through tokentap to an HTTPS upstream,
/// as to `wss://api.openai.com`: verified against the CA, over HTTP/1.1 (WebSocket has no HTTP/2
/// here), recorded with its TLS time.
#[test]
fn a_websocket_session_reaches_an_https_upstream_over_http1() {
    let pki = Pki::new("localhost");
    let (_mock, _config, tokentap) = pki.tokentap();
    let mut feed = tokentap.feed();
    let base = format!("http://{}/v1", tokentap.addr);
    let query = ["mock_first_audio_ms=20", "mock_delta_ms=5", "mock_audio_ms=60"];
    let args: Vec<&str> =
        ["--base-url", base.as_str()].into_iter().chain(query.iter().flat_map(|q| ["--query", q])).collect();
    let out = run_sdk_script("realtime_openai.py", &args);
    assert_eq!(out["responses"].as_array().map(Vec::len), Some(3), "{out}");
    let record = loop {
        let r = feed.next_record();
        if r["path"].as_str().is_some_and(|p| p.starts_with("/v1/realtime")) {
            break r;
        }
    };
    assert_eq!(record["status"], 101, "{record}");
    let connection = &record["timeline"]["connection"];
    assert_eq!(connection["protocol"], "http/1.1", "{record}");
    assert!(connection["tls_ms"].as_f64().is_some(), "{record}");
}

#[test]
fn certificate_for_the_wrong_host_fails_clearly() {
    let pki = Pki::new("wrong.example");
    let (_mock, _config, tokentap) = pki.tokentap();
    let mut feed = tokentap.feed();
    let resp = http1::post(tokentap.addr, "/v1/chat/completions", &[("content-type", "application/json")], BODY);
    assert_eq!(resp.status, 502);
    let body = String::from_utf8_lossy(&resp.body).to_lowercase();
    assert!(body.contains("certificate") || body.contains("tls"), "{body}");
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!(record["outcome"], "upstream_connect_error", "{record}");
}
