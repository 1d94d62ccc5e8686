//! The arms under comparison and how each proxy is started: pinned to the proxy core, fresh for
//! every level, with configs generated here.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tokentap_e2e::process::Proc;

/// One way of reaching the upstream.
#[derive(Clone, Debug)]
pub(crate) enum Arm {
    Direct,
    Nginx {
        bin: PathBuf,
    },
    /// `pingora_relay`: `[connections] relay = "pingora"` (pingora's HTTP/1 proxy instead of
    /// tokentap's one loop per exchange).
    Tokentap {
        label: String,
        bin: PathBuf,
        recording: bool,
        pingora_relay: bool,
    },
    /// agentgateway (a Rust gateway on hyper), one worker thread, its access log to a file: with
    /// `llm`, its LLM route (an `ai` backend with the OpenAI provider, which parses each event of
    /// the stream), else a plain HTTP route to the same upstream.
    Agentgateway {
        bin: PathBuf,
        llm: bool,
    },
}

impl Arm {
    pub(crate) fn name(&self) -> String {
        match self {
            Arm::Direct => "direct".into(),
            Arm::Nginx { .. } => "nginx".into(),
            Arm::Tokentap { label, recording: true, pingora_relay: false, .. } => label.clone(),
            Arm::Tokentap { label, recording: true, pingora_relay: true, .. } => format!("{label}, pingora relay"),
            Arm::Tokentap { label, recording: false, .. } => format!("{label}, recording off"),
            Arm::Agentgateway { llm: true, .. } => "agentgateway LLM route".into(),
            Arm::Agentgateway { llm: false, .. } => "agentgateway plain route".into(),
        }
    }
}

/// A started proxy (none for the direct arm).
pub(crate) struct Running {
    pub(crate) addr: SocketAddr,
    /// tokentap's admin listener (its `/metrics`).
    pub(crate) admin: Option<SocketAddr>,
    pub(crate) proc: Option<Proc>,
    pub(crate) dir: Option<tempfile::TempDir>,
}

impl Running {
    pub(crate) fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }

    /// tokentap's journal, when this is a recording tokentap.
    pub(crate) fn records_file(&self) -> Option<PathBuf> {
        let path = self.dir.as_ref()?.path().join("data").join("records.jsonl");
        path.exists().then_some(path)
    }
}

pub(crate) fn start(arm: &Arm, upstream: SocketAddr, core: usize, threads: usize) -> Running {
    start_wrapped(arm, upstream, core, threads, &[])
}

/// Like [`start`], the proxy run under `wrap` (a command and its arguments, such as valgrind's),
/// which must exec the proxy in its own process.
pub(crate) fn start_wrapped(arm: &Arm, upstream: SocketAddr, core: usize, threads: usize, wrap: &[String]) -> Running {
    match arm {
        Arm::Direct => Running { addr: upstream, admin: None, proc: None, dir: None },
        Arm::Nginx { bin } => start_nginx(bin, upstream, core, wrap),
        Arm::Tokentap { bin, recording, pingora_relay, .. } => {
            start_tokentap(bin, upstream, core, threads, *recording, *pingora_relay, wrap)
        }
        Arm::Agentgateway { bin, llm } => start_agentgateway(bin, upstream, core, *llm, wrap),
    }
}

fn pinned(core: usize, bin: &Path, wrap: &[String]) -> Command {
    let mut cmd = Command::new("taskset");
    cmd.arg("-c").arg(core.to_string()).args(wrap).arg(bin);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("OTEL_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
}

fn start_tokentap(
    bin: &Path,
    upstream: SocketAddr,
    core: usize,
    threads: usize,
    recording: bool,
    pingora_relay: bool,
    wrap: &[String],
) -> Running {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let config = dir.path().join("tokentap.toml");
    let mut text = format!(
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\ndata_dir = {:?}\nthreads = {threads}\n\n\
[[route]]\nprefix = \"/\"\nupstream = \"http://{upstream}\"\n",
        data.display().to_string()
    );
    if !recording {
        text.push_str("\n[timeline]\nenabled = false\n");
    }
    if pingora_relay {
        text.push_str("\n[connections]\nrelay = \"pingora\"\n");
    }
    if !wrap.is_empty() {
        // Instrumented, the record worker at SCHED_IDLE would be starved by anything else on the
        // machine and do its work (the tokenizer's tables at start, the records) whenever it got
        // to run: inside a later measurement. Counted instructions do not depend on priority.
        text.push_str("\n[analysis]\nworker_priority = \"normal\"\n");
    }
    std::fs::write(&config, text).expect("write tokentap.toml");
    let mut cmd = pinned(core, bin, wrap);
    cmd.env("TOKENTAP_LOG", "warn").arg("serve").arg("--config").arg(&config);
    let mut proc = Proc::spawn(cmd);
    // Under an instrumenting wrapper, start-up is tens of times slower.
    let patience = Duration::from_secs(if wrap.is_empty() { 60 } else { 600 });
    let line = proc.wait_line("tokentap listening on ", patience);
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let admin_line = proc.wait_line("tokentap admin API on ", patience);
    let admin = admin_line.split("http://").nth(1).and_then(|rest| rest.split('/').next()).and_then(|a| a.parse().ok());
    Running { addr, admin, proc: Some(proc), dir: Some(dir) }
}

fn start_nginx(bin: &Path, upstream: SocketAddr, core: usize, wrap: &[String]) -> Running {
    assert!(bin.exists(), "{} not found: run scripts/setup.sh test (it installs nginx)", bin.display());
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let config = dir.path().join("nginx.conf");
        std::fs::write(&config, nginx_config(dir.path(), port, upstream)).expect("write nginx.conf");
        let mut cmd = pinned(core, bin, wrap);
        cmd.arg("-p").arg(dir.path()).arg("-c").arg(&config).arg("-e").arg("stderr");
        // nginx prints nothing when it is up: poll until it accepts (or exits).
        let started = Started { proc: Proc::spawn(cmd), addr: ([127, 0, 0, 1], port).into(), dir, name: "nginx" };
        if let Some(running) = started.accepting(wrap, Proc::stderr) {
            return running;
        }
    }
    panic!("nginx could not bind a free port in five tries");
}

