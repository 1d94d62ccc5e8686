//! The `tokentap` command line.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tokentap::config::{self, Overrides};
use tokentap::demo::{self, DemoOptions};
use tokentap::server::{self, RunOptions};

/// Shown after `tokentap --help`; each line's command parses (tests/tests/docs_commands.rs).
const EXAMPLES: &str = "\
Examples:
  tokentap demo                                      # the mock provider and a chat page; no API key
  tokentap --upstream https://api.openai.com         # then point the SDK's base_url at http://127.0.0.1:8787/v1
  tokentap report --since 1h --group-by route,model  # percentiles, stalls and goodput of what was recorded
  tokentap explain REQUEST_ID                        # where one answer waited (the x-tokentap-request-id header)
  tokentap bench --help                              # load-test an endpoint";

/// A streaming reverse proxy for LLM APIs that shows where a user's wait goes.
#[derive(Parser, Debug)]
#[command(name = "tokentap", version, args_conflicts_with_subcommands = true, after_help = EXAMPLES)]
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
    /// Percentile tables, stall rate and goodput over recorded requests (markdown, JSON or HTML).
    Report(ReportArgs),
    /// Where one request's answer text waited (the re-buffering verdict and a timeline per hop), or
    /// where one turn's time went (its steps, tool runs and critical path).
    Explain(ExplainArgs),
    /// Load-test a streaming LLM endpoint (a concurrency or rate sweep × output × prompt lengths)
    /// and write the report; `bench compare A.json B.json` compares two runs.
    Bench(Box<BenchCommand>),
}

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct BenchCommand {
    #[command(subcommand)]
    sub: Option<BenchSubcommand>,
    #[command(flatten)]
    args: tokentap_bench::BenchArgs,
}

#[derive(Subcommand, Debug, Clone)]
enum BenchSubcommand {
    /// Compare two `--json` results: conditions side by side, then each cell's change.
    Compare(CompareArgs),
}

#[derive(Args, Debug, Clone)]
struct CompareArgs {
    /// The baseline run (`tokentap bench --json A.json`).
    a: PathBuf,
    /// The run compared with it.
    b: PathBuf,
    /// Compare runs whose conditions differ (the differences are printed first).
    #[arg(long)]
    allow_mismatch: bool,
}

#[derive(Args, Debug, Clone)]
struct ExplainArgs {
    /// The request id (the `x-tokentap-request-id` response header), or a turn id.
    request_id: String,
    /// Ask a running tokentap's admin API, e.g. http://127.0.0.1:8788.
    #[arg(long, conflicts_with = "data_dir")]
    admin: Option<String>,
    /// Read the local record store instead [default: ./tokentap-data, or ./tokentap-demo-data when
    /// only the demo's exists].
    #[arg(long, env = "TOKENTAP_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Print the diagnosis as JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug, Clone)]
struct ReportArgs {
    /// The record store to read (records.jsonl and its rotated files) [default: ./tokentap-data, or
    /// ./tokentap-demo-data when only the demo's exists].
    #[arg(long, env = "TOKENTAP_DATA_DIR", conflicts_with = "records")]
    data_dir: Option<PathBuf>,
    /// Read these records files instead (oldest first); the last line per request id wins.
    #[arg(long, num_args = 1..)]
    records: Vec<PathBuf>,
    /// Config file whose `[slo]` section sets the goodput objectives (and `data_dir` the store).
    #[arg(long, env = "TOKENTAP_CONFIG")]
    config: Option<PathBuf>,
    /// Only requests started at or after this: a duration before now (15m, 2h, 1d) or an RFC 3339 time.
    #[arg(long)]
    since: Option<String>,
    /// Only requests started before this: a duration before now or an RFC 3339 time.
    #[arg(long)]
    until: Option<String>,
    /// Group by any of: route, model, concurrency (comma-separated).
    #[arg(long, default_value = "")]
    group_by: String,
    /// Include the warm-up requests (the first requests of each route after start).
    #[arg(long)]
    include_warmup: bool,
    /// Print the report as JSON instead of markdown.
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML report (tables and plots) to this file.
    #[arg(long)]
    html: Option<PathBuf>,
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
    provider: Option<config::Provider>,
    /// Admin API address, or "off" [default: 127.0.0.1:8788].
    #[arg(long, env = "TOKENTAP_ADMIN_LISTEN")]
    admin_listen: Option<String>,
    /// Directory of the local record store [default: ./tokentap-data].
    #[arg(long, env = "TOKENTAP_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Proxy worker threads [default: number of CPUs, at most 8].
    #[arg(long, env = "TOKENTAP_THREADS")]
    threads: Option<usize>,
    /// CPU priority of the record worker against forwarding [default: idle].
    #[arg(long, env = "TOKENTAP_WORKER_PRIORITY", value_enum)]
    worker_priority: Option<config::WorkerPriority>,
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
    #[arg(long, default_value = demo::DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    /// An OpenAI-compatible server to put the demo in front of, instead of the built-in mock
    /// (`scripts/demo.sh --real-model` starts a local llama.cpp server and passes it here).
    #[arg(long)]
    upstream: Option<String>,
    /// The model the chat page asks the `--upstream` server for.
    #[arg(long, requires = "upstream")]
    model: Option<String>,
    /// A WebRTC voice peer's base URL: the voice page's SDP offers (`POST /v1/realtime/calls`) go
    /// to it through tokentap (`scripts/demo.sh` starts examples/voice-webrtc/agent.py and passes it).
    #[arg(long)]
    webrtc_peer: Option<String>,
}

impl ServeArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen.clone(),
            admin_listen: self.admin_listen.clone(),
            upstream: self.upstream.clone(),
            provider: self.provider,
            data_dir: self.data_dir.clone(),
            threads: self.threads,
            worker_priority: self.worker_priority,
        }
    }

    fn load(&self) -> anyhow::Result<config::ValidConfig> {
        config::load(self.config.as_deref(), &self.overrides()).context("configuration error")
    }
}

