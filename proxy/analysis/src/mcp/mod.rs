//! MCP (Model Context Protocol) exchanges over Streamable HTTP: the JSON-RPC messages of one HTTP
//! exchange read in both directions, and the operations they make up.
//!
//! An exchange is one HTTP request through an MCP route: a `POST` carrying a client message (a
//! request, notification or response; a batch in the 2025-03-26 revision), answered by JSON, by
//! an SSE stream or by `202`; a `GET` opening the server's stream; a `DELETE` ending a session.
//! Each client request becomes an [`McpOperation`]: it starts at the request head (t0, the `POST`
//! carrying it arrived) and ends when the response message with its id arrives (the stamp of the
//! body piece that completed it), not when the stream ends. Progress notifications whose token is
//! the operation's progress token mark its first progress. Requests the server sends on a stream
//! (`ping`, `sampling/createMessage`, `elicitation/create`, `roots/list`) are operations in the
//! other direction; their answers come in later `POST`s of their own.
//!
//! Both protocol eras are read: the handshake era (`initialize`, `Mcp-Session-Id`, the `GET`
//! stream) and the 2026-07-28 revision (no session; the version in each request's `_meta`,
//! `Mcp-Method` / `Mcp-Name` headers); and both transports: Streamable HTTP, and the older
//! HTTP+SSE one (a `GET` stream whose first event, `endpoint`, names the URI the client `POST`s
//! its messages to, with the session in its query; every `POST` answered `202`, every response
//! sent on the `GET` stream).
//!
//! Some answers come in another exchange than their request: under HTTP+SSE always (on the
//! session's `GET` stream), and under Streamable HTTP when a request's stream broke after events
//! with ids and the client resumed it with a `GET` carrying `Last-Event-ID`. Such a request is
//! recorded as [`McpOperationStatus::Detached`] in its own exchange, and the answer's exchange
//! hands the messages it could not pair over as [`McpExchange::foreign`], for the worker to pair
//! within the session (`tokentap_record::mcp_pairing`).
//!
//! Bounded: the request body and the response bytes are what the proxy kept; one SSE event or
//! JSON body larger than [`McpLimits::max_message_bytes`] is skipped and counted; at most
//! [`McpLimits::max_messages`] messages are read per exchange and at most
//! [`McpLimits::max_operations`] operations recorded, the rest counted. Malformed messages are
//! counted, never fatal: the proxy forwards the bytes untouched whatever this module makes of them.

mod exchange;
mod message;
#[cfg(test)]
mod tests;

pub use exchange::*;

use std::collections::HashMap;

use crate::sse::{SseFramer, SseItem};
use message::{CanonicalId, Message};

/// Header names MCP uses, lower case.
pub const SESSION_HEADER: &str = "mcp-session-id";
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
pub const METHOD_HEADER: &str = "mcp-method";
pub const NAME_HEADER: &str = "mcp-name";
/// The header a client resumes a stream with.
pub const LAST_EVENT_ID_HEADER: &str = "last-event-id";

/// Query parameters that carry the session of the HTTP+SSE transport's message endpoint
/// (`session_id`: the Python SDK; `sessionId`: the TypeScript SDK).
const SESSION_QUERY_PARAMS: [&str; 2] = ["session_id", "sessionid"];

/// The longest session id kept (the specification allows visible ASCII of any length).
const MAX_SESSION_ID_BYTES: usize = 256;

/// The first protocol revision without sessions.
const MODERN_REVISION: &str = "2026-07-28";

/// Bounds of one exchange's analysis.
#[derive(Debug, Clone, Copy)]
pub struct McpLimits {
    /// One JSON body or SSE event larger than this is skipped (counted as oversized).
    pub max_message_bytes: usize,
    /// Messages read per exchange and direction; later ones are counted only.
    pub max_messages: usize,
    /// Operations recorded per exchange; later requests are counted only.
    pub max_operations: usize,
}

impl Default for McpLimits {
    fn default() -> Self {
        Self { max_message_bytes: 4 << 20, max_messages: 4096, max_operations: 256 }
    }
}

