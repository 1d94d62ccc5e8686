//! `tokentap demo`: tokentap in front of the built-in mock provider, with the demo chat page.
//! Needs no API key and no network. `--upstream URL` puts the demo in front of an
//! OpenAI-compatible server instead (`scripts/demo.sh --real-model` starts a local llama.cpp one).
//! `--webrtc-peer URL` routes the WebRTC offer path (`/v1/realtime/calls`) to a local WebRTC voice
//! peer (`scripts/demo.sh` starts `examples/voice-webrtc/agent.py`), for the voice page's WebRTC mode.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use tokentap_mock::MockConfig;

use crate::config::{self, ConfigError, FileConfig, OtelEnv, Overrides, RouteConfig};
use crate::pages::Pages;
use crate::server::{self, BoundAddrs, RunOptions, ServeError};

/// Where `tokentap demo` keeps its records when no `--data-dir` is given.
pub const DEFAULT_DATA_DIR: &str = "tokentap-demo-data";

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot start the mock provider: {0}")]
    Mock(std::io::Error),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// Where the demo listens and keeps its records.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub listen: String,
    pub admin_listen: String,
    pub data_dir: PathBuf,
    /// An OpenAI-compatible server to use instead of the built-in mock.
    pub upstream: Option<String>,
    /// The model the chat page asks `upstream` for (the mock's scenarios are then hidden).
    pub model: Option<String>,
    /// A WebRTC voice peer's base URL: the voice page's SDP offers go to it through tokentap.
    pub webrtc_peer: Option<String>,
}

/// The path a browser POSTs its SDP offer to (OpenAI Realtime's WebRTC calls endpoint).
pub const WEBRTC_OFFER_PATH: &str = "/v1/realtime/calls";

/// The demo's config: every path to the upstream, the offer path to the WebRTC peer when one is given.
fn file_config(webrtc_peer: Option<&str>) -> FileConfig {
    let mut file = FileConfig::default();
    if let Some(peer) = webrtc_peer {
        file.routes.push(RouteConfig {
            prefix: WEBRTC_OFFER_PATH.into(),
            upstream: format!("{}{WEBRTC_OFFER_PATH}", peer.trim_end_matches('/')),
            provider: None,
            name: Some("webrtc-peer".into()),
            ca_file: None,
            http2: None,
            role: None,
        });
    }
    file
}

/// Starts the mock provider (unless `upstream` is given) and tokentap, prints the URLs, then a
/// summary line per request.
pub fn run(options: DemoOptions) -> Result<(), DemoError> {
    let (upstream, is_mock) = match options.upstream {
        Some(url) => (url, false),
        None => {
            let mock_addr =
                tokentap_mock::spawn_background(SocketAddr::from(([127, 0, 0, 1], 0)), MockConfig::default())
                    .map_err(DemoError::Mock)?;
            (format!("http://{mock_addr}"), true)
        }
    };
    let overrides = Overrides {
        listen: Some(options.listen),
        admin_listen: Some(options.admin_listen),
        upstream: Some(upstream.clone()),
        data_dir: Some(options.data_dir.clone()),
        ..Overrides::default()
    };
    let webrtc_peer = options.webrtc_peer;
    // The standard `OTEL_*` variables turn export on, as for `tokentap serve` (off when unset).
    let config = config::validate_with_env(file_config(webrtc_peer.as_deref()), &overrides, &OtelEnv::from_process())?;
    let observer = Box::new(|record: &tokentap_record::Record| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "[tokentap] {}", tokentap_report::one_line::one_line(record));
        let _ = out.flush();
    });
    let model = if is_mock { None } else { Some(options.model.unwrap_or_else(|| "default".to_string())) };
    let pages =
        Pages { demo_enabled: true, demo_model: model, demo_webrtc: Some(webrtc_peer.is_some()), ..Pages::default() };
    let prepared = server::prepare(config, RunOptions { pages, observer: Some(observer) })?;
    let data_dir = options.data_dir.clone();
    server::run(prepared, move |bound| print_banner(&bound, &upstream, is_mock, webrtc_peer.as_deref(), &data_dir));
    Ok(())
}

fn print_banner(
    bound: &BoundAddrs,
    upstream: &str,
    is_mock: bool,
    webrtc_peer: Option<&str>,
    data_dir: &std::path::Path,
) {
    let proxy = format!("http://{}", bound.listen);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "tokentap demo is running (Ctrl-C to stop: answers in flight finish and are recorded; Ctrl-C twice to stop at once)"
    );
    let _ = writeln!(out, "  chat page      {proxy}/_tokentap/demo/");
    if is_mock {
        let _ =
            writeln!(out, "  voice page     {proxy}/_tokentap/demo/voice/   (hold to talk: speech → model → speech)");
    }
    if let Some(peer) = webrtc_peer {
        let _ = writeln!(
            out,
            "  webrtc voice   {proxy}/_tokentap/demo/voice/?mode=webrtc   (a WebRTC session with the voice agent at {peer})"
        );
    }
    let _ =
        writeln!(out, "  proxy          {proxy}   (OpenAI SDK base_url: {proxy}/v1, Anthropic SDK base_url: {proxy})");
    let _ = writeln!(out, "  {}  {upstream}", if is_mock { "mock provider" } else { "upstream     " });
    if let Some(admin) = bound.admin {
        let _ = writeln!(out, "  admin API      http://{admin}/_tokentap/api/requests");
        let _ = writeln!(out, "  live feed      http://{admin}/_tokentap/api/stream");
        let _ = writeln!(out, "  turns          http://{admin}/_tokentap/#/turns");
    }
    let _ = writeln!(out, "  records        {}", data_dir.join(tokentap_record::RECORDS_FILE).display());
    if !is_mock {
        let _ = writeln!(
            out,
            "try: curl -N {proxy}/v1/chat/completions -H 'content-type: application/json' \\\n       -d '{{\"stream\":true,\"stream_options\":{{\"include_usage\":true}},\"max_tokens\":64,\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'"
        );
        let _ = out.flush();
        return;
    }
    let _ = writeln!(
        out,
        "try: curl -N {proxy}/v1/chat/completions -H 'content-type: application/json' -H 'x-mock-scenario: reasoning' \\\n       -d '{{\"model\":\"mock-gpt\",\"stream\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'"
    );
    let _ = writeln!(out, "an agent turn (two tools, two model calls): python3 examples/agent-turn/agent_turn.py");
    let _ = out.flush();
}
