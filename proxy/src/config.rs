//! Configuration: the TOML file, `TOKENTAP_*` environment variables and command-line flags, merged
//! and validated once into a [`ValidConfig`] that the rest of the program trusts.
//!
//! Precedence, highest first: command-line flag, environment variable, config file, default.
//! Unknown keys are rejected with the key's name, so a typo never silently does nothing.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::route::{Route, RouteTable, UpstreamTarget};

mod otel;
pub use otel::{OtelConfig, OtelEnv};
pub use tokentap_record::{Provider, SloConfig};
pub use tokentap_telemetry::settings::{MetricsConfig, OtlpProtocol, OtlpSettings, OtlpTarget, SecretHeaders};

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

/// One `[[route]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Path prefix this route serves, e.g. "/" or "/anthropic". Stripped before forwarding unless "/".
    pub prefix: String,
    /// Upstream base URL, http or https, optionally with a base path ("https://example.com/openai").
    pub upstream: String,
    /// Provider hint for stream analysis: openai, anthropic, gemini, ollama, generic.
    pub provider: Option<String>,
    /// Name shown in records and metrics; defaults to the prefix.
    pub name: Option<String>,
    /// PEM file with CA certificates trusted for this upstream (in place of the system roots).
    pub ca_file: Option<PathBuf>,
    /// Offer HTTP/2 to HTTPS upstreams (ALPN h2, falling back to HTTP/1.1). Default true.
    pub http2: Option<bool>,
    /// The route's place in a multi-hop chain: "ingress" (browser → tokentap → app) or "egress"
    /// (app → tokentap → provider). Records of both roles in one trace are joined. Default: none.
    pub role: Option<String>,
}

/// `[timeouts]`: how long tokentap waits on the upstream. Streams that think for minutes need long reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutConfig {
    /// TCP connect timeout.
    pub connect_ms: u64,
    /// TCP + TLS connect timeout.
    pub total_connect_ms: u64,
    /// Longest silence tolerated between two reads from the upstream (covers long reasoning phases).
    pub read_s: u64,
    /// Longest time a write to the upstream may take.
    pub write_s: u64,
    /// How long an idle pooled upstream connection is kept.
    pub idle_pool_s: u64,
    /// A WebSocket session (realtime voice) is closed after this long without a byte in one
    /// direction, client or upstream; sessions last many minutes and a user may stay silent.
    pub websocket_idle_s: u64,
}

impl Default for TimeoutConfig {
    fn default() -> Self {
        Self {
            connect_ms: 10_000,
            total_connect_ms: 20_000,
            read_s: 900,
            write_s: 60,
            idle_pool_s: 60,
            websocket_idle_s: 3_600,
        }
    }
}

/// `[shutdown]`: what SIGTERM and SIGINT (Ctrl-C) do. tokentap stops accepting connections, lets
/// in-flight requests and streams finish for up to `grace_period_s`, writes their records and
/// exits; streams still open then are cut. A second SIGTERM or SIGINT ends at once.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownConfig {
    pub grace_period_s: u64,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        // Long enough for typical chat streams and most reasoning answers.
        Self { grace_period_s: 120 }
    }
}

/// `[connections]`: client connections to the proxy listener. A connection over `max_open` gets a
/// 503 and is closed; a connection whose request head is not complete within `head_timeout_s` is
/// closed (the slow-header attack): the first head from the accept, a later one on a kept-alive
/// connection from its first byte. A kept-alive connection whose next request does not start
/// within `keepalive_idle_s` of the previous one's end is closed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionsConfig {
    /// Client connections open at once (default 10,000). Each one also needs an upstream
    /// connection, so the cap is lowered at start to fit half of the process's file descriptor
    /// limit (tokentap first raises its soft limit to the hard one), with a warning when it was set
    /// here.
    pub max_open: Option<usize>,
    /// Longest time from accepting a connection to the end of its first request head, and from
    /// the first byte of a later request head to its end.
    pub head_timeout_s: u64,
    /// Longest time a kept-alive connection waits, after a request, for the next one to start.
    pub keepalive_idle_s: u64,
    /// Bytes of each client connection's read buffer (0: none, every read goes to the socket).
    /// pingora's own default is 64 KiB, allocated and zeroed per connection; client requests are
    /// small, and a read that does not fit takes one more system call, never more latency.
    pub read_buffer_bytes: usize,
}

