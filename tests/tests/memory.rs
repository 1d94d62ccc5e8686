//! What tokentap keeps for analysis is bounded by `[timeline] max_kept_bytes` in memory, not only
//! in bytes: a response of one-byte chunks (each one a separate piece) cannot grow tokentap's
//! resident memory past the budget plus a constant, and a request body of one-byte chunks costs
//! about the bytes `max_request_bytes` lets it keep, not an entry per chunk.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use tokentap_e2e::Tokentap;

const CHUNKS: usize = 400_000;
const BUDGET: u64 = 4 << 20;
/// What the test allows besides the budget: allocator slack, the runtime's buffers, the small
/// warm-up's leftovers (measured growth with the budget spent: about 6 MiB on the debug build).
const CONSTANT: u64 = 12 << 20;

/// An upstream that answers `/big` with `CHUNKS` one-byte chunks of a chunked body and anything
/// else with ten; one response per connection.
fn one_byte_chunks_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let chunks = if head.starts_with(b"GET /big") { CHUNKS } else { 10 };
            let mut answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\
                               connection: close\r\n\r\n"
                .to_vec();
            answer.extend_from_slice(&b"1\r\nx\r\n".repeat(chunks));
            answer.extend_from_slice(b"0\r\n\r\n");
            let _ = conn.write_all(&answer);
        }
    });
    addr
}

/// Sends `GET path` and reads the whole answer; returns its size in bytes.
fn get(proxy: SocketAddr, path: &str) -> usize {
    let mut stream = TcpStream::connect(proxy).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").unwrap();
    let mut got = Vec::new();
    stream.read_to_end(&mut got).unwrap();
    assert!(got.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got[..got.len().min(200)]));
    got.len()
}

fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[test]
fn a_response_of_one_byte_chunks_keeps_no_more_memory_than_the_budget() {
    let upstream = one_byte_chunks_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    // Few chunk entries, so that what grows is the kept pieces.
    std::fs::write(&config, format!("[timeline]\nmax_kept_bytes = {BUDGET}\nmax_chunks = 1000\n")).unwrap();
    // The worker holds each finished request 5 s before building its record: the big response's
    // kept pieces are still in memory when the client has read the whole answer.
    let tokentap = Tokentap::start_with_env(
        &["--upstream", &format!("http://{upstream}"), "--config", config.to_str().unwrap()],
        &[("TOKENTAP_TEST_WORKER_DELAY_MS", "5000")],
    );
    let mut feed = tokentap.feed();
    get(tokentap.addr, "/small");
    feed.next_record_for("/small");
    let pid = tokentap.proc.pid();
    let before = resident_bytes(pid);
    let answer = get(tokentap.addr, "/big");
    assert!(answer > CHUNKS, "the whole answer was forwarded ({answer} bytes)");
    let held = resident_bytes(pid);
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    let grown = held.saturating_sub(before);
    assert!(
        grown <= BUDGET + CONSTANT,
        "resident memory grew {grown} bytes for {CHUNKS} one-byte chunks; budget {BUDGET} + {CONSTANT}: {health}"
    );
    assert!(health["records"]["kept_bytes"].as_u64().unwrap() <= BUDGET, "{health}");
    assert!(health["records"]["kept_budget_hits"].as_u64().unwrap() >= 1, "the budget stopped the pieces: {health}");
    // The record says its analysis saw a prefix, and every byte was counted.
    let record = feed.next_record_for("/big");
    assert_eq!(record["timeline"]["body_bytes"], CHUNKS, "{}", record["timeline"]);
    assert_eq!(record["timeline"]["chunk_count"], CHUNKS, "{}", record["timeline"]);
}

const REQUEST_CHUNKS: usize = 600_000;
const MAX_REQUEST_BYTES: u64 = 512 << 10;
/// What the request test allows besides the kept bytes: the runtime's buffers and allocator
/// slack (measured growth with no piece kept: under 1 MiB on the debug build; an entry per kept
/// one-byte chunk made it about 27 MiB).
const REQUEST_CONSTANT: u64 = 6 << 20;

