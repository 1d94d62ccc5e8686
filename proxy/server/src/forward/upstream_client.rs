//! The relay's HTTP/1.1 client on one upstream connection: the request written (head, body as
//! the client sends it, chunked when it has no length) and the answer read into a buffer of its
//! own, sized to what arrives, with the framing of `response_framing`. Each piece of the answer is
//! a `Bytes` that shares that buffer: no allocation and no copy per piece (pingora's client read
//! every answer's body into a 64 KiB buffer of its own, allocated per response, and copied each
//! piece out of it).
//!
//! The buffer starts with room for 4 KiB (a head and, most often, a whole unstreamed body); a read
//! that fills all the room it had doubles the next buffer's size, up to 64 KiB, so a large answer is
//! read in few system calls, and a read of less than a quarter of its room halves it, down to
//! 1 KiB, so an open stream of small events waits for its next event in a 1 KiB buffer, not a
//! 4 KiB one (the smaller size takes effect when the current buffer is used up and nothing is left
//! in it). A body that did not come with its head starts in a new buffer: of its length when the
//! head gives one, of 1 KiB for a stream of events; the head itself is copied out of the read
//! buffer (`response_framing::take_head`), since it lives as long as the answer and would keep the
//! buffer alive. A piece kept for analysis keeps its buffer alive, and the kept-bytes
//! budget is charged the whole buffer once (`read_buffer`, `timeline::ReadBuffer`); the pieces of
//! at most 512 bytes, most streamed events, are copied into shared buffers by the body hook.
//!
//! Whether the connection can serve another request follows pingora's client: not after a body
//! that ends at the close, bytes after the body's end, an HTTP/1.0 answer with a transfer coding,
//! `Connection: close` on either side, or an HTTP/1.0 answer without `Connection: keep-alive`.
//!
//! An upgrade request (`Upgrade`, HTTP/1.1) answered by an HTTP/1.1 `101` switches the connection,
//! as pingora's client does: the bytes after the `101` (those read with it among them) are the
//! upstream's half of the tunnel, read until the upstream closes, and what is written after it goes
//! as it is. A switched connection is never reused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::FutureExt;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::v1::client::http_req_header_to_wire;
use pingora::protocols::http::HttpTask;
use pingora::protocols::{Digest, Stream, UniqueIDType};
use pingora::{Error, ErrorType, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::timeline::ReadBuffer;

use super::response_framing::{content_length, is_chunked, take_head, BodyDecoder, Framing, Step};

/// The room of the first read buffer.
const FIRST_BUFFER: usize = 4 * 1024;
/// The largest read buffer.
const MAX_BUFFER: usize = 64 * 1024;
/// The smallest read buffer (two or three server-sent events of the usual size).
const MIN_BUFFER: usize = 1024;
/// A read always has at least this much room (a server-sent event of the usual size, 150–400
/// bytes, arrives in one read); a buffer with less left is replaced.
const MIN_ROOM: usize = 512;

const PREMATURE_BODY_END: ErrorType = ErrorType::Custom("PrematureBodyEnd");

/// The number of the next read buffer (`ReadBuffer::id`).
static NEXT_BUFFER: AtomicU64 = AtomicU64::new(1);

/// How the request's body goes upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RequestBody {
    Chunked,
    /// This many bytes still to write.
    Length(u64),
    Finished,
    /// After a `101`: the client's bytes as they are, until the tunnel ends.
    Upgraded,
}

/// One upstream connection's exchange (see the module's comment).
pub(super) struct UpstreamClient {
    stream: Stream,
    buf: BytesMut,
    /// The room the next buffer gets.
    buffer_size: usize,
    /// The buffer pieces are split from now: its number and its capacity when it was made.
    buffer: ReadBuffer,
    /// Each read of the head waits at most this long (`[timeouts] read_s`); the relay takes it
    /// once the final head is read and times the body's reads itself.
    pub(super) read_timeout: Option<Duration>,
    /// Each write waits at most this long (`[timeouts] write_s`).
    pub(super) write_timeout: Option<Duration>,
    request_body: RequestBody,
    request_close: bool,
    head_request: bool,
    /// The request asks to switch protocols (`Upgrade`, HTTP/1.1).
    upgrade_request: bool,
    /// A `101` switched the connection.
    upgraded: bool,
    /// The final answer's body, once its head is read.
    body: Option<BodyDecoder>,
    /// What was decoded ahead of the last piece, to tell whether that piece ended the body: the
    /// next piece, or the framing error found after it (the piece goes to the client first).
    ahead: Option<Result<bytes::Bytes>>,
    keepalive: bool,
    /// A read error that came right after bytes read in the same `fill`: returned by the next.
    deferred_error: Option<std::io::Error>,
}

