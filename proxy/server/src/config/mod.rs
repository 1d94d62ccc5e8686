//! Configuration: the TOML file, `TOKENTAP_*` environment variables and command-line flags, merged
//! and validated once into a [`ValidConfig`] that the rest of the program trusts.
//!
//! Precedence, highest first: command-line flag, environment variable, config file, default.
//! Unknown keys are rejected with the key's name, so a typo never silently does nothing. Each
//! section lives in a module of its own with its fields and its `validate`, which checks all of
//! their bounds in one place ([`bounds`] words the errors).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::route::RouteTable;

mod admin;
mod analysis;
mod bounds;
mod connections;
mod listen;
mod metrics;
mod otel;
mod privacy;
mod probe;
mod routes;
mod shutdown;
mod store;
mod timeline;
mod timeouts;
mod turns;

pub use admin::{
    AdminAccess, AdminToken, DEFAULT_ADMIN_HEAD_TIMEOUT_S, DEFAULT_ADMIN_MAX_CONNECTIONS, DEFAULT_FEED_SUBSCRIBERS,
    MAX_FEED_SUBSCRIBERS, MIN_ADMIN_TOKEN_LEN,
};
pub use analysis::{AnalysisConfig, WorkerPriority};
pub use connections::{ConnectionsConfig, Relay, DEFAULT_READ_BUFFER_BYTES};
pub use listen::{DEFAULT_ADMIN_LISTEN, DEFAULT_LISTEN};
pub use otel::{OtelConfig, OtelEnv};
pub use privacy::PrivacyConfig;
pub use probe::ProbeConfig;
pub use routes::RouteConfig;
pub use shutdown::ShutdownConfig;
pub use store::StoreConfig;
pub use timeline::TimelineConfig;
pub use timeouts::TimeoutConfig;
pub use tokentap_record::{Provider, SloConfig};
pub use tokentap_telemetry::settings::{MetricsConfig, OtlpProtocol, OtlpSettings, OtlpTarget, SecretHeaders};
pub use turns::TurnsConfig;

/// Everything that can go wrong while reading or validating configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid value for `{key}`: {reason}")]
    Invalid { key: String, reason: String },
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), reason: reason.into() }
}

/// The config file as written by the user. Every field has a default; unknown fields are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Address the proxy listens on, e.g. "127.0.0.1:8787".
    pub listen: Option<String>,
    /// Address of the admin API (records, live feed). Loopback by default.
    pub admin_listen: Option<String>,
    /// Bearer token the admin API requires (`TOKENTAP_ADMIN_TOKEN` wins); needed off loopback.
    pub admin_token: Option<AdminToken>,
    /// Host names (besides IP addresses and `localhost`) the admin API answers to.
    #[serde(default)]
    pub admin_allowed_hosts: Vec<String>,
    /// Live feeds (`/_tokentap/api/stream`) open at once; one more gets a 503.
    pub admin_max_feed_subscribers: Option<usize>,
    /// Connections to the admin listener open at once (default 256); one more gets a 503.
    pub admin_max_connections: Option<usize>,
    /// Longest time an admin connection waits for a complete request head, from the accept or
    /// from the end of the previous response (default 30 s): slow heads and idle kept-alive
    /// connections are closed.
    pub admin_head_timeout_s: Option<u64>,
    /// Directory of the local record store.
    pub data_dir: Option<PathBuf>,
    /// Worker threads of the proxy service.
    pub threads: Option<usize>,
    /// Let the proxy's worker threads steal each other's tasks (one shared tokio runtime), or
    /// give each thread a runtime of its own that keeps its connections (no cross-thread wake-ups).
    pub work_stealing: Option<bool>,
    /// Add `x-tokentap-request-id` to responses so clients can look their request up.
    pub response_request_id_header: Option<bool>,
    /// Forward a `traceparent` header upstream (continuing the client's trace or starting one).
    pub inject_traceparent: Option<bool>,
    /// Serve the demo chat page at `/_tokentap/demo/` on the proxy listener.
    pub demo_page: Option<bool>,
    /// Routes: path prefix → upstream base URL. The longest matching prefix wins.
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteConfig>,
    #[serde(default)]
    pub timeouts: TimeoutConfig,
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// Client connections to the proxy listener: how many at once, how long a request head may take.
    #[serde(default)]
    pub connections: ConnectionsConfig,
    #[serde(default)]
    pub timeline: TimelineConfig,
    #[serde(default)]
    pub analysis: AnalysisConfig,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub privacy: PrivacyConfig,
    #[serde(default)]
    pub probe: ProbeConfig,
    /// Agent turns rebuilt from the wire.
    #[serde(default)]
    pub turns: TurnsConfig,
    /// OpenTelemetry export over OTLP (off unless an endpoint is configured).
    #[serde(default)]
    pub otel: OtelConfig,
    /// The metric registry and the Prometheus endpoint.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Service-level objectives for goodput (report and dashboard). None are set by default.
    #[serde(default)]
    pub slo: SloConfig,
}