/// Default client read buffer: one request head of common size. Reads larger than the buffer go
/// straight to the socket, so request bodies never pass through it (BENCHMARKS.md: 64 KiB less
/// per open stream than pingora's default, with no cost seen in CPU or latency).
pub const DEFAULT_READ_BUFFER_BYTES: usize = 4 * 1024;

impl Default for ConnectionsConfig {
    fn default() -> Self {
        // nginx's client_header_timeout is 60 s as well.
        // nginx's keepalive_timeout is 75 s; pingora's (for its first read only) 60 s.
        Self { max_open: None, head_timeout_s: 60, keepalive_idle_s: 60, read_buffer_bytes: DEFAULT_READ_BUFFER_BYTES }
    }
}

/// `[turns]`: linking the model calls of one user turn (docs/metrics.md, "Turns").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TurnsConfig {
    pub enabled: bool,
    /// An open turn (its last response asked for tools) with no next step for this long closes as
    /// incomplete.
    pub idle_close_s: u64,
    /// A conversation with no new request for this long is forgotten.
    pub conversation_idle_s: u64,
    pub max_conversations: usize,
    /// Bytes of linking state (ids and hashes) kept at most; the least recently active
    /// conversations go first, counted.
    pub max_state_bytes: usize,
    /// Steps listed per turn; later ones are counted in the totals only.
    pub max_steps: usize,
    /// Request header an app may send to name the turn (same value = same turn, also across
    /// tokentap instances: the trace id is derived from it).
    pub turn_header: String,
    /// Request header an app may send to name the conversation.
    pub conversation_header: String,
    /// Remove those two headers before forwarding (default: forward them unchanged).
    pub strip_headers: bool,
}

impl Default for TurnsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            idle_close_s: 120,
            conversation_idle_s: 1800,
            max_conversations: 10_000,
            max_state_bytes: 32 << 20,
            max_steps: 256,
            turn_header: "x-tokentap-turn".into(),
            conversation_header: "x-tokentap-conversation".into(),
            strip_headers: false,
        }
    }
}

impl TurnsConfig {
    /// The tracker's settings.
    pub fn tracker_config(&self) -> tokentap_record::turn::TurnConfig {
        tokentap_record::turn::TurnConfig {
            idle_close_ns: self.idle_close_s.saturating_mul(1_000_000_000),
            conversation_idle_ns: self.conversation_idle_s.saturating_mul(1_000_000_000),
            max_conversations: self.max_conversations,
            max_state_bytes: self.max_state_bytes,
            max_steps: self.max_steps,
            max_tool_calls: 1024,
            headers: tokentap_record::turn::TurnHeaders {
                turn: self.turn_header.clone(),
                conversation: self.conversation_header.clone(),
            },
        }
    }
}

/// `[timeline]`: per-request memory bounds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimelineConfig {
    /// Record requests at all. `false` makes tokentap a plain forwarding proxy: no stamps, no
    /// records, no analysis, no telemetry per request (to measure what recording costs).
    pub enabled: bool,
    /// Chunk entries kept per request; beyond it counts continue and the record says `chunks_truncated`.
    pub max_chunks: usize,
    /// Response bytes kept per request for analysis; beyond it analysis sees a prefix and says so.
    pub max_analysis_bytes: usize,
    /// Request body bytes kept per request for analysis (model, prompt size…).
    pub max_request_bytes: usize,
    /// Bytes kept per WebSocket session and direction for the realtime analysis (instead of
    /// `max_request_bytes` and `max_analysis_bytes`); still drawn from `max_kept_bytes`. A session
    /// past it is analysed as a prefix (the record says which direction was cut). 64 MiB holds
    /// about 17 minutes of 24 kHz PCM appended as base64.
    pub max_websocket_bytes: usize,
    /// Request and response bytes kept for analysis by all requests in flight (and queued for the
    /// record worker) together; a request that finds it spent keeps no more (its analysis sees a
    /// prefix and says so) and is counted (`records.kept_budget_hits`).
    pub max_kept_bytes: usize,
    /// After the last write, how long tokentap watches the client acknowledge the tail (ms).
    pub ack_drain_ms: u64,
}

