//! Arize Phoenix, a GenAI trace backend, as the receiver of tokentap's spans: it takes OTLP and
//! converts `gen_ai.*` spans to its own kinds at ingest (`invoke_agent` → AGENT, `chat {model}` →
//! LLM, `execute_tool` → TOOL), so the tests see what a team using it would see.
//!
//! `scripts/setup.sh test` installs it (`tests/phoenix/requirements.txt`) into
//! `.cache/venv-phoenix`. [`Phoenix::start`] runs its server on free loopback ports with a
//! temporary working directory (its SQLite database) and its own telemetry off; its REST API
//! (`GET /v1/projects/{project}/spans`) reads the spans back.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::browser::repo_root;
use crate::process::Proc;

/// Phoenix needs about 25 s to start on an idle machine (database migrations, its UI); the tests
/// share two cores.
const START_TIMEOUT: Duration = Duration::from_secs(240);

/// The Python of Phoenix's virtualenv (`TOKENTAP_PHOENIX_PYTHON` overrides).
pub fn phoenix_python() -> PathBuf {
    let path = std::env::var_os("TOKENTAP_PHOENIX_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cache/venv-phoenix/bin/python"));
    assert!(
        path.exists(),
        "{} not found: run scripts/setup.sh test, which installs Arize Phoenix (tests/phoenix/requirements.txt)",
        path.display()
    );
    path
}

/// A port that was free a moment ago; [`Phoenix::start`] starts again when it is taken by the time
/// Phoenix binds it.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
}

/// A running Phoenix server; dropping it ends the process and removes its database.
pub struct Phoenix {
    pub proc: Proc,
    /// Its HTTP address: web UI, REST and GraphQL APIs, OTLP/HTTP at `/v1/traces`.
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`, the base URL for `[otel] endpoint`.
    pub url: String,
    /// OTLP/gRPC.
    pub grpc_url: String,
    _dir: tempfile::TempDir,
}

/// How a start attempt ended.
enum Start {
    Ready,
    PortTaken,
}

impl Phoenix {
    pub fn start() -> Phoenix {
        for _ in 0..5 {
            let (http, grpc) = (free_port(), free_port());
            let dir = tempfile::tempdir().expect("tempdir");
            let mut cmd = Command::new(phoenix_python());
            cmd.args(["-m", "phoenix.server.main", "serve"])
                .env("PHOENIX_HOST", "127.0.0.1")
                .env("PHOENIX_PORT", http.to_string())
                .env("PHOENIX_GRPC_PORT", grpc.to_string())
                .env("PHOENIX_WORKING_DIR", dir.path())
                .env("PHOENIX_TELEMETRY_ENABLED", "false")
                .env("PYTHONUNBUFFERED", "1");
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("OTEL_") {
                    cmd.env_remove(key);
                }
            }
            let mut proc = Proc::spawn(cmd);
            match Self::wait_ready(&mut proc) {
                Start::Ready => {
                    let addr = SocketAddr::from(([127, 0, 0, 1], http));
                    return Phoenix {
                        proc,
                        addr,
                        url: format!("http://{addr}"),
                        grpc_url: format!("http://127.0.0.1:{grpc}"),
                        _dir: dir,
                    };
                }
                Start::PortTaken => continue,
            }
        }
        panic!("five pairs of free ports in a row were taken before Phoenix could bind them");
    }

    /// Waits for uvicorn's "running on" line (after Phoenix's startup, the gRPC server included),
    /// within [`START_TIMEOUT`]; panics with the output when Phoenix exits for another reason.
    fn wait_ready(proc: &mut Proc) -> Start {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "Phoenix did not start within {START_TIMEOUT:?}:\n{}", proc.stderr());
            let text = proc.wait_stderr_change(left.min(Duration::from_millis(500)));
            if text.contains("Uvicorn running on") {
                return Start::Ready;
            }
            if text.contains("address already in use") || text.contains("Address already in use") {
                return Start::PortTaken;
            }
            if let Some(status) = proc.try_wait() {
                panic!(
                    "Phoenix exited ({status}) before it was ready:\nstdout:\n{}\nstderr:\n{}",
                    proc.stdout(),
                    proc.stderr()
                );
            }
        }
    }

    /// Every span of `project`, newest first, as Phoenix's REST API returns them (`span_kind`,
    /// `context.trace_id`, `context.span_id`, `parent_id`, `attributes`, …). An unknown project
    /// (nothing received yet) has none.
    pub fn spans(&self, project: &str) -> Vec<serde_json::Value> {
        let mut spans = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/v1/projects/{project}/spans?limit=1000");
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let resp = crate::http1::get(self.addr, &path, &[]);
            if resp.status == 404 {
                return spans;
            }
            assert_eq!(resp.status, 200, "GET {path}: {}", String::from_utf8_lossy(&resp.body));
            let page: serde_json::Value = serde_json::from_slice(&resp.body).expect("JSON spans");
            spans.extend(page["data"].as_array().cloned().unwrap_or_default());
            match page["next_cursor"].as_str() {
                Some(next) if !next.is_empty() => cursor = Some(next.to_string()),
                _ => return spans,
            }
        }
    }

    /// Reads `project`'s spans until `done` holds for them (Phoenix writes what it receives in
    /// batches), at most `timeout`; panics naming `what` with the spans it has.
    pub fn wait_spans(
        &self,
        project: &str,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans(project);
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "Phoenix never showed {what} within {timeout:?}; it has:\n{}",
                spans
                    .iter()
                    .map(|s| format!("{} {} parent {}", s["span_kind"], s["name"], s["parent_id"]))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            // Phoenix has no way to be told "tell me when": ask again shortly.
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
