//! Realtime voice over WebSocket through tokentap (issue 15).
//!
//! 1. Byte-exact forwarding: generated sessions (random frame sizes, fragmentation, ping/pong,
//!    masked client frames, permessage-deflate on and off with both of RFC 7692's flushes, empty
//!    messages, text and binary, close handshakes and resets) through one tokentap to a scripted
//!    upstream; each side must receive exactly what the other sent, and the session record must
//!    count the frames each side sent.
//! 2. The official openai SDK's realtime client through tokentap to the mock: a conversation with
//!    a tool call, an interruption and an audio answer; the session record shows each response's
//!    time to first audio within a stated tolerance of the mock's schedule.

use std::io::Write as _;

use flate2::{Compress, Compression, FlushCompress};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tokentap_e2e::otlp_receiver::{attr_f64, attr_str, hex};
use tokentap_e2e::process::run_sdk_script;
use tokentap_e2e::websocket::{frame, read_head, run_client, Ending, WsSession, WsUpstream};
use tokentap_e2e::{http1, Mock, OtlpReceiver, Tokentap};

/// A permessage-deflate compressor (RFC 7692 §7.2.1: sync flush, the data ending in an empty
/// stored block, its 4-byte tail removed).
struct Deflater(Compress);

impl Deflater {
    fn new() -> Self {
        Deflater(Compress::new(Compression::default(), false))
    }

    fn compress(&mut self, message: &[u8]) -> Vec<u8> {
        let mut out = self.deflate(message, FlushCompress::Sync);
        // zlib (flate2's backend when pingora is in the build) emits nothing for a sync flush
        // right after another with no input, e.g. for an empty message: the block goes whole.
        if !out.ends_with(&[0x00, 0x00, 0xFF, 0xFF]) {
            out.extend_from_slice(&[0x00, 0x00, 0x00, 0xFF, 0xFF]);
        }
        out.truncate(out.len() - 4);
        out
    }

    /// The other flush RFC 7692 allows (§7.2.3.3): the message ends the stream with a BFINAL
    /// block, then the empty block's header (0x00); the next message starts a new stream.
    fn compress_final(&mut self, message: &[u8]) -> Vec<u8> {
        let mut out = self.deflate(message, FlushCompress::Finish);
        out.push(0x00);
        self.0.reset();
        out
    }

    /// All of `message` through the compressor, then `flush` until it is done.
    fn deflate(&mut self, message: &[u8], flush: FlushCompress) -> Vec<u8> {
        let mut out = Vec::with_capacity(message.len() + 1024);
        let mut input = message;
        loop {
            out.reserve(4096);
            let before = self.0.total_in();
            let status = self.0.compress_vec(input, &mut out, flush).expect("deflate");
            input = &input[(self.0.total_in() - before) as usize..];
            let done = match flush {
                FlushCompress::Finish => status == flate2::Status::StreamEnd,
                _ => input.is_empty() && out.len() < out.capacity(),
            };
            if done {
                return out;
            }
        }
    }
}

/// One generated message: text or binary, its payload size, how many fragments, and whether a
/// ping goes between its fragments.
#[derive(Clone, Debug)]
struct GenMessage {
    binary: bool,
    size: usize,
    fragments: usize,
    ping_inside: bool,
}

fn gen_message() -> impl Strategy<Value = GenMessage> {
    // Empty messages are their own case: an empty compressed message has two forms on the wire.
    let size = prop_oneof![Just(0usize), 1usize..126, 126usize..70_000, 65_536usize..140_000];
    (any::<bool>(), size, 1usize..4, any::<bool>()).prop_map(|(binary, size, fragments, ping_inside)| GenMessage {
        binary,
        size,
        fragments,
        ping_inside,
    })
}