impl Default for TimelineConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_chunks: 50_000,
            max_analysis_bytes: 16 << 20,
            max_request_bytes: 4 << 20,
            max_websocket_bytes: 64 << 20,
            max_kept_bytes: 512 << 20,
            ack_drain_ms: 10_000,
        }
    }
}

/// `[analysis]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnalysisConfig {
    /// A gap between content-bearing events at least this long is a stall.
    pub stall_threshold_ms: u64,
    /// The first N requests of each route after start are marked `warm_up`.
    pub warmup_requests: u64,
    /// Completed requests waiting for analysis; when full, new ones are dropped and counted.
    pub queue_capacity: usize,
    /// CPU priority of the record worker (analysis, store, telemetry) against forwarding.
    pub worker_priority: WorkerPriority,
    /// The record worker is reported stuck (health `degraded`) when it has made no progress for
    /// this long while items wait in its queue.
    pub worker_stuck_s: u64,
}

/// How the record worker shares the CPU with forwarding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum WorkerPriority {
    /// Linux `SCHED_IDLE`: the worker runs only on CPU time nothing else wants, so recording never
    /// takes CPU from forwarding; under saturation detail is shed, then records dropped (counted).
    Idle,
    /// `nice` 10: the worker gets about a tenth of a contended core.
    Low,
    /// The same priority as forwarding.
    Normal,
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        Self {
            stall_threshold_ms: 1000,
            warmup_requests: 3,
            queue_capacity: 1024,
            worker_priority: WorkerPriority::Idle,
            worker_stuck_s: 30,
        }
    }
}

/// `[store]`: the local record store.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Rotate `records.jsonl` when it grows past this many bytes.
    pub max_file_bytes: u64,
    /// Rotated files kept (records.1.jsonl … records.N.jsonl).
    pub max_files: u32,
    /// Recent records kept in memory for the admin API.
    pub ring_size: usize,
    /// Bytes the in-memory ring may hold (estimated as twice each record's JSON line: the line
    /// and the parsed record); the oldest records leave first when either bound is reached.
    pub ring_max_bytes: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self { max_file_bytes: 64 << 20, max_files: 4, ring_size: 5_000, ring_max_bytes: 64 << 20 }
    }
}

/// `[privacy]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrivacyConfig {
    /// Store request and response bodies in records. Off by default.
    pub capture_content: bool,
    /// Bytes of each body stored when capture is on.
    pub capture_max_bytes: usize,
    /// Extra header names whose values are never recorded (added to the built-in list).
    pub redact_headers: Vec<String>,
}

impl Default for PrivacyConfig {
    fn default() -> Self {
        Self { capture_content: false, capture_max_bytes: 64 << 10, redact_headers: Vec::new() }
    }
}

/// `[probe]`: reports from the browser probe (`POST /_tokentap/v1/probe` on the proxy listener).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// Accept probe reports and serve the probe at `/_tokentap/probe/`.
    pub enabled: bool,
    /// Origins (besides the proxy's own) whose pages may send reports, e.g. "https://app.example".
    pub allowed_origins: Vec<String>,
    /// Largest report body accepted.
    pub max_report_bytes: usize,
    /// Reports per second per client address (token bucket rate)…
    pub reports_per_second: f64,
    /// …and the bucket's size.
    pub burst: u32,
    /// How long after a request its trace id may still be reported on.
    pub trace_ttl_s: u64,
    /// Trace ids remembered for that purpose.
    pub max_recent_traces: usize,
    /// Reports accepted per proxied request of a trace; later ones get a 429 (each accepted report
    /// rewrites the whole record).
    pub max_reports_per_request: u32,
    /// Reports per second from all clients together (token bucket rate)…
    pub total_reports_per_second: f64,
    /// …and the bucket's size.
    pub total_burst: u32,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            allowed_origins: Vec::new(),
            max_report_bytes: 256 << 10,
            reports_per_second: 20.0,
            burst: 100,
            trace_ttl_s: 600,
            max_recent_traces: 50_000,
            max_reports_per_request: 2,
            total_reports_per_second: 50.0,
            total_burst: 200,
        }
    }
}

