//! Per-chunk latency that tokentap adds, measured against the same schedule sent directly.
//!
//! An in-process upstream streams `--events` SSE events `--gap-ms` apart to each of N concurrent
//! clients; every event carries its send time. Clients read either directly from the upstream or
//! through a tokentap started by this program; per event, latency = client arrival − upstream send
//! (one process, one monotonic clock). Direct and proxied rounds are interleaved.
//!
//! With `--keepalive N`, it also sends N non-streaming requests one after another on one
//! keep-alive connection (direct, then through tokentap) and reports the time from writing each
//! request to reading its whole response: what a keep-alive client pays per request.
//!
//!   cargo build --release -p tokentap -p tokentap-e2e
//!   target/release/latency-bench --streams 1,100,1000 --events 50 --gap-ms 20 --rounds 2 --keepalive 2000

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

static EPOCH: OnceLock<Instant> = OnceLock::new();

fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

struct Args {
    streams: Vec<usize>,
    events: usize,
    gap: Duration,
    rounds: usize,
    keepalive: usize,
}

fn parse_args() -> Args {
    let mut args =
        Args { streams: vec![1, 100, 1000], events: 50, gap: Duration::from_millis(20), rounds: 2, keepalive: 0 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--streams" => args.streams = value.split(',').map(|s| s.parse().expect("--streams")).collect(),
            "--events" => args.events = value.parse().expect("--events"),
            "--gap-ms" => args.gap = Duration::from_millis(value.parse().expect("--gap-ms")),
            "--rounds" => args.rounds = value.parse().expect("--rounds"),
            "--keepalive" => args.keepalive = value.parse().expect("--keepalive"),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// Upstream: for each request, `events` chunked events on an absolute schedule.
async fn upstream(listener: TcpListener, events: usize, gap: Duration) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let mut buf = Vec::new();
            loop {
                // Read one request (head + content-length body).
                let head_end = loop {
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i;
                    }
                    let mut tmp = [0u8; 4096];
                    match stream.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
                    .unwrap_or(0);
                while buf.len() < head_end + 4 + len {
                    let mut tmp = [0u8; 4096];
                    match stream.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                }
                let marker: &[u8] = b"\"stream\":false";
                let non_streaming = buf[head_end + 4..head_end + 4 + len].windows(marker.len()).any(|w| w == marker);
                buf.drain(..head_end + 4 + len);
                if non_streaming {
                    let body = format!(
                        "{{\"id\":\"x\",\"choices\":[{{\"message\":{{\"content\":\"{}\"}}}}]}}",
                        "y".repeat(200)
                    );
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                    continue;
                }
                let start = tokio::time::Instant::now();
                if stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
                    )
                    .await
                    .is_err()
                {
                    return;
                }
                for i in 0..events {
                    tokio::time::sleep_until(start + Duration::from_millis(5) + gap * i as u32).await;
                    let event = format!("data: {{\"t\":{:020},\"pad\":\"{}\"}}\n\n", now_ns(), "x".repeat(60));
                    let chunk = format!("{:x}\r\n{event}\r\n", event.len());
                    if stream.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                }
                if stream.write_all(b"0\r\n\r\n").await.is_err() {
                    return;
                }
            }
        });
    }
}

/// One client stream: returns per-event latencies in µs.
async fn client(addr: std::net::SocketAddr, events: usize) -> Vec<f64> {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).unwrap();
    let body = b"{\"stream\":true}";
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut buf = Vec::new();
    let mut scanned = 0;
    let mut out = Vec::with_capacity(events);
    let marker = b"{\"t\":";
    loop {
        let mut tmp = [0u8; 16384];
        let n = match stream.read(&mut tmp).await {
            Ok(0) => {
                if std::env::var_os("BENCH_DEBUG").is_some() {
                    eprintln!(
                        "eof after {} events: {:?}",
                        out.len(),
                        String::from_utf8_lossy(&buf[..buf.len().min(200)])
                    );
                }
                break;
            }
            Err(e) => {
                if std::env::var_os("BENCH_DEBUG").is_some() {
                    eprintln!("read error after {} events: {e}", out.len());
                }
                break;
            }
            Ok(n) => n,
        };
        let arrival = now_ns();
        buf.extend_from_slice(&tmp[..n]);
        while let Some(i) = buf[scanned..].windows(marker.len()).position(|w| w == marker) {
            let start = scanned + i + marker.len();
            if buf.len() < start + 20 {
                break;
            }
            let sent: u64 = std::str::from_utf8(&buf[start..start + 20]).unwrap().parse().unwrap();
            out.push(arrival.saturating_sub(sent) as f64 / 1e3);
            scanned = start + 20;
        }
        if out.len() == events {
            break;
        }
    }
    out
}

