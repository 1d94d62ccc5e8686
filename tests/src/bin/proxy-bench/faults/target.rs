//! One tokentap under test: started with its own data dir, its health read and waited on, its
//! journal counted.

use super::*;

/// A tokentap started for one fault run.
pub(super) struct Target {
    pub(super) proc: Proc,
    pub(super) addr: SocketAddr,
    pub(super) admin: SocketAddr,
    pub(super) data: PathBuf,
}

pub(super) fn address_after(line: &str, marker: &str) -> SocketAddr {
    line.split(marker)
        .nth(1)
        .and_then(|rest| rest.split(['/', ' ']).next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

pub(super) fn start(
    bin: &Path,
    dir: &Path,
    data: &Path,
    upstream: SocketAddr,
    extra: &str,
    env: &[(&str, &str)],
) -> Target {
    start_with_top(bin, dir, data, upstream, "", extra, env)
}

/// [`start`] with `top` among the file's top-level keys (before the route), `extra` after it.
pub(super) fn start_with_top(
    bin: &Path,
    dir: &Path,
    data: &Path,
    upstream: SocketAddr,
    top: &str,
    extra: &str,
    env: &[(&str, &str)],
) -> Target {
    let config = dir.join("tokentap.toml");
    let text = format!(
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\ndata_dir = {:?}\nthreads = 1\n{top}\n\
[[route]]\nprefix = \"/\"\nupstream = \"http://{upstream}\"\n\n{extra}",
        data.display().to_string()
    );
    std::fs::write(&config, text).expect("write tokentap.toml");
    let mut cmd = Command::new(bin);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("OTEL_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("TOKENTAP_LOG", "error").envs(env.iter().copied()).arg("serve").arg("--config").arg(&config);
    let mut proc = Proc::spawn(cmd);
    let listen = proc.wait_line("tokentap listening on ", Duration::from_secs(60));
    let admin = proc.wait_line("tokentap admin API on ", Duration::from_secs(60));
    Target {
        addr: address_after(&listen, "http://"),
        admin: address_after(&admin, "http://"),
        proc,
        data: data.to_path_buf(),
    }
}

pub(super) async fn health(admin: SocketAddr) -> Value {
    tokio::task::spawn_blocking(move || {
        let response = http1::get(admin, "/_tokentap/api/health", &[]);
        serde_json::from_slice(&response.body).unwrap_or(Value::Null)
    })
    .await
    .unwrap_or(Value::Null)
}

pub(super) fn count(health: &Value, path: &[&str]) -> u64 {
    path.iter().fold(health, |v, key| &v[*key]).as_u64().unwrap_or(0)
}

/// Polls health every 20 ms until `done` holds (or `limit` passes); the time it took.
pub(super) async fn wait_health(admin: SocketAddr, limit: Duration, done: impl Fn(&Value) -> bool) -> Option<Duration> {
    let begin = Instant::now();
    while begin.elapsed() < limit {
        if done(&health(admin).await) {
            return Some(begin.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Waits until every finished request has been handled by the record worker.
pub(super) async fn settle(admin: SocketAddr) {
    let _ = wait_health(admin, Duration::from_secs(60), |h| {
        count(h, &["records", "queued"]) == 0 && count(h, &["records", "open"]) == 0
    })
    .await;
}

/// Records on disk for `path` (every journal file), and lines that do not parse (split on bytes:
/// a line that is not UTF-8 is one unreadable line).
pub(super) fn journal_records(data: &Path, path: &str) -> (u64, u64) {
    let (mut found, mut unreadable) = (0, 0);
    let Ok(entries) = std::fs::read_dir(data) else { return (0, 0) };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !(name.starts_with("records") && name.ends_with(".jsonl") && entry.path().is_file()) {
            continue;
        }
        let Ok(bytes) = std::fs::read(entry.path()) else { continue };
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<Value>(line) {
                Ok(record) if record["path"] == path => found += 1,
                Ok(_) => {}
                Err(_) => unreadable += 1,
            }
        }
    }
    (found, unreadable)
}
