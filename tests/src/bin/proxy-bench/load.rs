//! The load: an upstream that streams OpenAI-style chat chunks on an absolute schedule, streaming
//! clients that note when each chunk arrives, and an open-loop non-streaming client. Everything
//! runs in this process on one clock, so latency = client arrival − upstream send, exactly.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

static EPOCH: OnceLock<Instant> = OnceLock::new();

pub(crate) fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Where the send time sits in every timed event: `"obfuscation":"<20 digits>"`, the last member,
/// where OpenAI puts its per-chunk padding of random length. The rest of a stream's chunks repeat
/// up to their text (one `id`, as a real stream has), as a proxy parsing the stream meets them.
pub(crate) const STAMP_MARKER: &[u8] = b"\"obfuscation\":\"";
pub(crate) const STAMP_DIGITS: usize = 20;

#[derive(Clone, Copy)]
pub(crate) struct Schedule {
    pub(crate) events: usize,
    pub(crate) gap: Duration,
    pub(crate) transport: Transport,
}

/// How a stream travels: an HTTP response body of server-sent events, or server frames of a
/// WebSocket session (a realtime API), each carrying the same timed event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    Sse,
    WebSocket,
}

impl Transport {
    pub(crate) fn parse(value: &str) -> Option<Transport> {
        match value {
            "sse" => Some(Transport::Sse),
            "websocket" => Some(Transport::WebSocket),
            _ => None,
        }
    }
}

/// What a request asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ask {
    Stream,
    Json,
    WebSocket,
}

pub(crate) fn chunk_event(stamp: u64, content: &str, finish: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1764590400,\
\"model\":\"bench-model\",\"system_fingerprint\":\"fp_bench\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}},\
\"logprobs\":null,\"finish_reason\":{finish}}}],\"obfuscation\":\"{stamp:020}\"}}\n\n"
    )
}

fn chunked(payload: &str) -> String {
    format!("{:x}\r\n{payload}\r\n", payload.len())
}

/// Reads one request (head and Content-Length body) from `buf`/`stream`; `None` at end of stream.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Ask> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let mut tmp = [0u8; 8192];
        match stream.read(&mut tmp).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    };
    let len = content_length(&buf[..head_end]);
    while buf.len() < head_end + 4 + len {
        let mut tmp = [0u8; 8192];
        match stream.read(&mut tmp).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let body = &buf[head_end + 4..head_end + 4 + len];
    let marker: &[u8] = b"\"stream\":true";
    let ask = if head.contains("\r\nupgrade: websocket") {
        Ask::WebSocket
    } else if body.windows(marker.len()).any(|w| w == marker) {
        Ask::Stream
    } else {
        Ask::Json
    };
    buf.drain(..head_end + 4 + len);
    Some(ask)
}

fn content_length(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length").then(|| value.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0)
}

/// Serves every connection: streamed requests get `schedule.events` timed chunks, each written
/// at `arrival + 5 ms + i × gap`; a WebSocket handshake gets a `101` and the same events as
/// server frames, then a close frame; non-streaming requests get one chat completion at once.
pub(crate) async fn upstream(listener: TcpListener, schedule: Schedule) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let mut buf = Vec::new();
            while let Some(ask) = read_request(&mut stream, &mut buf).await {
                let ok = match ask {
                    Ask::Stream => stream_answer(&mut stream, schedule).await,
                    Ask::Json => json_answer(&mut stream).await,
                    Ask::WebSocket => {
                        let _ = websocket_answer(&mut stream, schedule).await;
                        // The session is over: the connection carries nothing else.
                        let _ = stream.shutdown().await;
                        false
                    }
                };
                if !ok {
                    return;
                }
            }
        });
    }
}

async fn json_answer(stream: &mut TcpStream) -> bool {
    let body = format!(
        "{{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":1764590400,\"model\":\"bench-model\",\
\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"{}\"}},\"finish_reason\":\"stop\"}}],\
\"usage\":{{\"prompt_tokens\":12,\"completion_tokens\":40,\"total_tokens\":52}}}}",
        "word ".repeat(40).trim_end()
    );
    let response =
        format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len());
    stream.write_all(response.as_bytes()).await.is_ok()
}