/// What the proxy knows of the exchange besides its bodies.
#[derive(Debug, Clone, Default)]
pub struct McpContext {
    /// The HTTP method (`POST`, `GET`, `DELETE`).
    pub http_method: String,
    pub status: Option<u16>,
    pub response_content_type: Option<String>,
    /// The request's `Mcp-Session-Id`.
    pub session_id: Option<String>,
    /// The response's `Mcp-Session-Id` (set by the answer to `initialize`).
    pub response_session_id: Option<String>,
    /// The request's `MCP-Protocol-Version`.
    pub protocol_version: Option<String>,
    /// The request's `Mcp-Method` (2026-07-28).
    pub method_header: Option<String>,
    /// The request's `Last-Event-ID`: the client resumes a stream after that event.
    pub last_event_id: Option<String>,
    /// The request's path and query (the HTTP+SSE message endpoint names the session in it).
    pub path: String,
}

impl McpContext {
    /// Fills the MCP headers from a request's header list (names in any case).
    pub fn with_request_headers<'a>(mut self, headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        for (name, value) in headers {
            let value = Some(value.trim()).filter(|v| !v.is_empty() && v.len() <= MAX_SESSION_ID_BYTES);
            if name.eq_ignore_ascii_case(SESSION_HEADER) {
                self.session_id = value.map(str::to_string);
            } else if name.eq_ignore_ascii_case(PROTOCOL_VERSION_HEADER) {
                self.protocol_version = value.map(str::to_string);
            } else if name.eq_ignore_ascii_case(METHOD_HEADER) {
                self.method_header = value.map(str::to_string);
            } else if name.eq_ignore_ascii_case(LAST_EVENT_ID_HEADER) {
                self.last_event_id = value.map(str::to_string);
            }
        }
        self
    }
}

/// Whether an exchange on a route without `provider = "mcp"` is MCP: it carries an MCP header, or
/// its path ends in `/mcp` and its body is a JSON-RPC 2.0 message or batch.
pub fn looks_like_mcp<'a>(
    path: &str,
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    request_body: &[u8],
) -> bool {
    let mcp_header = headers.into_iter().any(|(name, _)| {
        [SESSION_HEADER, PROTOCOL_VERSION_HEADER, METHOD_HEADER].iter().any(|h| name.eq_ignore_ascii_case(h))
    });
    if mcp_header {
        return true;
    }
    let path = path.split('?').next().unwrap_or(path).trim_end_matches('/');
    if !path.ends_with("/mcp") {
        return false;
    }
    let read = message::read(&request_body[..request_body.len().min(1 << 20)], 1);
    !read.messages.is_empty()
}

/// The session named in a URI's query (`session_id=` or `sessionId=`), as the HTTP+SSE
/// transport's message endpoint carries it.
pub fn session_in_query(uri: &str) -> Option<String> {
    let query = uri.split_once('?')?.1.split('#').next().unwrap_or("");
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        let known = SESSION_QUERY_PARAMS.iter().any(|p| name.eq_ignore_ascii_case(p));
        (known && !value.is_empty() && value.len() <= MAX_SESSION_ID_BYTES).then(|| value.to_string())
    })
}

/// The incremental reader of one exchange: the request body first, then the response pieces.
#[derive(Debug)]
pub struct McpAnalyzer {
    limits: McpLimits,
    exchange: McpExchange,
    /// Unanswered client requests of this exchange, by canonical id.
    pending: HashMap<CanonicalId, usize>,
    /// Progress tokens of this exchange's requests.
    tokens: HashMap<CanonicalId, usize>,
    /// Messages read so far from the client and from the server (each up to `max_messages`).
    messages: [usize; 2],
    era_modern: bool,
    body: Body,
    /// The response's status (a request answered `202` is answered elsewhere).
    status: Option<u16>,
    /// An event of the response stream carried an id (the client can resume the stream).
    event_ids: bool,
}

#[derive(Debug)]
enum Body {
    Sse(SseFramer),
    /// A JSON body being collected (`None` once over the bound).
    Json(Option<Vec<u8>>, u64),
    None,
}

