//! A model's tool call joined to the MCP `tools/call` that executed it. There is no shared id:
//! the join uses the tool name (agent SDKs and gateways prefix it with the server's name, e.g.
//! `mcp_{server}__{tool}`, and cut long names with a hash suffix), the timing (the MCP call ran
//! inside the tool run: after the call was ready, before the request carrying its result) and the
//! arguments as parsed values (agent SDKs parse the model's argument string and serialise it
//! again: both sides are hashed by value, `conversation::arguments_hash`). A call whose arguments
//! are known on both sides and differ is not a candidate; among candidates, those with the same
//! arguments go first, so two concurrent calls of one tool join by their arguments whatever order
//! they ran in; equal candidates go first-in, first-out. The tool run then splits into the tool
//! server's time (the MCP operation) and the harness's time before and after it, with the
//! evidence (`joined_by`).

use std::collections::VecDeque;

use super::schema::{JoinedBy, ToolRunMcp, TurnRecord};
use crate::Record;

/// MCP calls kept for joining at most, and for at most this long after their end.
pub const MAX_MCP_CALLS: usize = 4096;
pub const MCP_CALL_TTL_NS: u64 = 10 * 60 * 1_000_000_000;

/// One answered MCP `tools/call`, as kept for joining.
#[derive(Debug, Clone, PartialEq)]
pub struct McpCall {
    /// The tokentap record of the exchange.
    pub request_id: String,
    /// `jsonrpc.request.id`.
    pub jsonrpc_id: String,
    pub tool: String,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    /// Its arguments as parsed values, hashed.
    pub arguments_hash: Option<u64>,
}

/// Recent answered MCP tool calls, bounded, oldest first.
#[derive(Debug, Default)]
pub struct McpCalls {
    calls: VecDeque<McpCall>,
}

pub(crate) fn name_match(model: &str, tool: &str) -> Option<JoinedBy> {
    if model == tool {
        return Some(JoinedBy::NameExact);
    }
    let separated = |rest: &str, at_end: bool| {
        let c = if at_end { rest.chars().last() } else { rest.chars().next() };
        c.is_some_and(|c| matches!(c, '_' | '-' | '.' | '/' | ':'))
    };
    if let Some(prefix) = model.strip_suffix(tool) {
        if separated(prefix, true) {
            return Some(JoinedBy::NameAffixed);
        }
    }
    if let Some(suffix) = model.strip_prefix(tool) {
        if separated(suffix, false) {
            return Some(JoinedBy::NameAffixed);
        }
    }
    // `mcp_{server}__{tool}` cut to fit with `_` and 8 hex digits: the stem before the suffix ends
    // with a beginning of the tool's name (at least 4 characters, after a separator).
    let (stem, hash) = model.rsplit_once('_')?;
    if hash.len() != 8 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) || stem.len() < 32 {
        return None;
    }
    (4..=tool.len().min(stem.len())).rev().find_map(|k| {
        let head = tool.get(..k)?;
        let before = stem.strip_suffix(head)?;
        separated(before, true).then_some(JoinedBy::NameTruncated)
    })
}

impl McpCalls {
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Keeps the answered `tools/call` operations of an MCP exchange's record.
    pub fn observe(&mut self, record: &Record) {
        let Some(exchange) = &record.mcp else { return };
        let t0 = record.timeline.t0_unix_ns;
        for op in &exchange.operations {
            let (Some(tool), Some(end)) = (op.name.as_ref(), op.end_ns) else { continue };
            if op.method != "tools/call" || op.direction != tokentap_analysis::mcp::McpDirection::ClientToServer {
                continue;
            }
            if self.calls.len() >= MAX_MCP_CALLS {
                self.calls.pop_front();
            }
            self.calls.push_back(McpCall {
                request_id: record.request_id.clone(),
                jsonrpc_id: op.request_id.clone(),
                tool: tool.clone(),
                start_unix_ns: t0.saturating_add_signed(op.start_ns),
                end_unix_ns: t0.saturating_add(end),
                arguments_hash: op.arguments_hash,
            });
        }
    }

    /// Drops calls that ended more than [`MCP_CALL_TTL_NS`] before `now_unix_ns`.
    pub fn expire(&mut self, now_unix_ns: u64) {
        let cutoff = now_unix_ns.saturating_sub(MCP_CALL_TTL_NS);
        self.calls.retain(|c| c.end_unix_ns >= cutoff);
    }

