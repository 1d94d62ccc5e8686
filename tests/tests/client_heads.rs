//! Hostile and unusual request heads on a client's connection: tokentap's connection loop (which
//! reads each head before it decides who serves the request) answers every one as pingora's proxy
//! does (`[connections] relay = "pingora"`, where pingora serves every connection). Each case is
//! sent on a new connection, split at a random byte, and followed by a last request that closes
//! the connection (`Connection: close`), so the client reads to the close either way. The upstream
//! echoes what it received, so the client's transcript says what reached it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Duration;

use tokentap_e2e::http1::read_to_close;
use tokentap_e2e::Tokentap;

/// An upstream that answers every request it can read with what it read: method, target, body
/// length and a checksum of the body.
fn echo_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            std::thread::spawn(move || echo(conn));
        }
    });
    url
}

fn echo(mut conn: TcpStream) {
    conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut buf = Vec::new();
    loop {
        let Some(end) = fill_until(&mut conn, &mut buf, |b| find(b, b"\r\n\r\n").map(|at| at + 4)) else { return };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let header = |name: &str| header_value(&head, name);
        let body = if header("transfer-encoding").is_some_and(|v| v.ends_with("chunked")) {
            let mut body = Vec::new();
            loop {
                let Some(line_end) = fill_until(&mut conn, &mut buf, |b| find(b, b"\r\n").map(|at| at + 2)) else {
                    return;
                };
                let size_text = String::from_utf8_lossy(&buf[..line_end - 2]).into_owned();
                buf.drain(..line_end);
                let Ok(size) = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16) else {
                    return;
                };
                if fill_until(&mut conn, &mut buf, |b| (b.len() >= size + 2).then_some(size + 2)).is_none() {
                    return;
                }
                body.extend_from_slice(&buf[..size]);
                buf.drain(..size + 2);
                if size == 0 {
                    break;
                }
            }
            body
        } else {
            let length: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            if fill_until(&mut conn, &mut buf, |b| (b.len() >= length).then_some(length)).is_none() {
                return;
            }
            buf.drain(..length).collect()
        };
        let request_line = head.lines().next().unwrap_or("").to_string();
        let sum: u64 = body.iter().map(|b| *b as u64).sum();
        let text = format!("{request_line} | {} bytes, sum {sum}", body.len());
        let answer =
            format!("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{text}", text.len());
        if conn.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// A header's value in a head's text, lower-cased.
fn header_value(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_ascii_lowercase())
    })
}

/// Reads into `buf` until `done` finds what it looks for; `None` when the connection ends first.
fn fill_until(conn: &mut TcpStream, buf: &mut Vec<u8>, done: impl Fn(&[u8]) -> Option<usize>) -> Option<usize> {
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(at) = done(buf) {
            return Some(at);
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// What a client read: each answer's status and body, in order, then whatever could not be read
/// as an answer.
fn transcript(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some(end) = find(rest, b"\r\n\r\n") else {
            out.push(format!("unreadable: {:?}", String::from_utf8_lossy(rest)));
            break;
        };
        let head = String::from_utf8_lossy(&rest[..end]).into_owned();
        rest = &rest[end + 4..];
        let status = head.split(' ').nth(1).unwrap_or("?").to_string();
        let header = |name: &str| header_value(&head, name);
        let body = if status.starts_with('1') {
            Vec::new()
        } else if header("transfer-encoding").is_some_and(|v| v.ends_with("chunked")) {
            let mut body = Vec::new();
            while let Some(line_end) = find(rest, b"\r\n") {
                let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..line_end]).trim(), 16).unwrap_or(0);
                rest = &rest[line_end + 2..];
                let take = size.min(rest.len());
                body.extend_from_slice(&rest[..take]);
                rest = &rest[(take + 2).min(rest.len())..];
                if size == 0 {
                    break;
                }
            }
            body
        } else if let Some(length) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
            let take = length.min(rest.len());
            let body = rest[..take].to_vec();
            rest = &rest[take..];
            body
        } else {
            let body = rest.to_vec();
            rest = &[];
            body
        };
        // tokentap's own 4xx/5xx bodies name the request id; the status says what happened.
        let body = if status.starts_with('2') { String::from_utf8_lossy(&body).into_owned() } else { String::new() };
        out.push(format!("{status} {body}"));
    }
    out
}

/// A small deterministic generator for the split points.
struct Splits(u64);