/// Values given on the command line or in `TOKENTAP_*` variables; they override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub admin_listen: Option<String>,
    pub upstream: Option<String>,
    pub provider: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub threads: Option<usize>,
    pub worker_priority: Option<WorkerPriority>,
}

/// The admin API's bearer token. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct AdminToken(String);

impl AdminToken {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken([redacted])")
    }
}

/// Who the admin API answers: a token (when set) and the Host names it accepts.
#[derive(Debug, Clone, Default)]
pub struct AdminAccess {
    pub token: Option<AdminToken>,
    /// Lower case; IP addresses and `localhost` are always accepted.
    pub allowed_hosts: Vec<String>,
}

/// Live feed subscribers by default, and at most.
pub const DEFAULT_FEED_SUBSCRIBERS: usize = 16;
/// `admin_max_connections` when not set, and its upper bound.
pub const DEFAULT_ADMIN_MAX_CONNECTIONS: usize = 256;
const MAX_ADMIN_CONNECTIONS: usize = 65_536;
/// `admin_head_timeout_s` when not set (hyper's own default).
pub const DEFAULT_ADMIN_HEAD_TIMEOUT_S: u64 = 30;
pub const MAX_FEED_SUBSCRIBERS: usize = 1024;

/// Whether the proxy's threads share one work-stealing runtime unless the config says.
pub const DEFAULT_WORK_STEALING: bool = true;

