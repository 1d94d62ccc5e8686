//! The pingora proxy: one [`ProxyHttp`] implementation whose hooks are the phases of a request.
//! Each hook delegates to the module of its phase: `request_head` (the client's head, the route,
//! the head sent upstream), `upstream` (the peer and its connection), `response_head`, `body` (the
//! three body hooks), `failure` (errors, the retry, the failure answer) and `completion` (the
//! outcome and the record's handoff in `logging`).
//!
//! Architecture invariant: the body hooks (`upstream_response_body_filter`, `response_body_filter`)
//! only read the clock, push a stamp and clone a `Bytes` handle. They never parse, tokenize, lock,
//! allocate per byte, log, or export. Everything else happens in the record pipeline after `logging`.

mod body;
pub(crate) mod client_connection;
mod closing_peers;
mod completion;
pub(crate) mod exchange;
mod failure;
mod hop_by_hop;
pub(crate) mod internal;
pub(crate) mod privacy;
pub(crate) mod probe_ingest;
mod read_deadline;
mod request_head;
mod response_framing;
mod response_head;
pub(crate) mod stale_connection;
pub(crate) mod tail;
pub(crate) mod tunnel;
mod upstream;
mod upstream_client;
mod upstream_pool;
pub(crate) mod upstream_queue;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::Digest;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, Result};

use tokentap_record::{ErrorInfo, ErrorSide, Outcome};

use crate::config::ValidConfig;
use crate::pages::Pages;
use crate::pipeline::{CompletedRequest, FinalizeQueue};
use crate::request_data::RequestData;
use crate::scheduling_lag::LagProbe;
use exchange::Exchanges;
use internal::ProbeIngest;
use privacy::{redact_path, Redactor};
use tail::TailWatcher;

/// Header tokentap adds to responses (when enabled) so a client can find its record.
pub(crate) const REQUEST_ID_HEADER: &str = "x-tokentap-request-id";

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
    exchanges: Exchanges,
    closing_peers: closing_peers::ClosingPeers,
}

impl TapProxy {
    pub(crate) fn new(
        config: Arc<ValidConfig>,
        finalize: FinalizeQueue,
        pages: Arc<Pages>,
        lag_probe: LagProbe,
        exchanges: Exchanges,
    ) -> Self {
        let redactor = Redactor::new(&config.privacy.redact_headers);
        let ingest = Arc::new(ProbeIngest::new(config.probe.clone()));
        let kept = finalize.kept_budget();
        let tails = TailWatcher::new(finalize.clone());
        let closing_peers =
            closing_peers::ClosingPeers::new(Duration::from_millis(config.timeouts.closed_after_answer_ms));
        Self { config, redactor, finalize, pages, ingest, kept, tails, lag_probe, exchanges, closing_peers }
    }
}

impl TapProxy {
    /// A request's context, as pingora's `new_ctx` hook makes it.
    fn new_ctx(&self) -> Box<RequestCtx> {
        let mut ctx = Box::new(RequestCtx::new());
        ctx.data.ack.max_samples = self.config.timeline.max_chunks;
        ctx.data.request_body.budget = Some(self.kept.clone());
        ctx.data.chunks.body.budget = Some(self.kept.clone());
        ctx
    }

    /// The request as a log line names it. pingora's default summary includes the raw query,
    /// which may carry an API key.
    fn request_summary(&self, session: &Session) -> String {
        let req = session.req_header();
        format!("{} {}", req.method, redact_path(req.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")))
    }
}

/// tokentap's hooks as pingora's proxy calls them, for the requests pingora's proxy serves
/// (`client_connection` says which); the same [`TapProxy`] serves the others itself.
pub(crate) struct PingoraHooks(pub(crate) Arc<TapProxy>);

impl std::ops::Deref for PingoraHooks {
    type Target = TapProxy;

    fn deref(&self) -> &TapProxy {
        &self.0
    }
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
    /// An HTTP/1.1 exchange relayed by `exchange` (which logs its errors as pingora's proxy would).
    pub exchange: bool,
    /// Where the record goes if the request's task is dropped before `logging` (see `Drop`).
    finalize: Option<FinalizeQueue>,
    /// The reused upstream connection's counters until the response head arrives.
    stale_probe: Option<stale_connection::StaleProbe>,
    /// The reused connection was past the server's FIN before anything was written on it.
    closed_before_write: bool,
    /// Retried once on a fresh connection after a stale pooled one (never twice).
    retried_stale_connection: bool,
    /// The upstream closes right after answering: the request says `Connection: close`.
    close_upstream_connection: bool,
    /// Informational (1xx) heads passed on so far (at most [`MAX_INFORMATIONAL`]).
    informational: u32,
    /// The upstream socket, to date pieces that waited in it (`upstream_queue`).
    upstream_queue: upstream_queue::UpstreamQueue,
    /// The read buffer the piece being delivered was split from (tokentap's relay), so that a
    /// piece kept by reference is charged what it keeps alive.
    read_buffer: Option<crate::timeline::ReadBuffer>,
}

impl RequestCtx {
    fn new() -> Self {
        Self {
            data: RequestData::start(),
            internal: false,
            no_route: false,
            recording: true,
            relayed: false,
            exchange: false,
            finalize: None,
            stale_probe: None,
            closed_before_write: false,
            retried_stale_connection: false,
            close_upstream_connection: false,
            read_buffer: None,
            informational: 0,
            upstream_queue: upstream_queue::UpstreamQueue::default(),
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

fn header_str(value: Option<&http::HeaderValue>) -> Option<String> {
    value.and_then(|v| v.to_str().ok()).map(str::to_string)
}

#[async_trait]
impl ProxyHttp for PingoraHooks {
    /// Boxed: pingora's per-request future keeps the context by value, in more than one of its
    /// states, and that future is moved into a box of its own on every request; a pointer is
    /// copied instead of the context's kilobyte.
    type CTX = Box<RequestCtx>;

    fn new_ctx(&self) -> Self::CTX {
        self.0.new_ctx()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        self.take_request_head(session, ctx).await
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        self.stamp_request_piece(body.as_ref(), end_of_stream, ctx)
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Self::CTX) -> Result<Box<HttpPeer>> {
        self.choose_peer(ctx).await
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
        upstream::note_connection(self, reused, fd, digest, ctx)
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        self.write_upstream_head(session, upstream_request, ctx)
    }

    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        response_head::take_upstream_head(session, upstream_response, ctx)
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        self.write_client_head(session, upstream_response, ctx)
    }

    #[inline]
    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<Option<Duration>> {
        self.stamp_upstream_piece(body.as_ref(), end_of_stream, ctx);
        Ok(None)
    }

    #[inline]
    fn response_body_filter(
        &self,
        session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<Option<Duration>> {
        body::stamp_handoff(session, body.as_ref(), end_of_stream, ctx);
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
        self.retry_or_fail(peer, session, e, ctx, client_reused)
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        _ctx: &mut Self::CTX,
        e: Box<Error>,
    ) -> Box<Error> {
        failure::connect_failed(e)
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Self::CTX) -> FailToProxy {
        self.answer_failure(session, e, ctx).await
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Self::CTX) {
        self.complete(session, e, ctx).await;
    }

    fn suppress_error_log(&self, session: &Session, ctx: &Self::CTX, error: &Error) -> bool {
        failure::quiet_error_log(ctx, error, || self.request_summary(session, ctx))
    }

    fn request_summary(&self, session: &Session, _ctx: &Self::CTX) -> String {
        self.0.request_summary(session)
    }
}