async fn stream_answer(stream: &mut TcpStream, schedule: Schedule) -> bool {
    let start = tokio::time::Instant::now();
    let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    if stream.write_all(head).await.is_err() {
        return false;
    }
    for i in 0..schedule.events {
        tokio::time::sleep_until(start + Duration::from_millis(5) + schedule.gap * i as u32).await;
        let event = chunked(&chunk_event(now_ns(), " tok", "null"));
        if stream.write_all(event.as_bytes()).await.is_err() {
            return false;
        }
    }
    let tail = format!("{}{}0\r\n\r\n", chunked(&chunk_event(0, "", "\"stop\"")), chunked("data: [DONE]\n\n"));
    stream.write_all(tail.as_bytes()).await.is_ok()
}

/// A WebSocket server frame (unmasked, final, text) around `payload`.
fn server_frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 4);
    out.push(0x81);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out
}

/// The close frame that ends each session (status 1000), by which the client knows it is over.
const CLOSE_FRAME: &[u8] = &[0x88, 0x02, 0x03, 0xE8];

async fn websocket_answer(stream: &mut TcpStream, schedule: Schedule) -> bool {
    let start = tokio::time::Instant::now();
    let head = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
    if stream.write_all(head).await.is_err() {
        return false;
    }
    for i in 0..schedule.events {
        tokio::time::sleep_until(start + Duration::from_millis(5) + schedule.gap * i as u32).await;
        let event = server_frame(chunk_event(now_ns(), " tok", "null").as_bytes());
        if stream.write_all(&event).await.is_err() {
            return false;
        }
    }
    stream.write_all(CLOSE_FRAME).await.is_ok()
}

const CHAT_STREAM_BODY: &str =
    r#"{"model":"bench-model","stream":true,"messages":[{"role":"user","content":"Say forty words."}]}"#;
const CHAT_BODY: &str =
    r#"{"model":"bench-model","stream":false,"messages":[{"role":"user","content":"Say forty words."}]}"#;

fn request(body: &str, close: bool) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n\
authorization: Bearer sk-bench\r\ncontent-length: {}\r\n{}\r\n{body}",
        body.len(),
        if close { "connection: close\r\n" } else { "" }
    )
}

/// What one streaming client saw.
#[derive(Default)]
pub(crate) struct StreamResult {
    /// Per timed event: arrival − send, µs.
    pub(crate) latencies_us: Vec<f64>,
    pub(crate) failed: bool,
}

/// A realtime session's handshake.
const WEBSOCKET_REQUEST: &str = "GET /v1/realtime?model=bench-model HTTP/1.1\r\nhost: bench\r\n\
authorization: Bearer sk-bench\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n";

/// One streamed request (or WebSocket session) on its own connection, started at `start`.
pub(crate) async fn stream_client(
    addr: SocketAddr,
    events: usize,
    transport: Transport,
    start: tokio::time::Instant,
) -> StreamResult {
    tokio::time::sleep_until(start).await;
    let mut result = StreamResult { latencies_us: Vec::with_capacity(events), failed: false };
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        result.failed = true;
        return result;
    };
    let _ = stream.set_nodelay(true);
    let ask = match transport {
        Transport::Sse => request(CHAT_STREAM_BODY, true),
        Transport::WebSocket => WEBSOCKET_REQUEST.to_string(),
    };
    if stream.write_all(ask.as_bytes()).await.is_err() {
        result.failed = true;
        return result;
    }
    // A chunked answer is read without its framing: a relay may cut the upstream's events into
    // chunks of its own (a read that ended mid-event), and a size line inside a stamp would hide it.
    let mut dechunk = (transport == Transport::Sse).then(Dechunk::default);
    let mut buf = Vec::with_capacity(16384);
    let mut scanned = 0;
    let mut tmp = vec![0u8; 16384];
    // Read to the end of the chunked body (its last chunk) or to the close frame, as a client that
    // consumes the whole response does, then close.
    loop {
        let n = match stream.read(&mut tmp).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let arrival = now_ns();
        let ended = match &mut dechunk {
            Some(dechunk) => dechunk.feed(&tmp[..n], &mut buf),
            None => {
                buf.extend_from_slice(&tmp[..n]);
                buf.ends_with(CLOSE_FRAME)
            }
        };
        while let Some(i) = buf[scanned..].windows(STAMP_MARKER.len()).position(|w| w == STAMP_MARKER) {
            let at = scanned + i + STAMP_MARKER.len();
            if buf.len() < at + STAMP_DIGITS {
                break;
            }
            let sent: u64 =
                std::str::from_utf8(&buf[at..at + STAMP_DIGITS]).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
            if sent > 0 {
                result.latencies_us.push(arrival.saturating_sub(sent) as f64 / 1e3);
            }
            scanned = at + STAMP_DIGITS;
        }
        if ended {
            break;
        }
        // Keep memory flat: drop what was scanned.
        if scanned > 8192 {
            buf.drain(..scanned);
            scanned = 0;
        }
    }
    result.failed = result.latencies_us.len() < events;
    result
}

