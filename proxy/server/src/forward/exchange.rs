//! HTTP/1.1 exchanges relayed by tokentap itself: one loop per exchange.
//!
//! pingora's HTTP/1 proxy runs each exchange as two tasks joined by a channel (one reads the
//! client and writes the answer, the other writes the request and reads the answer), so every
//! piece of a streamed answer wakes two tasks and crosses a channel. Here one `select!` loop reads
//! both sides and does what the hooks do, in the same order as pingora's proxy calls them:
//! `upstream_peer`, `connected_to_upstream`, `upstream_request_filter`, then `request_body_filter`
//! for every piece of the request body, `upstream_response_filter` and `response_filter` for the
//! answer's head, and both response body hooks for every piece of the answer. It calls the
//! functions the hooks delegate to (`choose_peer`, `note_connection`, …), not the hooks: a hook
//! is an `async_trait` method, and each call would allocate its future. pingora's transport
//! connector (new connections, TLS) and its HTTP/1 server session on the client's side (framing,
//! smuggling checks, keep-alive, pipelining) are used as they are; the relay between them, the
//! HTTP/1.1 client on the upstream connection (`upstream_client`: the answer read into a buffer of
//! its own, with pingora's client's framing rules, `response_framing`) and the pool of kept-alive
//! upstream connections (`upstream_pool`) are tokentap's.
//!
//! What the loop does as pingora's proxy does:
//! - the request head is sanitized before the hook (`upstream_head`): the headers the client's
//!   `Connection` names dropped (at most 9; more, a protected name or a malformed token refuses the
//!   request), its framing headers dropped (the hook drops the other hop-by-hop ones), and a
//!   body without a length sent chunked;
//! - the request body streams upstream while the answer may already be coming: informational
//!   heads (`100 Continue` to a client that sent `Expect: 100-continue`) are passed on before the
//!   body is sent; once the body is sent the client is watched while the answer streams (a client
//!   that closes ends the exchange at once, bytes of a pipelined next request are kept for it);
//! - an answer without a length to an HTTP/1.1 client is sent chunked; to an HTTP/1.0 client it
//!   ends with the client's connection, with no transfer coding (`write_client_head`), and an
//!   informational head is not passed on to it;
//! - the request is retried once on a new connection when a reused one was stale (the same
//!   decision as `error_while_proxy`, `failure::retry_or_fail`), its body replayed from pingora's
//!   retry buffer (at most 64 KiB; a longer body is never retried);
//! - an upstream connection goes back to the pool only when the request was written whole and
//!   the answer read whole;
//! - every read of the answer waits at most `[timeouts] read_s` (pingora's `read_timeout`); the
//!   head's reads under a timer each (`upstream_client`), the body's under one timer for the
//!   whole exchange (`read_deadline`) instead of one registered and dropped per piece.
//!
//! Left to pingora's proxy (`relays`): HTTP/2 clients, routes that may speak HTTP/2
//! upstream, upgrade requests (WebSocket sessions have their own relay, `tunnel`).
//!
//! One difference: a request body piece is written upstream before the loop reads the upstream
//! again, so an upstream that stops reading the request while it sends a long answer holds the
//! exchange until `[timeouts] write_s` (pingora's two tasks would read the answer meanwhile).

use std::sync::Arc;

use bytes::Bytes;
use pingora::connectors::TransportConnector;
use pingora::http::RequestHeader;
use pingora::protocols::http::HttpTask;
use pingora::proxy::Session;
use pingora::upstreams::peer::{HttpPeer, Peer};
use pingora::{Error, ErrorType, Result};

use crate::config::{Relay, ValidConfig};
use crate::pipeline::UpstreamPoolStats;
use crate::route::Route;

use super::hop_by_hop::CLIENT_FRAMING;
use super::read_deadline::{self, ReadDeadline};
use super::upstream_client::UpstreamClient;
use super::upstream_pool::UpstreamPool;
use super::{RequestCtx, TapProxy};