/// A proxy just started on a port of its own.
struct Started {
    proc: Proc,
    addr: SocketAddr,
    dir: tempfile::TempDir,
    name: &'static str,
}

impl Started {
    /// Polls until the proxy accepts: `None` when it exited because its port was taken meanwhile
    /// (`said` is what it wrote), a panic when it exited for another reason or took too long.
    fn accepting(mut self, wrap: &[String], said: impl Fn(&Proc) -> String) -> Option<Running> {
        let deadline = std::time::Instant::now() + Duration::from_secs(if wrap.is_empty() { 30 } else { 300 });
        loop {
            if std::net::TcpStream::connect(self.addr).is_ok() {
                return Some(Running { addr: self.addr, admin: None, proc: Some(self.proc), dir: Some(self.dir) });
            }
            if self.proc.try_wait().is_some() {
                let said = said(&self.proc);
                if said.contains("in use") {
                    return None;
                }
                panic!("{} did not start: {said}", self.name);
            }
            assert!(std::time::Instant::now() < deadline, "{} not accepting in time: {}", self.name, said(&self.proc));
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn start_agentgateway(bin: &Path, upstream: SocketAddr, core: usize, llm: bool, wrap: &[String]) -> Running {
    assert!(bin.exists(), "{} not found", bin.display());
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let (port, ready) = (free_port(), free_port());
        let config = dir.path().join("agentgateway.yaml");
        std::fs::write(&config, agentgateway_config(port, ready, upstream, llm)).expect("write agentgateway.yaml");
        // Its log (a line per request, as nginx's access log) goes to a file, not through a pipe
        // read on the load generator's core.
        let log = dir.path().join("agentgateway.log");
        let mut cmd = pinned(core, Path::new("sh"), &[]);
        cmd.arg("-c").arg("log=$1; shift; exec \"$@\" >\"$log\" 2>&1");
        cmd.arg("sh").arg(&log).args(wrap).arg(bin).arg("-f").arg(&config);
        let started =
            Started { proc: Proc::spawn(cmd), addr: ([127, 0, 0, 1], port).into(), dir, name: "agentgateway" };
        if let Some(running) = started.accepting(wrap, |_| std::fs::read_to_string(&log).unwrap_or_default()) {
            return running;
        }
    }
    panic!("agentgateway could not bind a free port in five tries");
}

/// One worker thread; its admin and stats listeners off, readiness on a free port; one route to
/// the upstream: the LLM route (the OpenAI provider with its host overridden) or a plain one.
fn agentgateway_config(port: u16, ready: u16, upstream: SocketAddr, llm: bool) -> String {
    let backend = if llm {
        format!("- ai: {{name: openai, hostOverride: \"{upstream}\", provider: {{openAI: {{}}}}}}")
    } else {
        format!("- host: \"{upstream}\"")
    };
    format!(
        r#"config:
  workerThreads: 1
  adminAddr: "off"
  statsAddr: "off"
  readinessAddr: "127.0.0.1:{ready}"
binds:
- port: {port}
  listeners:
  - name: bench
    protocol: HTTP
    routes:
    - name: bench
      backends:
        {backend}
"#
    )
}

/// One worker, no buffering, HTTP/1.1 keep-alive to the upstream, access log on (as deployed).
fn nginx_config(prefix: &Path, port: u16, upstream: SocketAddr) -> String {
    let p = prefix.display();
    format!(
        r#"daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 65536;
pid {p}/nginx.pid;
error_log stderr error;
events {{ worker_connections 30000; }}
http {{
    access_log {p}/access.log;
    client_body_temp_path {p}/client_body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;
    upstream provider {{
        server {upstream};
        keepalive 1024;
    }}
    # A WebSocket handshake passes its Upgrade on; any other request keeps the upstream alive.
    map $http_upgrade $upstream_connection {{
        default upgrade;
        '' "";
    }}
    server {{
        listen 127.0.0.1:{port} backlog=65535;
        location / {{
            proxy_pass http://provider;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $upstream_connection;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"#
    )
}
