//! A small blocking HTTP/1.1 client that stamps every socket read, so tests can see exactly when
//! each body byte arrived and whether the body ended cleanly.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A response read to its end (clean or not).
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// One entry per socket read that delivered body bytes: when, and the body length after it.
    pub reads: Vec<(Instant, usize)>,
    /// True when the body was complete by its framing (terminal chunk, full Content-Length).
    pub complete: bool,
    /// When the request was written.
    pub sent_at: Instant,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Arrival time of the read that completed body offset `end` (exclusive end of some bytes).
    pub fn arrival_of_offset(&self, end: usize) -> Option<Instant> {
        self.reads.iter().find(|(_, len)| *len >= end).map(|(t, _)| *t)
    }
}

/// Builds the bytes of a request with a Content-Length body.
pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nhost: tokentap.test\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        out.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    out.push_str("connection: close\r\n\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
    send(addr, &request_bytes("GET", path, headers, b""))
}

pub fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
    send(addr, &request_bytes("POST", path, headers, body))
}

/// The request bytes of [`request_bytes`] without `connection: close`: the connection stays open
/// for the next request (HTTP/1.1 keep-alive).
pub fn keep_alive_request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let raw = request_bytes(method, path, headers, body);
    let close = b"connection: close\r\n";
    let at = find(&raw, close).expect("request_bytes asks to close");
    [&raw[..at], &raw[at + close.len()..]].concat()
}

/// Writes one request on an open connection and reads its whole response, leaving the
/// connection open for the next one.
pub fn exchange(stream: &mut TcpStream, raw_request: &[u8]) -> HttpResponse {
    let sent_at = Instant::now();
    stream.write_all(raw_request).expect("write request");
    let mut s = StreamedResponse::reading(&mut *stream, sent_at);
    while s.read_some() {}
    s.into_response()
}

/// Sends raw request bytes and reads the whole response.
pub fn send(addr: SocketAddr, raw_request: &[u8]) -> HttpResponse {
    let mut s = StreamedResponse::open(addr, raw_request);
    while s.read_some() {}
    s.into_response()
}

/// A response being read piece by piece, from a socket or (with [`parse_response`]) from bytes.
pub struct StreamedResponse<S = TcpStream> {
    stream: S,
    buf: Vec<u8>,
    pub response: HttpResponse,
    head_done: bool,
    framing: Framing,
    done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    Chunked { remaining_in_chunk: Option<usize> },
    Length(usize),
    UntilClose,
}

impl<S> StreamedResponse<S> {
    /// A response not yet read from `stream`; `sent_at` is when its request was written.
    fn reading(stream: S, sent_at: Instant) -> Self {
        StreamedResponse {
            stream,
            buf: Vec::new(),
            response: HttpResponse {
                status: 0,
                headers: Vec::new(),
                body: Vec::new(),
                reads: Vec::new(),
                complete: false,
                sent_at,
            },
            head_done: false,
            framing: Framing::UntilClose,
            done: false,
        }
    }
}

impl StreamedResponse<TcpStream> {
    pub fn open(addr: SocketAddr, raw_request: &[u8]) -> StreamedResponse {
        let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        stream.set_nodelay(true).unwrap();
        let sent_at = Instant::now();
        stream.write_all(raw_request).expect("write request");
        StreamedResponse::reading(stream, sent_at)
    }