/// Crates whose debug and trace logs print request and response heads (with Authorization, API
/// keys, cookies): capped at `info` whatever `TOKENTAP_LOG` asks for.
const HEAD_LOGGING_CRATES: &[&str] = &["pingora", "pingora_core", "pingora_proxy", "pingora_http", "h2", "hyper"];

fn init_logging(default_filter: &str, head_crates_cap: &str) -> anyhow::Result<()> {
    // Logs go to stderr. They never contain header values or bodies (see forward/privacy.rs).
    let mut filter = match std::env::var("TOKENTAP_LOG") {
        Ok(text) => tracing_subscriber::EnvFilter::try_new(&text).with_context(|| {
            format!("TOKENTAP_LOG={text:?} is not a log filter (e.g. \"info\" or \"warn,tokentap=debug\")")
        })?,
        Err(_) => tracing_subscriber::EnvFilter::new(default_filter),
    };
    for name in HEAD_LOGGING_CRATES {
        filter = filter.add_directive(format!("{name}={head_crates_cap}").parse().context("built-in log directive")?);
    }
    // Colour only on a terminal: a log file or a pipe gets plain text.
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    Ok(())
}

fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let config = args.load()?;
    let data_dir = config.data_dir.clone();
    let prepared = server::prepare(config, RunOptions::default()).context("cannot start tokentap")?;
    server::run(prepared, move |bound| {
        println!("tokentap listening on http://{}", bound.listen);
        if let Some(admin) = bound.admin {
            println!("tokentap admin API on http://{admin}/_tokentap/api/requests");
            println!("tokentap dashboard on http://{admin}/_tokentap/");
        }
        println!("tokentap records in {}", data_dir.join(tokentap_record::RECORDS_FILE).display());
    });
    Ok(())
}

fn check_config(args: &ServeArgs) -> anyhow::Result<()> {
    let config = args.load()?;
    let admin = config.admin_listen.map_or_else(|| "off".to_string(), |a| a.to_string());
    println!("config OK: listen {}, admin {admin}, data dir {}", config.listen, config.data_dir.display());
    for route in config.routes.routes() {
        println!(
            "  route {:<12} {:<20} -> {}  provider={}",
            route.name,
            route.prefix,
            route.upstream.url(),
            route.provider_hint.map_or("auto", |p| p.as_str())
        );
    }
    Ok(())
}

