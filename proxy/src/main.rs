//! The `tokentap` command line.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tokentap::config::{self, Overrides};
use tokentap::demo::{self, DemoOptions};
use tokentap::server::{self, RunOptions};

/// A streaming reverse proxy for LLM APIs that shows where a user's wait goes.
#[derive(Parser, Debug)]
#[command(name = "tokentap", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Proxy traffic to an upstream and record every request (the default command).
    Serve(ServeArgs),
    /// Run tokentap in front of its built-in mock provider, with a demo chat page. No API key needed.
    Demo(DemoArgs),
    /// Validate a config file (and flags) and print the routes, without starting.
    CheckConfig(ServeArgs),
}

#[derive(Args, Debug, Clone)]
struct ServeArgs {
    /// TOML config file (routes, timeouts, limits, privacy).
    #[arg(long, env = "TOKENTAP_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8787].
    #[arg(long, env = "TOKENTAP_LISTEN")]
    listen: Option<String>,
    /// Upstream base URL for every path, e.g. https://api.openai.com (adds a "/" route).
    #[arg(long, env = "TOKENTAP_UPSTREAM")]
    upstream: Option<String>,
    /// Provider hint for --upstream: openai, anthropic, gemini, ollama, generic.
    #[arg(long, env = "TOKENTAP_PROVIDER")]
    provider: Option<String>,
    /// Admin API address, or "off" [default: 127.0.0.1:8788].
    #[arg(long, env = "TOKENTAP_ADMIN_LISTEN")]
    admin_listen: Option<String>,
    /// Directory of the local record store [default: ./tokentap-data].
    #[arg(long, env = "TOKENTAP_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Proxy worker threads [default: number of CPUs, at most 8].
    #[arg(long, env = "TOKENTAP_THREADS")]
    threads: Option<usize>,
}

#[derive(Args, Debug, Clone)]
struct DemoArgs {
    /// Address of the demo proxy and chat page.
    #[arg(long, default_value = config::DEFAULT_LISTEN)]
    listen: String,
    /// Admin API address.
    #[arg(long, default_value = config::DEFAULT_ADMIN_LISTEN)]
    admin_listen: String,
    /// Where the demo's records go.
    #[arg(long, default_value = "tokentap-demo-data")]
    data_dir: PathBuf,
}

impl ServeArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen.clone(),
            admin_listen: self.admin_listen.clone(),
            upstream: self.upstream.clone(),
            provider: self.provider.clone(),
            data_dir: self.data_dir.clone(),
            threads: self.threads,
        }
    }

    fn load(&self) -> anyhow::Result<config::ValidConfig> {
        config::load(self.config.as_deref(), &self.overrides()).context("configuration error")
    }
}

fn init_logging() {
    // Logs go to stderr. They never contain header values or bodies (see privacy.rs).
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOKENTAP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,tokentap=info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}

fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let config = args.load()?;
    let data_dir = config.data_dir.clone();
    let (pingora_server, bound) = server::prepare(config, RunOptions::default()).context("cannot start tokentap")?;
    println!("tokentap listening on http://{}", bound.listen);
    if let Some(admin) = bound.admin {
        println!("tokentap admin API on http://{admin}/_tokentap/api/requests");
    }
    println!("tokentap records in {}", data_dir.join(tokentap::store::RECORDS_FILE).display());
    server::run(pingora_server);
    Ok(())
}

fn check_config(args: &ServeArgs) -> anyhow::Result<()> {
    let config = args.load()?;
    println!("config OK: listen {}, admin {:?}, data dir {}", config.listen, config.admin_listen, config.data_dir.display());
    for route in config.routes.routes() {
        println!("  route {:<12} {:<20} -> {}  provider={}", route.name, route.prefix, route.upstream.url(), route.provider_hint.as_deref().unwrap_or("auto"));
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging();
    match cli.command {
        None => serve(&cli.serve),
        Some(Command::Serve(args)) => serve(&args),
        Some(Command::CheckConfig(args)) => check_config(&args),
        Some(Command::Demo(args)) => {
            demo::run(DemoOptions { listen: args.listen, admin_listen: args.admin_listen, data_dir: args.data_dir })
                .context("cannot start the demo")
        }
    }
}