/// What the `Connection` headers say of keep-alive: `Some(false)` for a `close` token,
/// `Some(true)` for `keep-alive` (and no `close`), `None` when they say neither.
fn connection_keepalive(headers: &http::HeaderMap) -> Option<bool> {
    let mut said = None;
    let tokens = headers.get_all(http::header::CONNECTION).iter().flat_map(|v| v.as_bytes().split(|b| *b == b','));
    for token in tokens.map(<[u8]>::trim_ascii) {
        if token.eq_ignore_ascii_case(b"close") {
            return Some(false);
        }
        if token.eq_ignore_ascii_case(b"keep-alive") {
            said = Some(true);
        }
    }
    said
}

impl UpstreamClient {
    pub(super) fn new(stream: Stream) -> Self {
        Self {
            stream,
            buf: BytesMut::new(),
            buffer_size: FIRST_BUFFER,
            buffer: ReadBuffer { id: 0, capacity: 0 },
            read_timeout: None,
            write_timeout: None,
            request_body: RequestBody::Finished,
            request_close: false,
            head_request: false,
            upgrade_request: false,
            upgraded: false,
            body: None,
            ahead: None,
            keepalive: false,
            deferred_error: None,
        }
    }

    /// The buffer the last piece was split from (what a piece kept by reference keeps alive).
    pub(super) fn read_buffer(&self) -> ReadBuffer {
        self.buffer
    }

    /// The connection's descriptor.
    pub(super) fn id(&self) -> UniqueIDType {
        self.stream.id()
    }

    /// The connect and TLS handshake times of a new connection (pingora's digest).
    pub(super) fn digest(&self) -> Digest {
        Digest {
            ssl_digest: self.stream.get_ssl_digest(),
            timing_digest: self.stream.get_timing_digest(),
            ..Default::default()
        }
    }

    /// Writes `parts` and flushes, each write under the write timeout.
    async fn write(&mut self, parts: &[&[u8]], what: &'static str) -> Result<()> {
        let stream = &mut self.stream;
        let write = async {
            for part in parts {
                stream.write_all(part).await?;
            }
            stream.flush().await
        };
        let written = match self.write_timeout {
            Some(t) => match tokio::time::timeout(t, write).await {
                Ok(written) => written,
                Err(_) => return Err(Error::explain(ErrorType::WriteTimedout, what)),
            },
            None => write.await,
        };
        written.map_err(|e| Error::because(ErrorType::WriteError, what, e))
    }

    /// Writes the request head; the body follows by [`Self::write_body`] and
    /// [`Self::finish_body`].
    pub(super) async fn write_head(&mut self, request: &RequestHeader) -> Result<()> {
        let headers = &request.headers;
        // As pingora's client: chunked when it is the last coding, else the length, else none
        // (the client's own framing was checked by pingora's server session).
        self.request_body = if is_chunked(headers) {
            RequestBody::Chunked
        } else {
            RequestBody::Length(content_length(headers).unwrap_or(0))
        };
        self.request_close = connection_keepalive(headers) == Some(false);
        self.head_request = request.method == http::Method::HEAD;
        self.upgrade_request = request.version == http::Version::HTTP_11 && headers.contains_key(http::header::UPGRADE);
        let wire = http_req_header_to_wire(request).ok_or_else(|| {
            Error::explain(
                ErrorType::InvalidHTTPHeader,
                "a request line with forbidden bytes or an unsupported version",
            )
        })?;
        self.write(&[&wire], "while writing the request head").await
    }