impl McpAnalyzer {
    pub fn new(ctx: McpContext, limits: McpLimits) -> Self {
        let content_type = ctx.response_content_type.as_deref().unwrap_or("").to_ascii_lowercase();
        let body = if content_type.starts_with("text/event-stream") {
            Body::Sse(SseFramer::new(limits.max_message_bytes))
        } else if content_type.contains("json") {
            Body::Json(Some(Vec::new()), 0)
        } else {
            Body::None
        };
        let era_modern =
            ctx.method_header.is_some() || ctx.protocol_version.as_deref().is_some_and(|v| v >= MODERN_REVISION);
        let query_session = session_in_query(&ctx.path);
        let exchange = McpExchange {
            era: None,
            transport: if ctx.session_id.is_none() && query_session.is_some() {
                McpTransport::HttpSse
            } else {
                McpTransport::StreamableHttp
            },
            endpoint: None,
            resumed_after: ctx.last_event_id.as_deref().map(message::bounded),
            session_id: ctx.session_id.clone().or_else(|| ctx.response_session_id.clone()).or(query_session),
            session_started: ctx.session_id.is_none() && ctx.response_session_id.is_some(),
            session_ended: ctx.session_id.is_some()
                && match ctx.status {
                    Some(s) if ctx.http_method.eq_ignore_ascii_case("DELETE") => (200..300).contains(&s),
                    Some(404) => true,
                    _ => false,
                },
            protocol_version: ctx.protocol_version.clone(),
            get_stream: ctx.http_method.eq_ignore_ascii_case("GET"),
            batch: false,
            operations: Vec::new(),
            client_responses: 0,
            client_notifications: McpNotifications::default(),
            server_notifications: McpNotifications::default(),
            cancelled_request_ids: Vec::new(),
            skipped: McpSkipped::default(),
            foreign: Vec::new(),
        };
        Self {
            limits,
            exchange,
            pending: HashMap::new(),
            tokens: HashMap::new(),
            messages: [0, 0],
            era_modern,
            body,
            status: ctx.status,
            event_ids: false,
        }
    }

    fn budget(&self, direction: McpDirection) -> usize {
        self.limits.max_messages.saturating_sub(self.messages[direction as usize])
    }

    /// The request body as kept (`truncated`: cut at the keep limit). Its messages were sent at
    /// the request head (t0).
    pub fn request_body(&mut self, body: &[u8], truncated: bool) {
        self.exchange.skipped.request_truncated = truncated;
        if body.len() > self.limits.max_message_bytes && !self.may_be_batch(body) {
            self.exchange.skipped.oversized += 1;
            return;
        }
        let read = message::read(body, self.budget(McpDirection::ClientToServer));
        self.exchange.batch = read.batch;
        self.exchange.skipped.malformed += read.malformed;
        self.exchange.skipped.messages_not_read += read.not_read;
        for m in read.messages {
            self.messages[McpDirection::ClientToServer as usize] += 1;
            self.client_message(m);
        }
    }

    fn may_be_batch(&self, body: &[u8]) -> bool {
        body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
    }

    fn client_message(&mut self, m: Message) {
        match m {
            Message::Request {
                id,
                method,
                name,
                uri,
                progress_token,
                traceparent,
                protocol_version,
                arguments_hash,
                bytes,
            } => {
                self.note_version(protocol_version, true);
                if self.exchange.operations.len() >= self.limits.max_operations {
                    self.exchange.skipped.operations_not_recorded += 1;
                    return;
                }
                let index = self.exchange.operations.len();
                self.pending.insert(id.key.clone(), index);
                if let Some(token) = &progress_token {
                    self.tokens.insert(token.clone(), index);
                }
                self.exchange.operations.push(McpOperation {
                    method,
                    direction: McpDirection::ClientToServer,
                    request_id: id.text,
                    name,
                    arguments_hash,
                    resource_uri: uri,
                    traceparent,
                    turn_traceparent: None,
                    start_ns: 0,
                    first_progress_ns: None,
                    progress_notifications: 0,
                    end_ns: None,
                    status: McpOperationStatus::Unanswered,
                    is_error: false,
                    error: None,
                    result_type: None,
                    request_bytes: bytes,
                    response_bytes: None,
                    request_record: None,
                    answer_record: None,
                    progress_token: progress_token.map(|t| t.0),
                });
            }
            Message::Notification { method, cancelled, protocol_version, .. } => {
                self.note_version(protocol_version, true);
                count(&mut self.exchange.client_notifications, &method);
                if let Some(id) = cancelled {
                    match self.pending.remove(&id.key) {
                        Some(i) => self.exchange.operations[i].status = McpOperationStatus::Cancelled,
                        None if self.exchange.cancelled_request_ids.len() < 64 => {
                            self.exchange.cancelled_request_ids.push(id.text)
                        }
                        None => {}
                    }
                }
            }
            Message::Response { .. } => self.exchange.client_responses += 1,
        }
    }

