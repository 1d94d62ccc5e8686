//! [`RequestData`]: what tokentap knows about one request, gathered by the forwarding hooks and
//! moved whole to the record pipeline when the request ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokentap_record::ack::AckTracker;
use tokentap_record::trace::{random_hex, TraceContext};
use tokentap_record::UpstreamConnection;

use crate::route::Route;
use crate::timeline::{Anchor, CapturedBody, ChunkTimeline};

/// One proxied request that is not yet recorded: counted from routing until its record has been
/// built and stored, or dropped (the count the graceful drain waits for).
#[derive(Debug)]
pub(crate) struct OpenRequest(Arc<AtomicU64>);

impl OpenRequest {
    pub(crate) fn new(open: &Arc<AtomicU64>) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        Self(open.clone())
    }
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Everything recorded about one request while it is in flight. Stamps are ns since t0.
#[derive(Debug)]
pub(crate) struct RequestData {
    /// Held until the record is stored (or dropped).
    pub open: Option<OpenRequest>,
    pub anchor: Anchor,
    pub request_id: String,
    pub trace: Option<TraceContext>,
    pub route: Option<Arc<Route>>,
    pub method: String,
    pub path: String,
    pub request_headers: Vec<(String, String)>,
    pub request_content_type: Option<String>,
    pub request_body: CapturedBody,
    pub concurrency_at_t0: u64,
    pub route_request_index: u64,
    pub t_upstream_request_ns: Option<u64>,
    pub t_request_body_end_ns: Option<u64>,
    pub connection: Option<UpstreamConnection>,
    pub peer_addr: Option<String>,
    pub t_upstream_headers_ns: Option<u64>,
    pub status: Option<u16>,
    pub response_content_type: Option<String>,
    pub response_content_encoding: Option<String>,
    pub response_protocol: Option<tokentap_record::HttpProtocol>,
    /// The server-timing response headers (`tokentap_analysis::server_timing::TIMING_HEADERS`),
    /// copied short and unparsed.
    pub timing_headers: Vec<(&'static str, String)>,
    pub chunks: ChunkTimeline,
    /// A WebSocket upgrade request (`Upgrade` header, HTTP/1.1): kept under the realtime caps.
    pub upgrade: bool,
    /// The 101 response's `Sec-WebSocket-Extensions` (permessage-deflate parameters), at most
    /// 256 bytes, copied unparsed.
    pub websocket_extensions: Option<String>,
    /// The response's `Mcp-Session-Id` (an MCP server's answer to `initialize`), at most 256
    /// bytes, copied unparsed.
    pub mcp_session_id: Option<String>,
    /// Client socket readings for delivery from TCP ACKs.
    pub ack: AckTracker,
    pub upstream_eos: bool,
    pub t_end_ns: Option<u64>,
    /// Time spent inside tokentap's hooks.
    pub hook_ns: u64,
}

impl RequestData {
    /// A request whose head is arriving now (t0).
    pub(crate) fn start() -> Self {
        Self { request_id: random_hex(12), ..Self::empty(Anchor::now()) }
    }

    fn empty(anchor: Anchor) -> Self {
        Self {
            open: None,
            anchor,
            request_id: String::new(),
            trace: None,
            route: None,
            method: String::new(),
            path: String::new(),
            request_headers: Vec::new(),
            request_content_type: None,
            request_body: CapturedBody::default(),
            concurrency_at_t0: 0,
            route_request_index: 0,
            t_upstream_request_ns: None,
            t_request_body_end_ns: None,
            connection: None,
            peer_addr: None,
            t_upstream_headers_ns: None,
            status: None,
            response_content_type: None,
            response_content_encoding: None,
            response_protocol: None,
            timing_headers: Vec::new(),
            chunks: ChunkTimeline::default(),
            upgrade: false,
            websocket_extensions: None,
            mcp_session_id: None,
            ack: AckTracker::default(),
            upstream_eos: false,
            t_end_ns: None,
            hook_ns: 0,
        }
    }

    /// Moves the data out (vectors and `Bytes` handles move, not bytes), leaving an empty one.
    pub(crate) fn take(&mut self) -> Self {
        let anchor = self.anchor;
        std::mem::replace(self, Self::empty(anchor))
    }

    /// The request reached the upstream when both its head and its body had been handed on.
    pub(crate) fn t_upstream_sent_ns(&self) -> Option<u64> {
        match (self.t_upstream_request_ns, self.t_request_body_end_ns) {
            (Some(head), Some(body)) => Some(head.max(body)),
            (Some(head), None) => Some(head),
            _ => None,
        }
    }
}
