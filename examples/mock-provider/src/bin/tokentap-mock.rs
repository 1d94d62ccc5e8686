//! `tokentap-mock`: run the mock LLM provider.
//!
//! Prints exactly one line, `tokentap-mock listening on http://ADDR`, once bound; tests read it to
//! learn the port.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use tokentap_mock::{MockConfig, MockServer, REQUEST_HEADERS_HELP};

const HOW_TO_RUN: &str = "\
HOW TO RUN:
  tokentap-mock --listen 127.0.0.1:8081 --ttft-ms 300 --itl-ms 25
  curl -N http://127.0.0.1:8081/v1/chat/completions -H 'x-mock-scenario: reasoning' \\
       -d '{\"model\":\"gpt-4o\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'
  tokentap-mock --listen 127.0.0.1:8443 --tls-cert cert.pem --tls-key key.pem   # HTTPS, ALPN h2 + http/1.1";

/// A mock LLM provider streaming the real wire formats on a deterministic schedule.
#[derive(Parser, Debug)]
#[command(
    name = "tokentap-mock",
    version,
    about,
    after_help = "Run with --help for endpoints, per-request headers and examples."
)]
#[command(after_long_help = format!("{REQUEST_HEADERS_HELP}\n{HOW_TO_RUN}"))]
struct Cli {
    /// Address to listen on; port 0 picks a free port (printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    #[command(flatten)]
    config: MockConfig,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let server = MockServer::bind(cli.listen, cli.config).await.with_context(|| format!("binding {}", cli.listen))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "tokentap-mock listening on {}", server.url())?;
    stdout.flush()?;
    drop(stdout);
    server.run().await.context("serving")?;
    Ok(())
}

// How to run: `cargo run -p tokentap-mock -- --listen 127.0.0.1:8081`, then see `--help`.
