//! A client's connection, served by tokentap: each request head is read first, then either
//! tokentap serves the request itself or pingora's proxy serves it (and the rest of the
//! connection).
//!
//! pingora's HTTP application runs every request of a connection through pingora-proxy's
//! per-request future (`HttpProxy::process_new_http`: about 17 KiB, boxed per request, with a
//! boxed future for every hook it calls), even when tokentap relays the exchange itself
//! (`exchange`, `tunnel`) or answers it (`internal`, the 404 of an unrouted path). Here the
//! connection's own loop does for those requests what pingora's proxy does around its
//! `request_filter` hook: pingora's HTTP/1 server session reads and validates the head (framing,
//! smuggling checks, keep-alive, pipelining), `take_request_head` serves the request, `complete`
//! records it, and a failure is answered and logged as pingora's proxy answers and logs it
//! (`answer_failure`, `quiet_error_log`). The request's futures live in the connection's task,
//! not in boxes of their own.
//!
//! Who serves a request is decided from its head's bytes before pingora's session parses them
//! (`TapProxy::serves_itself`, the decisions `take_request_head` makes): the bytes read are handed
//! to the session as a pipelined prefix, so nothing is read twice from the socket and every byte
//! reaches the session that serves the request. A request tokentap does not serve (a route that
//! may speak HTTP/2 upstream, an upgrade other than a bodyless WebSocket handshake, `CONNECT`, a
//! head pingora's parser must judge) goes to pingora's proxy with its bytes, and pingora's proxy
//! serves the rest of that connection, as it serves every connection when `[connections] relay =
//! "pingora"`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::BytesMut;
use pingora::apps::{HttpServerApp, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::Stream;
use pingora::proxy::{HttpProxy, Session};
use pingora::server::ShutdownWatch;
use pingora::{Error, ErrorType};
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;

use super::{failure, PingoraHooks, TapProxy};
use crate::admission::ConnectionStats;
use crate::config::Relay;

/// pingora's limits on a request head: its bytes and its header lines. A head past them is left
/// to pingora's parser, which refuses it.
const MAX_HEAD_BYTES: usize = 1_048_575;
const MAX_HEAD_LINES: usize = 256;
/// The first read's room (pingora's session starts with the same).
const HEAD_BUFFER_BYTES: usize = 4096;
/// How long a kept-alive connection may wait for its next request, as pingora's HTTP application
/// sets it (`[connections] keepalive_idle_s` ends it sooner, `admission`).
const KEEPALIVE_S: u64 = 60;

/// The proxy listener's application: tokentap's connection loop, with pingora's proxy for the
/// requests tokentap does not serve itself.
pub(crate) struct ClientConnections {
    tap: Arc<TapProxy>,
    proxy: Arc<HttpProxy<PingoraHooks>>,
    /// `[connections] relay = "pingora"`: every connection is pingora's.
    pingora_only: bool,
    stats: Arc<ConnectionStats>,
    /// Set when the service stops: a connection that waits for its next request closes.
    closing: AtomicBool,
    closed: Notify,
}

impl ClientConnections {
    pub(crate) fn new(tap: Arc<TapProxy>, proxy: HttpProxy<PingoraHooks>, stats: Arc<ConnectionStats>) -> Self {
        let pingora_only = tap.config.connections.relay == Relay::Pingora;
        let (closing, closed) = (AtomicBool::new(false), Notify::new());
        Self { tap, proxy: Arc::new(proxy), pingora_only, stats, closing, closed }
    }
}

/// Whether the bytes from `scanned` on (with the two before) hold a line feed followed by a blank
/// line: `\n\n` or `\n\r\n` (httparse ends a head at either).
fn may_end(bytes: &[u8], scanned: usize) -> bool {
    let from = scanned.saturating_sub(2);
    memchr::memchr_iter(b'\n', &bytes[from..]).any(|at| {
        let rest = &bytes[from + at + 1..];
        rest.first() == Some(&b'\n') || rest.starts_with(b"\r\n")
    })
}

/// A request head's bytes as they arrived, and who serves the request.
enum Arrival {
    /// The client closed (or its connection failed) before a head was complete.
    Closed,
    /// A head (and whatever followed it in the same reads).
    Head { bytes: BytesMut, ours: bool },
}

#[async_trait]
impl ServerApp for ClientConnections {
    async fn process_new(self: &Arc<Self>, stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        if self.pingora_only {
            return ServerApp::process_new(&self.proxy, stream, shutdown).await;
        }
        let mut stream = stream;
        let mut prefix = None;
        loop {
            let bytes = match self.next_head(&mut stream, prefix.take()).await {
                Arrival::Closed => return None,
                Arrival::Head { bytes, ours: false } => return self.leave_to_pingora(stream, bytes, shutdown).await,
                Arrival::Head { bytes, ours: true } => bytes,
            };
            (stream, prefix) = self.serve(stream, bytes, shutdown).await?;
        }
    }

    async fn cleanup(&self) {
        self.closing.store(true, Ordering::Release);
        self.closed.notify_waiters();
        ServerApp::cleanup(&*self.proxy).await;
    }
}

impl ClientConnections {
    /// Reads until a request head is complete (starting with bytes read with the request before),
    /// and decides who serves it. A connection that waits for its next request closes when the
    /// service stops, as pingora's does.
    async fn next_head(&self, stream: &mut Stream, prefix: Option<BytesMut>) -> Arrival {
        let mut bytes = prefix.unwrap_or_default();
        // Parsed up to here without an end: a head is parsed again only once a blank line may
        // have come (a head trickled in a byte at a time is not parsed once per byte).
        let mut scanned = 0;
        loop {
            // Past pingora's limit without an end (a head that never ends): parsed once more, and
            // left to pingora's parser, which refuses it; never read further.
            if !bytes.is_empty() && (scanned == 0 || bytes.len() > MAX_HEAD_BYTES || may_end(&bytes, scanned)) {
                scanned = bytes.len();
                let mut lines = [httparse::EMPTY_HEADER; MAX_HEAD_LINES];
                let mut head = httparse::Request::new(&mut lines);
                let ours = match head.parse(&bytes) {
                    Ok(httparse::Status::Complete(_)) => Some(self.tap.serves_itself(&head)),
                    Ok(httparse::Status::Partial) if bytes.len() <= MAX_HEAD_BYTES => None,
                    // Too long, or not a head httparse reads as it is: pingora's parser judges it.
                    _ => Some(false),
                };
                if let Some(ours) = ours {
                    // The buffer stays alive as long as the request (pingora's session keeps the
                    // head's values in it): a head that left most of it empty moves to a buffer
                    // of its own size (a copy of a few hundred bytes, 3 KiB less per request).
                    if bytes.capacity() - bytes.len() >= HEAD_BUFFER_BYTES / 4 {
                        bytes = BytesMut::from(&bytes[..]);
                    }
                    return Arrival::Head { bytes, ours };
                }
            }
            if bytes.capacity() == bytes.len() {
                bytes.reserve(HEAD_BUFFER_BYTES.max(bytes.len()));
            }
            let read = if bytes.is_empty() {
                let closed = self.closed.notified();
                tokio::pin!(closed);
                closed.as_mut().enable();
                if self.closing.load(Ordering::Acquire) {
                    return Arrival::Closed;
                }
                tokio::select! {
                    biased;
                    read = stream.read_buf(&mut bytes) => read,
                    _ = closed => return Arrival::Closed,
                }
            } else {
                stream.read_buf(&mut bytes).await
            };
            match read {
                Ok(0) if bytes.is_empty() => return Arrival::Closed,
                // A head cut short: pingora's session reads the same end and says so.
                Ok(0) => return Arrival::Head { bytes, ours: true },
                Ok(_) => {}
                Err(e) => {
                    // A head deadline (`admission`) or a broken connection.
                    tracing::debug!(error = %e, "client connection closed while a request head was awaited");
                    return Arrival::Closed;
                }
            }
        }
    }

    /// One request served by tokentap; the connection and the bytes read past the request when
    /// it can serve another.
    async fn serve(
        &self,
        stream: Stream,
        bytes: BytesMut,
        shutdown: &ShutdownWatch,
    ) -> Option<(Stream, Option<BytesMut>)> {
        let mut session = Session::new_h1(stream);
        if let ServerSession::H1(h1) = session.downstream_session.as_mut() {
            h1.set_pipelined_prefix(bytes);
        }
        session.set_keepalive((!*shutdown.borrow()).then_some(KEEPALIVE_S));
        match session.downstream_session.read_request().await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(mut e) => {
                // As pingora's proxy answers a head it cannot read.
                e.as_down();
                if matches!(e.etype(), ErrorType::InvalidHTTPHeader) {
                    tracing::debug!("bad request head: {e}");
                    if let Err(e) = session.downstream_session.respond_error(400).await {
                        tracing::debug!("cannot answer a bad request head: {e}");
                    }
                } else {
                    tracing::error!("Fail to proxy: {e}, downstream session type: HTTP/1");
                }
                session.downstream_session.shutdown().await;
                return None;
            }
        }
        let tap = &*self.tap;
        let mut ctx = tap.new_ctx();
        let served = match tap.take_request_head(&mut session, &mut ctx).await {
            Ok(true) => Ok(()),
            // `serves_itself` and `take_request_head` decide alike; a request left over is a
            // fault of tokentap's, answered as one.
            Ok(false) => Err(Error::explain(ErrorType::InternalError, "a request tokentap took was left to pingora")),
            Err(e) => Err(e),
        };
        let reusable = match served {
            Ok(()) => {
                tap.complete(&mut session, None, &mut ctx).await;
                true
            }
            Err(e) => {
                let answer = tap.answer_failure(&mut session, &e, &ctx).await;
                if !failure::quiet_error_log(&ctx, &e, || tap.request_summary(&session)) {
                    tracing::error!(
                        "Fail to filter request: {e}, status: {}, {}",
                        answer.error_code,
                        tap.request_summary(&session)
                    );
                }
                tap.complete(&mut session, Some(&e), &mut ctx).await;
                answer.can_reuse_downstream
            }
        };
        drop(ctx);
        if !reusable {
            session.downstream_session.shutdown().await;
            return None;
        }
        let Session { downstream_session, .. } = session;
        let reused = downstream_session.finish().await.ok().flatten()?;
        Some(reused.into_parts())
    }

    /// The request whose head is `bytes`, and every later one on the connection, served by
    /// pingora's proxy (its HTTP application's loop, as for any connection of its own).
    async fn leave_to_pingora(&self, stream: Stream, bytes: BytesMut, shutdown: &ShutdownWatch) -> Option<Stream> {
        self.stats.handed_to_pingora.fetch_add(1, Ordering::Relaxed);
        let mut session = ServerSession::new_http1(stream);
        if let ServerSession::H1(h1) = &mut session {
            h1.set_pipelined_prefix(bytes);
        }
        session.set_keepalive((!*shutdown.borrow()).then_some(KEEPALIVE_S));
        let mut next = self.proxy.process_new_http(session, shutdown).await;
        while let Some((stream, settings)) = next.map(|reused| reused.consume()) {
            let mut session = ServerSession::new_http1(stream);
            if let Some(settings) = settings {
                settings.apply_to_session(&mut session);
            }
            next = self.proxy.process_new_http(session, shutdown).await;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether httparse finds a complete head in `bytes`.
    fn complete(bytes: &[u8]) -> bool {
        let mut lines = [httparse::EMPTY_HEADER; MAX_HEAD_LINES];
        matches!(httparse::Request::new(&mut lines).parse(bytes), Ok(httparse::Status::Complete(_)))
    }

    /// A head that arrives in any pieces is parsed again on the read that completes it: the
    /// head is never left waiting for bytes that will not come.
    #[test]
    fn the_read_that_completes_a_head_is_always_parsed() {
        let heads: [&[u8]; 4] = [
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}",
            b"GET /v1/lf HTTP/1.1\nHost: t\n\nGET",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET /mixed HTTP/1.1\nHost: t\r\n\r\n",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for head in heads {
            for _ in 0..2_000 {
                // Random reads: each piece 1 to 8 bytes.
                let mut arrived = 0;
                let mut scanned = 0;
                let mut found = false;
                while arrived < head.len() {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    arrived = (arrived + 1 + (state >> 61) as usize).min(head.len());
                    let bytes = &head[..arrived];
                    if scanned == 0 || may_end(bytes, scanned) {
                        scanned = bytes.len();
                        if complete(bytes) {
                            found = true;
                            break;
                        }
                    } else {
                        assert!(!complete(bytes), "a complete head not parsed: {:?}", String::from_utf8_lossy(bytes));
                    }
                }
                assert!(found, "{:?}", String::from_utf8_lossy(head));
            }
        }
    }

    #[test]
    fn only_a_blank_line_may_end_a_head() {
        assert!(!may_end(b"GET / HTTP/1.1\r\nHost: t\r\n", 0));
        assert!(may_end(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n", 0));
        assert!(may_end(b"GET / HTTP/1.1\nHost: t\n\n", 0));
        // The blank line's bytes split across reads: the two bytes before are looked at again.
        assert!(may_end(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n", 26));
        assert!(!may_end(b"GET / HTTP/1.1\r\nHost: t\r\nX: 1", 26));
    }
}