    /// Closes the connection abruptly (the client goes away).
    pub fn abort(self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

impl<S: Read> StreamedResponse<S> {
    /// Reads once from the socket; returns false when the response is over (cleanly or not).
    pub fn read_some(&mut self) -> bool {
        if self.done {
            return false;
        }
        let mut tmp = [0u8; 65536];
        // A read error ends the response like EOF does.
        let n: usize = self.stream.read(&mut tmp).unwrap_or_default();
        let now = Instant::now();
        if n == 0 {
            if self.framing == Framing::UntilClose && self.head_done {
                self.response.complete = true;
            }
            self.done = true;
            return false;
        }
        self.buf.extend_from_slice(&tmp[..n]);
        let before = self.response.body.len();
        self.parse();
        if self.response.body.len() > before {
            self.response.reads.push((now, self.response.body.len()));
        }
        !self.done
    }

    /// Reads until the head has arrived.
    pub fn read_head(&mut self) {
        while !self.head_done && self.read_some() {}
        assert!(self.head_done, "connection ended before the response head");
    }

    /// Reads until at least `n` body bytes arrived or the response ended.
    pub fn read_body_until(&mut self, n: usize) {
        while self.response.body.len() < n && self.read_some() {}
    }

    pub fn into_response(self) -> HttpResponse {
        self.response
    }

    fn parse(&mut self) {
        if !self.head_done {
            let Some(end) = find(&self.buf, b"\r\n\r\n") else { return };
            let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
            self.buf.drain(..end + 4);
            let mut lines = head.split("\r\n");
            let status_line = lines.next().unwrap_or("");
            self.response.status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
            for line in lines {
                if let Some((k, v)) = line.split_once(':') {
                    self.response.headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                }
            }
            self.head_done = true;
            let chunked = self.response.header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
            let length = self.response.header("content-length").and_then(|v| v.parse().ok());
            self.framing = if chunked {
                Framing::Chunked { remaining_in_chunk: None }
            } else if let Some(len) = length {
                Framing::Length(len)
            } else if self.response.status == 204 || self.response.status == 304 {
                Framing::Length(0)
            } else {
                Framing::UntilClose
            };
        }
        loop {
            match self.framing {
                Framing::Length(len) => {
                    let take = (len - self.response.body.len()).min(self.buf.len());
                    self.response.body.extend(self.buf.drain(..take));
                    if self.response.body.len() == len {
                        self.response.complete = true;
                        self.done = true;
                    }
                    return;
                }
                Framing::UntilClose => {
                    self.response.body.append(&mut self.buf);
                    return;
                }
                Framing::Chunked { remaining_in_chunk: None } => {
                    let Some(end) = find(&self.buf, b"\r\n") else { return };
                    let size_text = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                    let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                        .unwrap_or_else(|_| panic!("bad chunk size line {size_text:?}"));
                    if size == 0 {
                        // Terminal chunk; trailers are not used by these tests.
                        if find(&self.buf[end + 2..], b"\r\n").is_some() || self.buf.len() >= end + 4 {
                            self.response.complete = true;
                            self.done = true;
                        }
                        return;
                    }
                    self.buf.drain(..end + 2);
                    self.framing = Framing::Chunked { remaining_in_chunk: Some(size) };
                }
                Framing::Chunked { remaining_in_chunk: Some(rem) } => {
                    if rem == 0 {
                        if self.buf.len() < 2 {
                            return;
                        }
                        self.buf.drain(..2);
                        self.framing = Framing::Chunked { remaining_in_chunk: None };
                        continue;
                    }
                    let take = rem.min(self.buf.len());
                    if take == 0 {
                        return;
                    }
                    self.response.body.extend(self.buf.drain(..take));
                    self.framing = Framing::Chunked { remaining_in_chunk: Some(rem - take) };
                }
            }
        }
    }
}

/// Parses one HTTP/1.1 response from raw bytes (as a wire tap saw them), removing its framing.
pub fn parse_response(raw: &[u8]) -> HttpResponse {
    let mut s = StreamedResponse::reading(raw, Instant::now());
    while s.read_some() {}
    s.into_response()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Streams one chat response through `addr` to a slow reader: a client with a 4 KiB receive buffer
/// that reads 4 KiB every 10 ms (about 400 KB/s), while the mock sends about 960 KB in half a
/// second. Returns the bytes read.
pub fn slow_read_chat(addr: SocketAddr) -> usize {
    slow_read_chat_after(addr, Duration::ZERO)
}

/// [`slow_read_chat`] by a client that reads nothing for `first_read_after` (a stalled tab, a
/// client busy elsewhere): the text is behind from the first event on.
pub fn slow_read_chat_after(addr: SocketAddr, first_read_after: Duration) -> usize {
    let mut stream = small_buffer_chat(addr, "60", &[]);
    // Not reading is the scenario under test, not a way to wait for something.
    std::thread::sleep(first_read_after);
    let mut total = 0usize;
    let mut buf = [0u8; 4096];
    loop {
        // Reading slowly is the scenario under test, not a way to wait for something.
        std::thread::sleep(Duration::from_millis(10));
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
        if buf[..].windows(5).any(|w| w == b"0\r\n\r\n") && total > 900_000 {
            break;
        }
    }
    total
}

/// Streams a chat response through `addr` larger than the kernel lets one socket buffer
/// (`tcp_wmem`'s maximum plus 1 MiB, in 16 KB events 5 ms apart) to a client with a 4 KiB
/// receive buffer that reads nothing for `stall`, then reads as fast as it can. tokentap's write
/// to it blocks, so the provider's last bytes wait in tokentap's upstream socket. Returns the
/// bytes read.
pub fn stalled_read_chat(addr: SocketAddr, stall: Duration) -> usize {
    let wmem = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem").expect("tcp_wmem");
    let wmem_max: usize = wmem.split_whitespace().nth(2).and_then(|v| v.parse().ok()).expect("tcp_wmem's maximum");
    let tokens = ((wmem_max + (1 << 20)) / 16_000 + 1).to_string();
    let mut stream = small_buffer_chat(addr, &tokens, &[("connection", "close")]);
    // Not reading is the scenario under test, not a way to wait for something.
    std::thread::sleep(stall);
    let mut total = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n,
        }
    }
}

/// A streamed chat request of `tokens` mock events of 16 KB, 5 ms apart, sent from a socket with
/// a 4 KiB receive buffer; nothing read yet.
fn small_buffer_chat(addr: SocketAddr, tokens: &str, extra: &[(&str, &str)]) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.set_recv_buffer_size(4096).expect("small receive buffer");
    socket.connect(&addr.into()).expect("connect");
    let mut stream: TcpStream = socket.into();
    let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut headers = vec![
        ("content-type", "application/json"),
        ("x-mock-tokens", tokens),
        ("x-mock-event-bytes", "16000"),
        ("x-mock-ttft-ms", "5"),
        ("x-mock-itl-ms", "5"),
    ];
    headers.extend_from_slice(extra);
    stream.write_all(&request_bytes("POST", "/v1/chat/completions", &headers, body)).expect("write request");
    stream
}

/// Whether `request` holds a whole request: its head and the body its `content-length` names
/// (none without one), for a test upstream that must read everything before it answers or closes.
pub fn is_whole_request(request: &[u8]) -> bool {
    let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else { return false };
    let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    request.len() >= end + 4 + length
}

/// Reads one message head (through the blank line) a byte at a time, so nothing after it is
/// consumed; fails when the peer closes inside it or the stream's read timeout passes.
pub fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).expect("a head before the read timeout");
        assert_eq!(n, 1, "closed inside a head: {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Reads until the peer closes; returns what it sent. Fails after `limit` of silence.
pub fn read_to_close(stream: &mut TcpStream, limit: Duration) -> Vec<u8> {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return out,
            Err(e) => panic!("the connection was not closed: {e} (got {:?})", String::from_utf8_lossy(&out)),
        }
    }
}
