//! Starting `tokentap` and `tokentap-mock` as child processes.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Where the workspace's binaries are: `$TOKENTAP_BIN_DIR`, or the profile folder this test runs from.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TOKENTAP_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // Tests run from target/<profile>/deps/, binaries (like the benchmark) from target/<profile>/.
    let dir = exe.parent().expect("executable has a folder");
    if dir.file_name().is_some_and(|n| n == "deps") { dir.parent().unwrap_or(dir) } else { dir }.to_path_buf()
}

pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} not found: build the binaries first (`cargo build --bins`, or run scripts/test.sh)",
        path.display()
    );
    path
}

/// A child process whose stdout lines and stderr text are collected.
pub struct Proc {
    child: Child,
    lines: Receiver<String>,
    stdout_text: Arc<Mutex<String>>,
    stderr_text: Arc<(Mutex<String>, Condvar)>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Proc {
    pub fn spawn(mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::null());
        Self::collect(cmd)
    }

    /// Like [`Proc::spawn`], with the child's stdin left to the caller (e.g. to tell a peer an
    /// address known only after it started).
    pub fn spawn_with_stdin(mut cmd: Command) -> (Proc, std::process::ChildStdin) {
        cmd.stdin(Stdio::piped());
        let mut proc = Self::collect(cmd);
        let stdin = proc.child.stdin.take().expect("stdin");
        (proc, stdin)
    }

    fn collect(mut cmd: Command) -> Proc {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = channel();
        let stdout_text = Arc::new(Mutex::new(String::new()));
        let stderr_text = Arc::new((Mutex::new(String::new()), Condvar::new()));
        let out = stdout_text.clone();
        let stdout_reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                out.lock().unwrap().push_str(&line);
                out.lock().unwrap().push('\n');
                let _ = tx.send(line);
            }
        });
        let err = stderr_text.clone();
        let stderr_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                err.0.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
                err.1.notify_all();
            }
        });
        Proc { child, lines, stdout_text, stderr_text, readers: vec![stdout_reader, stderr_reader] }
    }

    /// Waits for a stdout line starting with `prefix`; panics with the stderr text if the process
    /// exits first or nothing comes within `timeout`.
    pub fn wait_line(&mut self, prefix: &str, timeout: Duration) -> String {
        self.wait_line_or_exit(prefix, timeout).unwrap_or_else(|| self.no_line(prefix))
    }

    /// Like [`Proc::wait_line`], but `None` when the process closed its stdout (it exited) first;
    /// the caller reads `stderr` to say why. Panics when nothing comes within `timeout`.
    pub fn wait_line_or_exit(&mut self, prefix: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return Some(line),
                Ok(_) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    // Its stderr may still be being read: wait for the exit and both readers.
                    self.wait_exit();
                    return None;
                }
                Err(RecvTimeoutError::Timeout) => self.no_line(prefix),
            }
        }
    }

    fn no_line(&mut self, prefix: &str) -> ! {
        panic!(
            "no line starting with {prefix:?}; status {:?}; stdout:\n{}\nstderr:\n{}",
            self.child.try_wait(),
            self.stdout(),
            self.stderr()
        )
    }

    /// The exit status, if the process has exited.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout(&self) -> String {
        self.stdout_text.lock().unwrap().clone()
    }

    pub fn stderr(&self) -> String {
        self.stderr_text.0.lock().unwrap().clone()
    }

    /// Waits until stderr contains `needle`; panics with the output after `timeout`.
    pub fn wait_stderr(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let (text, changed) = &*self.stderr_text;
        let mut guard = text.lock().unwrap();
        while !guard.contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "stderr never contained {needle:?}:\n{}", *guard);
            guard = changed.wait_timeout(guard, left).unwrap().0;
        }
    }

    /// Waits until more stderr text arrives, at most `timeout`; returns all of it so far.
    pub fn wait_stderr_change(&self, timeout: Duration) -> String {
        let (text, changed) = &*self.stderr_text;
        let guard = text.lock().unwrap();
        let before = guard.len();
        let (guard, _) = changed.wait_timeout_while(guard, timeout, |t| t.len() == before).unwrap();
        guard.clone()
    }

    /// Waits for the process to exit and for its output to be read completely.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let status = self.child.wait().expect("wait for child");
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        status
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn addr_after(line: &str, marker: &str) -> SocketAddr {
    let rest = line.split(marker).nth(1).unwrap_or_else(|| panic!("no {marker:?} in {line:?}"));
    let addr = rest.split(|c: char| c == '/' || c.is_whitespace()).next().unwrap();
    addr.parse().unwrap_or_else(|e| panic!("bad address {addr:?} in {line:?}: {e}"))
}

/// A running `tokentap-mock`.
pub struct Mock {
    pub proc: Proc,
    pub addr: SocketAddr,
    pub url: String,
}