/// Encodes one side's messages; returns the bytes and the number of frames and text messages.
fn encode_side(messages: &[GenMessage], masked: bool, deflate: &mut Option<Deflater>, seed: u8) -> (Vec<u8>, u64, u64) {
    let mut out = Vec::new();
    let mut frames = 0;
    let mut texts = 0;
    for (i, m) in messages.iter().enumerate() {
        let payload: Vec<u8> = if m.binary {
            (0..m.size).map(|k| (k as u8).wrapping_mul(31).wrapping_add(seed)).collect()
        } else {
            texts += 1;
            // A JSON event tokentap does not know (counted as unknown, never fatal).
            let pad = "x".repeat(m.size);
            format!(r#"{{"type":"test.generated","n":{i},"pad":"{pad}"}}"#).into_bytes()
        };
        let (payload, rsv1) = match deflate.as_mut() {
            // An empty message goes as RFC 7692 has it (the empty block's first byte) or as a
            // sender that skips the block sends it (nothing); the window is the same after both.
            Some(_) if payload.is_empty() => (if i % 2 == 0 { Vec::new() } else { vec![0x00] }, true),
            // Every fifth message ends the sender's deflate stream instead of flushing it.
            Some(d) if i % 5 == 4 => (d.compress_final(&payload), true),
            Some(d) => (d.compress(&payload), true),
            None => (payload, false),
        };
        let mask = masked.then_some([seed, 0x5a, 0xa5, i as u8]);
        let n = m.fragments.min(payload.len().max(1));
        let step = payload.len().div_ceil(n).max(1);
        let parts: Vec<&[u8]> = if payload.is_empty() { vec![&payload[..]] } else { payload.chunks(step).collect() };
        let last = parts.len() - 1;
        for (k, part) in parts.iter().enumerate() {
            let opcode = if k == 0 {
                if m.binary {
                    2
                } else {
                    1
                }
            } else {
                0
            };
            out.extend(frame(k == last, rsv1 && k == 0, opcode, mask, part));
            frames += 1;
            if m.ping_inside && k == 0 && last > 0 {
                out.extend(frame(true, false, 0x9, mask, b"are you there"));
                frames += 1;
            }
        }
        if i % 4 == 3 {
            out.extend(frame(true, false, 0xA, mask, b""));
            frames += 1;
        }
    }
    (out, frames, texts)
}

/// Cuts bytes into pieces of generated sizes (the writes each side makes).
fn cut(bytes: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < bytes.len() {
        let n = sizes.get(i % sizes.len().max(1)).copied().unwrap_or(4096).max(1);
        let end = (at + n).min(bytes.len());
        out.push(bytes[at..end].to_vec());
        at = end;
        i += 1;
    }
    out
}

#[test]
fn websocket_sessions_are_forwarded_byte_for_byte_and_recorded() {
    let upstream = WsUpstream::start();
    let tokentap = Tokentap::start(&upstream.url(), &[]);
    let feed = std::cell::RefCell::new(tokentap.feed());
    let mut runner = TestRunner::new(Config { cases: 24, failure_persistence: None, ..Config::default() });
    let counter = std::cell::Cell::new(0u32);
    let strategy = (
        proptest::collection::vec(gen_message(), 0..8),
        proptest::collection::vec(gen_message(), 0..8),
        any::<bool>(),
        prop_oneof![Just(Ending::Close), Just(Ending::Reset)],
        proptest::collection::vec(1usize..20_000, 1..6),
        proptest::collection::vec(1usize..20_000, 1..6),
    );
    runner
        .run(&strategy, |(client_msgs, server_msgs, compressed, ending, client_cuts, server_cuts)| {
            counter.set(counter.get() + 1);
            let case = counter.get();
            let mut client_deflate = compressed.then(Deflater::new);
            let mut server_deflate = compressed.then(Deflater::new);
            let (mut client_bytes, mut client_frames, client_texts) =
                encode_side(&client_msgs, true, &mut client_deflate, case as u8);
            let (mut server_bytes, mut server_frames, server_texts) =
                encode_side(&server_msgs, false, &mut server_deflate, case as u8 ^ 0xff);
            if ending == Ending::Close {
                // The close handshake: the client closes, the upstream answers.
                client_bytes.extend(frame(true, false, 0x8, Some([1, 2, 3, 4]), &[0x03, 0xE8]));
                server_bytes.extend(frame(true, false, 0x8, None, &[0x03, 0xE8]));
                client_frames += 1;
                server_frames += 1;
            }
            let session = WsSession {
                path: format!("/v1/realtime?case={case}"),
                client_pieces: cut(&client_bytes, &client_cuts),
                server_pieces: cut(&server_bytes, &server_cuts),
                extensions: compressed.then(|| "permessage-deflate".to_string()),
                ending,
            };
            let (upstream_side, end) = upstream.serve(&session);
            let client = run_client(tokentap.addr, &session, || {
                let _ = end.send(());
            });
            let up = upstream_side.recv().expect("upstream side");
            prop_assert!(client.head.starts_with("HTTP/1.1 101"), "{}", client.head);
            prop_assert!(up.head.to_ascii_lowercase().contains("upgrade: websocket"), "{}", up.head);
            prop_assert!(
                client.received == server_bytes,
                "client got {} of {} bytes",
                client.received.len(),
                server_bytes.len()
            );
            prop_assert!(
                up.received == client_bytes,
                "upstream got {} of {} bytes",
                up.received.len(),
                client_bytes.len()
            );

            let record = feed.borrow_mut().next_record_for(&session.path);
            prop_assert_eq!(&record["status"], 101);
            let rt = &record["realtime"];
            prop_assert_eq!(rt["version"].as_u64(), Some(1), "{}", rt);
            prop_assert_eq!(rt["client"]["frames"]["frames"].as_u64(), Some(client_frames), "{}", rt);
            prop_assert_eq!(rt["server"]["frames"]["frames"].as_u64(), Some(server_frames), "{}", rt);
            prop_assert_eq!(rt["client"]["frames"]["masked_frames"].as_u64(), Some(client_frames), "{}", rt);
            prop_assert_eq!(rt["client"]["unknown_events"].as_u64(), Some(client_texts), "{}", rt);
            prop_assert_eq!(rt["server"]["unknown_events"].as_u64(), Some(server_texts), "{}", rt);
            prop_assert!(
                rt["client"].get("frame_error").is_none() && rt["server"].get("frame_error").is_none(),
                "{}",
                rt
            );
            prop_assert!(
                rt["client"].get("inflate_errors").is_none() && rt["server"].get("inflate_errors").is_none(),
                "{}",
                rt
            );
            let end = if ending == Ending::Close { "close_handshake" } else { "abrupt" };
            prop_assert_eq!(rt["end"].as_str(), Some(end), "{}", rt);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = std::io::stderr().flush();
}

/// An upstream that answers at once must not lose the session. pingora's own HTTP/1 proxy
/// closed the tunnel right after the `101` whenever it read the `101` before the end of the
/// upgrade request's empty body (cloudflare/pingora#946): the client got the `101`, then EOF.
/// tokentap relays upgrades itself; every one of these sessions must carry both frames each way.
#[test]
fn sessions_stay_open_when_the_upstream_answers_at_once() {
    let upstream = WsUpstream::start();
    let tokentap = Tokentap::start(&upstream.url(), &[]);
    let mask = Some([1, 2, 3, 4]);
    for i in 0..150u32 {
        let client =
            [frame(true, false, 0x1, mask, format!("c{i}").as_bytes()), frame(true, false, 0x8, mask, &[0x03, 0xE8])]
                .concat();
        let server =
            [frame(true, false, 0x1, None, format!("s{i}").as_bytes()), frame(true, false, 0x8, None, &[0x03, 0xE8])]
                .concat();
        let session = WsSession {
            path: format!("/v1/realtime?n={i}"),
            client_pieces: vec![client.clone()],
            server_pieces: vec![server.clone()],
            extensions: None,
            ending: Ending::Close,
        };
        let (upstream_side, end) = upstream.serve(&session);
        let got = run_client(tokentap.addr, &session, || {
            let _ = end.send(());
        });
        let up = upstream_side.recv().expect("upstream side");
        assert!(got.head.starts_with("HTTP/1.1 101"), "session {i}: {}", got.head);
        assert_eq!(got.received, server, "session {i}: what the client got");
        assert_eq!(up.received, client, "session {i}: what the upstream got");
    }
}

/// An upgrade request as a browser's WebSocket sends it.
const UPGRADE: &[u8] = b"GET /v1/realtime HTTP/1.1\r\nhost: tokentap.test\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n";

/// An upstream on a free port that serves each connection with `serve`, on a thread of its own.
fn upstream_serving(serve: impl Fn(std::net::TcpStream) + Send + Sync + 'static) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let serve = std::sync::Arc::new(serve);
    std::thread::spawn(move || {
        for conn in listener.incoming().map_while(Result::ok) {
            let serve = serve.clone();
            std::thread::spawn(move || serve(conn));
        }
    });
    addr
}

/// Reads a request head and as much of its body as `content-length` says; returns the body
/// (empty when the connection ends first).
fn read_request(conn: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return got[end + 4..end + 4 + length].to_vec();
            }
        }
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return Vec::new(),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// An upstream that answers each connection's request with `answer`, then closes.
fn answering_upstream(answer: Vec<u8>) -> std::net::SocketAddr {
    upstream_serving(move |mut conn| {
        read_request(&mut conn);
        let _ = conn.write_all(&answer);
    })
}

#[test]
fn a_refused_upgrade_reaches_the_client_as_an_ordinary_response() {
    let body = br#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#;
    let mut answer = format!(
        "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(body);
    let upstream = answering_upstream(answer);
    let tokentap = Tokentap::start(&format!("http://{upstream}"), &[]);
    let mut feed = tokentap.feed();
    let resp = http1::send(tokentap.addr, UPGRADE);
    assert_eq!(resp.status, 401);
    assert!(resp.complete, "the body ends by its content-length");
    assert_eq!(resp.body, body);
    let record = feed.next_record_for("/v1/realtime");
    assert_eq!(record["status"], 401, "{record}");
    assert_eq!(record["outcome"], "http_error", "{record}");
}

#[test]
fn an_upgrade_to_an_upstream_that_is_down_is_a_502_that_says_so() {
    let down = tokentap_e2e::upstream::RefusingPort::new();
    let tokentap = Tokentap::start(&format!("http://{}", down.addr()), &[]);
    let mut feed = tokentap.feed();
    let resp = http1::send(tokentap.addr, UPGRADE);
    let body = String::from_utf8_lossy(&resp.body).into_owned();
    assert_eq!(resp.status, 502, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("tokentap: upstream error "), "{message}");
    let record = feed.next_record_for("/v1/realtime");
    assert_eq!(record["outcome"], "upstream_connect_error", "{record}");
}

/// A garbage answer to an upgrade is a 502 that quotes none of it, never a tunnel.
#[test]
fn a_garbage_answer_to_an_upgrade_is_a_502() {
    let upstream = answering_upstream(b"SSH-2.0-UPSTREAM-SECRET\r\n\r\nTUNNELLED-BYTES".to_vec());
    let tokentap = Tokentap::start(&format!("http://{upstream}"), &[]);
    let mut feed = tokentap.feed();
    let resp = http1::send(tokentap.addr, UPGRADE);
    let body = String::from_utf8_lossy(&resp.body).into_owned();
    assert_eq!(resp.status, 502, "{body}");
    assert!(!body.contains("UPSTREAM-SECRET") && !body.contains("TUNNELLED"), "{body}");
    let record = feed.next_record_for("/v1/realtime");
    assert_eq!(record["outcome"], "upstream_error", "{record}");
    assert!(!record.to_string().contains("UPSTREAM-SECRET"), "{record}");
}

/// An upstream that answers a handshake with informational heads and never the answer gets a
/// 502 after a few, not an endless relay of them.
#[test]
fn endless_informational_answers_to_an_upgrade_are_a_502() {
    let upstream = answering_upstream(b"HTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\n".repeat(1000));
    let tokentap = Tokentap::start(&format!("http://{upstream}"), &[]);
    let mut feed = tokentap.feed();
    let mut client = std::net::TcpStream::connect(tokentap.addr).unwrap();
    client.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    client.write_all(UPGRADE).unwrap();
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut client, &mut got).unwrap();
    let got = String::from_utf8_lossy(&got);
    let heads: Vec<&str> = got.split("\r\n\r\n").filter_map(|part| part.lines().next()).collect();
    let early = heads.iter().filter(|h| h.starts_with("HTTP/1.1 103")).count();
    assert!((1..=16).contains(&early), "{early} informational heads passed on: {got}");
    assert!(heads.iter().any(|h| h.starts_with("HTTP/1.1 502")), "{got}");
    let record = feed.next_record_for("/v1/realtime");
    assert_eq!(record["outcome"], "upstream_error", "{record}");
}

/// A tunnel that times out after its 101 is closed: no HTTP error response is written into the
/// upgraded stream (the client would read it as WebSocket frames).
#[test]
fn a_tunnel_that_times_out_after_its_101_is_closed_without_an_http_answer() {
    let upstream = upstream_serving(|mut conn| {
        use std::io::Read;
        read_request(&mut conn);
        let _ = conn.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
              sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
        );
        // Then silence until tokentap gives up and closes.
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest);
    });
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "[timeouts]\nwebsocket_idle_s = 1\n").unwrap();
    let tokentap = Tokentap::start(&format!("http://{upstream}"), &["--config", config.path().to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let mut client = std::net::TcpStream::connect(tokentap.addr).unwrap();
    client.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    client.write_all(UPGRADE).unwrap();
    let head = read_head(&mut client);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut after = Vec::new();
    let _ = std::io::Read::read_to_end(&mut client, &mut after);
    assert!(after.is_empty(), "bytes after the 101: {:?}", String::from_utf8_lossy(&after));
    let record = feed.next_record_for("/v1/realtime");
    assert_eq!(record["status"], 101, "{record}");
}

/// An `h2c` upgrade offered on a POST (as some HTTP/2 clients offer it on `http://`) keeps its
/// body: an upstream that declines the offer reads the whole body and answers as usual.
#[test]
fn an_upgrade_offered_on_a_post_keeps_its_body() {
    // Echoes the request body.
    let upstream = upstream_serving(|mut conn| {
        let body = read_request(&mut conn);
        let mut answer =
            format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len())
                .into_bytes();
        answer.extend_from_slice(&body);
        let _ = conn.write_all(&answer);
    });
    let tokentap = Tokentap::start(&format!("http://{upstream}"), &[]);
    let body = br#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#;
    let headers =
        [("content-type", "application/json"), ("upgrade", "h2c"), ("http2-settings", "AAMAAABkAAQAoAAAAAIAAAAA")];
    let resp = http1::post(tokentap.addr, "/v1/chat/completions", &headers, body);
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, body);
}

