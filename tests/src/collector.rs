//! A real OpenTelemetry Collector and a real Jaeger v2, each started on free ports from a config
//! file in collector-config/. Both are built from their pinned Go modules
//! (collector-config/distribution/, collector-config/jaeger/) by `scripts/setup.sh test`, which
//! links them as `.cache/bin/otelcol-tokentap` and `.cache/bin/jaeger`; `OTELCOL_BIN` and
//! `JAEGER_BIN` override. The configs take their listen addresses from environment variables,
//! so the files run unmodified.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::Proc;

/// What every Collector distribution logs once its receivers, exporters and extensions run.
const READY: &str = "Everything is ready";
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A file of the repository (relative to its root).
pub fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// A binary named by `var`, else the one `scripts/setup.sh test` linked under `.cache/bin/`.
fn built_binary(var: &str, name: &str, module: &str) -> PathBuf {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| repo_file(&format!(".cache/bin/{name}")));
    assert!(
        path.is_file(),
        "{} not found: run scripts/setup.sh test, which builds it from {module} (needs Go), or set {var}",
        path.display()
    );
    path
}

/// The OpenTelemetry Collector built from collector-config/distribution/.
pub fn otelcol_bin() -> PathBuf {
    built_binary("OTELCOL_BIN", "otelcol-tokentap", "collector-config/distribution/")
}

/// Jaeger v2 built from collector-config/jaeger/.
pub fn jaeger_bin() -> PathBuf {
    built_binary("JAEGER_BIN", "jaeger", "collector-config/jaeger/")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
}

fn loopback(port: u16) -> SocketAddr {
    ([127, 0, 0, 1], port).into()
}

/// Starts `bin --config config` with `env` (listen addresses among them, from `ports`) until it
/// logs that it is ready. Another process can take a port between the probe bind and the
/// collector's: it is started again on new ports then.
fn start_distribution<const N: usize>(
    bin: &Path,
    config: &Path,
    env: impl Fn([u16; N]) -> Vec<(String, String)>,
) -> (Proc, [u16; N]) {
    for _ in 0..5 {
        let ports: [u16; N] = std::array::from_fn(|_| free_port());
        match spawn_ready(bin, config, &env(ports)) {
            Ok(proc) => return (proc, ports),
            Err(stderr) if stderr.contains("address already in use") => continue,
            Err(stderr) => panic!("{} --config {} did not start:\n{stderr}", bin.display(), config.display()),
        }
    }
    panic!("{} could not bind free ports in five tries", bin.display());
}

/// `bin --config config` with `env`, once it logs that it is ready; its log if it exits first.
fn spawn_ready(bin: &Path, config: &Path, env: &[(String, String)]) -> Result<Proc, String> {
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--config={}", config.display()));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("OTEL_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let mut proc = Proc::spawn(cmd);
    wait_ready(&mut proc).map(|()| proc)
}

/// Ready (the log line), or the log of a process that exited first.
fn wait_ready(proc: &mut Proc) -> Result<(), String> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if proc.stderr().contains(READY) {
            return Ok(());
        }
        if proc.try_wait().is_some() {
            let _ = proc.wait_exit();
            return Err(proc.stderr());
        }
        assert!(Instant::now() < deadline, "not ready after {START_TIMEOUT:?}:\n{}", proc.stderr());
        proc.wait_stderr_change(Duration::from_millis(50));
    }
}

/// A Collector running a config of collector-config/ (otelcol.yaml or otelcol-loadbalancer.yaml)
/// with every listen address on a free loopback port.
pub struct Collector {
    pub proc: Proc,
    /// OTLP/gRPC and OTLP/HTTP receivers.
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    /// The Prometheus exporter (otelcol.yaml only; unused by the load-balancing tier).
    pub prometheus: SocketAddr,
    pub health: SocketAddr,
    /// The collector's own metrics (tail sampling decisions, exporter failures).
    pub telemetry: SocketAddr,
    config: PathBuf,
    env: Vec<(String, String)>,
}

/// A Collector that was killed: [`StoppedCollector::restart`] starts it again on the same ports.
pub struct StoppedCollector {
    config: PathBuf,
    env: Vec<(String, String)>,
}

impl Collector {
    /// Runs `collector-config/<file>` unmodified with `env` on top of the listen addresses.
    pub fn start(file: &str, env: &[(&str, &str)]) -> Collector {
        let config = repo_file(&format!("collector-config/{file}"));
        let extra: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let with_ports = |[grpc, http, prometheus, health, telemetry]: [u16; 5]| {
            let mut vars = vec![
                ("OTLP_GRPC_LISTEN".to_string(), loopback(grpc).to_string()),
                ("OTLP_HTTP_LISTEN".to_string(), loopback(http).to_string()),
                ("PROMETHEUS_LISTEN".to_string(), loopback(prometheus).to_string()),
                ("HEALTH_CHECK_LISTEN".to_string(), loopback(health).to_string()),
                ("COLLECTOR_TELEMETRY_PORT".to_string(), telemetry.to_string()),
            ];
            vars.extend(extra.iter().cloned());
            vars
        };
        let (proc, ports) = start_distribution(&otelcol_bin(), &config, with_ports);
        Collector::running(proc, config, with_ports(ports), ports)
    }

    fn running(proc: Proc, config: PathBuf, env: Vec<(String, String)>, ports: [u16; 5]) -> Collector {
        let [grpc, http, prometheus, health, telemetry] = ports.map(loopback);
        Collector { proc, grpc, http, prometheus, health, telemetry, config, env }
    }

