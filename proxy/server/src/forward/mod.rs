//! The pingora proxy: one [`ProxyHttp`] implementation whose hooks are the phases of a request.
//!
//! Architecture invariant: the body hooks (`upstream_response_body_filter`, `response_body_filter`)
//! only read the clock, push a stamp and clone a `Bytes` handle. They never parse, tokenize, lock,
//! allocate per byte, log, or export. Everything else happens in the record pipeline after `logging`.

pub(crate) mod internal;
pub(crate) mod privacy;
pub(crate) mod probe_ingest;
pub(crate) mod stale_connection;
pub(crate) mod tail;
pub(crate) mod tunnel;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::{Digest, SocketDigest, ALPN};
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorSource, ErrorType, Result};

use tokentap_analysis::server_timing::{MAX_TIMING_HEADER_BYTES, TIMING_HEADERS};
use tokentap_record::ack::AckSample;
use tokentap_record::trace::{split_traceparent_query, TraceContext};
use tokentap_record::{ErrorInfo, ErrorSide, HttpProtocol, Outcome, UpstreamConnection};

use crate::config::ValidConfig;
use crate::pages::Pages;
use crate::pipeline::{CompletedRequest, FinalizeQueue};
use crate::request_data::RequestData;
use crate::scheduling_lag::LagProbe;
use internal::ProbeIngest;
use privacy::{redact_path, Redactor};
use tail::{TailWatch, TailWatcher};
use tunnel::Tunnels;

/// Header tokentap adds to responses (when enabled) so a client can find its record.
pub(crate) const REQUEST_ID_HEADER: &str = "x-tokentap-request-id";

/// The error kind of an upstream `101 Switching Protocols` answer to a request that asked for no
/// upgrade (refused: it would make the connection a tunnel tokentap cannot read).
const UNSOLICITED_UPGRADE: &str = "UnsolicitedUpgrade";
/// More than [`MAX_INFORMATIONAL`] 1xx heads before the answer.
const ENDLESS_INFORMATIONAL: &str = "EndlessInformational";

/// At most this many informational (1xx) heads are passed on before the answer, on a plain
/// request as on a WebSocket handshake; an upstream that sends more is answering nothing.
pub(crate) const MAX_INFORMATIONAL: u32 = 16;

/// Hop-by-hop headers (RFC 9110 §7.6.1) that are not forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "trailer",
    "upgrade",
];

/// The proxy application handed to pingora.
pub(crate) struct TapProxy {
    config: Arc<ValidConfig>,
    redactor: Redactor,
    finalize: FinalizeQueue,
    pages: Arc<Pages>,
    ingest: Arc<ProbeIngest>,
    kept: Arc<crate::timeline::KeptBudget>,
    tails: TailWatcher,
    lag_probe: LagProbe,
    tunnels: Tunnels,
}

impl TapProxy {
    pub(crate) fn new(
        config: Arc<ValidConfig>,
        finalize: FinalizeQueue,
        pages: Arc<Pages>,
        lag_probe: LagProbe,
        tunnels: Tunnels,
    ) -> Self {
        let redactor = Redactor::new(&config.privacy.redact_headers);
        let ingest = Arc::new(ProbeIngest::new(config.probe.clone()));
        let kept = finalize.kept_budget();
        let tails = TailWatcher::new(finalize.clone());
        Self { config, redactor, finalize, pages, ingest, kept, tails, lag_probe, tunnels }
    }
}

/// tokentap's 404 for a path no route matches.
async fn write_no_route(session: &mut Session) -> Result<()> {
    let body = Bytes::from(format!(
        "{{\"error\":{{\"type\":\"tokentap_no_route\",\"message\":\"tokentap has no route for path {}\"}}}}",
        serde_json::Value::String(session.req_header().uri.path().to_string())
    ));
    let mut resp = ResponseHeader::build(404, Some(3))?;
    resp.insert_header("content-type", "application/json")?;
    resp.insert_header("content-length", body.len().to_string())?;
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body), true).await?;
    Ok(())
}

/// Everything known about one request while it is in flight: the recorded [`RequestData`] and
/// the forwarding path's own flags.
pub(crate) struct RequestCtx {
    pub data: RequestData,
    /// Served by tokentap itself (pages under /_tokentap/): no record.
    pub internal: bool,
    pub no_route: bool,
    /// `[timeline] enabled`: when false, the request is forwarded and nothing else.
    pub recording: bool,
    /// A WebSocket session relayed by `tunnel` (which logs its own errors).
    pub relayed: bool,
    /// Where the record goes if the request's task is dropped before `logging` (see `Drop`).
    finalize: Option<FinalizeQueue>,
    /// The reused upstream connection's counters until the response head arrives.
    stale_probe: Option<stale_connection::StaleProbe>,
    /// The reused connection was past the server's FIN before anything was written on it.
    closed_before_write: bool,
    /// Retried once on a fresh connection after a stale pooled one (never twice).
    retried_stale_connection: bool,
    /// Informational (1xx) heads passed on so far (at most [`MAX_INFORMATIONAL`]).
    informational: u32,
}