/// Shortest admin token accepted.
pub const MIN_ADMIN_TOKEN_LEN: usize = 16;

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

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:8788";
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
    mut file: FileConfig,
    overrides: &Overrides,
    otel_env: &OtelEnv,
) -> Result<ValidConfig, ConfigError> {
    check_upper_bounds(&file)?;
    let listen_text = overrides.listen.clone().or(file.listen).unwrap_or_else(|| DEFAULT_LISTEN.into());
    let listen = parse_addr("listen", &listen_text)?;
    let admin_text =
        overrides.admin_listen.clone().or(file.admin_listen).unwrap_or_else(|| DEFAULT_ADMIN_LISTEN.into());
    let admin_listen = if admin_text == "off" { None } else { Some(parse_addr("admin_listen", &admin_text)?) };
    if admin_listen == Some(listen) && listen.port() != 0 {
        return Err(invalid("admin_listen", "must differ from `listen`"));
    }
    let admin = validate_admin_access(admin_listen, file.admin_token.take(), &file.admin_allowed_hosts)?;
    let admin_max_feed_subscribers = file.admin_max_feed_subscribers.unwrap_or(DEFAULT_FEED_SUBSCRIBERS);
    if !(1..=MAX_FEED_SUBSCRIBERS).contains(&admin_max_feed_subscribers) {
        return Err(invalid("admin_max_feed_subscribers", format!("must be between 1 and {MAX_FEED_SUBSCRIBERS}")));
    }
    let admin_max_connections = file.admin_max_connections.unwrap_or(DEFAULT_ADMIN_MAX_CONNECTIONS);
    if !(1..=MAX_ADMIN_CONNECTIONS).contains(&admin_max_connections) {
        return Err(invalid("admin_max_connections", format!("must be between 1 and {MAX_ADMIN_CONNECTIONS}")));
    }
    let admin_head_timeout_s = file.admin_head_timeout_s.unwrap_or(DEFAULT_ADMIN_HEAD_TIMEOUT_S);
    if !(1..=3600).contains(&admin_head_timeout_s) {
        return Err(invalid("admin_head_timeout_s", format!("{admin_head_timeout_s} is outside 1..=3600")));
    }
    let data_dir = overrides.data_dir.clone().or(file.data_dir).unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let threads = overrides
        .threads
        .or(file.threads)
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8));
    if let Some(priority) = overrides.worker_priority {
        file.analysis.worker_priority = priority;
    }
    if threads == 0 || threads > 256 {
        return Err(invalid("threads", format!("{threads} is outside 1..=256")));
    }
    if file.shutdown.grace_period_s > 3600 {
        return Err(invalid(
            "shutdown.grace_period_s",
            format!("{} is outside 0..=3600", file.shutdown.grace_period_s),
        ));
    }
    if let Some(max_open) = file.connections.max_open.filter(|n| !(1..=1_000_000).contains(n)) {
        return Err(invalid("connections.max_open", format!("{max_open} is outside 1..=1000000")));
    }
    if file.connections.read_buffer_bytes > 1 << 20 {
        return Err(invalid(
            "connections.read_buffer_bytes",
            format!("{} is outside 0..=1048576", file.connections.read_buffer_bytes),
        ));
    }
    if !(1..=3600).contains(&file.connections.head_timeout_s) {
        return Err(invalid(
            "connections.head_timeout_s",
            format!("{} is outside 1..=3600", file.connections.head_timeout_s),
        ));
    }
    if !(1..=86_400).contains(&file.connections.keepalive_idle_s) {
        return Err(invalid(
            "connections.keepalive_idle_s",
            format!("{} is outside 1..=86400", file.connections.keepalive_idle_s),
        ));
    }
    for (key, name) in [
        ("turns.turn_header", &mut file.turns.turn_header),
        ("turns.conversation_header", &mut file.turns.conversation_header),
    ] {
        *name = name.trim().to_ascii_lowercase();
        if name.is_empty() || http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(invalid(key, format!("{name:?} is not a header name")));
        }
    }
    if file.turns.turn_header == file.turns.conversation_header {
        return Err(invalid("turns.conversation_header", "must differ from turns.turn_header"));
    }

    let mut route_configs = file.routes;
    if let Some(upstream) = &overrides.upstream {
        // `--upstream` is the zero-config form: one route for every path.
        route_configs.retain(|r| r.prefix != "/");
        route_configs.push(RouteConfig {
            prefix: "/".into(),
            upstream: upstream.clone(),
            provider: overrides.provider.clone(),
            name: None,
            ca_file: None,
            http2: None,
            role: None,
        });
    }
    if route_configs.is_empty() {
        return Err(invalid(
            "upstream",
            "no upstream configured: pass --upstream URL or add a [[route]] to the config file",
        ));
    }
    let mut routes = Vec::with_capacity(route_configs.len());
    for (index, rc) in route_configs.into_iter().enumerate() {
        routes.push(validate_route(index, rc)?);
    }
    let routes = RouteTable::new(routes).map_err(|reason| invalid("route.prefix", reason))?;

    let t = &file.timeouts;
    for (key, value) in [
        ("timeouts.connect_ms", t.connect_ms),
        ("timeouts.total_connect_ms", t.total_connect_ms),
        ("timeouts.read_s", t.read_s),
        ("timeouts.write_s", t.write_s),
        ("timeouts.websocket_idle_s", t.websocket_idle_s),
    ] {
        if value == 0 {
            return Err(invalid(key, "must be greater than 0"));
        }
    }
    if file.timeline.max_chunks == 0 {
        return Err(invalid("timeline.max_chunks", "must be greater than 0"));
    }
    if file.analysis.queue_capacity == 0 {
        return Err(invalid("analysis.queue_capacity", "must be greater than 0"));
    }
    if file.analysis.worker_stuck_s == 0 {
        return Err(invalid("analysis.worker_stuck_s", "must be greater than 0"));
    }
    if file.analysis.stall_threshold_ms == 0 {
        return Err(invalid("analysis.stall_threshold_ms", "must be greater than 0"));
    }
    if file.store.ring_size == 0 {
        return Err(invalid("store.ring_size", "must be greater than 0"));
    }
    if file.store.ring_max_bytes < 1 << 20 {
        return Err(invalid("store.ring_max_bytes", "must be at least 1048576 (1 MiB)"));
    }
    if file.store.max_file_bytes < 4096 {
        return Err(invalid("store.max_file_bytes", "must be at least 4096"));
    }
    let p = &file.probe;
    if p.max_report_bytes < 1024 || p.max_report_bytes > (16 << 20) {
        return Err(invalid("probe.max_report_bytes", "must be between 1024 and 16 MiB"));
    }
    if !(p.reports_per_second > 0.0 && p.reports_per_second.is_finite()) || p.burst == 0 {
        return Err(invalid("probe.reports_per_second", "rate and burst must be greater than 0"));
    }
    if p.max_recent_traces == 0 {
        return Err(invalid("probe.max_recent_traces", "must be greater than 0"));
    }
    if !(1..=100).contains(&p.max_reports_per_request) {
        return Err(invalid("probe.max_reports_per_request", "must be between 1 and 100"));
    }
    if !(p.total_reports_per_second > 0.0 && p.total_reports_per_second.is_finite()) || p.total_burst == 0 {
        return Err(invalid("probe.total_reports_per_second", "rate and burst must be greater than 0"));
    }
    for origin in &p.allowed_origins {
        if origin != "*" && !(origin.starts_with("http://") || origin.starts_with("https://")) {
            return Err(invalid(
                "probe.allowed_origins",
                format!("{origin:?} is not an origin like https://app.example"),
            ));
        }
    }
    for name in &file.privacy.redact_headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(invalid("privacy.redact_headers", format!("{name:?} is not a header name")));
        }
    }

    let otel = otel::validate_otel(&file.otel, otel_env, &data_dir)?;
    otel::validate_metrics(&file.metrics)?;
    file.slo.validate().map_err(|e| invalid(e.key, e.message))?;

    Ok(ValidConfig {
        listen,
        admin_listen,
        admin,
        admin_max_feed_subscribers,
        admin_max_connections,
        admin_head_timeout_s,
        data_dir,
        threads,
        work_stealing: file.work_stealing.unwrap_or(DEFAULT_WORK_STEALING),
        response_request_id_header: file.response_request_id_header.unwrap_or(true),
        inject_traceparent: file.inject_traceparent.unwrap_or(true),
        demo_page: file.demo_page.unwrap_or(false),
        routes: Arc::new(routes),
        timeouts: file.timeouts,
        shutdown: file.shutdown,
        connections: file.connections,
        timeline: file.timeline,
        analysis: file.analysis,
        store: file.store,
        privacy: file.privacy,
        probe: file.probe,
        turns: file.turns,
        otel,
        metrics: file.metrics,
        slo: file.slo,
    })
}

