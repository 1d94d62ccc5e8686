//! MCP operations (`Record::mcp`) as OpenTelemetry's MCP conventions describe them: one CLIENT
//! span `{mcp.method.name} {target}` per operation the client sent, and the
//! `mcp.client.operation.duration` histogram.

use tokentap_analysis::mcp::{McpDirection, McpExchange, McpOperation, McpOperationStatus};
use tokentap_record::mcp_session::ClosedSession;
use tokentap_record::Record;

use super::attributes::attr;
use super::metrics::{label, Labels, MetricId, Observation};
use super::plan::{child_span_id, hex_bytes, AttrValue, Attributes, SpanKind, SpanPlan, SpanStatus};

/// The operations the client sent (server requests on a stream are the server's operations),
/// but not those whose answer comes in another exchange: they are observed with that exchange,
/// paired across exchanges.
fn client_operations(exchange: &McpExchange) -> impl Iterator<Item = (usize, &McpOperation)> {
    exchange
        .operations
        .iter()
        .enumerate()
        .filter(|(_, o)| o.direction == McpDirection::ClientToServer && o.status != McpOperationStatus::Detached)
}

/// Attributes both the span and the metric carry (no ids: those are span-only).
fn common(op: &McpOperation, exchange: &McpExchange, record: &Record) -> Labels {
    let mut out: Labels = vec![(attr::MCP_METHOD_NAME, label(&op.method))];
    if let Some(error) = op.error_type() {
        out.push((attr::ERROR_TYPE, error));
    }
    if let Some(code) = op.error.as_ref().and_then(|e| e.code) {
        out.push((attr::RPC_RESPONSE_STATUS_CODE, code.to_string()));
    }
    match op.method.as_str() {
        "tools/call" => {
            if let Some(name) = &op.name {
                out.push((attr::TOOL_NAME, label(name)));
            }
            out.push((attr::OPERATION_NAME, "execute_tool".to_string()));
        }
        "prompts/get" => {
            if let Some(name) = &op.name {
                out.push((attr::PROMPT_NAME, label(name)));
            }
        }
        _ => {}
    }
    if let Some(version) = &exchange.protocol_version {
        out.push((attr::MCP_PROTOCOL_VERSION, label(version)));
    }
    out.push((attr::NETWORK_PROTOCOL_NAME, "http".to_string()));
    out.push((attr::NETWORK_TRANSPORT, "tcp".to_string()));
    out.push((attr::ROUTE, label(&record.route)));
    out
}

/// `mcp.client.operation.duration` for every answered operation the client sent.
pub fn mcp_observations(record: &Record, out: &mut Vec<Observation>) {
    let Some(exchange) = &record.mcp else { return };
    for (_, op) in client_operations(exchange) {
        if let Some(ns) = op.duration_ns() {
            out.push(Observation {
                metric: MetricId::McpClientOperationDuration,
                labels: common(op, exchange, record).into(),
                value: ns as f64 / 1e9,
            });
        }
    }
}

/// `{mcp.method.name} {target}` with the tool or prompt name as target, else the method alone.
pub(super) fn span_name(op: &McpOperation) -> String {
    match &op.name {
        Some(name) if matches!(op.method.as_str(), "tools/call" | "prompts/get") => format!("{} {name}", op.method),
        _ => op.method.clone(),
    }
}

/// `mcp.client.session.duration` of a closed session.
pub fn mcp_session_observation(session: &ClosedSession) -> Observation {
    let mut labels: Labels = Vec::with_capacity(3);
    if let Some(version) = &session.protocol_version {
        labels.push((attr::MCP_PROTOCOL_VERSION, label(version)));
    }
    labels.push((attr::ROUTE, label(&session.route)));
    labels.push((attr::MCP_SESSION_END, session.ended_by.as_str().to_string()));
    Observation {
        metric: MetricId::McpClientSessionDuration,
        labels: labels.into(),
        value: session.duration_ns() as f64 / 1e9,
    }
}