    /// Writes a piece of the request body (chunked, or within its length).
    pub(super) async fn write_body(&mut self, piece: &[u8]) -> Result<()> {
        if piece.is_empty() {
            return Ok(());
        }
        match self.request_body {
            RequestBody::Chunked => {
                let mut size = [0u8; 18];
                let line = chunk_size_line(piece.len(), &mut size);
                self.write(&[line, piece, b"\r\n"], "while writing the request body").await
            }
            RequestBody::Length(left) => {
                let n = usize::try_from(left).unwrap_or(usize::MAX).min(piece.len());
                if n == 0 {
                    return Ok(());
                }
                self.request_body = RequestBody::Length(left - n as u64);
                self.write(&[&piece[..n]], "while writing the request body").await
            }
            RequestBody::Upgraded => self.write(&[piece], "while writing to the switched connection").await,
            RequestBody::Finished => Ok(()),
        }
    }

    /// Whether a `101` switched the connection (see the module's comment).
    pub(super) fn upgraded(&self) -> bool {
        self.upgraded
    }

    /// Ends the request body (the last chunk of a chunked one).
    pub(super) async fn finish_body(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.request_body, RequestBody::Finished) {
            RequestBody::Chunked => self.write(&[b"0\r\n\r\n"], "while writing the request body's end").await,
            RequestBody::Length(0) | RequestBody::Finished | RequestBody::Upgraded => Ok(()),
            RequestBody::Length(left) => Err(Error::explain(
                PREMATURE_BODY_END,
                format!("the request body ended {left} bytes short of its length"),
            )),
        }
    }

    /// One read into the buffer (a new buffer when the current one has less than a quarter of its
    /// room left, or less than [`MIN_ROOM`]), and the next buffer's size from what the read filled.
    async fn fill(&mut self) -> std::io::Result<usize> {
        if let Some(e) = self.deferred_error.take() {
            return Err(e);
        }
        let room = self.buf.capacity() - self.buf.len();
        if room < (self.buffer.capacity / 4).max(MIN_ROOM) {
            if self.buf.is_empty() && self.buffer_size < self.buffer.capacity {
                // Smaller reads: a smaller buffer (a reserve would keep the size it had).
                self.buf = BytesMut::with_capacity(self.buffer_size);
            } else {
                // A new buffer, or the same one reclaimed when no piece split off it is alive.
                self.buf.reserve(self.buffer_size);
            }
            // A buffer of its own for the pieces kept from now on.
            self.buffer = ReadBuffer { id: NEXT_BUFFER.fetch_add(1, Ordering::Relaxed), capacity: self.buf.capacity() };
        }
        let mut room = self.buf.capacity() - self.buf.len();
        let mut n = self.stream.read_buf(&mut self.buf).await?;
        let mut total = n;
        self.buffer_size = next_buffer_size(self.buffer_size, n, room);
        // A read that filled its room may have left bytes in the socket (a reader behind a
        // burst): they are read at once into more room, so that an event is not cut in two
        // pieces (and two chunks to the client) only because the buffer was small. At most
        // 64 KiB unread (then the next buffer is already the largest).
        while n == room && self.buf.len() < MAX_BUFFER {
            self.buf.reserve(self.buffer_size);
            // The pieces from here on may lie in a new allocation: a buffer of its own.
            self.buffer = ReadBuffer { id: NEXT_BUFFER.fetch_add(1, Ordering::Relaxed), capacity: self.buf.capacity() };
            room = self.buf.capacity() - self.buf.len();
            match self.stream.read_buf(&mut self.buf).now_or_never() {
                Some(Ok(more)) => {
                    n = more;
                    total += more;
                    self.buffer_size = next_buffer_size(self.buffer_size, n, room);
                }
                // The bytes read come first; the error is the next read's.
                Some(Err(e)) => {
                    self.deferred_error = Some(e);
                    break;
                }
                None => break,
            }
        }
        Ok(total)
    }

    /// The next part of the answer: a head (informational ones first), a piece of the body with
    /// whether it ended the body, or the body's end. Safe to cancel: nothing read is lost.
    pub(super) async fn read_task(&mut self) -> Result<HttpTask> {
        if self.body.is_none() {
            return self.read_head().await;
        }
        if let Some(ahead) = self.ahead.take() {
            let piece = ahead?;
            let end = self.decode_end();
            return Ok(HttpTask::Body(Some(piece), end));
        }
        loop {
            let body = self.body.as_mut().expect("the body follows its head");
            match body.decode(&mut self.buf)? {
                Step::Piece(piece) => {
                    let end = self.decode_end();
                    return Ok(HttpTask::Body(Some(piece), end));
                }
                Step::End => return Ok(HttpTask::Done),
                Step::More => {}
            }
            let n = self.fill().await.map_err(|e| Error::because(ErrorType::ReadError, "while reading the body", e))?;
            if n == 0 {
                self.body.as_mut().expect("the body follows its head").at_close()?;
                return Ok(HttpTask::Done);
            }
        }
    }

    /// After a piece: whether the bytes already read end the body. A piece after it, or a framing
    /// error after it, is kept for the next call: the piece before an error is still delivered.
    fn decode_end(&mut self) -> bool {
        let body = self.body.as_mut().expect("the body follows its head");
        if body.done() {
            return true;
        }
        if self.buf.is_empty() || body.until_close() {
            return false;
        }
        match body.decode(&mut self.buf) {
            Ok(Step::End) => true,
            Ok(Step::Piece(next)) => {
                self.ahead = Some(Ok(next));
                false
            }
            Ok(Step::More) => false,
            Err(e) => {
                self.ahead = Some(Err(e));
                false
            }
        }
    }

    async fn read_head(&mut self) -> Result<HttpTask> {
        loop {
            if let Some(head) = take_head(&mut self.buf)? {
                return Ok(self.on_head(head));
            }
            let already = self.buf.len();
            let timeout = self.read_timeout;
            let read = self.fill();
            let read = match timeout {
                Some(t) => match tokio::time::timeout(t, read).await {
                    Ok(read) => read,
                    Err(_) => return Err(Error::explain(ErrorType::ReadTimedout, "while reading the response head")),
                },
                None => read.await,
            };
            match read {
                Ok(0) => {
                    return Err(Error::explain(
                        ErrorType::ConnectionClosed,
                        format!("while reading the response head, bytes already read: {already}"),
                    ))
                }
                Ok(_) => {}
                Err(e) => return Err(Error::because(ErrorType::ReadError, "while reading the response head", e)),
            }
        }
    }

    fn on_head(&mut self, head: Box<ResponseHeader>) -> HttpTask {
        if head.status == http::StatusCode::SWITCHING_PROTOCOLS
            && self.upgrade_request
            && head.version == http::Version::HTTP_11
        {
            // The upstream's half of the tunnel: everything after the head, until it closes.
            self.upgraded = true;
            self.keepalive = false;
            self.request_body = RequestBody::Upgraded;
            self.body = Some(BodyDecoder::new(Framing::UntilClose));
            return HttpTask::Header(head, false);
        }
        if head.status.is_informational() {
            return HttpTask::Header(head, false);
        }
        let framing = Framing::of(&head, self.head_request);
        if self.buf.is_empty() {
            // Nothing of the body came with the head: the read buffer goes (the head has its own
            // bytes), and the body's first buffer is sized to it.
            self.buf = BytesMut::new();
            self.buffer_size = first_body_buffer(framing, &head.headers, self.buffer_size);
        }
        let body = BodyDecoder::new(framing);
        let end = body.done();
        let http10 = head.version == http::Version::HTTP_10;
        self.keepalive = framing != Framing::UntilClose
            && !(http10 && head.headers.contains_key(http::header::TRANSFER_ENCODING))
            && !self.request_close
            && connection_keepalive(&head.headers).unwrap_or(head.version == http::Version::HTTP_11);
        self.body = Some(body);
        HttpTask::Header(head, end)
    }

    /// The connection for the pool when it can serve another request: the answer read whole and
    /// nothing after it; else it is shut down.
    pub(super) async fn reuse(mut self) -> Option<Stream> {
        let complete = self.body.as_ref().is_some_and(BodyDecoder::done);
        if self.keepalive && complete && self.buf.is_empty() && self.ahead.is_none() {
            return Some(self.stream);
        }
        let _ = self.stream.shutdown().await;
        None
    }
}