/// A URL as a config error may show it: `user:password@` and any query replaced.
pub(crate) fn display_url(url: &str) -> String {
    const REDACTED: &str = "[redacted]";
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rfind('@') {
        Some(at) => format!("{REDACTED}@{}", &authority[at + 1..]),
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, _)) => format!("{path}?{REDACTED}"),
        None => tail.to_string(),
    };
    format!("{scheme}{authority}{tail}")
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Every capacity, size, count and duration has an upper bound, so that a typo cannot make
/// tokentap allocate gigabytes at start or wait for days. The bounds are in README.md.
fn check_upper_bounds(file: &FileConfig) -> Result<(), ConfigError> {
    let (t, a, st, p, o) = (&file.timeline, &file.analysis, &file.store, &file.probe, &file.otel);
    let to = &file.timeouts;
    let tu = &file.turns;
    let bounds: [(&str, u64, u64); 43] = [
        ("timeouts.connect_ms", to.connect_ms, 600_000),
        ("timeouts.total_connect_ms", to.total_connect_ms, 600_000),
        ("timeouts.read_s", to.read_s, 86_400),
        ("timeouts.write_s", to.write_s, 86_400),
        ("timeouts.idle_pool_s", to.idle_pool_s, 86_400),
        ("timeouts.websocket_idle_s", to.websocket_idle_s, 86_400),
        ("timeline.max_chunks", t.max_chunks as u64, 1_000_000),
        ("timeline.max_analysis_bytes", t.max_analysis_bytes as u64, 256 * MIB),
        ("timeline.max_request_bytes", t.max_request_bytes as u64, 64 * MIB),
        ("timeline.max_websocket_bytes", t.max_websocket_bytes as u64, 4 * GIB),
        ("timeline.max_kept_bytes", t.max_kept_bytes as u64, 64 * GIB),
        ("timeline.ack_drain_ms", t.ack_drain_ms, 60_000),
        ("analysis.stall_threshold_ms", a.stall_threshold_ms, 3_600_000),
        ("analysis.warmup_requests", a.warmup_requests, 1_000_000),
        ("analysis.queue_capacity", a.queue_capacity as u64, 65_536),
        ("analysis.worker_stuck_s", a.worker_stuck_s, 86_400),
        ("store.max_file_bytes", st.max_file_bytes, 16 * GIB),
        ("store.max_files", u64::from(st.max_files), 1000),
        ("store.ring_size", st.ring_size as u64, 100_000),
        ("store.ring_max_bytes", st.ring_max_bytes as u64, 16 * GIB),
        ("privacy.capture_max_bytes", file.privacy.capture_max_bytes as u64, 16 * MIB),
        ("privacy.redact_headers", file.privacy.redact_headers.len() as u64, 1000),
        ("probe.burst", u64::from(p.burst), 100_000),
        ("probe.total_burst", u64::from(p.total_burst), 100_000),
        ("probe.trace_ttl_s", p.trace_ttl_s, 86_400),
        ("probe.max_recent_traces", p.max_recent_traces as u64, 1_000_000),
        ("probe.allowed_origins", p.allowed_origins.len() as u64, 1000),
        ("otel.timeout_ms", o.timeout_ms, 600_000),
        ("otel.queue_capacity", o.queue_capacity as u64, 1_000_000),
        ("otel.batch_max_requests", o.batch_max_requests as u64, 100_000),
        ("otel.batch_delay_ms", o.batch_delay_ms, 3_600_000),
        ("otel.metrics_interval_ms", o.metrics_interval_ms, 3_600_000),
        ("otel.spool_max_bytes", o.spool_max_bytes, 64 * GIB),
        ("otel.retry_initial_ms", o.retry_initial_ms, 3_600_000),
        ("otel.retry_max_ms", o.retry_max_ms, 3_600_000),
        ("metrics.max_series_per_metric", file.metrics.max_series_per_metric as u64, 100_000),
        ("turns.idle_close_s", tu.idle_close_s, 86_400),
        ("turns.conversation_idle_s", tu.conversation_idle_s, 7 * 86_400),
        ("turns.max_conversations", tu.max_conversations as u64, 10_000_000),
        ("turns.max_state_bytes", tu.max_state_bytes as u64, 16 * GIB),
        ("turns.max_steps", tu.max_steps as u64, 100_000),
        ("route", file.routes.len() as u64, 1000),
        ("admin_allowed_hosts", file.admin_allowed_hosts.len() as u64, 1000),
    ];
    for (key, value, max) in bounds {
        if value > max {
            return Err(invalid(key, format!("{value} is larger than the maximum, {max}")));
        }
    }
    for (key, value) in [
        ("probe.reports_per_second", p.reports_per_second),
        ("probe.total_reports_per_second", p.total_reports_per_second),
    ] {
        if value > 100_000.0 {
            return Err(invalid(key, format!("{value} is larger than the maximum, 100000")));
        }
    }
    Ok(())
}