/// A W3C `traceparent`'s trace id and parent span id.
fn parse_traceparent(value: &str) -> Option<([u8; 16], [u8; 8])> {
    let mut parts = value.split('-');
    let (version, trace, span) = (parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 {
        return None;
    }
    let trace = hex_bytes::<16>(trace).filter(|t| t.iter().any(|b| *b != 0))?;
    let span = hex_bytes::<8>(span).filter(|s| s.iter().any(|b| *b != 0))?;
    Some((trace, span))
}

/// One CLIENT span per operation the client sent: in the trace of the request's
/// `params._meta.traceparent` when it carries one (its parent that span), else under the
/// `execute_tool` span of the open turn's tool call it ran (`turn_traceparent`), else under the
/// HTTP request's span (`trace_id`, `request_span`). An operation without an answer ends with the
/// request (`request_end`, ns since t0). `server`: the upstream's address and port.
pub fn mcp_spans(
    record: &Record,
    trace_id: [u8; 16],
    request_span: [u8; 8],
    request_end: u64,
    server: Option<(String, u16)>,
) -> Vec<SpanPlan> {
    let Some(exchange) = &record.mcp else { return Vec::new() };
    let t0 = record.timeline.t0_unix_ns;
    client_operations(exchange)
        .map(|(index, op)| {
            let (trace, parent) = (op.traceparent.as_deref().and_then(parse_traceparent))
                .or_else(|| op.turn_traceparent.as_deref().and_then(parse_traceparent))
                .unwrap_or((trace_id, request_span));
            let mut attributes: Attributes =
                common(op, exchange, record).into_iter().map(|(k, v)| (k, AttrValue::Str(v))).collect();
            attributes.push((attr::JSONRPC_REQUEST_ID, AttrValue::Str(op.request_id.clone())));
            if let Some(session) = &exchange.session_id {
                attributes.push((attr::MCP_SESSION_ID, AttrValue::Str(session.clone())));
            }
            if let Some(uri) = &op.resource_uri {
                attributes.push((attr::MCP_RESOURCE_URI, AttrValue::Str(uri.clone())));
            }
            if let Some((host, port)) = &server {
                attributes.push((attr::SERVER_ADDRESS, AttrValue::Str(host.clone())));
                attributes.push((attr::SERVER_PORT, AttrValue::Int(i64::from(*port))));
            }
            if let Some(ns) = op.first_progress_after_ns() {
                let ms = ns as f64 / 1e6;
                attributes.push((attr::MCP_FIRST_PROGRESS_MS, AttrValue::F64(ms)));
                attributes.push((attr::MCP_PROGRESS_NOTIFICATIONS, AttrValue::Int(op.progress_notifications as i64)));
            }
            attributes.push((attr::MCP_REQUEST_BYTES, AttrValue::Int(op.request_bytes as i64)));
            if let Some(bytes) = op.response_bytes {
                attributes.push((attr::MCP_RESPONSE_BYTES, AttrValue::Int(bytes as i64)));
            }
            attributes.push((attr::REQUEST_ID, AttrValue::Str(record.request_id.clone())));
            let status = match op.error_type() {
                Some(kind) => SpanStatus::Error(op.error.as_ref().map_or(kind, |e| e.message.clone())),
                None => SpanStatus::Unset,
            };
            SpanPlan {
                trace_id: trace,
                span_id: child_span_id(request_span, &format!("mcp/{index}")),
                parent_span_id: Some(parent),
                sampled: true,
                name: span_name(op),
                kind: SpanKind::Client,
                start_unix_ns: t0.saturating_add_signed(op.start_ns),
                end_unix_ns: t0
                    .saturating_add(op.end_ns.unwrap_or(request_end))
                    .max(t0.saturating_add_signed(op.start_ns)),
                attributes,
                events: Vec::new(),
                dropped_events: 0,
                status,
            }
        })
        .collect()
}