    /// Kills the Collector (SIGKILL: no flush, no goodbye) and waits until it is gone.
    pub fn kill(self) -> StoppedCollector {
        let Collector { proc, grpc, config, env, .. } = self;
        drop(proc);
        assert!(!accepts(grpc), "the killed Collector's port still accepts");
        StoppedCollector { config, env }
    }

    pub fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.grpc)
    }

    pub fn http_endpoint(&self) -> String {
        format!("http://{}", self.http)
    }

    /// The Prometheus exporter's scrape.
    pub fn prometheus_scrape(&self) -> String {
        scrape(self.prometheus)
    }

    /// The collector's own metrics.
    pub fn telemetry_scrape(&self) -> String {
        scrape(self.telemetry)
    }
}

impl StoppedCollector {
    /// The same Collector on the same ports (they were free a moment ago).
    pub fn restart(self) -> Collector {
        let port = |key: &str| -> u16 {
            let value = &self.env.iter().find(|(k, _)| k == key).expect("listen variable").1;
            value.rsplit(':').next().unwrap().parse().expect("port")
        };
        let ports = [
            port("OTLP_GRPC_LISTEN"),
            port("OTLP_HTTP_LISTEN"),
            port("PROMETHEUS_LISTEN"),
            port("HEALTH_CHECK_LISTEN"),
            port("COLLECTOR_TELEMETRY_PORT"),
        ];
        let proc = spawn_ready(&otelcol_bin(), &self.config, &self.env)
            .unwrap_or_else(|stderr| panic!("the Collector did not start again on its ports:\n{stderr}"));
        Collector::running(proc, self.config, self.env, ports)
    }
}

fn scrape(addr: SocketAddr) -> String {
    let resp = crate::http1::get(addr, "/metrics", &[]);
    assert_eq!(resp.status, 200, "GET http://{addr}/metrics");
    String::from_utf8_lossy(&resp.body).into_owned()
}

/// The sum of the samples of `family` (a name as scraped, e.g. `..._total`) whose labels contain
/// every `name="value"` pair of `labels`.
pub fn sample_sum(scrape: &str, family: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, rest) = series.split_once('{').unwrap_or((series, ""));
            let rest = format!(",{rest}");
            (name == family && labels.iter().all(|(k, v)| rest.contains(&format!(",{k}=\"{v}\""))))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// Jaeger v2 with in-memory storage (collector-config/jaeger/jaeger.yaml).
pub struct Jaeger {
    pub proc: Proc,
    /// Where spans come in (OTLP/gRPC).
    pub otlp_grpc: SocketAddr,
    /// The query API (`/api/traces/{id}`).
    pub query: SocketAddr,
}

impl Jaeger {
    pub fn start() -> Jaeger {
        let config = repo_file("collector-config/jaeger/jaeger.yaml");
        let (proc, [otlp, query, _]) = start_distribution(&jaeger_bin(), &config, |[otlp, query, grpc]: [u16; 3]| {
            vec![
                ("JAEGER_OTLP_GRPC_LISTEN".to_string(), loopback(otlp).to_string()),
                ("JAEGER_QUERY_HTTP_LISTEN".to_string(), loopback(query).to_string()),
                ("JAEGER_QUERY_GRPC_LISTEN".to_string(), loopback(grpc).to_string()),
            ]
        });
        Jaeger { proc, otlp_grpc: loopback(otlp), query: loopback(query) }
    }

    /// The endpoint a Collector's OTLP/gRPC exporter sends to (`host:port`).
    pub fn otlp_grpc_endpoint(&self) -> String {
        self.otlp_grpc.to_string()
    }

    /// The trace as Jaeger's query API answers it (`data[0]`), or `None` while it is unknown.
    pub fn trace(&self, trace_id: &str) -> Option<serde_json::Value> {
        let resp = crate::http1::get(self.query, &format!("/api/traces/{trace_id}"), &[]);
        if resp.status == 404 {
            return None;
        }
        assert_eq!(resp.status, 200, "GET /api/traces/{trace_id}: {}", String::from_utf8_lossy(&resp.body));
        let body: serde_json::Value = serde_json::from_slice(&resp.body).expect("Jaeger answers JSON");
        body["data"].as_array().and_then(|d| d.first()).cloned()
    }

    /// Polls the query API until the trace has at least `spans` spans; panics after `timeout`.
    pub fn wait_trace(&self, trace_id: &str, spans: usize, timeout: Duration) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let trace = self.trace(trace_id);
            if let Some(t) = &trace {
                if t["spans"].as_array().map_or(0, Vec::len) >= spans {
                    return t.clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "trace {trace_id} did not reach {spans} spans in Jaeger within {timeout:?}: {trace:?}\n{}",
                self.proc.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Whether something accepts connections at `addr`.
pub fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect(addr).is_ok()
}

/// The value of tag `key` of a span in Jaeger's JSON.
pub fn tag<'a>(span: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    span["tags"].as_array()?.iter().find(|t| t["key"] == key).map(|t| &t["value"])
}

/// The spans of a trace in Jaeger's JSON with operation name `name`.
pub fn spans_named<'a>(trace: &'a serde_json::Value, name: &str) -> Vec<&'a serde_json::Value> {
    trace["spans"].as_array().map(|s| s.iter().filter(|s| s["operationName"] == name).collect()).unwrap_or_default()
}