    /// Joins the turn's answered tool runs to the MCP calls that ran inside them (each call joins
    /// at most one run and is then let go); returns how many runs were joined.
    pub fn join(&mut self, turn: &mut TurnRecord) -> usize {
        let t0 = turn.t0_unix_ns as f64;
        let mut joined = 0;
        let mut order: Vec<usize> = (0..turn.tool_runs.len()).collect();
        order.sort_by(|&a, &b| turn.tool_runs[a].ready_ms.total_cmp(&turn.tool_runs[b].ready_ms));
        for i in order {
            let run = &mut turn.tool_runs[i];
            let (Some(name), Some(result_ms)) = (run.name.as_deref(), run.result_ms) else { continue };
            let ready = t0 + run.ready_ms * 1e6;
            let result = t0 + result_ms * 1e6;
            let args = run.arguments_hash;
            let candidate = |c: &McpCall| {
                let inside = c.start_unix_ns as f64 >= ready && c.end_unix_ns as f64 <= result;
                let differ = matches!((args, c.arguments_hash), (Some(a), Some(b)) if a != b);
                (inside && !differ).then(|| name_match(name, &c.tool)).flatten()
            };
            let same_args = |c: &McpCall| args.is_some() && c.arguments_hash == args;
            let found = (self.calls.iter().enumerate())
                .filter(|(_, c)| same_args(c))
                .chain(self.calls.iter().enumerate().filter(|(_, c)| !same_args(c)))
                .find_map(|(k, c)| candidate(c).map(|by| (k, by, same_args(c))));
            let Some((k, by, by_args)) = found else { continue };
            let call = self.calls.remove(k).expect("found above");
            run.mcp = Some(ToolRunMcp {
                server_ms: (call.end_unix_ns - call.start_unix_ns) as f64 / 1e6,
                harness_before_ms: (call.start_unix_ns as f64 - ready) / 1e6,
                harness_after_ms: (result - call.end_unix_ns as f64) / 1e6,
                request_id: call.request_id,
                jsonrpc_id: call.jsonrpc_id,
                tool: call.tool,
                joined_by: if by_args {
                    vec![by, JoinedBy::Arguments, JoinedBy::Window]
                } else {
                    vec![by, JoinedBy::Window]
                },
            });
            joined += 1;
        }
        if joined > 0 {
            turn.totals.tool_server_ms =
                Some(turn.tool_runs.iter().filter_map(|r| r.mcp.as_ref()).map(|m| m.server_ms).sum());
        }
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_exactly_with_affixes_or_cut_with_a_hash() {
        assert_eq!(name_match("get_weather", "get_weather"), Some(JoinedBy::NameExact));
        assert_eq!(name_match("mcp_weather__get_weather", "get_weather"), Some(JoinedBy::NameAffixed));
        assert_eq!(name_match("weather_get_weather", "get_weather"), Some(JoinedBy::NameAffixed));
        assert_eq!(name_match("xget_weather", "get_weather"), None);
        assert_eq!(name_match("get_time", "get_weather"), None);
        let cut = "mcp_a_very_long_server_name_here__get_the_wea_1a2b3c4d";
        assert_eq!(name_match(cut, "get_the_weather_forecast"), Some(JoinedBy::NameTruncated));
        assert_eq!(name_match(cut, "other_tool"), None);
    }

    fn turn(runs: serde_json::Value) -> TurnRecord {
        serde_json::from_value(serde_json::json!({
            "record_version": 1, "turn_id": "t", "conversation_id": "c", "turn_index": 0, "trace_id": "x",
            "started_at": "2026-01-01T00:00:00Z", "t0_unix_ns": 1_000_000_000u64, "route": "r", "status": "complete",
            "totals": {"e2e_ms": 1000.0, "model_ms": 100.0, "tool_ms": 800.0, "client_ms": 100.0, "steps": 2,
                       "tool_calls": 2, "unanswered_tool_calls": 0},
            "steps": [], "tool_runs": runs, "critical_path": []
        }))
        .unwrap()
    }

    fn call(tool: &str, start_ms: u64, end_ms: u64) -> McpCall {
        McpCall {
            request_id: format!("{tool}-{start_ms}"),
            jsonrpc_id: "3".into(),
            tool: tool.into(),
            start_unix_ns: 1_000_000_000 + start_ms * 1_000_000,
            end_unix_ns: 1_000_000_000 + end_ms * 1_000_000,
            arguments_hash: None,
        }
    }

    /// Two concurrent calls of one tool, run by the harness in the other order than the model
    /// made them: the arguments join each to its own run; arguments known on both sides that
    /// differ never join.
    #[test]
    fn concurrent_calls_of_one_tool_join_by_their_arguments() {
        use tokentap_analysis::conversation::arguments_hash;
        let (paris, rome) = (arguments_hash(r#"{"city": "Paris"}"#), arguments_hash(r#"{"city": "Rome"}"#));
        let mut t = turn(serde_json::json!([
            {"call_id": "a", "name": "weather", "step": 1, "ready_ms": 100.0, "result_step": 2,
             "result_ms": 500.0, "duration_ms": 400.0},
            {"call_id": "b", "name": "weather", "step": 1, "ready_ms": 100.0, "result_step": 2,
             "result_ms": 500.0, "duration_ms": 400.0}
        ]));
        t.tool_runs[0].arguments_hash = paris;
        t.tool_runs[1].arguments_hash = rome;
        let mut calls = McpCalls::default();
        // Rome's call went out first; a third call, with other arguments, too.
        let with = |mut c: McpCall, args: &str| {
            c.arguments_hash = arguments_hash(args);
            c
        };
        calls.calls.extend([
            with(call("weather", 110, 200), r#"{"city":"Oslo"}"#),
            with(call("weather", 120, 300), r#"{"city":"Rome"}"#),
            with(call("weather", 130, 400), r#"{ "city" : "Paris" }"#),
        ]);
        assert_eq!(calls.join(&mut t), 2);
        let (a, b) = (t.tool_runs[0].mcp.as_ref().unwrap(), t.tool_runs[1].mcp.as_ref().unwrap());
        assert_eq!((a.server_ms, b.server_ms), (270.0, 180.0));
        assert_eq!(a.joined_by, vec![JoinedBy::NameExact, JoinedBy::Arguments, JoinedBy::Window]);
        assert_eq!(calls.len(), 1, "Oslo's call joins no run");
        // Arguments unknown on one side: name and window alone, first in first out.
        let mut t = turn(serde_json::json!([
            {"call_id": "c", "name": "weather", "step": 1, "ready_ms": 100.0, "result_step": 2,
             "result_ms": 500.0, "duration_ms": 400.0}
        ]));
        t.tool_runs[0].arguments_hash = paris;
        let mut calls = McpCalls::default();
        calls.calls.extend([call("weather", 110, 200)]);
        assert_eq!(calls.join(&mut t), 1);
        assert_eq!(t.tool_runs[0].mcp.as_ref().unwrap().joined_by, vec![JoinedBy::NameExact, JoinedBy::Window]);
    }

    #[test]
    fn tool_runs_split_into_server_and_harness_time() {
        let mut t = turn(serde_json::json!([
            {"call_id": "a", "name": "mcp_srv__sleep", "step": 1, "ready_ms": 100.0, "result_step": 2,
             "result_ms": 500.0, "duration_ms": 400.0},
            {"call_id": "b", "name": "sleep", "step": 1, "ready_ms": 110.0, "result_step": 2,
             "result_ms": 500.0, "duration_ms": 390.0},
            {"call_id": "c", "name": "local_tool", "step": 1, "ready_ms": 120.0, "result_step": 2,
             "result_ms": 500.0, "duration_ms": 380.0}
        ]));
        let mut calls = McpCalls::default();
        // One before the window (not this turn's), two inside: first in, first out.
        calls.calls.extend([call("sleep", 50, 90), call("sleep", 120, 320), call("sleep", 330, 480)]);
        assert_eq!(calls.join(&mut t), 2);
        let a = t.tool_runs[0].mcp.as_ref().unwrap();
        assert_eq!((a.server_ms, a.harness_before_ms, a.harness_after_ms), (200.0, 20.0, 180.0));
        assert_eq!(a.joined_by, vec![JoinedBy::NameAffixed, JoinedBy::Window]);
        let b = t.tool_runs[1].mcp.as_ref().unwrap();
        assert_eq!((b.server_ms, b.joined_by[0]), (150.0, JoinedBy::NameExact));
        assert!(t.tool_runs[2].mcp.is_none(), "a local tool has no MCP call");
        assert_eq!(t.totals.tool_server_ms, Some(350.0));
        assert_eq!(calls.len(), 1, "the unmatched call stays");
        calls.expire(1_000_000_000 + 90 * 1_000_000 + MCP_CALL_TTL_NS + 1);
        assert!(calls.is_empty());
    }
}