impl RequestCtx {
    fn new() -> Self {
        Self {
            data: RequestData::start(),
            internal: false,
            no_route: false,
            recording: true,
            relayed: false,
            finalize: None,
            stale_probe: None,
            closed_before_write: false,
            retried_stale_connection: false,
            informational: 0,
        }
    }

    fn charge(&mut self, entered: Instant) {
        self.data.hook_ns += entered.elapsed().as_nanos() as u64;
    }
}

/// A request whose task is dropped before `logging` ran still gets its record: at the end of the
/// shutdown grace period pingora drops the tasks of the streams still open (outcome `shutdown`);
/// any other such drop is tokentap's own failure (`proxy_error`). The record keeps everything
/// stamped until then.
impl Drop for RequestCtx {
    fn drop(&mut self) {
        if self.data.open.is_none() {
            // Recorded already (`logging` took the data), or never recording.
            return;
        }
        let Some(finalize) = self.finalize.take() else { return };
        let (outcome, kind, message) = if finalize.shutting_down() {
            (
                Outcome::Shutdown,
                "shutdown",
                "tokentap stopped before the response was complete (the grace period ended)",
            )
        } else {
            (Outcome::ProxyError, "dropped", "the request ended inside tokentap without finishing")
        };
        let error = ErrorInfo { side: ErrorSide::Internal, kind: kind.to_string(), message: message.to_string() };
        finalize.submit_boxed(Box::new(CompletedRequest {
            data: self.data.take(),
            outcome,
            error: Some(error),
            shed: false,
        }));
    }
}

/// A reading of the client socket: the counters, and whether the connection can still
/// acknowledge anything (ESTABLISHED, or CLOSE_WAIT after the client's half-close). A client that
/// closed or reset its socket never acknowledges the tail: watching it would only burn CPU.
struct SocketReading {
    sample: AckSample,
    open: bool,
}

const TCP_ESTABLISHED: u8 = 1;
const TCP_CLOSE_WAIT: u8 = 8;

/// Reads the client socket's TCP counters (one getsockopt), or says why it cannot.
fn sample_ack(session: &Session, t_ns: u64, body_before: u64) -> Result<SocketReading, &'static str> {
    let downstream = session.as_downstream();
    if downstream.is_http2() {
        return Err("HTTP/2 client: streams share one socket, so its ACKs are not per response");
    }
    let socket = downstream
        .digest()
        .and_then(|d| d.socket_digest.as_ref())
        .ok_or("no TCP information for the client socket on this platform")?;
    sample_socket(socket, t_ns, body_before)
}

fn sample_socket(socket: &SocketDigest, t_ns: u64, body_before: u64) -> Result<SocketReading, &'static str> {
    let info = socket.tcp_info().ok_or("no TCP information for the client socket on this platform")?;
    let written = info.tcpi_bytes_sent.saturating_sub(info.tcpi_bytes_retrans) + u64::from(info.tcpi_notsent_bytes);
    Ok(SocketReading {
        sample: AckSample {
            t_ns,
            body_before,
            written,
            acked: info.tcpi_bytes_acked,
            last_ack_ns: t_ns.saturating_sub(u64::from(info.tcpi_last_ack_recv) * 1_000_000),
        },
        open: matches!(info.tcpi_state, TCP_ESTABLISHED | TCP_CLOSE_WAIT),
    })
}

/// Request header bytes (names and values) a record keeps; a client can send a head of up to
/// pingora's limit (about 1 MiB), and each record in memory would hold a copy.
pub(crate) const MAX_KEPT_HEADER_BYTES: usize = 16 << 10;
/// The name of the entry that says how much of the request head was not kept.
pub(crate) const HEADERS_NOT_KEPT: &str = "tokentap-headers-not-kept";

/// The request's headers for the record: redacted, and at most [`MAX_KEPT_HEADER_BYTES`]; when
/// more were sent, a last entry [`HEADERS_NOT_KEPT`] says how many headers and bytes were left out.
fn kept_headers(headers: &http::HeaderMap, redactor: &Redactor) -> Vec<(String, String)> {
    let mut kept = Vec::with_capacity(headers.len().min(32));
    let mut bytes = 0;
    let (mut left_out, mut left_out_bytes) = (0usize, 0usize);
    for (name, value) in headers {
        let size = name.as_str().len() + value.len();
        if bytes + size > MAX_KEPT_HEADER_BYTES {
            left_out += 1;
            left_out_bytes += size;
            continue;
        }
        bytes += size;
        kept.push((name.as_str().to_string(), redactor.header_value(name.as_str(), value.as_bytes())));
    }
    if left_out > 0 {
        kept.push((HEADERS_NOT_KEPT.to_string(), format!("{left_out} headers, {left_out_bytes} bytes")));
    }
    kept
}