    fn note_version(&mut self, version: Option<String>, from_request: bool) {
        if let Some(v) = version {
            if v.as_str() >= MODERN_REVISION && from_request {
                self.era_modern = true;
            }
            if self.exchange.protocol_version.is_none() {
                self.exchange.protocol_version = Some(v);
            }
        }
    }

    /// One response body piece as it arrived from the upstream, stamped.
    pub fn push_response(&mut self, piece: &[u8], t_ns: u64) {
        match &mut self.body {
            Body::Sse(framer) => {
                let mut events: Vec<(bool, Vec<u8>)> = Vec::new();
                let mut oversized = 0;
                let mut ids = false;
                framer.push(piece, &mut |item| match item {
                    SseItem::Event(e) => {
                        ids |= e.last_event_id.is_some_and(|id| !id.is_empty());
                        events.push((e.event_type == Some(b"endpoint".as_slice()), e.data.to_vec()));
                    }
                    SseItem::Oversized { .. } => oversized += 1,
                    SseItem::Comment { .. } => {}
                });
                self.exchange.skipped.oversized += oversized;
                self.event_ids |= ids;
                for (endpoint, data) in events {
                    if endpoint {
                        self.endpoint(&data);
                    } else {
                        self.server_data(&data, t_ns);
                    }
                }
            }
            Body::Json(buffer, stamp) => {
                *stamp = t_ns;
                if let Some(b) = buffer {
                    if b.len() + piece.len() > self.limits.max_message_bytes {
                        *buffer = None;
                        self.exchange.skipped.oversized += 1;
                    } else {
                        b.extend_from_slice(piece);
                    }
                }
            }
            Body::None => {}
        }
    }

    /// HTTP+SSE: the `endpoint` event names the URI of the session's `POST`s.
    fn endpoint(&mut self, data: &[u8]) {
        if self.exchange.endpoint.is_some() {
            return;
        }
        let uri = message::bounded(String::from_utf8_lossy(data).trim());
        self.exchange.transport = McpTransport::HttpSse;
        if self.exchange.session_id.is_none() {
            self.exchange.session_id = session_in_query(&uri);
            self.exchange.session_started = self.exchange.session_id.is_some();
        }
        self.exchange.endpoint = Some(uri);
    }

    fn server_data(&mut self, data: &[u8], t_ns: u64) {
        let read = message::read(data, self.budget(McpDirection::ServerToClient));
        self.exchange.skipped.malformed += read.malformed;
        self.exchange.skipped.messages_not_read += read.not_read;
        for m in read.messages {
            self.messages[McpDirection::ServerToClient as usize] += 1;
            self.server_message(m, t_ns);
        }
    }

