//! What an MCP exchange's analysis records (`Record::mcp`): the exchange, its operations, the
//! notifications and what was skipped, and the messages it hands over for pairing across
//! exchanges.

use serde::{Deserialize, Serialize};

/// Which transport carried the exchange.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// Streamable HTTP (2025-03-26 and later): one endpoint, answers on each `POST`'s response.
    #[default]
    StreamableHttp,
    /// HTTP+SSE (2024-11-05): a `GET` stream carries every answer; `POST`s are answered `202`.
    HttpSse,
}

impl McpTransport {
    pub(crate) fn is_default(&self) -> bool {
        *self == McpTransport::StreamableHttp
    }
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
    /// in another exchange: server requests).
    Unanswered,
    /// No response in this exchange, which expects it in another of its session: a request
    /// `POST`ed under HTTP+SSE (answered `202`; its response comes on the session's `GET`
    /// stream), or one whose stream ended without its response after events with ids (the client
    /// resumes it with `Last-Event-ID`). When the answer comes, the operation is recorded whole in
    /// the exchange that carried it (`request_record` names this one).
    Detached,
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
    /// `tools/call`: the arguments as parsed values, hashed like the model's tool call arguments
    /// (`conversation::arguments_hash`; written only when hashes are fleet-keyed).
    #[serde(
        with = "crate::conversation::fleet_hex",
        skip_serializing_if = "crate::conversation::fleet_hex::hidden",
        default
    )]
    pub arguments_hash: Option<u64>,
    /// The W3C trace context in the request's `params._meta.traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// A `tools/call` without trace context of its own that ran a tool call of an open agent turn:
    /// that call's `execute_tool` span, as a W3C traceparent (the operation's span goes there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_traceparent: Option<String>,
    /// The request was sent: the request head (client requests, 0) or the stamp of the body piece
    /// that completed it (server requests on a stream). Negative when the request came in an
    /// exchange that began before this one (`request_record`: a resumed stream's answer).
    pub start_ns: i64,
    /// The first `notifications/progress` with the operation's progress token arrived (negative:
    /// on the exchange of the request, before this one began).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_progress_ns: Option<i64>,
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
    /// The tokentap request id of the exchange that carried the request, when the answer came in
    /// another one (HTTP+SSE, a resumed stream): the operation was paired across exchanges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_record: Option<String>,
    /// The tokentap request id of the exchange that carried the answer, when that exchange's record
    /// reached the worker before this one's (the operation is then completed on the request's
    /// record instead of the answer's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_record: Option<String>,
    /// The request's progress token (canonical form), for pairing progress across exchanges.
    #[serde(skip)]
    pub progress_token: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl McpOperation {
    /// end − start, when answered.
    pub fn duration_ns(&self) -> Option<u64> {
        self.end_ns.map(|e| (e as i64).saturating_sub(self.start_ns).max(0) as u64)
    }

    /// start → first progress, when progress came.
    pub fn first_progress_after_ns(&self) -> Option<u64> {
        self.first_progress_ns.map(|p| p.saturating_sub(self.start_ns).max(0) as u64)
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
            McpOperationStatus::Answered | McpOperationStatus::Detached => None,
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

/// A server message this exchange could not pair: it answers a request of another exchange of
/// the session (HTTP+SSE, a resumed stream). Stamps are ns since this exchange's t0.
#[derive(Debug, Clone, PartialEq)]
pub enum ForeignMessage {
    Response {
        /// `jsonrpc.request.id` as a string (pair with [`id_key`]).
        request_id: String,
        t_ns: u64,
        is_error: bool,
        error: Option<JsonRpcError>,
        result_type: Option<String>,
        bytes: u64,
    },
    /// `notifications/progress` with a token no request of this exchange has (canonical form).
    Progress { token: String, t_ns: u64 },
}

/// The key two spellings of one JSON-RPC id share (`"7"` and `7`), from its string form
/// (`McpOperation::request_id`).
pub fn id_key(request_id: &str) -> String {
    match request_id.parse::<i64>() {
        Ok(n) => n.to_string(),
        Err(_) => request_id.to_string(),
    }
}

/// One HTTP exchange of an MCP route, read as MCP (`Record::mcp`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpExchange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub era: Option<McpEra>,
    #[serde(default, skip_serializing_if = "McpTransport::is_default")]
    pub transport: McpTransport,
    /// HTTP+SSE: the URI the `GET` stream's `endpoint` event named for the client's `POST`s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The request's `Last-Event-ID`: a stream resumed after that event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_after: Option<String>,
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
    /// Server messages for requests of other exchanges, in arrival order (at most
    /// `max_operations`): not recorded, the worker pairs them within the session.
    #[serde(skip)]
    pub foreign: Vec<ForeignMessage>,
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

    /// A client that closed this exchange early got all it waited for: every client request was
    /// answered, or it is a server stream (`GET`, not a resumption), which has no end of its own:
    /// the client closes it when it is done with the session (an HTTP+SSE session ends so).
    pub fn closed_normally(&self) -> bool {
        self.all_answered() || (self.get_stream && self.resumed_after.is_none())
    }
}
