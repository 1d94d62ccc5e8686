//! The fault table: one tokentap (recording on) under a steady streaming load while a fault is
//! injected and then removed. Per fault: the requests sent, how many streams failed or reached
//! their client altered, the records that did not reach disk (or the spans that did not reach the
//! collector), how many of those tokentap counted, and how long it took to recover.
//!
//! Each client checks its stream byte for byte: the upstream stamps each event with its send
//! time, so the client rebuilds the exact body the upstream wrote from the stamps it read and
//! compares (a dropped, duplicated, reordered or changed byte shows).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use tokentap_e2e::process::Proc;
use tokentap_e2e::{http1, ReservedReceiver};

use crate::load::{chunk_event, Schedule, STAMP_DIGITS, STAMP_MARKER};

/// One fault the table covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The collector refuses connections for a while, then comes up.
    CollectorDown,
    /// The collector accepts TCP connections and never answers, for the whole run.
    CollectorSilent,
    /// The data dir's file system fills up, then space frees.
    DiskFull,
    /// The data dir is deleted while tokentap runs.
    StoreRemoved,
    /// The record worker panics on some requests (a test-only hook).
    WorkerPanic,
    /// SIGTERM while streams are in flight.
    Sigterm,
    /// Clients that send one request on a kept-alive connection and then nothing, or trickle the
    /// next head a byte a second.
    KeepaliveSlowloris,
    /// `records.jsonl` replaced by a symbolic link to a file elsewhere, then removed.
    JournalSymlink,
    /// `records.jsonl` replaced by a FIFO nobody reads, then removed.
    JournalFifo,
    /// A line that is not UTF-8 appended to `records.jsonl` (a torn write); then the report and a
    /// restart read the journal back.
    JournalTornLine,
    /// Browser-style WebSocket sessions with the API key in `Sec-WebSocket-Protocol`, logging at
    /// `trace`.
    SubprotocolKey,
}

impl Fault {
    pub(crate) const ALL: [Fault; 11] = [
        Fault::CollectorDown,
        Fault::CollectorSilent,
        Fault::DiskFull,
        Fault::StoreRemoved,
        Fault::WorkerPanic,
        Fault::Sigterm,
        Fault::KeepaliveSlowloris,
        Fault::JournalSymlink,
        Fault::JournalFifo,
        Fault::JournalTornLine,
        Fault::SubprotocolKey,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Fault::CollectorDown => "collector-down",
            Fault::CollectorSilent => "collector-silent",
            Fault::DiskFull => "disk-full",
            Fault::StoreRemoved => "store-removed",
            Fault::WorkerPanic => "worker-panic",
            Fault::Sigterm => "sigterm",
            Fault::KeepaliveSlowloris => "keepalive-slowloris",
            Fault::JournalSymlink => "journal-symlink",
            Fault::JournalFifo => "journal-fifo",
            Fault::JournalTornLine => "journal-torn-line",
            Fault::SubprotocolKey => "subprotocol-key",
        }
    }

    /// `all`, or a comma-separated list of names.
    pub(crate) fn parse_list(text: &str) -> Result<Vec<Fault>, String> {
        if text == "all" {
            return Ok(Fault::ALL.to_vec());
        }
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|name| {
                Fault::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| {
                    let names: Vec<_> = Fault::ALL.iter().map(|f| f.name()).collect();
                    format!("unknown fault {name:?}; one of: all, {}", names.join(", "))
                })
            })
            .collect()
    }

    /// What the fault is, for the table.
    fn description(self, plan: &Plan) -> String {
        let (during, after) = (plan.during.as_secs(), plan.after.as_secs());
        match self {
            Fault::CollectorDown => format!("collector refuses connections for {during} s, then starts"),
            Fault::CollectorSilent => "collector accepts TCP and never answers (whole run)".into(),
            Fault::DiskFull => format!("data dir's file system full for {during} s, then {after} s with space"),
            Fault::StoreRemoved => "data dir deleted (`rm -r`) mid-run".into(),
            Fault::WorkerPanic => format!("record worker panics on {} requests in {during} s", plan.panics),
            Fault::Sigterm => format!("SIGTERM with {} streams half-way", plan.streams),
            Fault::KeepaliveSlowloris => format!(
                "{ATTACKERS} connections send one request, then half stay silent and half trickle the next head at 1 byte/s \
(`keepalive_idle_s` = `head_timeout_s` = {SLOWLORIS_TIMEOUT_S})"
            ),
            Fault::JournalSymlink => {
                format!("records.jsonl replaced by a symlink to a file outside the data dir for {during} s, then removed")
            }
            Fault::JournalFifo => format!("records.jsonl replaced by a FIFO nobody reads for {during} s, then removed"),
            Fault::JournalTornLine => "a line that is not UTF-8 appended to records.jsonl mid-run; then `tokentap report` and a restart".into(),
            Fault::SubprotocolKey => format!(
                "{WS_SESSIONS} WebSocket sessions with the key in `Sec-WebSocket-Protocol` (`TOKENTAP_LOG=trace`)"
            ),
        }
    }
}