fn report(args: &ReportArgs) -> anyhow::Result<()> {
    use tokentap_report as report;
    let file = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            config::parse_str(&text).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))?
        }
        None => config::FileConfig::default(),
    };
    file.slo.validate().context("configuration error")?;
    let dir = if args.records.is_empty() {
        Some(store_dir(args.data_dir.clone().or(file.data_dir.clone()), "--records FILE…")?)
    } else {
        None
    };
    let loaded = if let Some(dir) = &dir { report::load_data_dir(dir)? } else { report::load_files(&args.records)? };
    let now = std::time::SystemTime::now();
    let time = |text: &Option<String>| -> anyhow::Result<Option<u64>> {
        text.as_deref().map(|t| report::summary::parse_time(t, now).map_err(anyhow::Error::msg)).transpose()
    };
    let files: Vec<String> = loaded.files.iter().map(|p| p.display().to_string()).collect();
    let mut source = files.join(", ");
    if loaded.skipped_lines > 0 {
        source.push_str(&format!(" ({} unreadable lines skipped)", loaded.skipped_lines));
        // Also on stderr, where a script reading the JSON still sees it.
        eprintln!(
            "tokentap report: {} unreadable lines skipped (not a record of this version, or not UTF-8)",
            loaded.skipped_lines
        );
    }
    let options = report::ReportOptions {
        since_unix_ns: time(&args.since).context("--since")?,
        until_unix_ns: time(&args.until).context("--until")?,
        group_by: report::GroupKey::parse_list(&args.group_by).map_err(anyhow::Error::msg).context("--group-by")?,
        include_warmup: args.include_warmup,
        slo: file.slo,
        keep_samples: args.html.is_some(),
        source,
    };
    let mut built = report::build_report(&loaded.records, &options);
    if dir.is_none() {
        // Several instances' journals: their turns rebuilt as one instance would have built them.
        let rebuilt = report::turns::rebuild_turns(&loaded.records, &loaded.origins, file.turns.tracker_config());
        if !rebuilt.turns.is_empty() {
            let mut summary =
                report::turns::summarize_turns(&rebuilt.turns, options.since_unix_ns, options.until_unix_ns);
            summary.rebuilt = Some(report::turns::RebuiltNote {
                files: args.records.len() as u64,
                split_turns: rebuilt.split,
                fleet_keyed: rebuilt.fleet_keyed,
            });
            built.turns = Some(summary);
        }
    }
    if let Some(dir) = &dir {
        let turns = report::turns::load_turns(dir)?;
        if turns.skipped_lines > 0 {
            eprintln!("tokentap report: {} unreadable lines skipped in turns.jsonl", turns.skipped_lines);
        }
        if !turns.turns.is_empty() {
            built.turns =
                Some(report::turns::summarize_turns(&turns.turns, options.since_unix_ns, options.until_unix_ns));
        }
    }
    if let Some(path) = &args.html {
        std::fs::write(path, report::html::render(&built))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&built)?);
    } else {
        print!("{}", report::markdown::render(&built));
    }
    Ok(())
}

fn explain(args: &ExplainArgs) -> anyhow::Result<()> {
    let dir = match &args.admin {
        Some(_) => None,
        None => Some(store_dir(
            args.data_dir.clone(),
            "--admin URL (a running tokentap's admin API, e.g. --admin http://127.0.0.1:8788)",
        )?),
    };
    if let Some(turn) = find_turn(args, dir.as_deref())? {
        if args.json {
            println!("{}", serde_json::to_string_pretty(&turn)?);
        } else {
            print!("{}", tokentap_report::explain::explain_turn(&turn));
        }
        return Ok(());
    }
    let record = match (&args.admin, &dir) {
        (Some(admin), _) => admin_record(admin, &args.request_id)?,
        (None, dir) => {
            let dir = dir.as_deref().unwrap_or(std::path::Path::new(config::DEFAULT_DATA_DIR));
            let loaded = tokentap_report::load_data_dir(dir)?;
            loaded.records.into_iter().find(|r| r.request_id == args.request_id).with_context(|| {
                format!(
                    "no record {} in {}; pass --data-dir DIR for another record store, or --admin URL to ask a running tokentap",
                    args.request_id,
                    dir.display()
                )
            })?
        }
    };
    // Recomputed from the stamps, so records written before the diagnosis existed explain too;
    // a chain's diagnosis needs the egress record too, so it is taken as stored.
    let diagnosis =
        if record.chain.is_some() { record.diagnosis.clone() } else { tokentap_record::diagnosis::diagnose(&record) };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&diagnosis)?);
    } else {
        print!("{}", tokentap_report::explain(&record, diagnosis.as_ref()));
    }
    Ok(())
}