/// Values given on the command line or in `TOKENTAP_*` variables; they override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub admin_listen: Option<String>,
    pub upstream: Option<String>,
    pub provider: Option<Provider>,
    pub data_dir: Option<PathBuf>,
    pub threads: Option<usize>,
    pub worker_priority: Option<WorkerPriority>,
}

/// Whether the proxy's threads share one work-stealing runtime unless the config says.
pub const DEFAULT_WORK_STEALING: bool = true;

/// Configuration after validation: addresses parsed, routes built, limits checked.
#[derive(Debug, Clone)]
pub struct ValidConfig {
    pub listen: SocketAddr,
    pub admin_listen: Option<SocketAddr>,
    pub admin: AdminAccess,
    pub admin_max_feed_subscribers: usize,
    pub admin_max_connections: usize,
    pub admin_head_timeout_s: u64,
    pub data_dir: PathBuf,
    pub threads: usize,
    pub work_stealing: bool,
    pub response_request_id_header: bool,
    pub inject_traceparent: bool,
    pub demo_page: bool,
    pub routes: Arc<RouteTable>,
    pub timeouts: TimeoutConfig,
    pub shutdown: ShutdownConfig,
    pub connections: ConnectionsConfig,
    pub timeline: TimelineConfig,
    pub analysis: AnalysisConfig,
    pub store: StoreConfig,
    pub privacy: PrivacyConfig,
    pub probe: ProbeConfig,
    pub turns: TurnsConfig,
    /// `None` when OpenTelemetry export is off.
    pub otel: Option<OtlpSettings>,
    pub metrics: MetricsConfig,
    pub slo: SloConfig,
}

impl ValidConfig {
    pub fn read_timeout(&self) -> Duration {
        Duration::from_secs(self.timeouts.read_s)
    }
}

/// The record store's folder when none is given (relative to the working directory).
pub const DEFAULT_DATA_DIR: &str = "tokentap-data";

/// Reads a config file (if any), applies overrides, and validates the result.
pub fn load(config_path: Option<&Path>, overrides: &Overrides) -> Result<ValidConfig, ConfigError> {
    let mut file = match config_path {
        Some(path) => parse_file(path)?,
        None => FileConfig::default(),
    };
    if let Some(token) = std::env::var_os("TOKENTAP_ADMIN_TOKEN") {
        let token = token.into_string().map_err(|_| invalid("TOKENTAP_ADMIN_TOKEN", "is not UTF-8"))?;
        file.admin_token = Some(AdminToken(token));
    }
    if let Some(key) = std::env::var_os("TOKENTAP_FLEET_KEY") {
        let key = key.into_string().map_err(|_| invalid("TOKENTAP_FLEET_KEY", "is not UTF-8"))?;
        file.turns.fleet_key = Some(turns::FleetKey::new(key));
    }
    validate_with_env(file, overrides, &OtelEnv::from_process())
}

/// Largest config file read (a config is a few KB; `--config /dev/zero` must not fill memory).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

fn parse_file(path: &Path) -> Result<FileConfig, ConfigError> {
    use std::io::Read;
    let read_err = |source| ConfigError::Read { path: path.to_path_buf(), source };
    let mut bytes = Vec::new();
    std::fs::File::open(path).and_then(|f| f.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes)).map_err(read_err)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::Parse {
            path: path.to_path_buf(),
            message: format!("larger than {MAX_CONFIG_BYTES} bytes; is this a config file?"),
        });
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| ConfigError::Parse { path: path.to_path_buf(), message: "not UTF-8 text".into() })?;
    parse_str(&text).map_err(|message| ConfigError::Parse { path: path.to_path_buf(), message })
}

/// Parses TOML text; the error message names the offending key and line, and keeps the parser's
/// diagram (the line, a caret under the spot) on lines of its own.
pub fn parse_str(text: &str) -> Result<FileConfig, String> {
    toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())
}