    fn server_message(&mut self, m: Message, t_ns: u64) {
        match m {
            Message::Response { id, is_error, error, protocol_version, result_type, bytes } => {
                let Some(index) = id.as_ref().and_then(|id| self.pending.remove(&id.key)) else {
                    self.exchange.skipped.unmatched_responses += 1;
                    if let Some(id) = id.filter(|_| self.exchange.foreign.len() < self.limits.max_operations) {
                        self.exchange.foreign.push(ForeignMessage::Response {
                            request_id: id.text,
                            t_ns,
                            is_error,
                            error: error.map(|e| JsonRpcError { code: e.code, message: e.message }),
                            result_type,
                            bytes,
                        });
                    }
                    return;
                };
                let op = &mut self.exchange.operations[index];
                if op.method == "initialize" && self.exchange.protocol_version.is_none() {
                    self.exchange.protocol_version = protocol_version;
                }
                op.end_ns = Some(t_ns);
                if op.status == McpOperationStatus::Unanswered {
                    op.status = McpOperationStatus::Answered;
                }
                op.is_error = is_error;
                op.error = error.map(|e| JsonRpcError { code: e.code, message: e.message });
                op.result_type = result_type;
                op.response_bytes = Some(bytes);
            }
            Message::Notification { method, progress_token, .. } => {
                count(&mut self.exchange.server_notifications, &method);
                let Some(token) = progress_token else { return };
                if let Some(&i) = self.tokens.get(&token) {
                    let op = &mut self.exchange.operations[i];
                    op.first_progress_ns.get_or_insert(t_ns as i64);
                    op.progress_notifications += 1;
                } else if self.exchange.foreign.len() < self.limits.max_operations {
                    self.exchange.foreign.push(ForeignMessage::Progress { token: token.0, t_ns });
                }
            }
            Message::Request { id, method, name, uri, bytes, .. } => {
                if self.exchange.operations.len() >= self.limits.max_operations {
                    self.exchange.skipped.operations_not_recorded += 1;
                    return;
                }
                self.exchange.operations.push(McpOperation {
                    method,
                    direction: McpDirection::ServerToClient,
                    request_id: id.text,
                    name,
                    arguments_hash: None,
                    resource_uri: uri,
                    traceparent: None,
                    turn_traceparent: None,
                    start_ns: t_ns as i64,
                    first_progress_ns: None,
                    progress_notifications: 0,
                    end_ns: None,
                    status: McpOperationStatus::Unanswered,
                    is_error: false,
                    error: None,
                    result_type: None,
                    request_bytes: bytes,
                    response_bytes: None,
                    request_record: None,
                    answer_record: None,
                    progress_token: None,
                });
            }
        }
    }

    /// The exchange as read. `response_truncated`: the response bytes were cut at the keep limit.
    pub fn finish(mut self, response_truncated: bool) -> McpExchange {
        if let Body::Json(Some(buffer), stamp) = std::mem::replace(&mut self.body, Body::None) {
            self.server_data(&buffer, stamp);
        }
        self.exchange.skipped.response_truncated = response_truncated;
        self.detach_unanswered();
        // An HTTP+SSE session lives as long as its stream.
        if self.exchange.get_stream && self.exchange.transport == McpTransport::HttpSse {
            self.exchange.session_ended = self.exchange.session_id.is_some();
        }
        let known = self.era_modern
            || self.exchange.protocol_version.is_some()
            || self.exchange.session_id.is_some()
            || self.exchange.operations.iter().any(|o| o.method == "initialize");
        self.exchange.era = known.then_some(if self.era_modern { McpEra::Modern } else { McpEra::Handshake });
        self.exchange
    }
}

impl McpAnalyzer {
    /// Client requests left without an answer that will come in another exchange of the session:
    /// a request answered `202` (HTTP+SSE), or a handshake-era stream that ended after events with
    /// ids (resumable with `Last-Event-ID`).
    fn detach_unanswered(&mut self) {
        let answered_elsewhere = self.status == Some(202);
        let resumable = self.event_ids && !self.era_modern && self.exchange.session_id.is_some();
        if !answered_elsewhere && !resumable {
            return;
        }
        if answered_elsewhere && self.exchange.session_id.is_some() {
            self.exchange.transport = McpTransport::HttpSse;
        }
        for op in &mut self.exchange.operations {
            if op.direction == McpDirection::ClientToServer && op.status == McpOperationStatus::Unanswered {
                op.status = McpOperationStatus::Detached;
            }
        }
    }
}

fn count(n: &mut McpNotifications, method: &str) {
    if method == "notifications/progress" {
        n.progress += 1;
    } else if method == "notifications/cancelled" {
        n.cancelled += 1;
    } else if method.ends_with("/list_changed") || method == "notifications/resources/updated" {
        n.list_changed += 1;
    } else {
        n.other += 1;
    }
}
