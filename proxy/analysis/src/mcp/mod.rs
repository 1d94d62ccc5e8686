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
//! `Mcp-Method` / `Mcp-Name` headers).
//!
//! Bounded: the request body and the response bytes are what the proxy kept; one SSE event or
//! JSON body larger than [`McpLimits::max_message_bytes`] is skipped and counted; at most
//! [`McpLimits::max_messages`] messages are read per exchange and at most
//! [`McpLimits::max_operations`] operations recorded, the rest counted. Malformed messages are
//! counted, never fatal: the proxy forwards the bytes untouched whatever this module makes of them.

mod message;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::sse::{SseFramer, SseItem};
use message::{CanonicalId, Message};

/// Header names MCP uses, lower case.
pub const SESSION_HEADER: &str = "mcp-session-id";
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
pub const METHOD_HEADER: &str = "mcp-method";
pub const NAME_HEADER: &str = "mcp-name";

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

/// Which protocol era the exchange belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpEra {
    /// 2024-11-05 to 2025-11-25: `initialize`, sessions, the `GET` stream.
    Handshake,
    /// 2026-07-28 and later: stateless, version in each request's `_meta`.
    Modern,
}

/// Who sent an operation's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpDirection {
    /// The client (the usual case: `tools/call`, `initialize`, …).
    ClientToServer,
    /// The server, on a stream (`ping`, `sampling/createMessage`, `elicitation/create`, `roots/list`).
    ServerToClient,
}

/// How an operation ended within its exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpOperationStatus {
    /// Its response arrived.
    Answered,
    /// The client sent `notifications/cancelled` for it before an answer came.
    Cancelled,
    /// No response arrived in this exchange (the stream ended or broke first, or the answer comes
    /// in another exchange: server requests, resumption).
    Unanswered,
}

/// A JSON-RPC error as recorded (`message` at most 256 characters).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcError {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i64>,
    pub message: String,
}

/// One MCP operation: a request and, when it arrived, its response. Stamps are ns since t0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpOperation {
    /// `mcp.method.name`.
    pub method: String,
    pub direction: McpDirection,
    /// `jsonrpc.request.id`, as a string (a string id's content, a number's digits).
    pub request_id: String,
    /// The tool or prompt name (`params.name` of `tools/call`, `prompts/get`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The resource URI (`params.uri` of `resources/read`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_uri: Option<String>,
    /// The W3C trace context in the request's `params._meta.traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The request was sent: the request head (client requests, 0) or the stamp of the body piece
    /// that completed it (server requests on a stream).
    pub start_ns: u64,
    /// The first `notifications/progress` with the operation's progress token arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_progress_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub progress_notifications: u64,
    /// The response message arrived (the body piece that completed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
    pub status: McpOperationStatus,
    /// `result.isError` (a tool's own failure).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// A JSON-RPC error response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<JsonRpcError>,
    /// `result.resultType` when not `complete` (2026-07-28: `input_required`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_type: Option<String>,
    /// Bytes of the request message.
    pub request_bytes: u64,
    /// Bytes of the response message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_bytes: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl McpOperation {
    /// end − start, when answered.
    pub fn duration_ns(&self) -> Option<u64> {
        self.end_ns.map(|e| e.saturating_sub(self.start_ns))
    }

    /// `error.type` of the OpenTelemetry conventions: the JSON-RPC error code, `tool_error` for
    /// `isError`, `cancelled` / `unanswered` otherwise when no answer came.
    pub fn error_type(&self) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(e.code.map(|c| c.to_string()).unwrap_or_else(|| "_OTHER".to_string()));
        }
        if self.is_error {
            return Some("tool_error".to_string());
        }
        match self.status {
            McpOperationStatus::Answered => None,
            McpOperationStatus::Cancelled => Some("cancelled".to_string()),
            McpOperationStatus::Unanswered => Some("unanswered".to_string()),
        }
    }
}

/// Notifications seen in the exchange, by kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct McpNotifications {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub progress: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cancelled: u64,
    /// `notifications/*/list_changed`, `notifications/resources/updated`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub list_changed: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub other: u64,
}

/// What the analysis could not read, counted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct McpSkipped {
    /// Not JSON, not JSON-RPC 2.0, or no request, notification or response.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub malformed: u64,
    /// JSON bodies or SSE events over `max_message_bytes`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub oversized: u64,
    /// Messages past `max_messages` (a huge batch, an endless stream).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub messages_not_read: u64,
    /// Requests past `max_operations`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub operations_not_recorded: u64,
    /// Responses whose id matches no request of the exchange.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unmatched_responses: u64,
    /// The request body was cut at the proxy's keep limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub request_truncated: bool,
    /// The response bytes were cut at the proxy's keep limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub response_truncated: bool,
}