/// A chunked answer's body from the bytes on the wire (the head skipped, then each chunk's size
/// line and its closing CRLF), and whether its last chunk came.
#[derive(Debug, Default)]
struct Dechunk {
    state: DechunkState,
    line: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum DechunkState {
    #[default]
    Head,
    SizeLine,
    /// This many bytes of the chunk's data still to come.
    Data(usize),
    /// This many bytes of the CRLF after a chunk's data still to skip.
    DataEnd(usize),
    /// After the last chunk: trailer lines until an empty one.
    Trailers,
    Done,
}

impl Dechunk {
    /// Appends the body bytes in `wire` to `out`; true once the last chunk has come.
    fn feed(&mut self, wire: &[u8], out: &mut Vec<u8>) -> bool {
        let mut rest = wire;
        while !rest.is_empty() {
            match self.state {
                DechunkState::Head | DechunkState::SizeLine | DechunkState::Trailers => {
                    self.line.push(rest[0]);
                    rest = &rest[1..];
                    if self.state == DechunkState::Trailers && self.line.ends_with(b"\n") {
                        let empty = self.line.len() <= 2;
                        self.line.clear();
                        if empty {
                            self.state = DechunkState::Done;
                        }
                    } else if self.state == DechunkState::Head && self.line.ends_with(b"\r\n\r\n") {
                        self.line.clear();
                        self.state = DechunkState::SizeLine;
                    } else if self.state == DechunkState::SizeLine && self.line.ends_with(b"\n") {
                        let digits: Vec<u8> = self.line.iter().copied().take_while(|b| b.is_ascii_hexdigit()).collect();
                        let size = usize::from_str_radix(std::str::from_utf8(&digits).unwrap_or("0"), 16).unwrap_or(0);
                        self.line.clear();
                        self.state = if size == 0 { DechunkState::Trailers } else { DechunkState::Data(size) };
                    }
                }
                DechunkState::Data(left) => {
                    let n = left.min(rest.len());
                    out.extend_from_slice(&rest[..n]);
                    rest = &rest[n..];
                    self.state = if n == left { DechunkState::DataEnd(2) } else { DechunkState::Data(left - n) };
                }
                DechunkState::DataEnd(left) => {
                    let n = left.min(rest.len());
                    rest = &rest[n..];
                    self.state = if n == left { DechunkState::SizeLine } else { DechunkState::DataEnd(left - n) };
                }
                DechunkState::Done => return true,
            }
        }
        self.state == DechunkState::Done
    }
}

/// `streams` concurrent streamed requests, their starts spread evenly over one gap so that the
/// events of all streams arrive spread in time (a steady load, not synchronized bursts).
pub(crate) async fn stream_round(addr: SocketAddr, streams: usize, schedule: Schedule) -> Vec<StreamResult> {
    let begin = tokio::time::Instant::now() + Duration::from_millis(20);
    let tasks: Vec<_> = (0..streams)
        .map(|k| {
            let start = begin + schedule.gap.mul_f64(k as f64 / streams as f64);
            tokio::spawn(stream_client(addr, schedule.events, schedule.transport, start))
        })
        .collect();
    let mut out = Vec::with_capacity(streams);
    for task in tasks {
        out.push(task.await.unwrap_or(StreamResult { latencies_us: Vec::new(), failed: true }));
    }
    out
}

/// What the open-loop arm saw: per request, completion − scheduled send, µs.
#[derive(Default)]
pub(crate) struct OpenLoopResult {
    pub(crate) latencies_us: Vec<f64>,
    pub(crate) failed: usize,
}

/// Non-streaming requests at `rate` per second for `duration`, on an absolute schedule spread
/// over `connections` kept-alive connections (request i on connection i mod connections).
/// Latency counts from the send, or from the scheduled send when the connection was still busy
/// then (no coordinated omission).
pub(crate) async fn open_loop(addr: SocketAddr, rate: f64, duration: Duration, connections: usize) -> OpenLoopResult {
    let total = (rate * duration.as_secs_f64()).round() as usize;
    let begin = tokio::time::Instant::now() + Duration::from_millis(50);
    let begin_ns = now_ns() + 50_000_000;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let tasks: Vec<_> = (0..connections.min(total.max(1)))
        .map(|c| {
            tokio::spawn(async move {
                let mut out = OpenLoopResult::default();
                let mut stream = match TcpStream::connect(addr).await {
                    Ok(s) => s,
                    Err(_) => {
                        out.failed = (c..total).step_by(connections).count();
                        return out;
                    }
                };
                let _ = stream.set_nodelay(true);
                let req = request(CHAT_BODY, false);
                let mut buf = Vec::new();
                let mut previous_done_ns = 0;
                for i in (c..total).step_by(connections) {
                    let due = begin + interval.mul_f64(i as f64);
                    tokio::time::sleep_until(due).await;
                    // The timer wakes up to a millisecond late: count from the real send, unless
                    // the connection was still busy at the due time (then the wait is latency).
                    let due_ns = begin_ns + interval.mul_f64(i as f64).as_nanos() as u64;
                    let from_ns = if previous_done_ns > due_ns { due_ns } else { now_ns() };
                    if stream.write_all(req.as_bytes()).await.is_err() || !read_response(&mut stream, &mut buf).await {
                        out.failed += (i..total).step_by(connections).count();
                        return out;
                    }
                    previous_done_ns = now_ns();
                    out.latencies_us.push(previous_done_ns.saturating_sub(from_ns) as f64 / 1e3);
                }
                out
            })
        })
        .collect();
    let mut all = OpenLoopResult::default();
    for task in tasks {
        if let Ok(part) = task.await {
            all.latencies_us.extend(part.latencies_us);
            all.failed += part.failed;
        }
    }
    all
}

/// Reads one Content-Length response; false on a broken connection or a non-200 status.
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let len = content_length(&buf[..i]);
            if buf.len() >= i + 4 + len {
                let ok = buf.starts_with(b"HTTP/1.1 200");
                buf.drain(..i + 4 + len);
                return ok;
            }
        }
        let mut tmp = [0u8; 16384];
        match stream.read(&mut tmp).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body and the end come out the same however the wire is cut (every cut in two and in
    /// three), with the relay's chunks cutting the events where they like.
    #[test]
    fn a_chunked_body_is_read_without_its_framing_at_every_cut() {
        let wire: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
7\r\ndata: {\r\n3;x=1\r\n\"a\"\r\n2\r\n}\n\r\nA\r\n\ndata: [DO\r\n4\r\nNE]\n\r\n0\r\n\r\n";
        let body: &[u8] = b"data: {\"a\"}\n\ndata: [DONE]\n";
        let run = |pieces: &[&[u8]]| {
            let (mut dechunk, mut out) = (Dechunk::default(), Vec::new());
            let ended: Vec<bool> = pieces.iter().map(|p| dechunk.feed(p, &mut out)).collect();
            (out, ended)
        };
        for i in 0..=wire.len() {
            for j in i..=wire.len() {
                let (out, ended) = run(&[&wire[..i], &wire[i..j], &wire[j..]]);
                assert_eq!(out, body, "cut at {i}, {j}");
                assert!(*ended.last().unwrap(), "cut at {i}, {j}");
                assert!(!ended[..2].iter().any(|e| *e) || j == wire.len(), "cut at {i}, {j}");
            }
        }
        // Without its last chunk the body has not ended.
        let (out, ended) = run(&[&wire[..wire.len() - 5]]);
        assert_eq!(out, body);
        assert_eq!(ended, [false]);
    }
}