/// Checks every value once and builds the [`ValidConfig`].
pub fn validate(file: FileConfig, overrides: &Overrides) -> Result<ValidConfig, ConfigError> {
    validate_with_env(file, overrides, &OtelEnv::default())
}

/// [`validate`], with the standard `OTEL_*` variables that configure export.
pub fn validate_with_env(
    file: FileConfig,
    overrides: &Overrides,
    otel_env: &OtelEnv,
) -> Result<ValidConfig, ConfigError> {
    let listeners = listen::Listeners::validate(
        overrides.listen.clone().or(file.listen),
        overrides.admin_listen.clone().or(file.admin_listen),
    )?;
    let admin = AdminAccess::validate(listeners.admin_listen, file.admin_token, &file.admin_allowed_hosts)?;
    let admin_limits = admin::AdminLimits::validate(
        file.admin_max_feed_subscribers,
        file.admin_max_connections,
        file.admin_head_timeout_s,
    )?;
    let data_dir = overrides.data_dir.clone().or(file.data_dir).unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let threads = overrides
        .threads
        .or(file.threads)
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8));
    bounds::check("threads", threads as u64, 1..=MAX_THREADS)?;
    let mut analysis = file.analysis;
    if let Some(priority) = overrides.worker_priority {
        analysis.worker_priority = priority;
    }
    let timeouts = file.timeouts.validate()?;
    let shutdown = file.shutdown.validate()?;
    let connections = file.connections.validate()?;
    let timeline = file.timeline.validate()?;
    let analysis = analysis.validate()?;
    let store = file.store.validate()?;
    let privacy = file.privacy.validate()?;
    let probe = file.probe.validate()?;
    let turns = file.turns.validate()?;
    let metrics = metrics::validate_metrics(file.metrics)?;
    let otel = file.otel.validate(otel_env, &data_dir)?;
    let slo = file.slo;
    slo.validate().map_err(|e| invalid(e.key, e.message))?;
    let routes = routes::validate_routes(file.routes, overrides)?;
    Ok(ValidConfig {
        listen: listeners.listen,
        admin_listen: listeners.admin_listen,
        admin,
        admin_max_feed_subscribers: admin_limits.max_feed_subscribers,
        admin_max_connections: admin_limits.max_connections,
        admin_head_timeout_s: admin_limits.head_timeout_s,
        data_dir,
        threads,
        work_stealing: file.work_stealing.unwrap_or(DEFAULT_WORK_STEALING),
        response_request_id_header: file.response_request_id_header.unwrap_or(true),
        inject_traceparent: file.inject_traceparent.unwrap_or(true),
        demo_page: file.demo_page.unwrap_or(false),
        routes: Arc::new(routes),
        timeouts,
        shutdown,
        connections,
        timeline,
        analysis,
        store,
        privacy,
        probe,
        turns,
        otel,
        metrics,
        slo,
    })
}

/// Proxy worker threads at most.
const MAX_THREADS: u64 = 256;

#[cfg(test)]
mod tests {
    use super::*;

    fn overrides_with_upstream() -> Overrides {
        Overrides { upstream: Some("http://127.0.0.1:9".into()), ..Overrides::default() }
    }

    /// Every ```toml block of README.md, with the line where it starts.
    fn readme_toml_blocks() -> Vec<(usize, String)> {
        let readme = include_str!("../../../../README.md");
        let mut blocks = Vec::new();
        let mut current: Option<(usize, String)> = None;
        for (i, line) in readme.lines().enumerate() {
            match (&mut current, line.trim_end()) {
                (None, "```toml") => current = Some((i + 1, String::new())),
                (Some(_), "```") => blocks.extend(current.take()),
                (Some((_, text)), _) => {
                    text.push_str(line);
                    text.push('\n');
                }
                (None, _) => {}
            }
        }
        blocks
    }

    #[test]
    fn every_toml_example_of_the_readme_is_a_valid_config() {
        let blocks = readme_toml_blocks();
        assert!(blocks.len() >= 4, "README.md has {} toml blocks", blocks.len());
        for (line, text) in blocks {
            let file = parse_str(&text).unwrap_or_else(|e| panic!("README.md line {line}: {e}"));
            let has_routes = !file.routes.is_empty();
            let overrides = if has_routes { Overrides::default() } else { overrides_with_upstream() };
            if let Err(e) = validate_with_env(file, &overrides, &OtelEnv::default()) {
                panic!("README.md line {line}: {e}");
            }
        }
    }