/// The load and the phases of one fault run.
#[derive(Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) streams: usize,
    pub(crate) schedule: Schedule,
    pub(crate) before: Duration,
    pub(crate) during: Duration,
    pub(crate) after: Duration,
    /// Requests sent to the panicking path during the worker-panic fault.
    pub(crate) panics: u64,
}

/// One row of the fault table.
pub(crate) struct FaultRow {
    fault: Fault,
    description: String,
    /// Streams started (and, for worker-panic, the panicking requests).
    sent: u64,
    /// Streams that did not complete for their client (cut, refused).
    failed: u64,
    /// Streams complete but not byte-exact.
    altered: u64,
    /// Records (or spans, for the collector faults) that should exist.
    expected: u64,
    /// Of those, not on disk (or not at the collector).
    lost: u64,
    /// What tokentap counted for them (its own counters).
    counted: String,
    recovery: String,
    note: String,
}

const LOAD_PATH: &str = "/v1/chat/completions";
const PANIC_PATH: &str = "/v1/fault/chat/completions";
const BODY: &str =
    r#"{"model":"bench-model","stream":true,"messages":[{"role":"user","content":"Say twenty words."}]}"#;

/// How one stream ended for its client.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outcome {
    Exact,
    Altered,
    /// A response head arrived, the body did not complete.
    Cut,
    /// No response head (connection refused or closed first).
    Refused,
}

#[derive(Default)]
struct Tally {
    exact: AtomicU64,
    altered: AtomicU64,
    cut: AtomicU64,
    refused: AtomicU64,
}

impl Tally {
    fn add(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Exact => &self.exact,
            Outcome::Altered => &self.altered,
            Outcome::Cut => &self.cut,
            Outcome::Refused => &self.refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> [u64; 4] {
        [&self.exact, &self.altered, &self.cut, &self.refused].map(|c| c.load(Ordering::Relaxed))
    }
}

fn request(path: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\nauthorization: Bearer sk-bench\r\n\
content-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    )
}