/// `n` non-streaming requests one after another on one keep-alive connection: µs per request.
async fn keepalive_client(addr: std::net::SocketAddr, n: usize) -> Vec<f64> {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).unwrap();
    let body = b"{\"stream\":false}";
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
        body.len(),
        String::from_utf8_lossy(body)
    );
    let mut out = Vec::with_capacity(n);
    let mut buf = Vec::new();
    for _ in 0..n {
        let sent = now_ns();
        stream.write_all(req.as_bytes()).await.unwrap();
        let (head_end, len) = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
                    .unwrap_or(0);
                if buf.len() >= i + 4 + len {
                    break (i, len);
                }
            }
            let mut tmp = [0u8; 16384];
            match stream.read(&mut tmp).await {
                Ok(0) | Err(_) => return out,
                Ok(k) => buf.extend_from_slice(&tmp[..k]),
            }
        };
        out.push(now_ns().saturating_sub(sent) as f64 / 1e3);
        buf.drain(..head_end + 4 + len);
    }
    out
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = q / 100.0 * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

async fn run_round(addr: std::net::SocketAddr, streams: usize, events: usize) -> (Vec<f64>, usize) {
    let mut tasks = Vec::with_capacity(streams);
    for _ in 0..streams {
        tasks.push(tokio::spawn(client(addr, events)));
    }
    let mut all = Vec::new();
    let mut incomplete = 0;
    for t in tasks {
        let v = t.await.unwrap();
        if v.len() < events {
            incomplete += 1;
        }
        all.extend(v);
    }
    (all, incomplete)
}

fn main() {
    let args = parse_args();
    EPOCH.get_or_init(Instant::now);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let upstream_addr = rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(upstream(listener, args.events, args.gap));
        addr
    });
    let tokentap = tokentap_e2e::Tokentap::start(&format!("http://{upstream_addr}"), &[]);
    let pid = tokentap.proc.pid();
    println!("| concurrent streams | direct p50 (µs) | via tokentap p50 (µs) | added p50 (µs) | direct p99 (µs) | via tokentap p99 (µs) | added p99 (µs) | tokentap RSS after (MiB) | samples |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for &streams in &args.streams {
        let mut direct = Vec::new();
        let mut proxied = Vec::new();
        let mut incomplete = 0;
        for _ in 0..args.rounds {
            let (d, i1) = rt.block_on(run_round(upstream_addr, streams, args.events));
            let (p, i2) = rt.block_on(run_round(tokentap.addr, streams, args.events));
            direct.extend(d);
            proxied.extend(p);
            incomplete += i1 + i2;
        }
        direct.sort_by(f64::total_cmp);
        proxied.sort_by(f64::total_cmp);
        let (d50, p50) = (percentile(&direct, 50.0), percentile(&proxied, 50.0));
        let (d99, p99) = (percentile(&direct, 99.0), percentile(&proxied, 99.0));
        println!(
            "| {streams} | {d50:.0} | {p50:.0} | {:.0} | {d99:.0} | {p99:.0} | {:.0} | {:.1} | {} direct / {} proxied{} |",
            p50 - d50,
            p99 - d99,
            rss_kib(pid, "VmRSS:") as f64 / 1024.0,
            direct.len(),
            proxied.len(),
            if incomplete > 0 { format!(", {incomplete} incomplete streams") } else { String::new() }
        );
    }
    println!("tokentap peak RSS (VmHWM): {:.1} MiB", rss_kib(pid, "VmHWM:") as f64 / 1024.0);
    if args.keepalive > 0 {
        let mut direct = rt.block_on(keepalive_client(upstream_addr, args.keepalive));
        let mut proxied = rt.block_on(keepalive_client(tokentap.addr, args.keepalive));
        direct.sort_by(f64::total_cmp);
        proxied.sort_by(f64::total_cmp);
        println!();
        println!("| keep-alive, sequential non-streaming | direct p50 / p99 (µs) | via tokentap p50 / p99 (µs) | added p50 / p99 (µs) | requests |");
        println!("|---|---|---|---|---|");
        let (d50, d99, p50, p99) = (
            percentile(&direct, 50.0),
            percentile(&direct, 99.0),
            percentile(&proxied, 50.0),
            percentile(&proxied, 99.0),
        );
        println!(
            "| one connection | {d50:.0} / {d99:.0} | {p50:.0} / {p99:.0} | {:.0} / {:.0} | {} direct / {} proxied |",
            p50 - d50,
            p99 - d99,
            direct.len(),
            proxied.len()
        );
    }
}
