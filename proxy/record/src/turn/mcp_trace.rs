//! The agent turn an MCP `tools/call` runs a tool call of, found while the turn is still open:
//! an MCP request without trace context of its own (no `params._meta.traceparent`, no
//! `traceparent` header) gets its CLIENT span in that turn's trace, under the `execute_tool` span
//! of the tool call it ran, instead of a trace of its own.
//!
//! A candidate is an open turn's tool call that was ready when the MCP request arrived and has no
//! result yet, under a matching name (`mcp_join::name_match`) and, when both sides have them, the
//! same arguments (as parsed values). Among candidates, one with the same arguments wins, then
//! the one ready last (the call the harness most likely just started).

use tokentap_analysis::mcp::{McpDirection, McpOperationStatus};

use super::mcp_join::name_match;
use super::tracker::TurnTracker;
use crate::Record;

/// The tool call an MCP operation ran: its turn's trace, the turn's agent span and the call's
/// place among the turn's tool runs (the `execute_tool` span is derived from these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecuteToolRef {
    pub trace_id: String,
    pub agent_span_id: String,
    pub index: usize,
    pub call_id: Option<String>,
}

/// An MCP tools/call of a record that may belong to an open turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnTool {
    /// The operation's index in `record.mcp.operations`.
    pub operation: usize,
    pub call: ExecuteToolRef,
}

impl TurnTracker {
    /// The answered client `tools/call`s of an MCP record without trace context of their own,
    /// each with the open turn's tool call it ran, when one matches.
    pub fn turn_tools(&self, record: &Record) -> Vec<TurnTool> {
        let Some(exchange) = &record.mcp else { return Vec::new() };
        // A traceparent header continued the request's trace: the caller chose it.
        if record.parent_span_id.is_some() {
            return Vec::new();
        }
        let t0 = record.timeline.t0_unix_ns;
        let mut out = Vec::new();
        for (i, op) in exchange.operations.iter().enumerate() {
            let own_context = op.traceparent.is_some();
            let client_call = op.method == "tools/call" && op.direction == McpDirection::ClientToServer;
            let (Some(tool), true, false) = (op.name.as_deref(), client_call, own_context) else { continue };
            if op.status == McpOperationStatus::Detached {
                continue;
            }
            let start = t0.saturating_add_signed(op.start_ns);
            let args = op.arguments_hash;
            let best = self
                .waiting_calls(start)
                .filter(|(_, _, _, c)| c.name.as_deref().is_some_and(|n| name_match(n, tool).is_some()))
                .filter(|(_, _, _, c)| !matches!((args, c.arguments_hash), (Some(a), Some(b)) if a != b))
                .max_by_key(|(_, _, _, c)| (args.is_some() && c.arguments_hash == args, c.ready_unix_ns));
            if let Some((trace, agent, index, c)) = best {
                out.push(TurnTool {
                    operation: i,
                    call: ExecuteToolRef {
                        trace_id: trace.to_string(),
                        agent_span_id: agent.to_string(),
                        index,
                        call_id: c.call_id.clone(),
                    },
                });
            }
        }
        out
    }
}