fn validate_admin_access(
    admin_listen: Option<SocketAddr>,
    token: Option<AdminToken>,
    allowed_hosts: &[String],
) -> Result<AdminAccess, ConfigError> {
    let token = match token {
        Some(AdminToken(t)) if t.len() < MIN_ADMIN_TOKEN_LEN || !t.bytes().all(|b| b.is_ascii_graphic()) => {
            return Err(invalid(
                "admin_token",
                format!("must be at least {MIN_ADMIN_TOKEN_LEN} printable ASCII characters without spaces"),
            ));
        }
        t => t,
    };
    if let Some(addr) = admin_listen {
        if !addr.ip().is_loopback() && token.is_none() {
            return Err(invalid(
                "admin_listen",
                format!(
                    "{addr} is not a loopback address: set admin_token (or TOKENTAP_ADMIN_TOKEN) so that only \
                     holders of the token can read records, or listen on 127.0.0.1"
                ),
            ));
        }
    }
    let mut hosts = Vec::with_capacity(allowed_hosts.len());
    for host in allowed_hosts {
        let ok = !host.is_empty()
            && host.len() <= 253
            && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !ok {
            return Err(invalid("admin_allowed_hosts", format!("{host:?} is not a host name (no port, no scheme)")));
        }
        hosts.push(host.to_ascii_lowercase());
    }
    Ok(AdminAccess { token, allowed_hosts: hosts })
}

fn parse_addr(key: &str, text: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    // Allow "localhost:8787" and similar names, resolved once at start.
    match text.to_socket_addrs() {
        Ok(mut addrs) => addrs.next().ok_or_else(|| invalid(key, format!("{text:?} resolves to no address"))),
        Err(e) => Err(invalid(key, format!("{text:?} is not HOST:PORT ({e})"))),
    }
}