/// A client that sends its first frame in the same write as its handshake (before the `101`)
/// still has it delivered, after the handshake.
#[test]
fn a_frame_sent_with_the_handshake_is_delivered_after_it() {
    use std::io::Read;
    let upstream = WsUpstream::start();
    let tokentap = Tokentap::start(&upstream.url(), &[]);
    let early = frame(true, false, 0x1, Some([9, 8, 7, 6]), br#"{"type":"session.update"}"#);
    let answer = frame(true, false, 0x1, None, br#"{"type":"session.updated"}"#);
    let session = WsSession {
        path: "/v1/realtime?early=1".to_string(),
        client_pieces: vec![early.clone()],
        server_pieces: vec![answer.clone()],
        extensions: None,
        ending: Ending::Close,
    };
    let (upstream_side, end) = upstream.serve(&session);
    let mut client = std::net::TcpStream::connect(tokentap.addr).unwrap();
    client.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    client.write_all(&[UPGRADE, &early[..]].concat()).unwrap();
    let head = read_head(&mut client);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut got = vec![0u8; answer.len()];
    client.read_exact(&mut got).expect("the upstream's frame after the 101");
    assert_eq!(got, answer);
    let _ = end.send(());
    let up = upstream_side.recv().expect("upstream side");
    assert_eq!(up.received, early, "what the upstream got");
}

/// A session where neither side says anything ends at `timeouts.websocket_idle_s`: the client
/// gets EOF after the `101`, the record names the read timeout and the log says so.
#[test]
fn a_silent_session_ends_at_the_idle_timeout() {
    use std::io::Read;
    let upstream = upstream_serving(|mut conn| {
        read_request(&mut conn);
        let _ =
            conn.write_all(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n");
        // Silent from here on; holds the connection until tokentap closes it.
        let mut buf = [0u8; 4096];
        while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
    });
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "[timeouts]\nwebsocket_idle_s = 1\n").unwrap();
    let tokentap = Tokentap::start(&format!("http://{upstream}"), &["--config", config.path().to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let mut client = std::net::TcpStream::connect(tokentap.addr).unwrap();
    client.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    client.write_all(UPGRADE).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match client.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the session did not end at the idle timeout: {e}"),
        }
    }
    assert!(got.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&got));
    let record = feed.next_record_for("/v1/realtime");
    assert_eq!(record["status"], 101, "{record}");
    assert_eq!(record["error"]["kind"], "ReadTimedout", "{record}");
    // The log says what ended, in tokentap's words (never as a failed request filter).
    let mut tokentap = tokentap;
    tokentap.proc.wait_stderr("WebSocket session ended", std::time::Duration::from_secs(30));
    let log = tokentap.proc.stderr();
    assert!(!log.contains("Fail to filter request"), "{log}");
}

/// The mock's schedule for the SDK conversation: first audio 300 ms after the event that
/// triggered the response (`response.created` goes out at the trigger), deltas 50 ms apart.
const FIRST_AUDIO_MS: f64 = 300.0;
/// Stated tolerance: the mock schedules on tokio timers from the moment it read the client's
/// frame, and tokentap stamps on arrival. On a shared 2-core machine a timer can fire late, which
/// lengthens a measured wait; the trigger itself (`speech_stopped`, written by the mock after the
/// frame was read, then read by tokentap) can also arrive late, which shortens it by as much (one
/// whole-suite run measured 291.6 ms for the 300 ms schedule). Either way is far less than the
/// hundreds of milliseconds between the events a wrong anchor would measure from.
const EARLY_MS: f64 = 50.0;
const LATE_MS: f64 = 250.0;

fn within_schedule(name: &str, value: Option<f64>) {
    let v = value.unwrap_or_else(|| panic!("{name} missing"));
    assert!(
        (FIRST_AUDIO_MS - EARLY_MS..=FIRST_AUDIO_MS + LATE_MS).contains(&v),
        "{name} = {v} ms, schedule {FIRST_AUDIO_MS} ms"
    );
}

#[test]
fn the_openai_sdk_realtime_client_through_tokentap() {
    let mock = Mock::start(&[]);
    let receiver = OtlpReceiver::start();
    let endpoint = receiver.grpc_endpoint();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_METRICS_EXPORTER", "none"),
    ];
    let tokentap = Tokentap::start_with_env(&["--upstream", &mock.url], &env);
    let mut feed = tokentap.feed();
    let base = format!("http://{}/v1", tokentap.addr);
    let out = run_sdk_script(
        "realtime_openai.py",
        &[
            "--base-url",
            &base,
            "--query",
            "mock_first_audio_ms=300",
            "--query",
            "mock_delta_ms=50",
            "--query",
            "mock_audio_ms=600",
        ],
    );
    let sdk = out["responses"].as_array().expect("responses");
    assert_eq!(sdk.len(), 3, "{out}");
    assert_eq!(sdk[0]["call"], "get_weather");
    assert_eq!(sdk[1]["status"], "cancelled");
    assert_eq!(sdk[2]["status"], "completed");

    let record = loop {
        let r = feed.next_record();
        if r["path"].as_str().is_some_and(|p| p.starts_with("/v1/realtime")) {
            break r;
        }
    };
    assert_eq!(record["status"], 101);
    assert_eq!(record["request"]["operation"], "realtime");
    // The admin API serves the same session.
    let id = record["request_id"].as_str().unwrap();
    let (status, served) = tokentap.admin_get(&format!("/_tokentap/api/requests/{id}"));
    assert_eq!(status, 200);
    assert_eq!(served["realtime"], record["realtime"]);
    let rt = &record["realtime"];
    let responses = rt["responses"].as_array().expect("responses");
    assert_eq!(responses.len(), 3, "{rt}");
    // The Summary's realtime section: per response, over the session's responses.
    let (status, summary) =
        tokentap.admin_get("/_tokentap/api/summary?window=all&group_by=traffic&include_warmup=true");
    assert_eq!(status, 200);
    let section = &summary["realtime"];
    assert_eq!((section["sessions"].as_u64(), section["responses"].as_u64()), (Some(1), Some(3)), "{summary:#}");
    let with_ttfa = responses.iter().filter(|r| r["time_to_first_audio_from_speech_stopped_ms"].is_number()).count();
    assert!(with_ttfa > 0, "{rt}");
    assert_eq!(section["time_to_first_audio_from_speech_stopped_ms"]["count"], with_ttfa, "{section:#}");
    let interrupted = responses.iter().filter(|r| r["interruption"].as_object().is_some_and(|i| !i.is_empty())).count();
    assert!(interrupted > 0, "{rt}");
    assert_eq!(section["responses_interrupted"], interrupted, "{section:#}");
    for (r, s) in responses.iter().zip(sdk) {
        assert_eq!(r["response_id"], s["id"]);
    }
    let (tool, cancelled, answer) = (&responses[0], &responses[1], &responses[2]);

    // The tool call: ready, its output sent, the next response asked for.
    assert_eq!(tool["trigger"], "server_vad");
    let call = &tool["tool_calls"][0];
    assert_eq!(call["name"], "get_weather");
    let (ready, sent, next) = (
        call["ready_ms"].as_f64().unwrap(),
        call["output_sent_ms"].as_f64().unwrap(),
        call["next_response_requested_ms"].as_f64().unwrap(),
    );
    assert!(ready <= sent && sent <= next, "{call}");
    // The function call's arguments are on the same schedule as first audio.
    let created = tool["created_ms"].as_f64().unwrap();
    within_schedule("tool call ready after created", Some(ready - created));

    // The answer after the tool output, interrupted by the second turn.
    assert_eq!(cancelled["trigger"], "client");
    assert_eq!(cancelled["status"], "cancelled");
    within_schedule("time_to_first_audio_from_created_ms", cancelled["time_to_first_audio_from_created_ms"].as_f64());
    assert!(cancelled["interruption"]["speech_started_ms"].is_f64(), "{cancelled}");
    assert!(cancelled["interruption"]["truncate_sent_ms"].is_f64(), "{cancelled}");
    assert_eq!(cancelled["interruption"]["truncated_at_audio_ms"], 50.0);

    // The third response, after server VAD: time to first audio from speech_stopped on the
    // schedule, and from the estimated end of speech no shorter than that.
    assert_eq!(answer["trigger"], "server_vad");
    assert_eq!(answer["status"], "completed");
    within_schedule(
        "time_to_first_audio_from_speech_stopped_ms",
        answer["time_to_first_audio_from_speech_stopped_ms"].as_f64(),
    );
    let from_end = answer["time_to_first_audio_from_speech_end_ms"].as_f64().expect("from speech end");
    assert!(from_end >= answer["time_to_first_audio_from_speech_stopped_ms"].as_f64().unwrap(), "{answer}");
    assert!((answer["audio_ms"].as_f64().unwrap() - 600.0).abs() < 1.0, "{answer}");
    assert_eq!(answer["usage"]["output_audio_tokens"], 12);
    assert_eq!(rt["model"], "gpt-realtime");
    assert_eq!(rt["turn_detection"]["silence_duration_ms"], 500.0);

    // The OTLP spans, decoded with the official protobuf: one trace, a span per response under
    // the session's span, an execute_tool span for the tool gap, the same times to first audio.
    let trace = record["trace_id"].as_str().unwrap().to_string();
    let session_span = record["span_id"].as_str().unwrap().to_string();
    let ok = |r: &tokentap_e2e::otlp_receiver::Received| {
        let spans = r.spans();
        let of_trace: Vec<_> = spans.iter().filter(|s| hex(&s.trace_id) == trace).collect();
        of_trace.iter().filter(|s| s.name.starts_with("realtime_inference")).count() >= 3
            && of_trace.iter().any(|s| s.name == "execute_tool get_weather")
    };
    let received = receiver.wait_for(std::time::Duration::from_secs(60), "realtime spans", ok);
    let spans: Vec<_> = received.spans().into_iter().filter(|s| hex(&s.trace_id) == trace).collect();
    let mut inference: Vec<_> = spans.iter().filter(|s| s.name.starts_with("realtime_inference")).collect();
    inference.sort_by_key(|s| s.start_time_unix_nano);
    inference.dedup_by_key(|s| s.span_id.clone());
    assert_eq!(inference.len(), 3);
    for s in &inference {
        assert_eq!(hex(&s.parent_span_id), session_span);
        assert_eq!(attr_str(&s.attributes, "gen_ai.operation.name"), Some("realtime_inference"));
    }
    within_schedule(
        "span time_to_first_audio_from_speech_stopped_ms",
        attr_f64(&inference[2].attributes, "tokentap.voice.time_to_first_audio_from_speech_stopped_ms"),
    );
    // The same number, up to the last bit serde_json's float parsing may round differently.
    let span_ttfa = attr_f64(&inference[2].attributes, "tokentap.voice.time_to_first_audio_from_speech_stopped_ms")
        .expect("span time to first audio");
    let record_ttfa =
        answer["time_to_first_audio_from_speech_stopped_ms"].as_f64().expect("record time to first audio");
    assert!((span_ttfa - record_ttfa).abs() < 1e-9, "span {span_ttfa} ms, record {record_ttfa} ms");
    let tool_span = spans.iter().find(|s| s.name == "execute_tool get_weather").unwrap();
    assert_eq!(tool_span.parent_span_id, inference[0].span_id);
    assert_eq!(attr_str(&tool_span.attributes, "gen_ai.tool.call.id"), call["call_id"].as_str());
}