/// An upstream that reads a whole chunked request body before it answers, and hands the body's
/// bytes as received (chunk framing included) to the test; one request per connection.
fn body_reading_upstream() -> (SocketAddr, mpsc::Receiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            let mut got = Vec::new();
            let mut buf = [0u8; 65536];
            let body_start = loop {
                if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break got.len(),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            };
            // The chunks here are all `1\r\nx\r\n`: the last chunk is the only `0\r\n\r\n`.
            while !got[body_start..].ends_with(b"0\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
            let _ = tx.send(got.split_off(body_start));
        }
    });
    (addr, rx)
}

/// Posts `chunks` one-byte chunks to `path` and reads the whole answer.
fn post_one_byte_chunks(proxy: SocketAddr, path: &str, chunks: usize) {
    let mut stream = TcpStream::connect(proxy).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut request =
        format!("POST {path} HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
            .into_bytes();
    request.extend_from_slice(&b"1\r\nx\r\n".repeat(chunks));
    request.extend_from_slice(b"0\r\n\r\n");
    stream.write_all(&request).unwrap();
    let mut got = Vec::new();
    stream.read_to_end(&mut got).unwrap();
    assert!(got.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got[..got.len().min(200)]));
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("{field} in {status}"));
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[test]
fn a_request_of_one_byte_chunks_costs_its_kept_bytes_not_an_entry_per_chunk() {
    let (upstream, bodies) = body_reading_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    // The budget of all requests (512 MiB by default) is far away: what must bound this request
    // is its own cap on kept bytes.
    std::fs::write(&config, format!("[timeline]\nmax_request_bytes = {MAX_REQUEST_BYTES}\n")).unwrap();
    // The worker holds each finished request 5 s before building its record: the big request's
    // kept pieces are still in memory when its answer has arrived, and no analysis runs meanwhile.
    let tokentap = Tokentap::start_with_env(
        &["--upstream", &format!("http://{upstream}"), "--config", config.to_str().unwrap()],
        &[("TOKENTAP_TEST_WORKER_DELAY_MS", "5000")],
    );
    let mut feed = tokentap.feed();
    post_one_byte_chunks(tokentap.addr, "/small", 10);
    bodies.recv().unwrap();
    feed.next_record_for("/small");
    let pid = tokentap.proc.pid();
    // The peak from here on: `5` resets the process's peak resident size to its current size.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let before = status_kib(pid, "VmHWM:");
    post_one_byte_chunks(tokentap.addr, "/big", REQUEST_CHUNKS);
    let peak = status_kib(pid, "VmHWM:");
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    let grown = peak.saturating_sub(before);
    assert!(
        grown <= MAX_REQUEST_BYTES + REQUEST_CONSTANT,
        "peak resident memory grew {grown} bytes for a request of {REQUEST_CHUNKS} one-byte chunks; \
         max_request_bytes {MAX_REQUEST_BYTES} + {REQUEST_CONSTANT}: {health}"
    );
    // What is charged to the budget is what the kept body costs: its bytes in shared buffers.
    let charged = health["records"]["kept_bytes"].as_u64().unwrap();
    assert!(charged <= 2 * MAX_REQUEST_BYTES, "charged {charged}: {health}");
    // Forwarded byte for byte: pingora re-frames each chunk, here as the same `1\r\nx\r\n`.
    let mut expected = b"1\r\nx\r\n".repeat(REQUEST_CHUNKS);
    expected.extend_from_slice(b"0\r\n\r\n");
    let received = bodies.recv().unwrap();
    assert!(received == expected, "the upstream received {} bytes, not the {} sent", received.len(), expected.len());
    let record = feed.next_record_for("/big");
    assert_eq!(record["conditions"]["request_bytes"], REQUEST_CHUNKS, "every byte counted: {}", record["conditions"]);
}