fn validate_route(index: usize, rc: RouteConfig) -> Result<Route, ConfigError> {
    let key = |field: &str| format!("route[{index}].{field}");
    if !rc.prefix.starts_with('/') {
        return Err(invalid(key("prefix"), format!("{:?} must start with '/'", rc.prefix)));
    }
    // A space, CR/LF or other control character would make every forwarded request head invalid.
    for (field, value) in [("prefix", &rc.prefix), ("upstream", &rc.upstream)] {
        if !value.bytes().all(|b| b.is_ascii_graphic()) || value.len() > 2048 {
            return Err(invalid(
                key(field),
                "must be at most 2048 printable ASCII characters: no spaces, control characters (CR, LF) or non-ASCII",
            ));
        }
    }
    if rc.name.as_ref().is_some_and(|n| n.is_empty() || n.len() > 128 || n.chars().any(char::is_control)) {
        return Err(invalid(key("name"), "must be 1 to 128 bytes without control characters"));
    }
    let upstream = UpstreamTarget::parse(&rc.upstream)
        .map_err(|reason| invalid(key("upstream"), format!("{:?} {reason}", display_url(&rc.upstream))))?;
    let provider = match rc.provider.as_deref() {
        None => None,
        Some(name) => Some(Provider::parse(name).ok_or_else(|| {
            let names: Vec<&str> = Provider::ALL.iter().map(|p| p.as_str()).collect();
            invalid(key("provider"), format!("{name:?} is not one of {}", names.join(", ")))
        })?),
    };
    let ca = match &rc.ca_file {
        Some(path) => {
            if !upstream.tls {
                return Err(invalid(key("ca_file"), "only applies to https upstreams"));
            }
            Some(crate::route::load_ca_file(path).map_err(|reason| invalid(key("ca_file"), reason))?)
        }
        None => None,
    };
    let role = match rc.role.as_deref() {
        None => None,
        Some("ingress") => Some(crate::route::RouteRole::Ingress),
        Some("egress") => Some(crate::route::RouteRole::Egress),
        Some(other) => return Err(invalid(key("role"), format!("{other:?} is not one of ingress, egress"))),
    };
    let prefix = if rc.prefix.len() > 1 { rc.prefix.trim_end_matches('/').to_string() } else { rc.prefix };
    let mut route =
        Route::new(rc.name.unwrap_or_else(|| prefix.clone()), prefix, upstream, provider, ca, rc.http2.unwrap_or(true));
    route.role = role;
    Ok(route)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overrides_with_upstream() -> Overrides {
        Overrides { upstream: Some("http://127.0.0.1:9".into()), ..Overrides::default() }
    }

    /// Every ```toml block of README.md, with the line where it starts.
    fn readme_toml_blocks() -> Vec<(usize, String)> {
        let readme = include_str!("../../README.md");
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
            ("[[route]]\nprefix = \"/\"\nupstream = \"http://a\"\nprovider = \"acme\"\n", "route[0].provider"),
            ("[[route]]\nprefix = \"/\"\nupstream = \"http://a\"\nca_file = \"/x.pem\"\n", "route[0].ca_file"),
            ("[[route]]\nprefix = \"/a\"\nupstream = \"http://a\"\n[[route]]\nprefix = \"/a/\"\nupstream = \"http://b\"\n", "route.prefix"),
            ("[[route]]\nprefix = \"/\"\nupstream = \"http://a\"\nrole = \"middle\"\n", "route[0].role"),
        ];
        for (text, key) in cases {
            let file = parse_str(text).unwrap();
            let err = validate(file, &Overrides::default()).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
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

    #[test]
    fn urls_in_errors_carry_no_credentials() {
        let cases = [
            ("http://user:pass@host:8080/v1", "http://[redacted]@host:8080/v1"),
            ("https://a@b@host", "https://[redacted]@host"),
            ("https://host/x?key=S", "https://host/x?[redacted]"),
            ("ftp://u:p@host", "ftp://[redacted]@host"),
            ("u:p@host/path", "[redacted]@host/path"),
            ("https://host/a@b", "https://host/a@b"),
            ("http://127.0.0.1:9", "http://127.0.0.1:9"),
        ];
        for (url, expected) in cases {
            assert_eq!(display_url(url), expected, "{url}");
        }
    }
}