/// The size of the first buffer of a body that did not start with its head: its length when
/// the head gives one (within 1–64 KiB), the smallest for a stream of events (server-sent events,
/// JSON lines), else what the reads so far made it.
fn first_body_buffer(framing: Framing, headers: &http::HeaderMap, size: usize) -> usize {
    match framing {
        Framing::Length(length) => usize::try_from(length).unwrap_or(MAX_BUFFER).clamp(MIN_BUFFER, MAX_BUFFER),
        Framing::Chunked | Framing::UntilClose
            if tokentap_analysis::is_event_stream_type(
                headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()),
            ) =>
        {
            MIN_BUFFER
        }
        Framing::Chunked | Framing::UntilClose => size,
    }
}

/// The next read buffer's size after a read of `read` bytes into `room`: doubled when the read
/// filled the room, halved when it filled less than a quarter of it, within 1–64 KiB.
fn next_buffer_size(size: usize, read: usize, room: usize) -> usize {
    if read == room {
        (size * 2).min(MAX_BUFFER)
    } else if read > 0 && read * 4 <= room {
        (size / 2).max(MIN_BUFFER)
    } else {
        size
    }
}

/// A chunk's size line (`{size:X}\r\n`) written into `out`.
fn chunk_size_line(size: usize, out: &mut [u8; 18]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut digits = 0;
    let mut rest = size;
    loop {
        digits += 1;
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    for i in 0..digits {
        out[digits - 1 - i] = HEX[(size >> (4 * i)) & 0xf];
    }
    out[digits] = b'\r';
    out[digits + 1] = b'\n';
    &out[..digits + 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_size_line_is_upper_hex() {
        let mut out = [0u8; 18];
        for (size, line) in
            [(0, "0\r\n"), (1, "1\r\n"), (255, "FF\r\n"), (4096, "1000\r\n"), (usize::MAX, "FFFFFFFFFFFFFFFF\r\n")]
        {
            assert_eq!(chunk_size_line(size, &mut out), line.as_bytes());
        }
    }

    #[test]
    fn connection_tokens_say_close_over_keep_alive() {
        let cases: &[(&[&str], Option<bool>)] = &[
            (&[], None),
            (&["close"], Some(false)),
            (&["Keep-Alive"], Some(true)),
            (&["keep-alive, Close"], Some(false)),
            (&["upgrade"], None),
            (&["keep-alive", "close"], Some(false)),
            (&[" keep-alive , x-hop"], Some(true)),
        ];
        for (values, said) in cases {
            let mut headers = http::HeaderMap::new();
            for v in *values {
                headers.append(http::header::CONNECTION, http::HeaderValue::from_str(v).unwrap());
            }
            assert_eq!(connection_keepalive(&headers), *said, "{values:?}");
        }
    }

    /// A client on one end of a pipe; the server's end gets `answer` and is closed when `close`.
    async fn answered(request: &str, answer: &[u8], close: bool) -> (UpstreamClient, tokio::io::DuplexStream) {
        let (client, mut server) = tokio::io::duplex(1 << 20);
        let mut upstream = UpstreamClient::new(Box::new(client));
        let mut head = RequestHeader::build(request, b"/v1/chat/completions", None).unwrap();
        head.insert_header("host", "upstream").unwrap();
        upstream.write_head(&head).await.unwrap();
        upstream.finish_body().await.unwrap();
        server.write_all(answer).await.unwrap();
        if close {
            server.shutdown().await.unwrap();
        }
        (upstream, server)
    }

    /// Every task until the answer's end: heads as their status, pieces as text with the end flag.
    async fn tasks(upstream: &mut UpstreamClient) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            match upstream.read_task().await.unwrap() {
                HttpTask::Header(head, end) => {
                    seen.push(format!("head {} {end}", head.status.as_u16()));
                    if end {
                        return seen;
                    }
                }
                HttpTask::Body(Some(piece), end) => {
                    seen.push(format!("{} {end}", String::from_utf8_lossy(&piece)));
                    if end {
                        return seen;
                    }
                }
                HttpTask::Done => {
                    seen.push("done".into());
                    return seen;
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn answers_are_read_in_pieces_with_the_end_on_the_last_and_reused_when_they_may_be() {
        type Case = (&'static str, &'static str, bool, &'static [&'static str], bool);
        let cases: &[Case] = &[
            (
                "POST",
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
                false,
                &["head 200 false", "hello true"],
                true,
            ),
            (
                "POST",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
                false,
                &["head 200 false", "hello false", " world true"],
                true,
            ),
            (
                "POST",
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                false,
                &["head 100 false", "head 200 false", "ok true"],
                true,
            ),
            ("HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false, &["head 200 true"], true),
            ("POST", "HTTP/1.1 204 No Content\r\n\r\n", false, &["head 204 true"], true),
            // Bytes after the body's end: not a next answer, the connection goes.
            (
                "POST",
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n",
                false,
                &["head 200 false", "ok true"],
                false,
            ),
            (
                "POST",
                "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
                false,
                &["head 200 false", "ok true"],
                false,
            ),
            ("POST", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false, &["head 200 false", "ok true"], false),
            (
                "POST",
                "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
                false,
                &["head 200 false", "ok true"],
                true,
            ),
            (
                "POST",
                "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
                false,
                &["head 200 false", "ok true"],
                false,
            ),
            // Until the close: never reused.
            (
                "POST",
                "HTTP/1.1 200 OK\r\n\r\ndata: 1\n\n",
                true,
                &["head 200 false", "data: 1\n\n false", "done"],
                false,
            ),
        ];
        for (method, answer, close, expected, reused) in cases {
            let (mut upstream, _server) = answered(method, answer.as_bytes(), *close).await;
            assert_eq!(tasks(&mut upstream).await, *expected, "{answer:?}");
            assert_eq!(upstream.reuse().await.is_some(), *reused, "{answer:?}");
        }
    }

    #[tokio::test]
    async fn an_answer_cut_short_fails_as_a_closed_connection() {
        for answer in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe",
            "HTTP/1.1 200",
        ] {
            let (mut upstream, _server) = answered("POST", answer.as_bytes(), true).await;
            let e = loop {
                match upstream.read_task().await {
                    Ok(HttpTask::Done) => panic!("{answer:?} ended"),
                    Ok(_) => {}
                    Err(e) => break e,
                }
            };
            assert_eq!(e.etype(), &ErrorType::ConnectionClosed, "{answer:?}");
        }
    }

    /// A large answer is read in buffers that grow after reads that filled them; each piece lies
    /// within the buffer it is said to come from.
    #[tokio::test]
    async fn buffers_grow_for_a_large_answer_and_pieces_name_theirs() {
        let body = vec![b'x'; 200_000];
        let mut answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        answer.extend_from_slice(&body);
        let (mut upstream, _server) = answered("POST", &answer, false).await;
        let mut read = 0;
        let mut buffers = Vec::new();
        loop {
            match upstream.read_task().await.unwrap() {
                HttpTask::Header(..) => {}
                HttpTask::Body(Some(piece), end) => {
                    let buffer = upstream.read_buffer();
                    assert!(piece.len() <= buffer.capacity, "{} in {buffer:?}", piece.len());
                    if buffers.last() != Some(&buffer) {
                        buffers.push(buffer);
                    }
                    read += piece.len();
                    if end {
                        break;
                    }
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(read, body.len());
        assert!(buffers.windows(2).all(|w| w[0].id < w[1].id), "{buffers:?}");
        let largest = buffers.iter().map(|b| b.capacity).max().unwrap();
        assert!((MAX_BUFFER..2 * MAX_BUFFER).contains(&largest), "{buffers:?}");
    }

    /// A stream of small events is read into 1 KiB buffers: from its first event when the head
    /// says it is a stream of events, after a few buffers otherwise (each reclaimed while no
    /// piece of it is alive); a burst that fills the room grows the next buffer again.
    #[tokio::test]
    async fn buffers_shrink_for_a_stream_of_small_events_and_grow_for_a_burst() {
        for (content_type, first) in [("text/event-stream; charset=utf-8", MIN_BUFFER), ("text/plain", 2 * MIN_BUFFER)]
        {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n");
            let (mut upstream, server) = answered("POST", head.as_bytes(), false).await;
            assert!(matches!(upstream.read_task().await.unwrap(), HttpTask::Header(..)));
            stream_then_burst(upstream, server, first).await;
        }
    }

    async fn stream_then_burst(mut upstream: UpstreamClient, mut server: tokio::io::DuplexStream, first: usize) {
        let event = format!("data: {}\n\n", "x".repeat(250));
        let chunk = format!("{:X}\r\n{event}\r\n", event.len());
        let mut capacities = Vec::new();
        for _ in 0..40 {
            server.write_all(chunk.as_bytes()).await.unwrap();
            match upstream.read_task().await.unwrap() {
                HttpTask::Body(Some(piece), false) => assert_eq!(piece, event.as_bytes()),
                other => panic!("{other:?}"),
            }
            capacities.push(upstream.read_buffer().capacity);
        }
        assert_eq!(capacities[0], first, "{capacities:?}");
        assert!(capacities[20..].iter().all(|c| *c == MIN_BUFFER), "{capacities:?}");
        // A burst of 16 KiB: buffers grow until a read no longer fills them.
        let burst = chunk.repeat(60);
        server.write_all(burst.as_bytes()).await.unwrap();
        let mut read = 0;
        while read < 60 * event.len() {
            match upstream.read_task().await.unwrap() {
                // Bytes waiting in the socket are read before the buffer is decoded: every event
                // comes whole, none cut where a small buffer ended.
                HttpTask::Body(Some(piece), false) => {
                    assert_eq!(piece, event.as_bytes());
                    read += piece.len();
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(read, 60 * event.len());
        assert!(upstream.buffer_size > 4 * MIN_BUFFER, "{}", upstream.buffer_size);
    }

    /// A body that did not come with its head starts in a buffer of its length (within 1–64
    /// KiB); one that did shares the head's read buffer, and the head has bytes of its own.
    #[tokio::test]
    async fn a_body_after_its_head_gets_a_buffer_of_its_length() {
        for (length, capacity) in [(10, MIN_BUFFER), (3000, 3000), (1 << 20, MAX_BUFFER)] {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n");
            let (mut upstream, mut server) = answered("POST", head.as_bytes(), false).await;
            let HttpTask::Header(head, false) = upstream.read_task().await.unwrap() else { panic!() };
            server.write_all(b"x").await.unwrap();
            assert!(matches!(upstream.read_task().await.unwrap(), HttpTask::Body(Some(_), false)));
            assert_eq!(upstream.read_buffer().capacity, capacity, "{length}");
            assert_eq!(head.headers["content-length"], length.to_string().as_str());
        }
        let (mut upstream, _server) = answered("POST", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false).await;
        assert!(matches!(upstream.read_task().await.unwrap(), HttpTask::Header(_, false)));
        assert!(matches!(upstream.read_task().await.unwrap(), HttpTask::Body(Some(_), true)));
        assert_eq!(upstream.read_buffer().capacity, FIRST_BUFFER);
    }

    #[test]
    fn the_next_buffer_doubles_after_a_full_read_and_halves_after_a_small_one() {
        for (size, read, room, next) in [
            (4096, 4096, 4096, 8192),
            (MAX_BUFFER, 100, 100, MAX_BUFFER),
            (4096, 300, 4096, 2048),
            (1024, 300, 1024, 1024),
            (4096, 2000, 3000, 4096),
            (4096, 0, 4096, 4096),
        ] {
            assert_eq!(next_buffer_size(size, read, room), next, "{size} {read} {room}");
        }
    }

    /// Every piece before a framing error reaches the client; the error comes after them.
    #[tokio::test]
    async fn the_pieces_before_a_framing_error_are_read_before_it() {
        let cases = [
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1\r\n!\r\n1\r\n?X",
        ];
        for answer in cases {
            let (mut upstream, _server) = answered("POST", answer.as_bytes(), false).await;
            let mut pieces = String::new();
            let e = loop {
                match upstream.read_task().await {
                    Ok(HttpTask::Header(..)) => {}
                    Ok(HttpTask::Body(Some(piece), end)) => {
                        assert!(!end, "{answer:?}");
                        pieces.push_str(std::str::from_utf8(&piece).unwrap());
                    }
                    Ok(other) => panic!("{other:?}"),
                    Err(e) => break e,
                }
            };
            assert!(matches!(pieces.as_str(), "hello" | "hello!?"), "{answer:?}: {pieces}");
            assert_eq!(e.etype(), &super::super::response_framing::INVALID_CHUNK, "{answer:?}");
            assert!(upstream.reuse().await.is_none());
        }
    }

    #[tokio::test]
    async fn a_request_body_goes_chunked_or_within_its_length() {
        for (headers, pieces, wire_body) in [
            (
                vec![("transfer-encoding", "chunked")],
                vec!["abc", "", "0123456789abcdef"],
                "3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n",
            ),
            (vec![("content-length", "5")], vec!["abc", "defgh"], "abcde"),
        ] {
            let (client, mut server) = tokio::io::duplex(1 << 20);
            let mut upstream = UpstreamClient::new(Box::new(client));
            let mut head = RequestHeader::build("POST", b"/v1", None).unwrap();
            for (name, value) in headers {
                head.insert_header(name, value).unwrap();
            }
            upstream.write_head(&head).await.unwrap();
            for piece in &pieces {
                upstream.write_body(piece.as_bytes()).await.unwrap();
            }
            upstream.finish_body().await.unwrap();
            drop(upstream);
            let mut wire = Vec::new();
            server.read_to_end(&mut wire).await.unwrap();
            let wire = String::from_utf8(wire).unwrap();
            let body = wire.split_once("\r\n\r\n").unwrap().1;
            assert_eq!(body, wire_body, "{wire:?}");
        }
        // A body that ends short of its length is an error.
        let (client, _server) = tokio::io::duplex(1 << 20);
        let mut upstream = UpstreamClient::new(Box::new(client));
        let mut head = RequestHeader::build("POST", b"/v1", None).unwrap();
        head.insert_header("content-length", "5").unwrap();
        upstream.write_head(&head).await.unwrap();
        upstream.write_body(b"abc").await.unwrap();
        assert_eq!(upstream.finish_body().await.unwrap_err().etype(), &PREMATURE_BODY_END);
    }

    /// An upgrade request and the answers it may get: an HTTP/1.1 `101` switches the connection
    /// (what follows the head is the upstream's half, until it closes; the client's bytes go as
    /// they are), anything else does not.
    #[tokio::test]
    async fn a_101_to_an_upgrade_request_switches_the_connection() {
        /// Request headers, the answer, the tasks read, whether the connection switched.
        type Case = (&'static [(&'static str, &'static str)], &'static str, &'static [&'static str], bool);
        let upgrade: &[(&str, &str)] = &[("connection", "Upgrade"), ("upgrade", "websocket")];
        let cases: &[Case] = &[
            // The tunnel's bytes, a response head among them, are not read as HTTP.
            (
                upgrade,
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x01\x02hiHTTP/1.1 200 OK\r\n\r\n",
                &["head 101 false", "\u{1}\u{2}hiHTTP/1.1 200 OK\r\n\r\n false", "done"],
                true,
            ),
            // An HTTP/1.0 `101` switches nothing.
            (upgrade, "HTTP/1.0 101 Switching Protocols\r\n\r\n", &["head 101 false"], false),
            // A refused upgrade is an ordinary answer.
            (
                upgrade,
                "HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\nno",
                &["head 401 false", "no true"],
                false,
            ),
            // A `101` to a request that did not ask for it is informational.
            (
                &[],
                "HTTP/1.1 101 Switching Protocols\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                &["head 101 false", "head 200 false", "ok true"],
                false,
            ),
        ];
        for (headers, answer, expected, switched) in cases {
            let (client, mut server) = tokio::io::duplex(1 << 20);
            let mut upstream = UpstreamClient::new(Box::new(client));
            let mut head = RequestHeader::build("GET", b"/v1/realtime", None).unwrap();
            for (name, value) in *headers {
                head.insert_header(*name, *value).unwrap();
            }
            upstream.write_head(&head).await.unwrap();
            upstream.finish_body().await.unwrap();
            server.write_all(answer.as_bytes()).await.unwrap();
            let mut seen = Vec::new();
            while seen.len() < expected.len() {
                match upstream.read_task().await.unwrap() {
                    HttpTask::Header(head, end) => seen.push(format!("head {} {end}", head.status.as_u16())),
                    HttpTask::Body(Some(piece), end) => {
                        seen.push(format!("{} {end}", piece.iter().map(|b| char::from(*b)).collect::<String>()));
                        if *switched {
                            // The client's bytes go as they are; the upstream's close ends its half.
                            upstream.write_body(b"\x81\x02yo").await.unwrap();
                            server.shutdown().await.unwrap();
                        }
                    }
                    HttpTask::Done => seen.push("done".into()),
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(seen, *expected, "{answer:?}");
            assert_eq!(upstream.upgraded(), *switched, "{answer:?}");
            if *switched {
                let mut wire = Vec::new();
                drop(upstream);
                server.read_to_end(&mut wire).await.unwrap();
                assert!(wire.ends_with(b"\r\n\r\n\x81\x02yo"), "{wire:?}");
            } else if headers.is_empty() {
                assert!(upstream.reuse().await.is_some(), "{answer:?}");
            }
        }
    }
}