/// The connector of the exchanges tokentap relays (new connections: TCP, TLS) and their pool of
/// kept-alive connections (`upstream_pool`).
pub(crate) struct Exchanges {
    connector: TransportConnector,
    pool: Arc<UpstreamPool>,
}

impl Exchanges {
    /// `pool_size`: at most this many idle connections kept (pingora's
    /// `upstream_keepalive_pool_size`).
    pub(crate) fn new(connector: TransportConnector, pool_size: usize, stats: Arc<UpstreamPoolStats>) -> Self {
        Self { connector, pool: UpstreamPool::new(pool_size, stats) }
    }

    /// A new connection to `peer` (TCP, TLS), never a pooled one. Its future (the handshakes,
    /// ~8.6 KiB) is boxed: awaited inline it would size the caller's future, and so every open
    /// exchange's memory, for as long as the answer streams.
    pub(super) async fn connect(&self, peer: &HttpPeer) -> Result<UpstreamClient> {
        match Box::pin(self.connector.new_stream(peer)).await {
            Ok(stream) => Ok(UpstreamClient::new(stream)),
            Err(mut e) => {
                e.as_up();
                Err(super::failure::connect_failed(e).into_up())
            }
        }
    }
}

/// Whether tokentap relays this request itself: an HTTP/1.1 or HTTP/1.0 client, no upgrade, a
/// route that speaks HTTP/1 upstream, and `[connections] relay = "tokentap"`.
pub(crate) fn relays(config: &ValidConfig, session: &Session, route: &Route) -> bool {
    relays_head(config, session.req_header().version, session.is_upgrade_req(), route)
}

/// [`relays`], from the parts of the head it reads (`client_connection` decides before pingora
/// parses the head).
pub(super) fn relays_head(config: &ValidConfig, version: http::Version, upgrade: bool, route: &Route) -> bool {
    config.connections.relay == Relay::Tokentap
        && matches!(version, http::Version::HTTP_11 | http::Version::HTTP_10)
        && !upgrade
        && !(route.upstream.tls && route.http2)
}

/// At most this many `Connection` tokens name headers to drop; one more refuses the request
/// (pingora's bound on a hostile header's work).
const MAX_CONNECTION_NOMINATIONS: usize = 10;

/// Whether a byte may appear in an HTTP token (RFC 9110 §5.6.2).
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// The request head as it goes upstream before the hook: HTTP/1.1, the headers the client's
/// `Connection` names dropped, the client's framing headers dropped (the hook then drops the other
/// hop-by-hop ones, `Connection` among them). A `Connection` header that names
/// too many headers, a malformed token, a pseudo-header or a protected header (`host`, the
/// forwarding-origin ones) refuses the request, as pingora's proxy does.
fn upstream_head(request: &mut RequestHeader) -> Result<()> {
    request.set_version(http::Version::HTTP_11);
    let mut nominated: Vec<http::HeaderName> = Vec::new();
    let tokens = request
        .headers
        .get_all(http::header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|token| !token.is_empty());
    for (count, token) in tokens.enumerate() {
        if count + 1 >= MAX_CONNECTION_NOMINATIONS {
            return Err(refused("too many Connection header nominations"));
        }
        if token.first() == Some(&b':') || !token.iter().all(|b| is_token_byte(*b)) {
            return Err(refused("invalid token nominated by the Connection header"));
        }
        let name = http::HeaderName::from_bytes(token)
            .map_err(|_| refused("invalid token nominated by the Connection header"))?;
        if matches!(name.as_str(), "host" | "x-forwarded-for" | "x-forwarded-host" | "x-forwarded-proto") {
            return Err(refused("protected header cannot be nominated by the Connection header"));
        }
        nominated.push(name);
    }
    for name in nominated {
        request.remove_header(&name);
    }
    for name in CLIENT_FRAMING {
        request.remove_header(name);
    }
    Ok(())
}

fn refused(why: &'static str) -> Box<Error> {
    Error::explain(ErrorType::InvalidHTTPHeader, why).into_down()
}

