//! Floods of one-byte chunks: one request whose body, or one response whose body, is millions of
//! one-byte chunks of a chunked body (`1\r\nx\r\n`), sent while the load runs. What it costs
//! tokentap in memory (peak resident growth from the flood's start, against the kept-bytes budget
//! that should bound it), and whether the flood itself was forwarded byte for byte.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// One-byte chunks in a flood (12 MB on the wire).
pub(super) const FLOOD_CHUNKS: usize = 2_000_000;
/// `[timeline] max_kept_bytes` of the flood runs.
pub(super) const FLOOD_BUDGET: u64 = 16 << 20;
/// The route prefix that leads to the flood's own upstream.
const FLOOD_PREFIX: &str = "/flood";
const CHUNK: &[u8] = b"1\r\nx\r\n";
const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Which way the chunks go.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    Request,
    Response,
}

/// The flood's upstream: reads a request (a chunked body to its last chunk), then answers with
/// a short JSON body, or with [`FLOOD_CHUNKS`] one-byte chunks.
async fn flood_upstream(listener: TcpListener, direction: Direction) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        tokio::spawn(async move {
            if read_request(&mut stream).await.is_none() {
                return;
            }
            let _ = match direction {
                Direction::Request => {
                    let body = br#"{"ok":true}"#;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    stream.write_all(body).await
                }
                Direction::Response => {
                    let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
                    let _ = stream.write_all(head).await;
                    write_chunks(&mut stream).await
                }
            };
            let _ = stream.shutdown().await;
        });
    }
}

/// Writes [`FLOOD_CHUNKS`] one-byte chunks and the last chunk, in 60 KiB writes.
async fn write_chunks(stream: &mut TcpStream) -> std::io::Result<()> {
    let per_write = 10_240;
    let block = CHUNK.repeat(per_write);
    let mut left = FLOOD_CHUNKS;
    while left > 0 {
        let n = left.min(per_write);
        stream.write_all(&block[..n * CHUNK.len()]).await?;
        left -= n;
    }
    stream.write_all(LAST_CHUNK).await
}

/// Reads one request: its head and, when chunked, its body to the last chunk. The body bytes
/// received (decoded), or `None` when the peer went away first.
async fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut tmp = vec![0u8; 65536];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut tmp).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    };
    let chunked = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase().contains("transfer-encoding: chunked");
    if !chunked {
        return Some(Vec::new());
    }
    loop {
        // The flood's payload is all `x`: the last chunk can only be at the end.
        if buf.len() >= head_end + LAST_CHUNK.len() && buf.ends_with(LAST_CHUNK) {
            if let Some(body) = dechunk(&buf[head_end..]) {
                return Some(body);
            }
        }
        match stream.read(&mut tmp).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
}

/// A complete chunked body decoded (no trailers), or `None` while it is not complete.
fn dechunk(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let line_end = at + raw.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&raw[at..line_end]).ok()?.split(';').next()?.trim();
        let size = usize::from_str_radix(size, 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            return (raw.len() >= at + 2 && &raw[at..at + 2] == b"\r\n").then_some(out);
        }
        out.extend_from_slice(raw.get(at..at + size)?);
        at += size + 2;
        if raw.len() < at {
            return None;
        }
    }
}

/// The client of a flood: sends the request (with a one-byte-chunk body for a request flood)
/// and reads the whole response. Returns the body bytes received and whether they are exact.
async fn flood_client(addr: SocketAddr, direction: Direction) -> Option<bool> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let head = format!(
        "POST {FLOOD_PREFIX}/v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n\
transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    match direction {
        Direction::Request => write_chunks(&mut stream).await.ok()?,
        Direction::Response => stream.write_all(b"2\r\n{}\r\n0\r\n\r\n").await.ok()?,
    }
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.ok()?;
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        return Some(false);
    }
    Some(match direction {
        Direction::Request => raw[head_end..].ends_with(br#"{"ok":true}"#),
        Direction::Response => {
            dechunk(&raw[head_end..]).is_some_and(|body| body.len() == FLOOD_CHUNKS && body.iter().all(|&b| b == b'x'))
        }
    })
}

/// What the flood's client saw: exact or not (`None`: not completed), how long it took, and the
/// resident size at its start and the peak at its end (KiB).
struct FloodResult {
    exact: Option<bool>,
    took: Duration,
    base_kib: u64,
    peak_kib: u64,
}

/// Peak and current resident memory of `pid` in KiB (`VmHWM`, `VmRSS`).
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

pub(super) async fn one_byte_flood(bin: &Path, upstream: SocketAddr, direction: Direction, plan: Plan) -> FaultRow {
    let fault = match direction {
        Direction::Request => Fault::OneByteRequest,
        Direction::Response => Fault::OneByteResponse,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the flood upstream");
    let flood_addr = listener.local_addr().expect("flood upstream address");
    let server = tokio::spawn(flood_upstream(listener, direction));
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let extra = format!(
        "[[route]]\nprefix = \"{FLOOD_PREFIX}\"\nupstream = \"http://{flood_addr}\"\n\n[timeline]\nmax_kept_bytes = {FLOOD_BUDGET}\n"
    );
    let target = start(bin, dir.path(), &data, upstream, &extra, &[]);
    let pid = target.proc.pid();
    let addr = target.addr;
    let flood: std::sync::Mutex<Option<FloodResult>> = Default::default();
    let tally = phases(
        &target,
        plan,
        async {
            // The peak is measured from here: reset it to the current resident size.
            let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
            let (_, base) = memory_kib(pid);
            let began = Instant::now();
            let exact = flood_client(addr, direction).await;
            let (peak, _) = memory_kib(pid);
            *flood.lock().expect("flood") =
                Some(FloodResult { exact, took: began.elapsed(), base_kib: base, peak_kib: peak });
        },
        async {},
    )
    .await;
    server.abort();
    let h = health(target.admin).await;
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let mut out = row(fault, &plan, tally);
    out.expected = proxied(tally);
    out.lost = out.expected.saturating_sub(records);
    let FloodResult { exact, took, base_kib, peak_kib } = flood.lock().expect("flood").take().unwrap_or(FloodResult {
        exact: None,
        took: Duration::ZERO,
        base_kib: 0,
        peak_kib: 0,
    });
    let growth = peak_kib.saturating_sub(base_kib);
    out.counted = format!(
        "kept_budget_hits {}, kept_bytes at the end {}",
        count(&h, &["records", "kept_budget_hits"]),
        count(&h, &["records", "kept_bytes"])
    );
    out.recovery = format!("the flood took {:.2} s", took.as_secs_f64());
    out.note = format!(
        "flood forwarded exactly: {}; peak resident growth from the flood's start {} KiB (budget {} KiB); unreadable lines: {unreadable}",
        match exact {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "not completed",
        },
        growth,
        FLOOD_BUDGET / 1024
    );
    out
}

#[cfg(test)]
mod tests {
    use super::dechunk;

    #[test]
    fn dechunks_complete_bodies_only() {
        assert_eq!(dechunk(b"1\r\nx\r\n2\r\nyz\r\n0\r\n\r\n").as_deref(), Some(&b"xyz"[..]));
        assert_eq!(dechunk(b"1\r\nx\r\n0\r\n"), None);
        assert_eq!(dechunk(b"1\r\nx"), None);
        assert_eq!(dechunk(b""), None);
    }
}