/// Undoes chunked framing; `None` unless the terminal chunk arrived.
fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len());
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&body[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        if body.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// What the upstream wrote for a stream whose timed events carried `stamps`.
fn expected_body(stamps: &[u64]) -> Vec<u8> {
    let mut out = String::new();
    for &stamp in stamps {
        out.push_str(&chunk_event(stamp, " tok", "null"));
    }
    out.push_str(&chunk_event(0, "", "\"stop\""));
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// Judges one response read to its end.
fn judge(raw: &[u8], events: usize) -> Outcome {
    let Some(head_end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { return Outcome::Refused };
    if !raw.starts_with(b"HTTP/1.1 200") {
        return Outcome::Cut;
    }
    let Some(body) = dechunk(&raw[head_end + 4..]) else { return Outcome::Cut };
    let mut stamps = Vec::with_capacity(events);
    let mut at = 0;
    while let Some(i) = body[at..].windows(STAMP_MARKER.len()).position(|w| w == STAMP_MARKER) {
        let start = at + i + STAMP_MARKER.len();
        let Some(digits) = body.get(start..start + STAMP_DIGITS) else { return Outcome::Altered };
        let stamp: u64 = std::str::from_utf8(digits).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
        if stamp > 0 {
            stamps.push(stamp);
        }
        at = start + STAMP_DIGITS;
    }
    if stamps.len() == events && body == expected_body(&stamps) {
        Outcome::Exact
    } else {
        Outcome::Altered
    }
}

/// One streamed request on its own connection, read to its end and judged.
async fn checked_stream(addr: SocketAddr, path: &str, events: usize) -> Outcome {
    let Ok(mut stream) = TcpStream::connect(addr).await else { return Outcome::Refused };
    let _ = stream.set_nodelay(true);
    if stream.write_all(request(path).as_bytes()).await.is_err() {
        return Outcome::Refused;
    }
    let mut raw = Vec::with_capacity(8192);
    let read = tokio::time::timeout(Duration::from_secs(60), async {
        let mut tmp = vec![0u8; 16384];
        loop {
            match stream.read(&mut tmp).await {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&tmp[..n]),
            }
        }
    });
    if read.await.is_err() && raw.is_empty() {
        return Outcome::Refused;
    }
    judge(&raw, events)
}

/// `streams` clients, each starting a new stream as its last one ends, until `stop` is set.
fn spawn_load(
    addr: SocketAddr,
    plan: &Plan,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..plan.streams)
        .map(|k| {
            let (stop, tally) = (stop.clone(), tally.clone());
            let events = plan.schedule.events;
            let offset = plan.schedule.gap.mul_f64(k as f64 / plan.streams as f64);
            tokio::spawn(async move {
                tokio::time::sleep(offset).await;
                while !stop.load(Ordering::Relaxed) {
                    tally.add(checked_stream(addr, LOAD_PATH, events).await);
                }
            })
        })
        .collect()
}

/// A tokentap started for one fault run.
struct Target {
    proc: Proc,
    addr: SocketAddr,
    admin: SocketAddr,
    data: PathBuf,
}

fn address_after(line: &str, marker: &str) -> SocketAddr {
    line.split(marker)
        .nth(1)
        .and_then(|rest| rest.split(['/', ' ']).next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

fn start(bin: &Path, dir: &Path, data: &Path, upstream: SocketAddr, extra: &str, env: &[(&str, &str)]) -> Target {
    let config = dir.join("tokentap.toml");
    let text = format!(
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\ndata_dir = {:?}\nthreads = 1\n\n\
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

async fn health(admin: SocketAddr) -> Value {
    tokio::task::spawn_blocking(move || {
        let response = http1::get(admin, "/_tokentap/api/health", &[]);
        serde_json::from_slice(&response.body).unwrap_or(Value::Null)
    })
    .await
    .unwrap_or(Value::Null)
}

fn count(health: &Value, path: &[&str]) -> u64 {
    path.iter().fold(health, |v, key| &v[*key]).as_u64().unwrap_or(0)
}

/// Polls health every 20 ms until `done` holds (or `limit` passes); the time it took.
async fn wait_health(admin: SocketAddr, limit: Duration, done: impl Fn(&Value) -> bool) -> Option<Duration> {
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
async fn settle(admin: SocketAddr) {
    let _ = wait_health(admin, Duration::from_secs(60), |h| {
        count(h, &["records", "queued"]) == 0 && count(h, &["records", "open"]) == 0
    })
    .await;
}

/// Records on disk for `path` (every journal file), and lines that do not parse (split on bytes:
/// a line that is not UTF-8 is one unreadable line).
fn journal_records(data: &Path, path: &str) -> (u64, u64) {
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

fn show(d: Option<Duration>, limit: Duration) -> String {
    d.map_or(format!("not within {} s", limit.as_secs()), |d| format!("{:.2} s", d.as_secs_f64()))
}

/// Runs each fault with a fresh tokentap and returns the table's rows.
pub(crate) fn run(
    rt: &tokio::runtime::Runtime,
    bin: &Path,
    upstream: SocketAddr,
    faults: &[Fault],
    plan: Plan,
) -> Vec<FaultRow> {
    let mut rows = Vec::new();
    for &fault in faults {
        eprintln!("[faults] {}", fault.name());
        let row = match fault {
            Fault::CollectorDown | Fault::CollectorSilent => rt.block_on(collector(bin, upstream, fault, plan)),
            Fault::DiskFull => rt.block_on(disk_full(bin, upstream, plan)),
            Fault::StoreRemoved => rt.block_on(store_removed(bin, upstream, plan)),
            Fault::WorkerPanic => rt.block_on(worker_panic(bin, upstream, plan)),
            Fault::Sigterm => rt.block_on(sigterm(bin, upstream, plan)),
            Fault::KeepaliveSlowloris => rt.block_on(keepalive_slowloris(bin, upstream, plan)),
            Fault::JournalSymlink | Fault::JournalFifo => rt.block_on(journal_replaced(bin, upstream, fault, plan)),
            Fault::JournalTornLine => rt.block_on(journal_torn_line(bin, upstream, plan)),
            Fault::SubprotocolKey => rt.block_on(subprotocol_key(bin, upstream, plan)),
        };
        eprintln!(
            "[faults] {}: {} sent, {} failed, {} altered, {} lost of {}",
            fault.name(),
            row.sent,
            row.failed,
            row.altered,
            row.lost,
            row.expected
        );
        rows.push(row);
    }
    rows
}

/// The phases shared by most faults: load for `before`, `inject`, `during`, `remove`, `after`;
/// then the load stops and the pipeline settles. Returns the stream tally.
async fn phases<I, R>(target: &Target, plan: Plan, inject: I, remove: R) -> [u64; 4]
where
    I: std::future::Future<Output = ()>,
    R: std::future::Future<Output = ()>,
{
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let tasks = spawn_load(target.addr, &plan, &stop, &tally);
    tokio::time::sleep(plan.before).await;
    inject.await;
    tokio::time::sleep(plan.during).await;
    remove.await;
    tokio::time::sleep(plan.after).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    settle(target.admin).await;
    tally.get()
}

fn row(fault: Fault, plan: &Plan, tally: [u64; 4]) -> FaultRow {
    let [exact, altered, cut, refused] = tally;
    FaultRow {
        fault,
        description: fault.description(plan),
        sent: exact + altered + cut + refused,
        failed: cut + refused,
        altered,
        expected: 0,
        lost: 0,
        counted: String::new(),
        recovery: "–".into(),
        note: String::new(),
    }
}

/// Records that reached tokentap: every stream that got a response head.
fn proxied(tally: [u64; 4]) -> u64 {
    tally[0] + tally[1] + tally[2]
}

async fn collector(bin: &Path, upstream: SocketAddr, fault: Fault, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let reserved = ReservedReceiver::reserve();
    // A listener nobody accepts on: the kernel completes the handshakes, nothing answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = match fault {
        Fault::CollectorDown => reserved.http_endpoint(),
        _ => format!("http://{}", silent.local_addr().expect("address")),
    };
    let otel = format!(
        "[otel]\nendpoint = \"{endpoint}\"\nprotocol = \"http/protobuf\"\nbatch_delay_ms = 200\nmetrics_interval_ms = 1000\n\
timeout_ms = 2000\nretry_initial_ms = 100\nretry_max_ms = 1000\n"
    );
    let target = start(bin, dir.path(), &dir.path().join("data"), upstream, &otel, &[]);
    let rss_before = crate::machine::status_kib(target.proc.pid(), "VmRSS:");
    let receiver: std::sync::Mutex<Option<tokentap_e2e::OtlpReceiver>> = std::sync::Mutex::new(None);
    let started_at: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
    let mut reserved = Some(reserved);
    let tally = phases(&target, plan, async {}, async {
        if fault == Fault::CollectorDown {
            if let Some(reserved) = reserved.take() {
                *receiver.lock().expect("receiver") = Some(reserved.start());
                *started_at.lock().expect("start time") = Some(Instant::now());
            }
        }
    })
    .await;
    let rss_after = crate::machine::status_kib(target.proc.pid(), "VmRSS:");
    let mut out = row(fault, &plan, tally);
    let (records, _) = journal_records(&target.data, LOAD_PATH);
    let receiver = receiver.into_inner().expect("receiver");
    match (fault, receiver) {
        (Fault::CollectorDown, Some(receiver)) => {
            // Every recorded request's trace at the collector (the spool replayed).
            let traces = |r: &tokentap_e2e::otlp_receiver::Received| {
                let mut ids: Vec<Vec<u8>> = r.spans().iter().map(|s| s.trace_id.clone()).collect();
                ids.sort();
                ids.dedup();
                ids.len() as u64
            };
            let begin = started_at.into_inner().expect("start time").unwrap_or_else(Instant::now);
            let deadline = Instant::now() + Duration::from_secs(60);
            while traces(&receiver.received()) < records && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let arrived = traces(&receiver.received());
            let h = health(target.admin).await;
            out.expected = records;
            out.lost = records.saturating_sub(arrived);
            out.counted = format!(
                "spans dropped: {} (queue full), {} (spool full), {} (rejected)",
                count(&h, &["telemetry", "otlp", "spans", "dropped", "queue_full"]),
                count(&h, &["telemetry", "otlp", "spans", "dropped", "spool_full"]),
                count(&h, &["telemetry", "otlp", "spans", "dropped", "rejected"]),
            );
            out.recovery = if arrived >= records {
                format!("{:.2} s (collector up → every request's trace delivered)", begin.elapsed().as_secs_f64())
            } else {
                "not within 60 s".into()
            };
            out.note = format!("records on disk: {records} of {}", proxied(tally));
        }
        _ => {
            let h = health(target.admin).await;
            let spooled = count(&h, &["telemetry", "otlp", "spans", "spooled"]);
            let exported = count(&h, &["telemetry", "otlp", "spans", "exported"]);
            out.expected = records;
            out.lost = 0;
            out.counted = format!(
                "spans spooled {spooled}, exported {exported}, dropped {} (queue full) / {} (spool full)",
                count(&h, &["telemetry", "otlp", "spans", "dropped", "queue_full"]),
                count(&h, &["telemetry", "otlp", "spans", "dropped", "spool_full"]),
            );
            out.recovery = "n/a (never answers)".into();
            out.note = format!(
                "records on disk: {records} of {}; RSS {:.1} → {:.1} MiB over the run",
                proxied(tally),
                rss_before as f64 / 1024.0,
                rss_after as f64 / 1024.0
            );
        }
    }
    drop(silent);
    out
}

/// Mounts a small tmpfs at `dir` (root only); false when that is not possible here.
fn mount_tmpfs(dir: &Path, size_mib: u64) -> bool {
    std::fs::create_dir_all(dir).is_ok()
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success())
}

/// Writes `path` until the file system is full.
fn fill(path: &Path) {
    use std::io::Write;
    let Ok(mut file) = std::fs::File::create(path) else { return };
    let block = vec![0u8; 1 << 20];
    while file.write_all(&block).is_ok() {}
    // The last partial block: fill what remains byte by byte in smaller writes.
    let small = vec![0u8; 4096];
    while file.write_all(&small).is_ok() {}
    while file.write_all(&[0]).is_ok() {}
    let _ = file.flush();
}

async fn disk_full(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    if !mount_tmpfs(&data, 256) {
        let mut out = row(Fault::DiskFull, &plan, [0; 4]);
        out.note = "skipped: mounting a tmpfs for the data dir needs root".into();
        return out;
    }
    let target = start(bin, dir.path(), &data, upstream, "", &[]);
    let filler = data.join("filler");
    let recovered: std::sync::Mutex<Option<Duration>> = std::sync::Mutex::new(None);
    let health_ok: std::sync::Mutex<Option<Duration>> = std::sync::Mutex::new(None);
    let admin = target.admin;
    let tally = phases(
        &target,
        plan,
        async {
            let filler = filler.clone();
            let _ = tokio::task::spawn_blocking(move || fill(&filler)).await;
        },
        async {
            let _ = std::fs::remove_file(&filler);
            let written_then = count(&health(admin).await, &["records", "written"]);
            let begin = Instant::now();
            let took = wait_health(admin, plan.after, |h| count(h, &["records", "written"]) > written_then).await;
            *recovered.lock().expect("recovery") = took;
            let ok = wait_health(admin, plan.after, |h| h["status"] == "ok").await.map(|_| begin.elapsed());
            *health_ok.lock().expect("recovery") = ok;
        },
    )
    .await;
    let h = health(admin).await;
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let mut out = row(Fault::DiskFull, &plan, tally);
    out.expected = proxied(tally);
    out.lost = out.expected.saturating_sub(records);
    out.counted = format!("store_errors {}", count(&h, &["records", "store_errors"]));
    out.recovery = format!(
        "{} (space freed → next record on disk); health `ok` again after {}",
        show(*recovered.lock().expect("recovery"), plan.after),
        show(*health_ok.lock().expect("recovery"), plan.after)
    );
    out.note = format!(
        "unreadable lines on disk after recovery: {unreadable}; health `degraded` while full; the records missing from disk stay in memory (ring, feed)"
    );
    drop(target);
    let _ = Command::new("umount").arg(&data).status();
    out
}

async fn store_removed(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let target = start(bin, dir.path(), &data, upstream, "", &[]);
    let admin = target.admin;
    let written_at_removal = std::sync::Mutex::new(0u64);
    let recovered: std::sync::Mutex<Option<Duration>> = std::sync::Mutex::new(None);
    let tally = phases(
        &target,
        plan,
        async {
            *written_at_removal.lock().expect("count") = count(&health(admin).await, &["records", "written"]);
            let _ = std::fs::remove_dir_all(&data);
            let took = wait_health(admin, plan.during, |h| count(h, &["records", "journal_recreated"]) > 0).await;
            *recovered.lock().expect("recovery") = took;
        },
        async {},
    )
    .await;
    let h = health(admin).await;
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let written_after = count(&h, &["records", "written"]).saturating_sub(*written_at_removal.lock().expect("count"));
    let mut out = row(Fault::StoreRemoved, &plan, tally);
    out.expected = written_after;
    out.lost = written_after.saturating_sub(records);
    out.counted = format!(
        "journal_gap {}, journal_recreated {}",
        count(&h, &["records", "journal_gap"]),
        count(&h, &["records", "journal_recreated"])
    );
    out.recovery = format!("{} (removal → journal recreated)", show(*recovered.lock().expect("recovery"), plan.during));
    out.note = format!(
        "expected = records written after the removal; the {} written before it went with the deleted dir; unreadable lines: {unreadable}",
        *written_at_removal.lock().expect("count")
    );
    out
}

async fn worker_panic(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let target = start(bin, dir.path(), &data, upstream, "", &[("TOKENTAP_TEST_WORKER_PANIC_PATH", PANIC_PATH)]);
    let admin = target.admin;
    let panic_tally = Arc::new(Tally::default());
    let events = plan.schedule.events;
    let addr = target.addr;
    let recovered: std::sync::Mutex<Option<Duration>> = std::sync::Mutex::new(None);
    let inject = {
        let panic_tally = panic_tally.clone();
        async move {
            let every = plan.during.div_f64(plan.panics.max(1) as f64);
            for _ in 0..plan.panics {
                let tally = panic_tally.clone();
                tokio::spawn(async move { tally.add(checked_stream(addr, PANIC_PATH, events).await) });
                tokio::time::sleep(every).await;
            }
        }
    };
    let tally = phases(&target, plan, async {}, async {
        // Recovery: after the last panic, the next record is written.
        let written_then = count(&health(admin).await, &["records", "written"]);
        let took = wait_health(admin, plan.after, |h| count(h, &["records", "written"]) > written_then).await;
        *recovered.lock().expect("recovery") = took;
    });
    // The panicking requests run during the load's fault window.
    let (tally, ()) = tokio::join!(tally, async {
        tokio::time::sleep(plan.before).await;
        inject.await;
    });
    settle(admin).await;
    let h = health(admin).await;
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let (panic_records, _) = journal_records(&data, PANIC_PATH);
    let panics = panic_tally.get();
    let mut out = row(Fault::WorkerPanic, &plan, tally);
    out.sent += panics.iter().sum::<u64>();
    out.failed += panics[2] + panics[3];
    out.altered += panics[1];
    out.expected = proxied(tally) + proxied(panics);
    out.lost = out.expected.saturating_sub(records + panic_records);
    out.counted = format!("worker_panics {}", count(&h, &["records", "worker_panics"]));
    out.recovery =
        format!("{} (last panic → next record written)", show(*recovered.lock().expect("recovery"), plan.after));
    out.note = format!(
        "lost = the panicking requests' records ({} on disk of {}); every other record on disk: {records} of {}; unreadable lines: {unreadable}",
        panic_records,
        proxied(panics),
        proxied(tally)
    );
    out
}

async fn sigterm(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut target = start(bin, dir.path(), &data, upstream, "", &[]);
    // One stream per client, all started together (spread over one gap); the signal comes when
    // they are half-way.
    let tally = Arc::new(Tally::default());
    let addr = target.addr;
    let tasks: Vec<_> = (0..plan.streams)
        .map(|k| {
            let tally = tally.clone();
            let (events, offset) = (plan.schedule.events, plan.schedule.gap.mul_f64(k as f64 / plan.streams as f64));
            tokio::spawn(async move {
                tokio::time::sleep(offset).await;
                tally.add(checked_stream(addr, LOAD_PATH, events).await);
            })
        })
        .collect();
    let stream_time = plan.schedule.gap * plan.schedule.events as u32;
    tokio::time::sleep(stream_time / 2).await;
    let signalled = Instant::now();
    let _ = Command::new("kill").arg("-TERM").arg(target.proc.pid().to_string()).status();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused_new = TcpStream::connect(target.addr).await.is_err();
    for task in tasks {
        let _ = task.await;
    }
    let mut exited = None;
    while signalled.elapsed() < Duration::from_secs(150) {
        if target.proc.try_wait().is_some() {
            exited = Some(signalled.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let tally = tally.get();
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let mut out = row(Fault::Sigterm, &plan, tally);
    out.expected = proxied(tally);
    out.lost = out.expected.saturating_sub(records);
    out.counted = "–".into();
    out.recovery = format!("{} (signal → exit, all recorded)", show(exited, Duration::from_secs(150)));
    out.note = format!(
        "a new connection 100 ms after the signal: {}; unreadable lines: {unreadable}",
        if refused_new { "refused" } else { "accepted" }
    );
    out
}

/// Slow-header connections of the keep-alive fault.
const ATTACKERS: usize = 1000;
/// `keepalive_idle_s` and `head_timeout_s` of the keep-alive fault.
const SLOWLORIS_TIMEOUT_S: u64 = 2;
const ATTACK_PATH: &str = "/v1/attack/chat/completions";

/// One slow client: a non-streaming request on a kept-alive connection, its whole answer read,
/// then silence (`trickle` false) or the next head a byte a second. Returns how long after its
/// answer tokentap closed the connection (`None`: still open after `limit`).
async fn slow_client(addr: SocketAddr, trickle: bool, limit: Duration) -> Option<Duration> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let body = r#"{"model":"bench-model","stream":false,"messages":[]}"#;
    let request = format!(
        "POST {ATTACK_PATH} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    // The answer has a content-length: read the head, then that many bytes.
    let mut raw = Vec::new();
    let mut tmp = vec![0u8; 16384];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length: usize =
                head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok())?;
            if raw.len() >= end + 4 + length {
                break;
            }
        }
        match tokio::time::timeout(Duration::from_secs(30), stream.read(&mut tmp)).await {
            Ok(Ok(n)) if n > 0 => raw.extend_from_slice(&tmp[..n]),
            _ => return None,
        }
    }
    let answered = Instant::now();
    let next = b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n";
    let mut sent = 0;
    while answered.elapsed() < limit {
        let wait = if trickle && sent < next.len() { Duration::from_secs(1) } else { limit };
        match tokio::time::timeout(wait, stream.read(&mut tmp)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(answered.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => {
                if trickle && sent < next.len() {
                    if stream.write_all(&next[sent..sent + 1]).await.is_err() {
                        return Some(answered.elapsed());
                    }
                    sent += 1;
                }
            }
        }
    }
    None
}

/// A slow client's task: whether it trickled, and when it was closed.
type SlowClient = tokio::task::JoinHandle<(bool, Option<Duration>)>;

async fn keepalive_slowloris(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let extra =
        format!("[connections]\nkeepalive_idle_s = {SLOWLORIS_TIMEOUT_S}\nhead_timeout_s = {SLOWLORIS_TIMEOUT_S}\n");
    let target = start(bin, dir.path(), &data, upstream, &extra, &[]);
    let addr = target.addr;
    let limit = plan.during + plan.after;
    let attackers: std::sync::Mutex<Vec<SlowClient>> = Default::default();
    let tally = phases(
        &target,
        plan,
        async {
            let mut handles = attackers.lock().expect("attackers");
            for k in 0..ATTACKERS {
                let trickle = k % 2 == 1;
                handles.push(tokio::spawn(async move { (trickle, slow_client(addr, trickle, limit).await) }));
            }
        },
        async {},
    )
    .await;
    let handles = std::mem::take(&mut *attackers.lock().expect("attackers"));
    let (mut idle_max, mut trickle_max, mut open, mut failed) = (Duration::ZERO, Duration::ZERO, 0, 0);
    for handle in handles {
        match handle.await {
            Ok((trickle, Some(took))) => {
                let max = if trickle { &mut trickle_max } else { &mut idle_max };
                *max = (*max).max(took);
            }
            Ok((_, None)) => open += 1,
            Err(_) => failed += 1,
        }
    }
    let h = health(target.admin).await;
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let mut out = row(Fault::KeepaliveSlowloris, &plan, tally);
    out.expected = proxied(tally);
    out.lost = out.expected.saturating_sub(records);
    out.counted = format!(
        "idle_closed {}, head_timeouts {}",
        count(&h, &["connections", "idle_closed"]),
        count(&h, &["connections", "head_timeouts"])
    );
    out.recovery = format!(
        "silent ones closed ≤ {:.2} s after their answer, trickling ones ≤ {:.2} s",
        idle_max.as_secs_f64(),
        trickle_max.as_secs_f64()
    );
    out.note = format!(
        "slow connections still open after {} s: {open} (not served: {failed}); connections open at the end: {}; unreadable lines: {unreadable}",
        limit.as_secs(),
        count(&h, &["connections", "open"])
    );
    out
}

async fn journal_replaced(bin: &Path, upstream: SocketAddr, fault: Fault, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let outside = dir.path().join("outside.jsonl");
    std::fs::write(&outside, b"").expect("outside file");
    let target = start(bin, dir.path(), &data, upstream, "", &[]);
    let admin = target.admin;
    let journal = data.join("records.jsonl");
    let degraded: std::sync::Mutex<(Option<Duration>, String)> = Default::default();
    let recovered: std::sync::Mutex<Option<Duration>> = Default::default();
    let tally = phases(
        &target,
        plan,
        async {
            let _ = std::fs::remove_file(&journal);
            if fault == Fault::JournalSymlink {
                std::os::unix::fs::symlink(&outside, &journal).expect("symlink");
            } else {
                let made = Command::new("mkfifo").arg(&journal).status();
                assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
            }
            let took = wait_health(admin, plan.during, |h| h["status"] == "degraded").await;
            let problem = health(admin).await["problem"].as_str().unwrap_or("").to_string();
            *degraded.lock().expect("degraded") = (took, problem);
        },
        async {
            let written_then = count(&health(admin).await, &["records", "written"]);
            let _ = std::fs::remove_file(&journal);
            let took = wait_health(admin, plan.after, |h| {
                count(h, &["records", "written"]) > written_then && h["status"] == "ok"
            })
            .await;
            *recovered.lock().expect("recovery") = took;
        },
    )
    .await;
    let h = health(admin).await;
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let mut out = row(fault, &plan, tally);
    out.expected = proxied(tally);
    out.lost = out.expected.saturating_sub(records);
    out.counted = format!(
        "store_errors {}, journal_gap {}",
        count(&h, &["records", "store_errors"]),
        count(&h, &["records", "journal_gap"])
    );
    out.recovery = format!(
        "{} (path freed → next record on disk, health `ok`)",
        show(*recovered.lock().expect("recovery"), plan.after)
    );
    let (took, problem) = degraded.lock().expect("degraded").clone();
    out.note = format!(
        "health `degraded` {} after the swap (\"{problem}\"); bytes written outside the data dir: {}; unreadable lines: {unreadable}",
        show(took, plan.during),
        std::fs::metadata(&outside).map_or(0, |m| m.len())
    );
    out
}

async fn journal_torn_line(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let target = start(bin, dir.path(), &data, upstream, "", &[]);
    let journal = data.join("records.jsonl");
    let tally = phases(
        &target,
        plan,
        async {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new().append(true).open(&journal).expect("journal");
            let _ = file.write_all(b"{\"record_version\":1,\"request_id\":\"torn-\xff\xfe\",\"path\":\"/v1/chat\n");
        },
        async {},
    )
    .await;
    drop(target);
    let report =
        Command::new(bin).args(["report", "--json", "--data-dir"]).arg(&data).output().expect("run tokentap report");
    let json: Value = serde_json::from_slice(&report.stdout).unwrap_or(Value::Null);
    let stderr = String::from_utf8_lossy(&report.stderr).trim().to_string();
    let reported = count(&json, &["records_total"]);
    let restarted = start(bin, dir.path(), &data, upstream, "", &[]);
    let h = health(restarted.admin).await;
    let listed = tokio::task::spawn_blocking({
        let admin = restarted.admin;
        move || {
            let response = http1::get(admin, "/_tokentap/api/requests?limit=10000", &[]);
            let v: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
            v["records"].as_array().map_or(0, |a| a.len() as u64)
        }
    })
    .await
    .unwrap_or(0);
    let mut out = row(Fault::JournalTornLine, &plan, tally);
    out.expected = proxied(tally);
    out.lost = out.expected.saturating_sub(reported);
    out.counted = format!(
        "report: \"{stderr}\" (exit {}); restart: restore_skipped_lines {}",
        report.status.code().unwrap_or(-1),
        count(&h, &["records", "restore_skipped_lines"])
    );
    out.recovery = "n/a (read-back)".into();
    out.note = format!("records in the report: {reported}; restored at restart: {listed}; lost = expected − reported");
    out
}

/// WebSocket sessions of the subprotocol fault, and the key they carry.
const WS_SESSIONS: usize = 100;
const SUBPROTOCOL_SECRET: &str = "sk-proj-BENCH-SUBPROTOCOL-SECRET-5f1e";

/// One browser-style WebSocket session through tokentap, the key among its subprotocols, read
/// until the upstream's end closes it. True when it was switched (a 101).
async fn keyed_websocket(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr).await else { return false };
    let request = format!(
        "GET /v1/realtime?model=gpt-realtime HTTP/1.1\r\nhost: bench\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\
sec-websocket-protocol: realtime, openai-insecure-api-key.{SUBPROTOCOL_SECRET}, openai-beta.realtime-v1\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut raw = Vec::new();
    let mut tmp = vec![0u8; 16384];
    let _ = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match stream.read(&mut tmp).await {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&tmp[..n]),
            }
        }
    })
    .await;
    raw.starts_with(b"HTTP/1.1 101")
}

async fn subprotocol_key(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let target = start(bin, dir.path(), &data, upstream, "", &[("TOKENTAP_LOG", "trace")]);
    let addr = target.addr;
    let sessions: std::sync::Mutex<Vec<tokio::task::JoinHandle<bool>>> = Default::default();
    let tally = phases(
        &target,
        plan,
        async {
            let mut handles = sessions.lock().expect("sessions");
            for _ in 0..WS_SESSIONS {
                handles.push(tokio::spawn(keyed_websocket(addr)));
            }
        },
        async {},
    )
    .await;
    let mut switched = 0;
    let handles = std::mem::take(&mut *sessions.lock().expect("sessions"));
    for handle in handles {
        switched += u64::from(handle.await.unwrap_or(false));
    }
    settle(target.admin).await;
    let listing = tokio::task::spawn_blocking({
        let admin = target.admin;
        move || {
            String::from_utf8_lossy(&http1::get(admin, "/_tokentap/api/requests?limit=10000", &[]).body).into_owned()
        }
    })
    .await
    .unwrap_or_default();
    let mut on_disk = 0;
    for entry in std::fs::read_dir(&data).into_iter().flatten().flatten() {
        let text = std::fs::read(entry.path()).unwrap_or_default();
        on_disk += text.windows(SUBPROTOCOL_SECRET.len()).filter(|w| *w == SUBPROTOCOL_SECRET.as_bytes()).count();
    }
    let logs = format!("{}{}", target.proc.stdout(), target.proc.stderr());
    let (sessions_recorded, unreadable) = journal_records(&data, "/v1/realtime?model=gpt-realtime");
    let (records, _) = journal_records(&data, LOAD_PATH);
    let mut out = row(Fault::SubprotocolKey, &plan, tally);
    out.expected = proxied(tally) + switched;
    out.lost = out.expected.saturating_sub(records + sessions_recorded);
    out.counted = format!(
        "key found: data dir {on_disk}, admin API {} (of {} bytes), logs {} (of {} bytes at trace)",
        listing.matches(SUBPROTOCOL_SECRET).count(),
        listing.len(),
        logs.matches(SUBPROTOCOL_SECRET).count(),
        logs.len()
    );
    out.recovery = "n/a".into();
    out.note = format!(
        "sessions switched (101): {switched} of {WS_SESSIONS}, recorded: {sessions_recorded}; recorded as `openai-insecure-api-key.[redacted]`: {}; unreadable lines: {unreadable}",
        listing.contains("openai-insecure-api-key.[redacted]")
    );
    out
}

/// The fault table (markdown).
pub(crate) fn table(rows: &[FaultRow], plan: &Plan) -> String {
    let mut out = format!(
        "Faults: {} concurrent streams ({} events, {} ms apart, each replaced as it ends); {} s of load, the fault, {} s, removal, {} s.\n\
Every stream is checked byte for byte against what the upstream wrote. \"Lost\" = records not on disk (collector faults: \
requests whose trace never reached the collector); \"counted\" = what tokentap's own counters say about them.\n\n",
        plan.streams,
        plan.schedule.events,
        plan.schedule.gap.as_millis(),
        plan.before.as_secs(),
        plan.during.as_secs(),
        plan.after.as_secs()
    );
    out.push_str(
        "| fault | what | requests | failed | bytes altered | lost / expected | counted | recovery | note |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} / {} | {} | {} | {} |\n",
            r.fault.name(),
            r.description,
            r.sent,
            r.failed,
            r.altered,
            r.lost,
            r.expected,
            r.counted,
            r.recovery,
            r.note
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(stamps: &[u64]) -> Vec<u8> {
        let body = expected_body(stamps);
        let mut raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for piece in body.chunks(37) {
            raw.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            raw.extend_from_slice(piece);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\n");
        raw
    }

    #[test]
    fn judges_exact_altered_cut_and_refused() {
        let stamps = [11_111, 22_222, 33_333];
        let raw = wire(&stamps);
        assert_eq!(judge(&raw, 3), Outcome::Exact);
        let mut changed = raw.clone();
        let at = changed.windows(4).position(|w| w == b" tok").expect("content");
        changed[at + 1] = b'T';
        assert_eq!(judge(&changed, 3), Outcome::Altered);
        assert_eq!(judge(&raw, 4), Outcome::Altered, "an event missing");
        assert_eq!(judge(&raw[..raw.len() - 5], 3), Outcome::Cut);
        assert_eq!(judge(b"", 3), Outcome::Refused);
        assert_eq!(judge(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n", 3), Outcome::Cut);
    }

    #[test]
    fn fault_names_parse() {
        assert_eq!(Fault::parse_list("all").unwrap().len(), 11);
        assert_eq!(Fault::parse_list("journal-fifo").unwrap(), vec![Fault::JournalFifo]);
        assert_eq!(Fault::parse_list("disk-full,sigterm").unwrap(), vec![Fault::DiskFull, Fault::Sigterm]);
        assert!(Fault::parse_list("meteor").is_err());
    }
}