#[test]
fn a_trace_context_in_the_query_is_continued_and_never_forwarded() {
    // A browser's WebSocket cannot send headers: the probe puts its traceparent in the URL.
    let upstream = WsUpstream::start();
    let tokentap = Tokentap::start(&upstream.url(), &[]);
    let mut feed = tokentap.feed();
    let (trace, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let session = WsSession {
        path: format!("/v1/realtime?model=m&tokentap_traceparent=00-{trace}-{parent}-01&x=1"),
        client_pieces: vec![frame(true, false, 0x8, Some([1, 2, 3, 4]), &[0x03, 0xE8])],
        server_pieces: vec![frame(true, false, 0x8, None, &[0x03, 0xE8])],
        extensions: None,
        ending: Ending::Close,
    };
    let (upstream_side, end) = upstream.serve(&session);
    let client = run_client(tokentap.addr, &session, || {
        let _ = end.send(());
    });
    assert!(client.head.starts_with("HTTP/1.1 101"), "{}", client.head);
    let up = upstream_side.recv().expect("upstream side");
    let request_line = up.head.lines().next().unwrap_or_default();
    assert_eq!(request_line, "GET /v1/realtime?model=m&x=1 HTTP/1.1", "{}", up.head);
    assert!(!up.head.contains("tokentap_traceparent"), "{}", up.head);
    let injected = up.head.lines().find(|l| l.to_ascii_lowercase().starts_with("traceparent:")).expect("traceparent");
    assert!(injected.contains(&format!("00-{trace}-")), "{injected}");
    let record = feed.next_record_for("/v1/realtime?model=m&x=1");
    assert_eq!(record["trace_id"], trace);
    assert_eq!(record["parent_span_id"], parent);
}