impl McpSkipped {
    pub fn any(&self) -> bool {
        self != &McpSkipped::default()
    }
}

/// One HTTP exchange of an MCP route, read as MCP (`Record::mcp`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpExchange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub era: Option<McpEra>,
    /// `mcp.session.id`: the request's `Mcp-Session-Id`, else the one the response set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The response set a session id the request did not carry (the answer to `initialize`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session_started: bool,
    /// A `DELETE` ending the session, answered 2xx; or 404 for a session the server no longer knows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session_ended: bool,
    /// `mcp.protocol.version`: the `MCP-Protocol-Version` header, else `_meta`'s, else the one
    /// `initialize` negotiated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    /// A `GET` stream for server messages.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub get_stream: bool,
    /// The request body was a JSON-RPC batch (an array).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub batch: bool,
    pub operations: Vec<McpOperation>,
    /// Client responses to server requests carried by this `POST`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub client_responses: u64,
    /// Notifications the client sent.
    #[serde(default, skip_serializing_if = "is_default")]
    pub client_notifications: McpNotifications,
    /// Notifications the server sent.
    #[serde(default, skip_serializing_if = "is_default")]
    pub server_notifications: McpNotifications,
    /// Requests the client cancelled (`notifications/cancelled`), by id: their operations live in
    /// other exchanges.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cancelled_request_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub skipped: McpSkipped,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    value == &T::default()
}

impl McpExchange {
    /// Every client request of the exchange got its answer (and there was at least one): a client
    /// that closed afterwards got all it asked for.
    pub fn all_answered(&self) -> bool {
        let mut client = self.operations.iter().filter(|o| o.direction == McpDirection::ClientToServer).peekable();
        client.peek().is_some()
            && client.all(|o| o.status == McpOperationStatus::Answered)
            && self.skipped.operations_not_recorded == 0
    }
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
        let exchange = McpExchange {
            era: None,
            session_id: ctx.session_id.clone().or_else(|| ctx.response_session_id.clone()),
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
        };
        Self { limits, exchange, pending: HashMap::new(), tokens: HashMap::new(), messages: [0, 0], era_modern, body }
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
            Message::Request { id, method, name, uri, progress_token, traceparent, protocol_version, bytes } => {
                self.note_version(protocol_version, true);
                if self.exchange.operations.len() >= self.limits.max_operations {
                    self.exchange.skipped.operations_not_recorded += 1;
                    return;
                }
                let index = self.exchange.operations.len();
                self.pending.insert(id.key.clone(), index);
                if let Some(token) = progress_token {
                    self.tokens.insert(token, index);
                }
                self.exchange.operations.push(McpOperation {
                    method,
                    direction: McpDirection::ClientToServer,
                    request_id: id.text,
                    name,
                    resource_uri: uri,
                    traceparent,
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
                let mut events: Vec<Vec<u8>> = Vec::new();
                let mut oversized = 0;
                framer.push(piece, &mut |item| match item {
                    SseItem::Event(e) => events.push(e.data.to_vec()),
                    SseItem::Oversized { .. } => oversized += 1,
                    SseItem::Comment { .. } => {}
                });
                self.exchange.skipped.oversized += oversized;
                for data in events {
                    self.server_data(&data, t_ns);
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
                let Some(index) = id.and_then(|id| self.pending.remove(&id.key)) else {
                    self.exchange.skipped.unmatched_responses += 1;
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
                if let Some(i) = progress_token.and_then(|t| self.tokens.get(&t).copied()) {
                    let op = &mut self.exchange.operations[i];
                    op.first_progress_ns.get_or_insert(t_ns);
                    op.progress_notifications += 1;
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
                    resource_uri: uri,
                    traceparent: None,
                    start_ns: t_ns,
                    first_progress_ns: None,
                    progress_notifications: 0,
                    end_ns: None,
                    status: McpOperationStatus::Unanswered,
                    is_error: false,
                    error: None,
                    result_type: None,
                    request_bytes: bytes,
                    response_bytes: None,
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
        let known = self.era_modern
            || self.exchange.protocol_version.is_some()
            || self.exchange.session_id.is_some()
            || self.exchange.operations.iter().any(|o| o.method == "initialize");
        self.exchange.era = known.then_some(if self.era_modern { McpEra::Modern } else { McpEra::Handshake });
        self.exchange
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