/// Copies the few response headers that carry the server's own timings (`TIMING_HEADERS`), each
/// at most `MAX_TIMING_HEADER_BYTES`; the record worker parses them. An overlong value is kept
/// empty, so the worker counts it as rejected rather than reading a prefix of it.
fn copy_timing_headers(response: &ResponseHeader, into: &mut Vec<(&'static str, String)>) {
    for name in TIMING_HEADERS {
        if let Some(value) = response.headers.get(name) {
            let bytes = value.as_bytes();
            let kept = if bytes.len() <= MAX_TIMING_HEADER_BYTES {
                String::from_utf8_lossy(bytes).into_owned()
            } else {
                String::new()
            };
            into.push((name, kept));
        }
    }
}

fn header_str(value: Option<&http::HeaderValue>) -> Option<String> {
    value.and_then(|v| v.to_str().ok()).map(str::to_string)
}

fn upstream_error(kind: ErrorType, context: String) -> Box<Error> {
    let mut e = Error::explain(kind, context);
    e.esource = ErrorSource::Upstream;
    e
}

#[async_trait]
impl ProxyHttp for TapProxy {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> Self::CTX {
        let mut ctx = RequestCtx::new();
        ctx.data.ack.max_samples = self.config.timeline.max_chunks;
        ctx.data.request_body.budget = Some(self.kept.clone());
        ctx.data.chunks.body.budget = Some(self.kept.clone());
        ctx
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        let entered = Instant::now();
        // The head is in: the connection no longer waits for one (its deadline stops).
        crate::admission::request_started(session.stream());
        // A client that pipelines (sends request N+1 before reading response N) is served in
        // order on the same connection (RFC 9112 §9.3.2) instead of having N+1 dropped.
        session.set_pipelining_enabled(true);
        let req = session.req_header();
        let path_and_query = req.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/").to_string();

        if path_and_query.starts_with("/_tokentap/") || path_and_query == "/_tokentap" {
            ctx.internal = true;
            internal::serve(session, &path_and_query, &self.pages, &self.ingest, &self.finalize).await?;
            return Ok(true);
        }

        ctx.recording = self.config.timeline.enabled;
        if ctx.recording {
            self.lag_probe.start_once();
            ctx.data.method = req.method.as_str().to_string();
            // A browser's WebSocket cannot send headers: the probe puts its trace context in the
            // query instead, which is read here and never forwarded.
            let (stripped, query_traceparent) = split_traceparent_query(&path_and_query);
            ctx.data.path = redact_path(stripped.as_deref().unwrap_or(&path_and_query));
            ctx.data.request_headers = kept_headers(&req.headers, &self.redactor);
            ctx.data.request_content_type = header_str(req.headers.get("content-type"));
            let turns = &self.config.turns;
            let turn_header = turns.enabled.then(|| req.headers.get(turns.turn_header.as_str())).flatten();
            let trace = TraceContext::from_incoming_or_turn(
                req.headers.get("traceparent").map(|v| v.as_bytes()).or(query_traceparent.map(str::as_bytes)),
                turn_header.map(|v| v.as_bytes()),
            );
            if self.ingest.config.enabled {
                self.ingest.recent.note(&trace.trace_id);
                // An app server that names the page's trace lets the page's report in.
                let page_trace = req.headers.get(tokentap_record::browser::arrival::PAGE_TRACE_HEADER);
                if let Some(id) =
                    page_trace.and_then(|v| v.to_str().ok()).and_then(tokentap_record::browser::arrival::page_trace_id)
                {
                    self.ingest.recent.note(id);
                }
            }
            ctx.data.trace = Some(trace);
        }

        let Some(route) = self.config.routes.find(req.uri.path()).cloned() else {
            ctx.no_route = true;
            write_no_route(session).await?;
            ctx.charge(entered);
            return Ok(true);
        };
        let (in_flight_before, index) = route.begin_request();
        if ctx.recording {
            ctx.data.concurrency_at_t0 = in_flight_before;
            ctx.data.route_request_index = index;
            ctx.data.open = Some(self.finalize.open_request());
            ctx.finalize = Some(self.finalize.clone());
        }
        ctx.data.route = Some(route);
        if session.is_upgrade_req() {
            // A WebSocket session. The client may stay silent for minutes (pingora's default: 60 s).
            ctx.data.upgrade = true;
            session.set_read_timeout(Some(Duration::from_secs(self.config.timeouts.websocket_idle_s)));
            // A WebSocket handshake without a body is relayed by tokentap itself (`tunnel`),
            // through the same hooks; any other upgrade request (an `h2c` offer) is left to
            // pingora, which sends a body before it reads the answer and drops the offer.
            if tunnel::is_websocket_handshake(session.req_header()) && session.is_body_empty() {
                ctx.charge(entered);
                ctx.relayed = true;
                if let Err(e) = self.relay_upgrade(session, ctx).await {
                    // pingora would log this as a failed request filter; say what it is instead.
                    tracing::warn!(request_id = %ctx.data.request_id, "WebSocket session ended: {}", error_message(&e));
                    return Err(e);
                }
                return Ok(true);
            }
        }
        ctx.charge(entered);
        Ok(false)
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if !ctx.recording {
            return Ok(());
        }
        let entered = Instant::now();
        let t = ctx.data.anchor.since_t0(entered);
        if let Some(piece) = body.as_ref() {
            let limits = &self.config.timeline;
            if ctx.data.upgrade {
                // The client's WebSocket frames: bytes and pieces capped per session.
                ctx.data.request_body.push_at_most(piece, t, limits.max_websocket_bytes, limits.max_chunks);
            } else {
                ctx.data.request_body.push_coalesced(piece, t, limits.max_request_bytes);
            }
        }
        if end_of_stream {
            ctx.data.t_request_body_end_ns = Some(t);
        }
        ctx.charge(entered);
        Ok(())
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Self::CTX) -> Result<Box<HttpPeer>> {
        let route =
            ctx.data.route.clone().ok_or_else(|| Error::explain(ErrorType::InternalError, "no route selected"))?;
        let addr = route.resolve().await.map_err(|message| upstream_error(DNS_LOOKUP_FAILED, message))?;
        ctx.data.peer_addr = Some(addr.to_string());
        // SNI is always the upstream host name: an empty SNI would disable certificate checks.
        let mut peer = HttpPeer::new(addr, route.upstream.tls, route.upstream.host.clone());
        let t = &self.config.timeouts;
        let options = &mut peer.options;
        options.connection_timeout = Some(Duration::from_millis(t.connect_ms));
        options.total_connection_timeout = Some(Duration::from_millis(t.total_connect_ms));
        let read_s = if ctx.data.upgrade { t.websocket_idle_s } else { t.read_s };
        options.read_timeout = Some(Duration::from_secs(read_s));
        options.write_timeout = Some(Duration::from_secs(t.write_s));
        options.idle_timeout = Some(Duration::from_secs(t.idle_pool_s));
        if route.upstream.tls && route.http2 {
            options.alpn = ALPN::H2H1;
            // One stream per connection hides other streams' flow control from the timings.
            options.max_h2_streams = 1;
        }
        if let Some(ca) = &route.ca {
            options.ca = Some(ca.clone());
        }
        Ok(Box::new(peer))
    }

    async fn connected_to_upstream(
        &self,
        _session: &mut Session,
        reused: bool,
        _peer: &HttpPeer,
        #[cfg(unix)] fd: std::os::unix::io::RawFd,
        #[cfg(windows)] _sock: std::os::windows::io::RawSocket,
        digest: Option<&Digest>,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        let mut connection = UpstreamConnection {
            reused,
            peer_addr: ctx.data.peer_addr.clone(),
            retried_stale_connection: ctx.retried_stale_connection,
            ..Default::default()
        };
        // Only a reused connection can be stale, and a request is retried at most once.
        #[cfg(unix)]
        if reused && !ctx.retried_stale_connection {
            match stale_connection::Reuse::before_write(fd) {
                stale_connection::Reuse::Open(probe) => ctx.stale_probe = Some(probe),
                stale_connection::Reuse::ClosedByServer => {
                    // Nothing is written on a connection the server has already closed.
                    ctx.closed_before_write = true;
                    ctx.data.connection = Some(connection);
                    return Err(Error::explain(
                        ErrorType::ConnectionClosed,
                        "pooled connection already closed by the server",
                    )
                    .into_up());
                }
                stale_connection::Reuse::Unknown => {}
            }
        }
        if !reused {
            if let Some(digest) = digest {
                let durations: Vec<Option<Duration>> =
                    digest.timing_digest.iter().map(|t| t.as_ref().and_then(|t| t.establishment_duration)).collect();
                connection.connect_ms = durations.first().copied().flatten().map(|d| d.as_secs_f64() * 1e3);
                if digest.ssl_digest.is_some() {
                    connection.tls_ms = durations.get(1).copied().flatten().map(|d| d.as_secs_f64() * 1e3);
                }
            }
        }
        ctx.data.connection = Some(connection);
        Ok(())
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        let entered = Instant::now();
        let route =
            ctx.data.route.clone().ok_or_else(|| Error::explain(ErrorType::InternalError, "no route selected"))?;
        let path_and_query = upstream_request.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/").to_string();
        let path_and_query = split_traceparent_query(&path_and_query).0.unwrap_or(path_and_query);
        let new_path = route.upstream_path(&path_and_query);
        let uri: http::Uri = new_path
            .parse()
            .map_err(|e| Error::because(ErrorType::InternalError, "rewritten upstream path is not a URI", e))?;
        upstream_request.set_uri(uri);
        upstream_request.insert_header("host", route.upstream.host_header())?;
        let upgrade = session.is_upgrade_req();
        for name in HOP_BY_HOP {
            if upgrade && (*name == "connection" || *name == "upgrade") {
                continue;
            }
            upstream_request.remove_header(*name);
        }
        if self.config.turns.strip_headers {
            upstream_request.remove_header(self.config.turns.turn_header.as_str());
            upstream_request.remove_header(self.config.turns.conversation_header.as_str());
        }
        if self.config.inject_traceparent {
            if let Some(trace) = &ctx.data.trace {
                upstream_request.insert_header("traceparent", trace.traceparent())?;
            }
        }
        ctx.data.t_upstream_request_ns = Some(ctx.data.anchor.since_t0(Instant::now()));
        ctx.charge(entered);
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        let entered = Instant::now();
        // A response byte arrived: this attempt is never retried.
        ctx.stale_probe = None;
        if upstream_response.status.is_informational() && upstream_response.status.as_u16() != 101 {
            // Passed on as it came, a few at most: an upstream that sends 1xx heads without end
            // is answering nothing, and each one would cost the client a read.
            ctx.informational += 1;
            if ctx.informational > MAX_INFORMATIONAL {
                return Err(upstream_error(
                    ErrorType::Custom(ENDLESS_INFORMATIONAL),
                    format!("more than {MAX_INFORMATIONAL} informational heads"),
                ));
            }
            return Ok(());
        }
        // A 101 the client did not ask for would turn the connection into a blind tunnel.
        if upstream_response.status.as_u16() == 101 && !session.is_upgrade_req() {
            return Err(upstream_error(
                ErrorType::Custom(UNSOLICITED_UPGRADE),
                "101 without an upgrade request".into(),
            ));
        }
        ctx.data.t_upstream_headers_ns = Some(ctx.data.anchor.since_t0(entered));
        ctx.data.status = Some(upstream_response.status.as_u16());
        ctx.data.response_content_type = header_str(upstream_response.headers.get("content-type"));
        ctx.data.response_content_encoding = header_str(upstream_response.headers.get("content-encoding"));
        ctx.data.response_protocol = http_protocol(upstream_response.version);
        copy_timing_headers(upstream_response, &mut ctx.data.timing_headers);
        ctx.data.mcp_session_id = upstream_response
            .headers
            .get(tokentap_analysis::mcp::SESSION_HEADER)
            .filter(|v| v.len() <= 256)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if upstream_response.status.as_u16() == 101 {
            ctx.data.websocket_extensions = upstream_response
                .headers
                .get("sec-websocket-extensions")
                .filter(|v| v.len() <= 256)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
        }
        if upstream_response.status.as_u16() != 101 {
            for name in ["connection", "keep-alive", "proxy-connection", "upgrade"] {
                upstream_response.remove_header(name);
            }
        }
        ctx.charge(entered);
        Ok(())
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        // An HTTP/1.0 client cannot read chunked encoding (RFC 9112 §6.1): a body of unknown length
        // is delimited by closing the connection instead. Same bytes, framed the way it can read.
        if session.req_header().version == http::Version::HTTP_10
            && upstream_response.headers.get("content-length").is_none()
            && upstream_response.status.as_u16() != 101
        {
            upstream_response.remove_header("transfer-encoding");
            upstream_response.insert_header("connection", "close")?;
        }
        if self.config.response_request_id_header && !ctx.internal {
            upstream_response.insert_header(REQUEST_ID_HEADER, ctx.data.request_id.as_str())?;
        }
        Ok(())
    }

    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<Option<Duration>> {
        // Forwarding path: stamp and keep a handle to the bytes. Nothing else.
        if !ctx.recording {
            return Ok(None);
        }
        let entered = Instant::now();
        if let Some(piece) = body.as_ref() {
            if !piece.is_empty() {
                let t = ctx.data.anchor.since_t0(entered);
                let limits = &self.config.timeline;
                let cap = if ctx.data.upgrade { limits.max_websocket_bytes } else { limits.max_analysis_bytes };
                ctx.data.chunks.on_upstream_chunk(piece, t, limits.max_chunks, cap);
            }
        }
        if end_of_stream {
            ctx.data.upstream_eos = true;
        }
        ctx.charge(entered);
        Ok(None)
    }

    fn response_body_filter(
        &self,
        session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<Option<Duration>> {
        // Forwarding path: stamp the handoff and, when due, read the client socket's TCP
        // counters (one getsockopt, for delivery from ACKs: `AckTracker::handoff_read_due`; the
        // piece that ends the response is not read, the tail reading follows it). Nothing else.
        if !ctx.recording {
            return Ok(None);
        }
        let entered = Instant::now();
        let t = ctx.data.anchor.since_t0(entered);
        if let Some(piece) = body.as_ref() {
            if !piece.is_empty() && !ctx.internal {
                let body_before = ctx.data.chunks.handed_off_bytes;
                ctx.data.chunks.on_handoff(piece.len(), t);
                if ctx.data.ack.unavailable.is_none() && !end_of_stream && ctx.data.ack.handoff_read_due(t) {
                    match sample_ack(session, t, body_before) {
                        Ok(reading) => ctx.data.ack.push_handoff(reading.sample, ctx.data.chunks.chunks.capacity()),
                        Err(reason) => ctx.data.ack.unavailable = Some(reason.to_string()),
                    }
                }
            }
        }
        if end_of_stream {
            ctx.data.t_end_ns = Some(t);
        }
        ctx.charge(entered);
        Ok(None)
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Self::CTX,
        client_reused: bool,
    ) -> Box<Error> {
        let probe = ctx.stale_probe.take();
        let closed_before_write = std::mem::take(&mut ctx.closed_before_write);
        // The one retry: a reused connection the server closed before any of the request reached
        // it (already past its FIN before the write, or its FIN acknowledging none of the request
        // and no response byte before it), and a request body replayable in full.
        let stale = client_reused
            && !ctx.retried_stale_connection
            && e.etype() == &ErrorType::ConnectionClosed
            && e.esource() == &ErrorSource::Upstream
            && !session.as_ref().retry_buffer_truncated()
            && (closed_before_write || probe.is_some_and(|p| p.closed_before_request()));
        if !stale {
            return while_proxying(e, peer);
        }
        ctx.retried_stale_connection = true;
        self.finalize.count_stale_connection_retry();
        let mut e = e.more_context(format!("upstream {}: stale pooled connection, retried once", peer._address));
        e.set_retry(true);
        e
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        _ctx: &mut Self::CTX,
        mut e: Box<Error>,
    ) -> Box<Error> {
        e.set_retry(false);
        e
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Self::CTX) -> FailToProxy {
        let code = match e.etype() {
            ErrorType::HTTPStatus(code) => *code,
            ErrorType::ReadTimedout | ErrorType::ConnectTimedout | ErrorType::TLSHandshakeTimedout
                if e.esource() == &ErrorSource::Upstream =>
            {
                504
            }
            _ => match e.esource() {
                ErrorSource::Upstream => 502,
                ErrorSource::Downstream => 0,
                ErrorSource::Internal | ErrorSource::Unset => 500,
            },
        };
        // Only answer when no answer was sent yet (informational heads may have been); a started
        // response ends abnormally instead. A 101 is the answer: after it the connection speaks
        // the upgraded protocol, where an HTTP response would be garbage.
        let answered = session.response_written().is_some_and(|head| {
            !head.status.is_informational() || head.status == http::StatusCode::SWITCHING_PROTOCOLS
        });
        if code > 0 && !answered {
            // `kind` is the record's `error.kind` (e.g. `ConnectRefused`), for clients that tell
            // a target that is down from one that answered with an error.
            let body = serde_json::json!({ "error": {
                "type": "tokentap_upstream_error",
                "kind": e.etype().as_str(),
                "message": format!("tokentap: {}", error_message(e)),
            }})
            .to_string();
            let mut resp = match ResponseHeader::build(code, Some(3)) {
                Ok(r) => r,
                Err(_) => return FailToProxy { error_code: code, can_reuse_downstream: false },
            };
            let _ = resp.insert_header("content-type", "application/json");
            let _ = resp.insert_header("content-length", body.len().to_string());
            if self.config.response_request_id_header {
                let _ = resp.insert_header(REQUEST_ID_HEADER, ctx.data.request_id.as_str());
            }
            if session.write_response_header(Box::new(resp), false).await.is_ok() {
                let _ = session.write_response_body(Some(Bytes::from(body)), true).await;
            }
        }
        FailToProxy { error_code: code, can_reuse_downstream: false }
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Self::CTX) {
        // The request is over: a kept-alive connection now waits for its next head, within
        // `[connections] keepalive_idle_s` and `head_timeout_s`.
        crate::admission::request_ended(session.stream());
        if ctx.internal {
            return;
        }
        if let Some(route) = &ctx.data.route {
            route.end_request();
        }
        if !ctx.recording {
            return;
        }
        if ctx.data.upgrade && self.ingest.config.enabled {
            // A session may outlast `probe.trace_ttl_s`; the page reports it after it ends.
            if let Some(trace) = &ctx.data.trace {
                self.ingest.recent.note(&trace.trace_id);
            }
        }
        let (outcome, error) = classify_outcome(e, ctx);
        let watch = e.is_none() && !ctx.data.chunks.chunks.is_empty() && ctx.data.ack.unavailable.is_none();
        let mut completed = Box::new(CompletedRequest { data: ctx.data.take(), outcome, error, shed: false });
        if !watch {
            self.finalize.submit_boxed(completed);
            return;
        }
        // Watch the client acknowledge the tail: one sample now, then, while the tail is not
        // acknowledged, from a task of its own that never holds the connection.
        let data = &mut completed.data;
        let mut open = false;
        match sample_ack(session, data.anchor.elapsed_ns(), data.chunks.handed_off_bytes) {
            Ok(reading) => {
                data.ack.push_tail(reading.sample);
                open = reading.open;
            }
            Err(reason) => data.ack.unavailable = Some(reason.to_string()),
        }
        let drain = Duration::from_millis(self.config.timeline.ack_drain_ms);
        let socket = session.as_downstream().digest().and_then(|d| d.socket_digest.clone());
        let cookie = socket.as_ref().and_then(|s| s.socket_cookie().ok());
        match (socket, cookie) {
            (Some(socket), Some(cookie))
                if open && !data.ack.drained && data.ack.unavailable.is_none() && !drain.is_zero() =>
            {
                let watch = TailWatch::new(socket, cookie, completed, Instant::now() + drain);
                // A connection that is kept alive serves its next request while the tail watcher
                // task reads its socket; one that closes after this response is watched here,
                // since closing the socket would end the watch before the client acknowledged
                // the tail.
                if session.as_downstream().get_keepalive().is_some() {
                    self.tails.watch(watch);
                } else {
                    tail::watch_here(watch, &self.finalize).await;
                }
            }
            _ => self.finalize.submit_boxed(completed),
        }
    }

    fn suppress_error_log(&self, _session: &Session, ctx: &Self::CTX, error: &Error) -> bool {
        // A relayed WebSocket session's error was logged by the relay, with what it means.
        if ctx.relayed {
            return true;
        }
        // A client that goes away (a closed tab, a stopped answer) is no error of tokentap's:
        // one calm line instead of pingora's `ERROR Fail to proxy` (the record says
        // `client_cancelled`).
        if error.esource() == &ErrorSource::Downstream {
            tracing::info!(
                path = %ctx.data.path,
                "client went away after {} response bytes ({})",
                ctx.data.chunks.handed_off_bytes,
                error.etype().as_str()
            );
            return true;
        }
        false
    }

    fn request_summary(&self, session: &Session, _ctx: &Self::CTX) -> String {
        // pingora's default summary includes the raw query, which may carry an API key.
        let req = session.req_header();
        format!("{} {}", req.method, redact_path(req.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")))
    }
}

/// An error while proxying to `peer`, named after the upstream and not retried: apart from a stale
/// pooled connection (`stale_connection`), what the upstream did is what the client sees.
fn while_proxying(e: Box<Error>, peer: &HttpPeer) -> Box<Error> {
    let mut e = e.more_context(format!("upstream {}", peer._address));
    e.set_retry(false);
    e
}

/// A message for records and clients: which side failed, the error's kind and what it means,
/// never bytes the upstream or the client sent (pingora's contexts quote them, e.g. a garbage
/// response head). Only tokentap's own context, a DNS failure naming the configured host, is kept.
fn error_message(e: &Error) -> String {
    let side = error_side(e).as_str();
    let what = match e.etype() {
        ErrorType::ConnectTimedout => "connecting timed out",
        ErrorType::ConnectRefused => "the connection was refused",
        ErrorType::ConnectNoRoute => "no route to the host",
        ErrorType::TLSHandshakeFailure | ErrorType::HandshakeError => "the TLS handshake failed",
        ErrorType::TLSHandshakeTimedout => "the TLS handshake timed out",
        ErrorType::InvalidCert => "the certificate was not accepted",
        ErrorType::ConnectError | ErrorType::SocketError | ErrorType::BindError => "could not connect",
        ErrorType::InvalidHTTPHeader => "the response head is not valid HTTP",
        ErrorType::Custom(UNSOLICITED_UPGRADE) => "the upstream switched protocols without an upgrade request",
        ErrorType::Custom(ENDLESS_INFORMATIONAL) => "too many informational (1xx) heads before the answer",
        ErrorType::H1Error => "HTTP/1 protocol error",
        ErrorType::H2Error | ErrorType::InvalidH2 | ErrorType::H2Downgrade => "HTTP/2 protocol error",
        ErrorType::ReadError => "reading failed",
        ErrorType::WriteError => "writing failed",
        ErrorType::ReadTimedout => "no data within the read timeout",
        ErrorType::WriteTimedout => "writing timed out",
        ErrorType::ConnectionClosed => "the connection closed early",
        &DNS_LOOKUP_FAILED => {
            let context = e.context.as_ref().map(|c| c.as_str()).unwrap_or("");
            // At most 300 bytes, cut on a character boundary.
            let mut end = context.len().min(300);
            while !context.is_char_boundary(end) {
                end -= 1;
            }
            return format!("{side} error {DNS_LOOKUP_FAILED_NAME}: {}", &context[..end]);
        }
        _ => "failed",
    };
    format!("{side} error {}: {what}", e.etype().as_str())
}

/// The error of a route whose upstream host name did not resolve.
const DNS_LOOKUP_FAILED_NAME: &str = "DNSLookupFailed";
const DNS_LOOKUP_FAILED: ErrorType = ErrorType::Custom(DNS_LOOKUP_FAILED_NAME);

/// The upstream response's HTTP version as the record names it.
fn http_protocol(version: http::Version) -> Option<HttpProtocol> {
    match version {
        http::Version::HTTP_10 => Some(HttpProtocol::Http10),
        http::Version::HTTP_11 => Some(HttpProtocol::Http11),
        http::Version::HTTP_2 => Some(HttpProtocol::H2),
        http::Version::HTTP_3 => Some(HttpProtocol::H3),
        _ => None,
    }
}

fn error_side(e: &Error) -> ErrorSide {
    match e.esource() {
        ErrorSource::Upstream => ErrorSide::Upstream,
        ErrorSource::Downstream => ErrorSide::Client,
        ErrorSource::Internal | ErrorSource::Unset => ErrorSide::Internal,
    }
}

fn classify_outcome(e: Option<&Error>, ctx: &RequestCtx) -> (Outcome, Option<ErrorInfo>) {
    if ctx.no_route {
        return (Outcome::NoRoute, None);
    }
    let Some(e) = e else {
        let outcome = match ctx.data.status {
            Some(s) if s >= 400 => Outcome::HttpError,
            Some(_) => Outcome::Ok,
            None => Outcome::ProxyError,
        };
        return (outcome, None);
    };
    let info = ErrorInfo { side: error_side(e), kind: e.etype().as_str().to_string(), message: error_message(e) };
    let outcome = match e.esource() {
        ErrorSource::Downstream => Outcome::ClientCancelled,
        ErrorSource::Upstream => match e.etype() {
            ErrorType::ReadTimedout | ErrorType::WriteTimedout => Outcome::UpstreamTimeout,
            ErrorType::ConnectTimedout
            | ErrorType::ConnectRefused
            | ErrorType::ConnectNoRoute
            | ErrorType::ConnectError
            | ErrorType::BindError
            | ErrorType::TLSHandshakeFailure
            | ErrorType::TLSHandshakeTimedout
            | ErrorType::InvalidCert
            | ErrorType::HandshakeError
            | &DNS_LOOKUP_FAILED
                if ctx.data.t_upstream_headers_ns.is_none() =>
            {
                Outcome::UpstreamConnectError
            }
            _ if ctx.data.connection.is_none() && ctx.data.t_upstream_headers_ns.is_none() => {
                Outcome::UpstreamConnectError
            }
            _ => Outcome::UpstreamError,
        },
        ErrorSource::Internal | ErrorSource::Unset => Outcome::ProxyError,
    };
    (outcome, Some(info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_request_head_is_kept_up_to_the_byte_bound() {
        let mut headers = http::HeaderMap::new();
        headers.insert("authorization", http::HeaderValue::from_static("Bearer sk-secret"));
        for i in 0..40 {
            let name = http::HeaderName::try_from(format!("x-filler-{i}")).unwrap();
            headers.insert(name, http::HeaderValue::from_str(&"v".repeat(1000)).unwrap());
        }
        let kept = kept_headers(&headers, &Redactor::new(&[]));
        let bytes: usize = kept[..kept.len() - 1].iter().map(|(n, v)| n.len() + v.len()).sum();
        assert!(bytes <= MAX_KEPT_HEADER_BYTES, "{bytes}");
        let (name, value) = kept.last().unwrap();
        assert_eq!(name, HEADERS_NOT_KEPT);
        assert!(value.ends_with(" bytes") && value.contains(" headers, "), "{value}");
        assert_eq!(kept[0].1, privacy::REDACTED);
        // A small head is kept whole, with no marker.
        let mut small = http::HeaderMap::new();
        small.insert("content-type", http::HeaderValue::from_static("application/json"));
        assert_eq!(kept_headers(&small, &Redactor::new(&[])), vec![("content-type".into(), "application/json".into())]);
    }
}