impl Splits {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

const LAST: &str = "GET /v1/last HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

/// The cases: a name and the bytes sent before [`LAST`] (`None` for [`LAST`]: the client
/// half-closes instead).
fn cases() -> Vec<(&'static str, Vec<u8>, bool)> {
    let many_headers: String = (0..300).map(|i| format!("X-H{i}: v\r\n")).collect();
    let huge = "a".repeat(1_100_000);
    let plain = "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}";
    let h2c = "GET /v1/h2c HTTP/1.1\r\nHost: t\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n";
    let cases: Vec<(&str, String, bool)> = vec![
        ("plain", plain.to_string(), true),
        ("length and transfer coding", "POST /v1/a HTTP/1.1\r\nHost: t\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /v1/smuggled HTTP/1.1\r\nHost: t\r\n\r\n".into(), true),
        ("two lengths", "POST /v1/a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!".into(), true),
        ("two equal lengths", "POST /v1/a HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}".into(), true),
        ("a length that is not a number", "POST /v1/a HTTP/1.1\r\nHost: t\r\nContent-Length: +2\r\n\r\n{}".into(), true),
        ("chunked not last", "POST /v1/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n2\r\n{}\r\n0\r\n\r\n".into(), true),
        ("a transfer coding pingora does not know", "POST /v1/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n".into(), true),
        ("a bad chunk size", "POST /v1/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n".into(), true),
        ("a chunked body", "POST /v1/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2;ext=1\r\n{}\r\n0\r\n\r\n".into(), true),
        ("a space before the colon", "POST /v1/a HTTP/1.1\r\nHost: t\r\nContent-Length : 2\r\n\r\n{}".into(), true),
        ("a folded header", "GET /v1/a HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n  more\r\n\r\n".into(), true),
        ("bare line feeds", "GET /v1/lf HTTP/1.1\nHost: t\n\n".into(), true),
        ("a request line that is not one", "GARBAGE\r\n\r\n".into(), true),
        ("an unknown version", "GET /v1/a HTTP/1.2\r\nHost: t\r\n\r\n".into(), true),
        ("CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n".into(), true),
        ("too many headers", format!("GET /v1/a HTTP/1.1\r\nHost: t\r\n{many_headers}\r\n"), true),
        ("a head over a megabyte", format!("GET /v1/a HTTP/1.1\r\nHost: t\r\nX-Big: {huge}\r\n\r\n"), true),
        ("unsafe bytes in the target", "GET /v1/a?q={\"x\"}|y^ HTTP/1.1\r\nHost: t\r\n\r\n".into(), true),
        ("the absolute form", "GET http://t/v1/abs?x=1 HTTP/1.1\r\nHost: t\r\n\r\n".into(), true),
        ("the absolute form with another host", "GET http://upstream.example/v1/abs HTTP/1.1\r\nHost: t\r\n\r\n".into(), true),
        ("braces and a bar in the target", "GET /v1/a?q={x}|y HTTP/1.1\r\nHost: t\r\n\r\n".into(), true),
        ("a bad escape in the target", "GET /v1/a?q=%zz HTTP/1.1\r\nHost: t\r\n\r\n".into(), true),
        ("a byte over 0x7f in the target", "GET /v1/caf\u{e9} HTTP/1.1\r\nHost: t\r\n\r\n".into(), true),
        ("a target that is a star", "OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n".into(), true),
        ("expecting 100-continue", "POST /v1/a HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}".into(), true),
        ("closing after the first", "GET /v1/first HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".into(), true),
        ("an HTTP/1.0 client kept alive", "GET /v1/a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".into(), true),
        ("an HTTP/1.0 client", "POST /v1/a HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}".into(), true),
        ("three pipelined", format!("{plain}{plain}{plain}"), true),
        ("an h2c offer, then tokentap's requests", format!("{plain}{h2c}{plain}"), true),
        ("a WebSocket handshake with a body", "GET /v1/ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 2\r\n\r\n{}".into(), true),
        ("tokentap's own path", "GET /_tokentap/nothing-here HTTP/1.1\r\nHost: t\r\n\r\n".into(), true),
        ("a head cut short", "GET /v1/a HTTP/1.1\r\nHost: t\r\nX-A".into(), false),
        // Neither the last request nor a close follows: only a refusal ends it.
        ("a head that never ends", format!("GET /v1/a HTTP/1.1\r\nHost: t\r\nX-Big: {}", "a".repeat(1_500_000)), true),
        ("a body cut short", "POST /v1/a HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n{}".into(), false),
        ("nothing", String::new(), false),
    ];
    cases.into_iter().map(|(name, bytes, last)| (name, bytes.into_bytes(), last)).collect()
}

/// Sends one case, split at `split`, and reads to the close.
fn run(addr: std::net::SocketAddr, bytes: &[u8], last: bool, split: usize) -> Vec<String> {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_nodelay(true).unwrap();
    let mut all = bytes.to_vec();
    // A head that never ends is followed by nothing: the client holds the connection.
    let hold = bytes.len() > 1 << 20 && find(bytes, b"\r\n\r\n").is_none();
    if last && !hold {
        all.extend_from_slice(LAST.as_bytes());
    }
    let split = split.min(all.len());
    // A connection tokentap closed early (a refused head) may refuse the rest of the bytes.
    let _ = conn.write_all(&all[..split]).and_then(|()| conn.write_all(&all[split..]));
    if !last && !hold {
        let _ = conn.shutdown(Shutdown::Write);
    }
    transcript(&read_to_close(&mut conn, Duration::from_secs(60)))
}

#[test]
fn hostile_and_unusual_heads_are_answered_as_pingoras_proxy_answers_them() {
    let upstream = echo_upstream();
    let dir = tempfile::tempdir().unwrap();
    let pingora_config = dir.path().join("pingora.toml");
    std::fs::write(&pingora_config, "[connections]\nrelay = \"pingora\"\n").unwrap();
    let tokentap = Tokentap::start(&upstream, &[]);
    let pingora = Tokentap::start(&upstream, &["--config", pingora_config.to_str().unwrap()]);
    let mut splits = Splits(0x5eed);
    let mut seen = Vec::new();
    for (name, bytes, last) in cases() {
        for round in 0..3 {
            let split = splits.below(bytes.len() + LAST.len());
            let ours = run(tokentap.addr, &bytes, last, split);
            let theirs = run(pingora.addr, &bytes, last, split);
            assert_eq!(ours, theirs, "{name} (round {round}, split at {split})");
            if std::env::var_os("CLIENT_HEADS_SHOW").is_some() && round == 0 {
                eprintln!("{name}: {ours:?}");
            }
            if round == 0 {
                seen.push((name, ours));
            }
        }
    }
    // The transcripts say what they should (so equal transcripts are not equal nothings).
    let of = |case: &str| seen.iter().find(|(name, _)| *name == case).map(|(_, t)| t.clone()).unwrap();
    let last_answer = "200 GET /v1/last HTTP/1.1 | 0 bytes, sum 0".to_string();
    assert_eq!(
        of("plain"),
        ["200 POST /v1/chat/completions HTTP/1.1 | 2 bytes, sum 248".to_string(), last_answer.clone()]
    );
    assert_eq!(of("three pipelined").len(), 4, "{:?}", of("three pipelined"));
    assert_eq!(
        of("an h2c offer, then tokentap's requests").len(),
        4,
        "{:?}",
        of("an h2c offer, then tokentap's requests")
    );
    assert_eq!(of("two lengths"), ["400 ".to_string()], "a request with two lengths is refused and nothing follows it");
    assert_eq!(of("CONNECT"), ["405 ".to_string()]);
    assert_eq!(of("the absolute form")[0], "200 GET /v1/abs?x=1 HTTP/1.1 | 0 bytes, sum 0");
    assert_eq!(of("closing after the first"), ["200 GET /v1/first HTTP/1.1 | 0 bytes, sum 0".to_string()]);
    assert!(of("a head over a megabyte").iter().all(|a| !a.starts_with('2')), "{:?}", of("a head over a megabyte"));
    let smuggled = of("length and transfer coding");
    assert!(
        !smuggled.iter().any(|a| a.contains("POST /v1/a HTTP/1.1 | 40")),
        "the length is not what frames a chunked body: {smuggled:?}"
    );
    assert_eq!(of("a head cut short"), Vec::<String>::new());
    assert_eq!(of("a head that never ends"), ["400 ".to_string()], "refused past 1 MiB, not read on");

    // Who served them: tokentap's loop, except the connections with a request only pingora's
    // proxy serves (counted in health), each handed over once, with the requests after it.
    let handed = |t: &Tokentap| t.admin_get("/_tokentap/api/health").1["connections"]["handed_to_pingora"].clone();
    assert_eq!(handed(&pingora), 0, "relay = \"pingora\" hands nothing over: every connection is pingora's");
    let before = handed(&tokentap).as_u64().unwrap();
    for (bytes, to_pingora) in
        [(cases()[0].1.clone(), 0), (b"CONNECT example.com:443 HTTP/1.1\r\nHost: e\r\n\r\n".to_vec(), 1)]
    {
        run(tokentap.addr, &bytes, true, 0);
        let after = handed(&tokentap).as_u64().unwrap();
        assert_eq!(after - before, to_pingora, "{:?}", String::from_utf8_lossy(&bytes));
    }
    assert_eq!(of("nothing"), Vec::<String>::new());
}