/// The turn `explain` was given, when its id names a turn rather than a request (turn ids are
/// 32 hex digits or an app's `x-tokentap-turn` value; request ids are 24 hex digits).
fn find_turn(
    args: &ExplainArgs,
    dir: Option<&std::path::Path>,
) -> anyhow::Result<Option<tokentap_record::turn::TurnRecord>> {
    let id = &args.request_id;
    if id.len() == 24 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(None);
    }
    match &args.admin {
        Some(admin) => match admin_get(admin, &format!("/_tokentap/api/turns/{id}")) {
            Ok(body) => {
                Ok(Some(serde_json::from_slice(&body).context("the admin API's turn is not a turn of this version")?))
            }
            Err(_) => Ok(None),
        },
        None => {
            let dir = dir.unwrap_or(std::path::Path::new(config::DEFAULT_DATA_DIR));
            Ok(tokentap_report::turns::load_turns(dir)?.turns.into_iter().rev().find(|t| t.turn_id == *id))
        }
    }
}

/// The record store `report` and `explain` read: the one given; else `./tokentap-data`; else, when
/// only the demo's store is here, `./tokentap-demo-data` (said on stderr). A store that does not
/// exist is an error naming `--data-dir DIR` and `other` (the command's other way to its records).
fn store_dir(given: Option<PathBuf>, other: &str) -> anyhow::Result<PathBuf> {
    let default = PathBuf::from(config::DEFAULT_DATA_DIR);
    let demo = PathBuf::from(demo::DEFAULT_DATA_DIR);
    let dir = match given {
        Some(dir) => dir,
        None if !default.exists() && demo.exists() => {
            eprintln!(
                "tokentap: reading the demo's records in ./{} (there is no ./{}; --data-dir DIR reads another store)",
                demo.display(),
                default.display()
            );
            demo
        }
        None => default,
    };
    anyhow::ensure!(
        dir.is_dir(),
        "no record store at {}: pass --data-dir DIR (the folder `tokentap serve` or `tokentap demo` wrote, e.g. --data-dir tokentap-demo-data), or {other}",
        dir.display()
    );
    Ok(dir)
}

/// GET `/_tokentap/api/requests/{id}` from a plain-HTTP admin API (no client library needed).
fn admin_record(admin: &str, request_id: &str) -> anyhow::Result<tokentap_record::Record> {
    anyhow::ensure!(
        request_id.bytes().all(|b| b.is_ascii_alphanumeric()),
        "a request id is hex digits, got {request_id:?}"
    );
    let body = admin_get(admin, &format!("/_tokentap/api/requests/{request_id}"))?;
    serde_json::from_slice(&body).context("the admin API's record is not a record of this version")
}

/// GET `path` from a plain-HTTP admin API; the body of a 200 answer.
fn admin_get(admin: &str, path: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::{Read, Write};
    let authority = admin.trim_start_matches("http://").trim_end_matches('/');
    anyhow::ensure!(
        !authority.contains('/') && !admin.starts_with("https://"),
        "--admin takes http://HOST:PORT, got {admin}"
    );
    anyhow::ensure!(path.bytes().all(|b| b.is_ascii_graphic()), "an id is printable ASCII, got {path:?}");
    let mut stream =
        std::net::TcpStream::connect(authority).with_context(|| format!("cannot connect to {authority}"))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    // The admin token, when the admin API requires one.
    let auth =
        std::env::var("TOKENTAP_ADMIN_TOKEN").map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {authority}\r\n{auth}Connection: close\r\n\r\n")?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").context("malformed answer from the admin API")?;
    let head = String::from_utf8_lossy(&response[..split]);
    let body = &response[split + 4..];
    let status = head.split_whitespace().nth(1).unwrap_or("");
    anyhow::ensure!(status == "200", "the admin API answered {status}: {}", String::from_utf8_lossy(body).trim());
    anyhow::ensure!(
        !head.to_ascii_lowercase().contains("transfer-encoding: chunked"),
        "unexpected chunked answer from the admin API"
    );
    Ok(body.to_vec())
}