impl Mock {
    pub fn start(args: &[&str]) -> Mock {
        let mut cmd = Command::new(bin("tokentap-mock"));
        cmd.arg("--listen").arg("127.0.0.1:0").args(args);
        let mut proc = Proc::spawn(cmd);
        let line = proc.wait_line("tokentap-mock listening on ", Duration::from_secs(30));
        let url = line.trim_start_matches("tokentap-mock listening on ").trim().to_string();
        let addr = addr_after(&line, "://");
        Mock { proc, addr, url }
    }

    /// GET a control endpoint (`/_mock/stats`, `/_mock/wait?…`) and parse its JSON.
    pub fn control(&self, path_and_query: &str) -> (u16, serde_json::Value) {
        let resp = crate::http1::get(self.addr, path_and_query, &[]);
        (resp.status, serde_json::from_slice(&resp.body).unwrap_or(serde_json::Value::Null))
    }

    /// Long-polls until the counters reach the given values (e.g. "cancelled=1").
    pub fn wait_stats(&self, condition: &str) -> serde_json::Value {
        let (status, body) = self.control(&format!("/_mock/wait?{condition}&timeout_ms=20000"));
        assert_eq!(status, 200, "mock never reached {condition}: {body}");
        body
    }
}

/// A running `tokentap` with its own data directory.
pub struct Tokentap {
    pub proc: Proc,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub data_dir: tempfile::TempDir,
}

impl Tokentap {
    /// `tokentap serve --upstream URL` plus extra arguments, on free ports.
    pub fn start(upstream: &str, extra: &[&str]) -> Tokentap {
        let mut args = vec!["--upstream", upstream];
        args.extend_from_slice(extra);
        Self::start_with_args(&args)
    }

    pub fn start_with_args(args: &[&str]) -> Tokentap {
        Self::start_with_env(args, &[])
    }

    /// Like [`Tokentap::start_with_args`], with extra environment variables. `OTEL_*` variables of
    /// the test's own environment are not passed on, so export is on only when a test asks for it.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Tokentap {
        Self::start_in(tempfile::tempdir().expect("tempdir"), args, env)
    }

    /// Like [`Tokentap::start_with_env`], on a data directory given (e.g. one a previous tokentap
    /// wrote, to see what a restart restores).
    pub fn start_in(data_dir: tempfile::TempDir, args: &[&str], env: &[(&str, &str)]) -> Tokentap {
        let mut cmd = Command::new(bin("tokentap"));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("OTEL_") {
                cmd.env_remove(key);
            }
        }
        // The test's own variables win over these defaults. Many tokentaps run in parallel on two
        // cores here: at its default `idle` priority a record worker could wait seconds for a free
        // core, so tests run it at normal priority
        // (the benchmark measures the default).
        cmd.env("TOKENTAP_LOG", "info").env("TOKENTAP_WORKER_PRIORITY", "normal").envs(env.iter().copied());
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--admin-listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir.path())
            .arg("--threads")
            .arg("2")
            .args(args);
        let mut proc = Proc::spawn(cmd);
        let line = proc.wait_line("tokentap listening on ", Duration::from_secs(30));
        let addr = addr_after(&line, "http://");
        let admin_line = proc.wait_line("tokentap admin API on ", Duration::from_secs(30));
        let admin = addr_after(&admin_line, "http://");
        // tokentap announces its address only once pingora accepts connections on it.
        Tokentap { proc, addr, admin, data_dir }
    }

    pub fn records_file(&self) -> PathBuf {
        self.data_dir.path().join("records.jsonl")
    }

    /// GET an admin API path and parse its JSON.
    pub fn admin_get(&self, path_and_query: &str) -> (u16, serde_json::Value) {
        let resp = crate::http1::get(self.admin, path_and_query, &[]);
        (resp.status, serde_json::from_slice(&resp.body).unwrap_or(serde_json::Value::Null))
    }

    pub fn feed(&self) -> crate::RecordFeed {
        crate::RecordFeed::connect(self.admin)
    }
}

/// Runs a command to completion (for config errors): exit status, stdout, stderr.
pub fn run_tokentap(args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let mut cmd = Command::new(bin("tokentap"));
    cmd.args(args).env("TOKENTAP_LOG", "info");
    let mut proc = Proc::spawn(cmd);
    let status = proc.wait_exit();
    (status, proc.stdout(), proc.stderr())
}

/// The Python of the SDK virtualenv that scripts/setup.sh creates (`TOKENTAP_PYTHON` overrides).
/// Runs `tests/sdk/<script>` with the SDK virtualenv's python and `args`; fails the test unless it
/// exits 0 and prints one JSON document, which it returns.
pub fn run_sdk_script(script: &str, args: &[&str]) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk").join(script);
    let out = std::process::Command::new(sdk_python()).arg(&path).args(args).output().expect("run python");
    assert!(
        out.status.success(),
        "{script} {args:?} failed:\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{script} printed no JSON ({e})"))
}

pub fn sdk_python() -> PathBuf {
    let path = std::env::var_os("TOKENTAP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/venv/bin/python"));
    assert!(path.exists(), "{} not found: run scripts/test.sh, which creates the SDK virtualenv", path.display());
    path
}
