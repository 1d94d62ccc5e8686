//! The steady streaming load of every fault and its check: each client rebuilds the exact body
//! the upstream wrote from the stamps it read and compares it byte for byte.

use super::*;

pub(super) const LOAD_PATH: &str = "/v1/chat/completions";
pub(super) const PANIC_PATH: &str = "/v1/fault/chat/completions";
pub(super) const BODY: &str =
    r#"{"model":"bench-model","stream":true,"messages":[{"role":"user","content":"Say twenty words."}]}"#;

/// How one stream ended for its client.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Outcome {
    Exact,
    Altered,
    /// A response head arrived, the body did not complete.
    Cut,
    /// No response head (connection refused or closed first).
    Refused,
}

#[derive(Default)]
pub(super) struct Tally {
    pub(super) exact: AtomicU64,
    pub(super) altered: AtomicU64,
    pub(super) cut: AtomicU64,
    pub(super) refused: AtomicU64,
}

impl Tally {
    pub(super) fn add(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Exact => &self.exact,
            Outcome::Altered => &self.altered,
            Outcome::Cut => &self.cut,
            Outcome::Refused => &self.refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn get(&self) -> [u64; 4] {
        [&self.exact, &self.altered, &self.cut, &self.refused].map(|c| c.load(Ordering::Relaxed))
    }
}

pub(super) fn request(path: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\nauthorization: Bearer sk-bench\r\n\
content-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    )
}

/// Undoes chunked framing; `None` unless the terminal chunk arrived.
pub(super) fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
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
pub(super) fn expected_body(stamps: &[u64]) -> Vec<u8> {
    let mut out = String::new();
    for &stamp in stamps {
        out.push_str(&chunk_event(stamp, " tok", "null"));
    }
    out.push_str(&chunk_event(0, "", "\"stop\""));
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// Judges one response read to its end.
pub(super) fn judge(raw: &[u8], events: usize) -> Outcome {
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
pub(super) async fn checked_stream(addr: SocketAddr, path: &str, events: usize) -> Outcome {
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
pub(super) fn spawn_load(
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