fn bench(command: &BenchCommand) -> anyhow::Result<()> {
    use tokentap_bench::{RequestPath, RunTarget, Target};
    if let Some(BenchSubcommand::Compare(args)) = &command.sub {
        return bench_compare(args);
    }
    let config = command.args.validate(|name| std::env::var(name).ok()).context("tokentap bench")?;
    let argv: Vec<String> = std::env::args().collect();
    let embedded = if command.args.direct {
        None
    } else {
        let t = &config.target;
        let host = if t.host.contains(':') { format!("[{}]", t.host) } else { t.host.clone() };
        let origin = format!("{}://{host}:{}", if t.https { "https" } else { "http" }, t.port);
        let hint = tokentap_bench::api::provider_hint(config.api);
        Some(
            tokentap::bench::start(&origin, hint, &command.args.records_dir)
                .context("cannot start the embedded tokentap")?,
        )
    };
    let target = match &embedded {
        None => RunTarget { send_to: config.target.clone(), path: RequestPath::Direct, records_dir: None, args: argv },
        Some(e) => RunTarget {
            send_to: Target {
                https: false,
                host: e.listen.ip().to_string(),
                port: e.listen.port(),
                base_path: config.target.base_path.clone(),
            },
            path: RequestPath::EmbeddedTokentap,
            records_dir: Some(e.data_dir.display().to_string()),
            args: argv,
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("tokio runtime")?;
    let output = runtime.block_on(tokentap_bench::run(&config, target))?;
    if let Some(e) = &embedded {
        let with_ids = output.records.iter().filter(|r| r.tokentap_request_id.is_some()).count();
        e.wait_for_records(with_ids, std::time::Duration::from_secs(10));
    }
    tokentap_bench::output::write_outputs(&config, &output)?;
    print!("{}", tokentap_bench::markdown::render(&output.results));
    // A run in which nothing succeeded measured nothing: say why, and fail.
    if !output.records.is_empty() && output.records.iter().all(|r| r.failure.is_some()) {
        let mut kinds = std::collections::BTreeMap::new();
        for failure in output.records.iter().filter_map(|r| r.failure.as_ref()) {
            *kinds.entry(failure.kind.as_str()).or_insert(0u64) += 1;
        }
        let kinds: Vec<String> = kinds.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
        let first = output.records.iter().find_map(|r| r.failure.as_ref()).map(|f| f.detail.as_str()).unwrap_or("");
        anyhow::bail!("no request succeeded ({}); the first failure: {first}", kinds.join(", "));
    }
    Ok(())
}

fn bench_compare(args: &CompareArgs) -> anyhow::Result<()> {
    let read = |path: &PathBuf| -> anyhow::Result<tokentap_bench::BenchResults> {
        let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_slice(&text)
            .with_context(|| format!("{} is not a `tokentap bench --json` file", path.display()))
    };
    let (a, b) = (read(&args.a)?, read(&args.b)?);
    let text = tokentap_bench::compare::compare(&a, &b, args.allow_mismatch)?;
    print!("{text}");
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The bench draws progress on stderr: only warnings from the embedded tokentap.
    let is_bench = matches!(cli.command, Some(Command::Bench(_)));
    if is_bench {
        init_logging("warn", "warn")?;
    } else {
        init_logging("warn,tokentap=info", "info")?;
    }
    match cli.command {
        None => serve(&cli.serve),
        Some(Command::Serve(args)) => serve(&args),
        Some(Command::CheckConfig(args)) => check_config(&args),
        Some(Command::Report(args)) => report(&args),
        Some(Command::Explain(args)) => explain(&args),
        Some(Command::Bench(command)) => bench(&command),
        Some(Command::Demo(args)) => demo::run(DemoOptions {
            listen: args.listen,
            admin_listen: args.admin_listen,
            data_dir: args.data_dir,
            upstream: args.upstream,
            model: args.model,
            webrtc_peer: args.webrtc_peer,
        })
        .context("cannot start the demo"),
    }
}