/// The answer's head as the client gets it: an answer without a length (closed by the upstream)
/// is sent chunked, so the client's connection stays open. Not for answers that have no body.
fn frame_client_head(head: &mut pingora::http::ResponseHeader, head_request: bool, end: bool) -> Result<()> {
    let no_body = head_request || matches!(head.status.as_u16(), 204 | 304) || head.status.is_informational();
    if !no_body
        && !end
        && !head.headers.contains_key("transfer-encoding")
        && !head.headers.contains_key("content-length")
    {
        head.set_version(http::Version::HTTP_11);
        head.insert_header("transfer-encoding", "chunked")?;
    }
    Ok(())
}

impl TapProxy {
    /// Relays one HTTP/1.1 exchange (see the module's comment); an error carries its side and is
    /// answered by `fail_to_proxy`, as a proxy error is.
    pub(super) async fn relay_exchange(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<()> {
        // The request body read from the client is kept (at most 64 KiB) for the one retry.
        session.enable_retry_buffering();
        let mut replay = false;
        loop {
            match self.exchange_on_a_connection(session, ctx, replay).await {
                Err(e) if e.retry() => {
                    tracing::warn!(request_id = %ctx.data.request_id, "{}", super::failure::error_message(&e));
                    replay = true;
                }
                done => return done,
            }
        }
    }

    /// One try: a connection from the pool (or a new one), the exchange on it, and the connection
    /// back to the pool when it can serve another request.
    async fn exchange_on_a_connection(&self, session: &mut Session, ctx: &mut RequestCtx, replay: bool) -> Result<()> {
        let peer = self.choose_peer(ctx).await?;
        // A pooled connection first; a new one's future is boxed only when it is needed (a box
        // made for every request would copy its 8.6 KiB into it each time).
        let key = peer.reuse_hash();
        let pooled = self.exchanges.pool.take(key);
        let (mut upstream, reused) = match pooled {
            Some(stream) => (UpstreamClient::new(stream), true),
            None => (self.exchanges.connect(&peer).await?, false),
        };
        upstream.read_timeout = peer.options.read_timeout;
        upstream.write_timeout = peer.options.write_timeout;
        let exchanged = self.exchange(session, &mut upstream, reused, ctx, replay).await;
        if exchanged.is_ok() {
            // The stale probe reads this connection's descriptor (no duplicate): never after the
            // connection is let go. A failure's retry decision reads it below, before that.
            ctx.stale_probe = None;
        }
        match exchanged {
            Ok(true) => {
                if let (Some(stream), Some(idle)) = (upstream.reuse().await, peer.idle_timeout()) {
                    self.exchanges.pool.give_back(key, stream, idle);
                }
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(e) => Err(self.retry_or_fail(&peer, session, e, ctx, reused)),
        }
    }

    /// The exchange on one upstream connection; `Ok(true)` when the connection can be reused.
    async fn exchange(
        &self,
        session: &mut Session,
        upstream: &mut UpstreamClient,
        reused: bool,
        ctx: &mut RequestCtx,
        replay: bool,
    ) -> Result<bool> {
        let digest = (!reused).then(|| upstream.digest());
        super::upstream::note_connection(self, reused, upstream.id(), digest.as_ref(), ctx)?;

        let mut request = session.req_header().clone();
        upstream_head(&mut request)?;
        self.write_upstream_head(session, &mut request, ctx)?;
        let body_empty = session.is_body_empty();
        if !body_empty && !request.headers.contains_key("content-length") {
            request.insert_header("transfer-encoding", "chunked")?;
        }
        let head_request = request.method == http::Method::HEAD;
        upstream.write_head(&request).await.map_err(|e| e.into_up())?;

        let mut request_done = false;
        if replay {
            // The retry: what the client sent so far goes again (its hooks ran the first time).
            if let Some(sent) = session.get_retry_buffer().filter(|b| !b.is_empty()) {
                upstream.write_body(&sent).await.map_err(|e| e.into_up())?;
            }
            if body_empty || session.is_body_done() {
                upstream.finish_body().await.map_err(|e| e.into_up())?;
                request_done = true;
            }
        } else if body_empty {
            self.stamp_request_piece(None, true, ctx)?;
            upstream.finish_body().await.map_err(|e| e.into_up())?;
            request_done = true;
        }

        let mut response_done = false;
        // The request could not be written whole: the answer may still come, the connection is
        // not reused, and an answer that does not come fails with this error.
        let mut send_error: Option<Box<Error>> = None;
        // The body's read timeout, from the final head on (pingora's, per read, until then).
        let mut body_deadline: Option<ReadDeadline> = None;
        while !request_done || !response_done {
            if !response_done {
                super::body::before_upstream_read(ctx);
                if let Some(deadline) = body_deadline.as_mut() {
                    deadline.read_starts();
                }
            }
            tokio::select! {
                // The request body, then (while the answer streams) the client watched: a close
                // ends the exchange, a pipelined next request's bytes are kept for it.
                piece = session.downstream_session.read_body_or_idle(request_done) => {
                    let piece = piece.map_err(|e| e.into_down())?;
                    if request_done {
                        continue;
                    }
                    let end = piece.is_none() || session.is_body_done();
                    self.stamp_request_piece(piece.as_ref(), end, ctx)?;
                    if send_error.is_none() {
                        if let Err(e) = send_body(upstream, piece, end).await {
                            if response_done {
                                // The answer is complete: the rest of the request is not needed.
                                return Ok(false);
                            }
                            send_error = Some(e);
                        }
                    }
                    request_done = end;
                }
                task = upstream.read_task(), if !response_done => {
                    let task = match task {
                        Ok(task) => task,
                        Err(e) => return Err(send_error.take().unwrap_or(e).into_up()),
                    };
                    if matches!(&task, HttpTask::Header(head, false) if !head.status.is_informational()) {
                        body_deadline = upstream.read_timeout.take().map(ReadDeadline::new);
                    }
                    ctx.read_buffer = Some(upstream.read_buffer());
                    response_done = self.deliver_task(session, task, head_request, ctx).await?;
                }
                timeout = read_deadline::expired(&mut body_deadline), if !response_done && body_deadline.is_some() => {
                    let e = Error::explain(ErrorType::ReadTimedout, format!("reading body, timeout: {timeout:?}"));
                    return Err(send_error.take().unwrap_or(e).into_up());
                }
            }
            if send_error.is_some() && !response_done {
                // Nothing more goes upstream; the answer is still read.
                request_done = true;
            }
        }
        Ok(send_error.is_none())
    }

    /// One task read from the upstream, through the hooks to the client; `Ok(true)` once the
    /// answer is complete.
    async fn deliver_task(
        &self,
        session: &mut Session,
        task: HttpTask,
        head_request: bool,
        ctx: &mut RequestCtx,
    ) -> Result<bool> {
        match task {
            HttpTask::Header(mut head, end) => {
                super::response_head::take_upstream_head(session, &mut head, ctx)?;
                if head.status.is_informational() {
                    // Passed on as it came (`100 Continue` among them); the answer follows. Never
                    // to an HTTP/1.0 client (RFC 9110 §15.2).
                    if session.req_header().version == http::Version::HTTP_11 {
                        session.write_response_header(head, false).await.map_err(|e| e.into_down())?;
                    }
                    return Ok(false);
                }
                frame_client_head(&mut head, head_request, end)?;
                self.write_client_head(session, &mut head, ctx)?;
                session.write_response_header(head, end).await.map_err(|e| e.into_down())?;
                if end {
                    self.deliver(session, None, true, ctx).await?;
                }
                Ok(end)
            }
            HttpTask::Body(piece, end) => {
                let end = end || piece.is_none();
                self.deliver(session, piece, end, ctx).await?;
                Ok(end)
            }
            // HTTP/1 trailers are not passed on (nor by pingora's proxy): the answer is over.
            HttpTask::Done | HttpTask::Trailer(_) => {
                self.deliver(session, None, true, ctx).await?;
                Ok(true)
            }
            HttpTask::Failed(e) => Err(e.into_up()),
            HttpTask::UpgradedBody(..) => {
                Err(Error::explain(ErrorType::InvalidHTTPHeader, "an upgraded body without an upgrade").into_up())
            }
        }
    }
}

/// A piece of the request body upstream, and the body's end when it ends.
async fn send_body(upstream: &mut UpstreamClient, piece: Option<Bytes>, end: bool) -> Result<()> {
    if let Some(bytes) = piece.filter(|b| !b.is_empty()) {
        upstream.write_body(&bytes).await.map_err(|e| e.into_up())?;
    }
    if end {
        upstream.finish_body().await.map_err(|e| e.into_up())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> RequestHeader {
        let mut request = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
        for (name, value) in headers {
            request.append_header(name.to_string(), *value).unwrap();
        }
        request
    }

    /// The head as the relay sends it: `upstream_head`, then the hook's hop-by-hop drop.
    #[test]
    fn the_upstream_head_drops_hop_by_hop_and_nominated_headers() {
        /// Client headers, headers present upstream, headers absent upstream.
        type Case = (&'static [(&'static str, &'static str)], &'static [&'static str], &'static [&'static str]);
        let cases: &[Case] = &[
            (
                &[("connection", "keep-alive, X-Hop"), ("x-hop", "1"), ("keep-alive", "timeout=5"), ("x-kept", "1")],
                &["x-kept"],
                &["connection", "x-hop", "keep-alive"],
            ),
            (
                &[("transfer-encoding", "chunked"), ("te", "trailers"), ("trailer", "x"), ("upgrade", "h2c")],
                &[],
                &["transfer-encoding", "te", "trailer", "upgrade"],
            ),
            (
                &[("proxy-authorization", "Basic x"), ("proxy-connection", "keep-alive"), ("http2-settings", "AA")],
                &[],
                &["proxy-authorization", "proxy-connection", "http2-settings"],
            ),
            (&[("connection", ", ,close"), ("content-length", "2")], &["content-length"], &["connection"]),
        ];
        for (headers, present, absent) in cases {
            let mut head = request(headers);
            upstream_head(&mut head).unwrap();
            super::super::hop_by_hop::drop_from(&mut head, false);
            assert_eq!(head.version, http::Version::HTTP_11);
            for name in *present {
                assert!(head.headers.contains_key(*name), "{name} kept: {headers:?}");
            }
            for name in *absent {
                assert!(!head.headers.contains_key(*name), "{name} dropped: {headers:?}");
            }
        }
    }

    #[test]
    fn a_hostile_connection_header_refuses_the_request() {
        let nine = "a,b,c,d,e,f,g,h,i";
        assert!(upstream_head(&mut request(&[("connection", nine)])).is_ok());
        let cases = [
            "a,b,c,d,e,f,g,h,i,j",
            "Host",
            "close, X-Forwarded-For",
            "x-forwarded-proto",
            ":authority",
            "\"x-forwarded-for\"",
            "x y",
        ];
        for value in cases {
            let e = upstream_head(&mut request(&[("connection", value)])).unwrap_err();
            assert_eq!(e.esource(), &pingora::ErrorSource::Downstream, "{value}");
        }
    }

    #[test]
    fn an_answer_without_a_length_is_sent_chunked_unless_it_has_no_body() {
        let head = |status: u16, headers: &[(&str, &str)]| {
            let mut head = pingora::http::ResponseHeader::build(status, None).unwrap();
            head.set_version(http::Version::HTTP_10);
            for (name, value) in headers {
                head.append_header(name.to_string(), *value).unwrap();
            }
            head
        };
        let chunked = |h: &pingora::http::ResponseHeader| h.headers.get("transfer-encoding").is_some();
        let mut plain = head(200, &[]);
        frame_client_head(&mut plain, false, false).unwrap();
        assert!(chunked(&plain) && plain.version == http::Version::HTTP_11);
        for (mut h, head_request, end) in [
            (head(200, &[("content-length", "3")]), false, false),
            (head(204, &[]), false, false),
            (head(304, &[]), false, false),
            (head(200, &[]), true, false),
            (head(200, &[]), false, true),
        ] {
            frame_client_head(&mut h, head_request, end).unwrap();
            assert!(!chunked(&h), "{} {head_request} {end}", h.status);
        }
    }
}
