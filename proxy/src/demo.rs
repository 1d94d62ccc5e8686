//! `tokentap demo`: tokentap in front of the built-in mock provider, with the demo chat page.
//! Needs no API key and no network.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use tokentap_mock::MockConfig;

use crate::config::{self, ConfigError, FileConfig, Overrides};
use crate::pages::Pages;
use crate::server::{self, BoundAddrs, RunOptions, ServeError};

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
}

/// Starts the mock provider and tokentap, prints the URLs, then a summary line per request.
pub fn run(options: DemoOptions) -> Result<(), DemoError> {
    let mock_addr = tokentap_mock::spawn_background(SocketAddr::from(([127, 0, 0, 1], 0)), MockConfig::default())
        .map_err(DemoError::Mock)?;
    let overrides = Overrides {
        listen: Some(options.listen),
        admin_listen: Some(options.admin_listen),
        upstream: Some(format!("http://{mock_addr}")),
        data_dir: Some(options.data_dir.clone()),
        ..Overrides::default()
    };
    let config = config::validate(FileConfig::default(), &overrides)?;
    let observer = Box::new(|record: &tokentap_record::Record| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "[tokentap] {}", tokentap_report::one_line::one_line(record));
        let _ = out.flush();
    });
    let pages = Pages { demo_enabled: true, ..Pages::default() };
    let prepared = server::prepare(config, RunOptions { pages, observer: Some(observer) })?;
    let data_dir = options.data_dir.clone();
    server::run(prepared, move |bound| print_banner(&bound, mock_addr, &data_dir));
    Ok(())
}

fn print_banner(bound: &BoundAddrs, mock: SocketAddr, data_dir: &std::path::Path) {
    let proxy = format!("http://{}", bound.listen);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "tokentap demo is running (Ctrl-C to stop)");
    let _ = writeln!(out, "  chat page      {proxy}/_tokentap/demo/");
    let _ =
        writeln!(out, "  proxy          {proxy}   (OpenAI SDK base_url: {proxy}/v1, Anthropic SDK base_url: {proxy})");
    let _ = writeln!(out, "  mock provider  http://{mock}");
    if let Some(admin) = bound.admin {
        let _ = writeln!(out, "  admin API      http://{admin}/_tokentap/api/requests");
        let _ = writeln!(out, "  live feed      http://{admin}/_tokentap/api/stream");
        let _ = writeln!(out, "  turns          http://{admin}/_tokentap/#/turns");
    }
    let _ = writeln!(out, "  records        {}", data_dir.join(tokentap_record::RECORDS_FILE).display());
    let _ = writeln!(
        out,
        "try: curl -N {proxy}/v1/chat/completions -H 'content-type: application/json' -H 'x-mock-scenario: reasoning' \\\n       -d '{{\"model\":\"mock-gpt\",\"stream\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'"
    );
    let _ = writeln!(out, "an agent turn (two tools, two model calls): python3 examples/agent-turn/agent_turn.py");
    let _ = out.flush();
}