    #[test]
    fn unknown_key_is_named() {
        let err = parse_str("listen = \"127.0.0.1:1\"\nlisten_adress = 3\n").unwrap_err();
        assert!(err.contains("listen_adress"), "{err}");
        let err = parse_str("[timeouts]\nread_seconds = 3\n").unwrap_err();
        assert!(err.contains("read_seconds"), "{err}");
        let err = parse_str("[[route]]\nprefix = \"/\"\nupstream = \"http://x\"\nweight = 2\n").unwrap_err();
        assert!(err.contains("weight"), "{err}");
    }

    #[test]
    fn bad_values_are_named() {
        let cases: &[(&str, &str)] = &[
            ("listen = \"nonsense\"\n", "listen"),
            ("[timeouts]\nread_s = 0\n", "timeouts.read_s"),
            ("[analysis]\nqueue_capacity = 0\n", "analysis.queue_capacity"),
            ("[privacy]\nredact_headers = [\"bad header\"]\n", "privacy.redact_headers"),
        ];
        for (text, key) in cases {
            let file = parse_str(text).unwrap();
            let err = validate(file, &overrides_with_upstream()).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }

    #[test]
    fn routes_are_validated() {
        let cases: &[(&str, &str)] = &[
            ("[[route]]\nprefix = \"v1\"\nupstream = \"http://a\"\n", "route[0].prefix"),
            ("[[route]]\nprefix = \"/\"\nupstream = \"ftp://a\"\n", "route[0].upstream"),
            ("[[route]]\nprefix = \"/\"\nupstream = \"http://\"\n", "route[0].upstream"),
            ("[[route]]\nprefix = \"/\"\nupstream = \"http://a\"\nca_file = \"/x.pem\"\n", "route[0].ca_file"),
            ("[[route]]\nprefix = \"/a\"\nupstream = \"http://a\"\n[[route]]\nprefix = \"/a/\"\nupstream = \"http://b\"\n", "route.prefix"),
        ];
        for (text, key) in cases {
            let file = parse_str(text).unwrap();
            let err = validate(file, &Overrides::default()).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }

    #[test]
    fn provider_and_role_are_parsed_into_enums() {
        // An unknown name is refused by the parser, which names the value, the key's line and the
        // names it takes.
        let cases = [
            ("provider = \"acme\"", "acme", "openai, anthropic, gemini, ollama, generic"),
            ("role = \"middle\"", "middle", "ingress, egress"),
        ];
        for (line, value, names) in cases {
            let err = parse_str(&format!("[[route]]\nprefix = \"/\"\nupstream = \"http://a\"\n{line}\n")).unwrap_err();
            assert!(err.contains(value) && err.contains(line), "{err}");
            assert!(names.split(", ").all(|n| err.contains(&format!("`{n}`"))), "{err}");
        }
        let text = "[[route]]\nprefix = \"/\"\nupstream = \"http://a\"\nprovider = \"anthropic\"\n";
        let c = validate(parse_str(text).unwrap(), &Overrides::default()).unwrap();
        assert_eq!(c.routes.find("/x").unwrap().provider_hint, Some(Provider::Anthropic));
    }

    #[test]
    fn route_roles_are_parsed() {
        let text = "[[route]]\nprefix = \"/app\"\nupstream = \"http://a\"\nrole = \"ingress\"\n[[route]]\nprefix = \"/provider\"\nupstream = \"http://b\"\nrole = \"egress\"\n[[route]]\nprefix = \"/\"\nupstream = \"http://c\"\n";
        let c = validate(parse_str(text).unwrap(), &Overrides::default()).unwrap();
        let role = |path: &str| c.routes.find(path).unwrap().role;
        assert_eq!(role("/app/x"), Some(crate::route::RouteRole::Ingress));
        assert_eq!(role("/provider/x"), Some(crate::route::RouteRole::Egress));
        assert_eq!(role("/x"), None);
    }

    #[test]
    fn slo_section_is_parsed_and_validated() {
        let file = parse_str("[slo]\nttft_answer_ms = 500\ntpot_ms = 50.5\n").unwrap();
        let c = validate(file, &overrides_with_upstream()).unwrap();
        assert_eq!(c.slo, SloConfig { ttft_answer_ms: Some(500.0), tpot_ms: Some(50.5), ..SloConfig::default() });
        assert!(validate(FileConfig::default(), &overrides_with_upstream()).unwrap().slo.is_empty());
        let err = parse_str("[slo]\nttft_ms = 500\n").unwrap_err();
        assert!(err.contains("ttft_ms"), "{err}");
        for text in ["[slo]\ne2e_ms = 0\n", "[slo]\ne2e_ms = -3\n", "[slo]\ne2e_ms = nan\n"] {
            let err = validate(parse_str(text).unwrap(), &overrides_with_upstream()).unwrap_err().to_string();
            assert!(err.contains("slo.e2e_ms"), "{text}: {err}");
        }
    }

    #[test]
    fn missing_upstream_is_an_error() {
        let err = validate(FileConfig::default(), &Overrides::default()).unwrap_err().to_string();
        assert!(err.contains("upstream"), "{err}");
    }

    #[test]
    fn overrides_win_over_the_file() {
        let file =
            parse_str("listen = \"127.0.0.1:1000\"\n[[route]]\nprefix = \"/\"\nupstream = \"http://file\"\n").unwrap();
        let o = Overrides {
            listen: Some("127.0.0.1:2000".into()),
            upstream: Some("https://flag.example".into()),
            ..Overrides::default()
        };
        let c = validate(file, &o).unwrap();
        assert_eq!(c.listen.port(), 2000);
        assert_eq!(c.routes.routes().len(), 1);
        assert_eq!(c.routes.routes()[0].upstream.host, "flag.example");
    }

    /// One row per bound: the key, a value outside it, and the whole error. Each field's lower and
    /// upper bound are checked by its section's `validate`.
    #[test]
    fn every_bound_is_checked_with_its_message() {
        const BIG: &str = "100000000000000";
        let rows: &[(&str, &str, &str)] = &[
            ("threads", "0", "must be greater than 0"),
            ("threads", "257", "257 is larger than the maximum, 256"),
            ("admin_max_feed_subscribers", "0", "must be greater than 0"),
            ("admin_max_feed_subscribers", "1025", "1025 is larger than the maximum, 1024"),
            ("admin_max_connections", "65537", "65537 is larger than the maximum, 65536"),
            ("admin_head_timeout_s", "0", "must be greater than 0"),
            ("admin_head_timeout_s", "3601", "3601 is larger than the maximum, 3600"),
            ("timeouts.connect_ms", "0", "must be greater than 0"),
            ("timeouts.connect_ms", "600001", "600001 is larger than the maximum, 600000"),
            ("timeouts.total_connect_ms", "0", "must be greater than 0"),
            ("timeouts.read_s", "0", "must be greater than 0"),
            ("timeouts.read_s", "86401", "86401 is larger than the maximum, 86400"),
            ("timeouts.write_s", "0", "must be greater than 0"),
            ("timeouts.idle_pool_s", "86401", "86401 is larger than the maximum, 86400"),
            ("timeouts.closed_after_answer_ms", "600001", "600001 is larger than the maximum, 600000"),
            ("timeouts.websocket_idle_s", "0", "must be greater than 0"),
            ("shutdown.grace_period_s", "3601", "3601 is larger than the maximum, 3600"),
            ("connections.max_open", "0", "must be greater than 0"),
            ("connections.max_open", "1000001", "1000001 is larger than the maximum, 1000000"),
            ("connections.max_open_per_client", "0", "must be greater than 0"),
            ("connections.head_timeout_s", "0", "must be greater than 0"),
            ("connections.keepalive_idle_s", "86401", "86401 is larger than the maximum, 86400"),
            ("connections.read_buffer_bytes", "1048577", "1048577 is larger than the maximum, 1048576"),
            ("timeline.max_chunks", "0", "must be greater than 0"),
            ("timeline.max_chunks", "1000001", "1000001 is larger than the maximum, 1000000"),
            ("timeline.max_analysis_bytes", BIG, "100000000000000 is larger than the maximum, 268435456"),
            ("timeline.max_websocket_bytes", BIG, "100000000000000 is larger than the maximum, 4294967296"),
            ("timeline.max_kept_bytes", BIG, "100000000000000 is larger than the maximum, 68719476736"),
            ("timeline.ack_drain_ms", "60001", "60001 is larger than the maximum, 60000"),
            ("analysis.stall_threshold_ms", "0", "must be greater than 0"),
            ("analysis.warmup_requests", "1000001", "1000001 is larger than the maximum, 1000000"),
            ("analysis.queue_capacity", "0", "must be greater than 0"),
            ("analysis.queue_capacity", "65537", "65537 is larger than the maximum, 65536"),
            ("store.max_file_bytes", "4095", "4095 is less than the minimum, 4096"),
            ("store.max_files", "1001", "1001 is larger than the maximum, 1000"),
            ("store.ring_size", "0", "must be greater than 0"),
            ("store.ring_max_bytes", "1048575", "1048575 is less than the minimum, 1048576"),
            ("privacy.capture_max_bytes", "16777217", "16777217 is larger than the maximum, 16777216"),
            ("probe.max_report_bytes", "1023", "1023 is less than the minimum, 1024"),
            ("probe.max_report_bytes", "16777217", "16777217 is larger than the maximum, 16777216"),
            ("probe.burst", "0", "must be greater than 0"),
            ("probe.total_burst", "100001", "100001 is larger than the maximum, 100000"),
            ("probe.reports_per_second", "0.0", "must be greater than 0"),
            ("probe.reports_per_second", "nan", "must be greater than 0"),
            ("probe.total_reports_per_second", "100001.0", "100001 is larger than the maximum, 100000"),
            ("probe.trace_ttl_s", "86401", "86401 is larger than the maximum, 86400"),
            ("probe.max_recent_traces", "0", "must be greater than 0"),
            ("probe.max_reports_per_request", "101", "101 is larger than the maximum, 100"),
            ("turns.idle_close_s", "86401", "86401 is larger than the maximum, 86400"),
            ("turns.conversation_idle_s", "604801", "604801 is larger than the maximum, 604800"),
            ("turns.max_conversations", "10000001", "10000001 is larger than the maximum, 10000000"),
            ("turns.max_steps", "100001", "100001 is larger than the maximum, 100000"),
            (
                "turns.fleet_key",
                "\"short\"",
                "is shorter than 16 bytes: use a random secret (e.g. `openssl rand -hex 32`)",
            ),
            ("otel.timeout_ms", "0", "must be greater than 0"),
            ("otel.queue_capacity", "1000001", "1000001 is larger than the maximum, 1000000"),
            ("otel.batch_max_requests", "0", "must be greater than 0"),
            ("otel.batch_delay_ms", "3600001", "3600001 is larger than the maximum, 3600000"),
            ("otel.metrics_interval_ms", "0", "must be greater than 0"),
            ("otel.max_events_per_span", "129", "129 is larger than the maximum, 128"),
            ("otel.spool_max_bytes", BIG, "100000000000000 is larger than the maximum, 68719476736"),
            ("otel.retry_initial_ms", "0", "must be greater than 0"),
            ("otel.retry_max_ms", "100", "must be at least otel.retry_initial_ms"),
            ("metrics.max_series_per_metric", "0", "must be greater than 0"),
            ("metrics.max_series_per_metric", "100001", "100001 is larger than the maximum, 100000"),
        ];
        for (key, value, message) in rows {
            let text = match key.split_once('.') {
                Some((section, field)) => format!("[{section}]\n{field} = {value}\n"),
                None => format!("{key} = {value}\n"),
            };
            let file = parse_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let err = validate(file, &overrides_with_upstream()).unwrap_err().to_string();
            assert_eq!(err, format!("invalid value for `{key}`: {message}"), "{text}");
        }
    }

    #[test]
    fn the_fleet_key_never_shows_in_debug_output() {
        let file = parse_str("[turns]\nfleet_key = \"a-secret-long-enough-0123\"\n").unwrap();
        let c = validate(file, &overrides_with_upstream()).unwrap();
        assert!(c.turns.tracker_config().fleet);
        let shown = format!("{c:?}");
        assert!(!shown.contains("a-secret-long-enough") && shown.contains("FleetKey([redacted])"), "{shown}");
    }

    #[test]
    fn lists_are_bounded() {
        let many = |n: usize, item: &str| format!("[{}]", vec![format!("{item:?}"); n].join(", "));
        for (key, item) in [
            ("admin_allowed_hosts", "a.example"),
            ("privacy.redact_headers", "x-a"),
            ("probe.allowed_origins", "https://a.example"),
        ] {
            let text = match key.split_once('.') {
                Some((section, field)) => format!("[{section}]\n{field} = {}\n", many(1001, item)),
                None => format!("{key} = {}\n", many(1001, item)),
            };
            let err = validate(parse_str(&text).unwrap(), &overrides_with_upstream()).unwrap_err().to_string();
            assert_eq!(err, format!("invalid value for `{key}`: 1001 is larger than the maximum, 1000"));
        }
    }
}
