//! MCP operations over request records (`Record::mcp`): per method and tool, how many, how many
//! failed, and the percentiles of their duration (request head → response message) and of their
//! first progress. Useful without any LLM traffic: a route fronting only an MCP server.

use std::collections::BTreeMap;

use serde::Serialize;
use tokentap_analysis::mcp::{McpDirection, McpOperation, McpOperationStatus};
use tokentap_analysis::Distribution;
use tokentap_record::Record;

/// One row: a method and, for `tools/call` and `prompts/get`, the tool or prompt.
#[derive(Debug, Clone, Serialize)]
pub struct McpRow {
    pub method: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Operations the client sent.
    pub operations: u64,
    /// Answered with `isError: true` or a JSON-RPC error.
    pub errors: u64,
    /// Cancelled or never answered within their exchange.
    pub unanswered: u64,
    /// Answered operations: request head → response message, ms.
    pub duration_ms: Option<Distribution>,
    /// Operations with progress: request head → first progress notification, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_progress_ms: Option<Distribution>,
}

/// The report's MCP section.
#[derive(Debug, Clone, Serialize)]
pub struct McpSummary {
    /// Records read as MCP exchanges.
    pub exchanges: u64,
    /// Distinct session ids seen.
    pub sessions: u64,
    /// Messages the analysis skipped (malformed, oversized, over the bounds).
    pub skipped_messages: u64,
    pub rows: Vec<McpRow>,
}

#[derive(Default)]
struct Acc {
    operations: u64,
    errors: u64,
    unanswered: u64,
    durations: Vec<f64>,
    progress: Vec<f64>,
}

/// The MCP section over `records`, `None` when none of them is an MCP exchange.
pub fn summarize_mcp(records: &[&Record]) -> Option<McpSummary> {
    let mut exchanges = 0;
    let mut sessions = std::collections::BTreeSet::new();
    let mut skipped_messages = 0;
    let mut rows: BTreeMap<(String, Option<String>), Acc> = BTreeMap::new();
    for exchange in records.iter().filter_map(|r| r.mcp.as_ref()) {
        exchanges += 1;
        if let Some(s) = &exchange.session_id {
            sessions.insert(s.as_str());
        }
        let s = &exchange.skipped;
        skipped_messages += s.malformed + s.oversized + s.messages_not_read;
        // A detached operation is counted where its answer came (paired across exchanges).
        let counted =
            |o: &&McpOperation| o.direction == McpDirection::ClientToServer && o.status != McpOperationStatus::Detached;
        for op in exchange.operations.iter().filter(counted) {
            let name = matches!(op.method.as_str(), "tools/call" | "prompts/get").then(|| op.name.clone()).flatten();
            let acc = rows.entry((op.method.clone(), name)).or_default();
            acc.operations += 1;
            if op.is_error || op.error.is_some() {
                acc.errors += 1;
            }
            if op.status != McpOperationStatus::Answered {
                acc.unanswered += 1;
            }
            if let Some(ns) = op.duration_ns() {
                acc.durations.push(ns as f64 / 1e6);
            }
            if let Some(ns) = op.first_progress_after_ns() {
                acc.progress.push(ns as f64 / 1e6);
            }
        }
    }
    (exchanges > 0).then(|| McpSummary {
        exchanges,
        sessions: sessions.len() as u64,
        skipped_messages,
        rows: rows
            .into_iter()
            .map(|((method, name), acc)| McpRow {
                method,
                name,
                operations: acc.operations,
                errors: acc.errors,
                unanswered: acc.unanswered,
                duration_ms: Distribution::from_samples(&acc.durations),
                first_progress_ms: Distribution::from_samples(&acc.progress),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ops: serde_json::Value) -> Record {
        let mut r = tokentap_record::fixtures::stream_record(1);
        r.mcp = Some(serde_json::from_value(serde_json::json!({ "session_id": "s", "operations": ops })).unwrap());
        r
    }

    #[test]
    fn rows_per_tool_with_percentiles_errors_and_unanswered() {
        let op = |name: &str, end: Option<u64>, is_error: bool| {
            serde_json::json!({"method": "tools/call", "direction": "client_to_server", "request_id": "1",
                "name": name, "start_ns": 0, "end_ns": end, "is_error": is_error, "request_bytes": 10,
                "status": if end.is_some() { "answered" } else { "unanswered" }})
        };
        let a = record(serde_json::json!([op("sleep", Some(100_000_000), false), op("fail", Some(2_000_000), true)]));
        let b = record(serde_json::json!([op("sleep", Some(300_000_000), false), op("sleep", None, false)]));
        let s = summarize_mcp(&[&a, &b]).unwrap();
        assert_eq!((s.exchanges, s.sessions), (2, 1));
        let sleep = s.rows.iter().find(|r| r.name.as_deref() == Some("sleep")).unwrap();
        assert_eq!((sleep.operations, sleep.errors, sleep.unanswered), (3, 0, 1));
        let d = sleep.duration_ms.as_ref().unwrap();
        assert_eq!((d.count, d.p50, d.max), (2, 200.0, 300.0));
        let fail = s.rows.iter().find(|r| r.name.as_deref() == Some("fail")).unwrap();
        assert_eq!(fail.errors, 1);
        assert!(summarize_mcp(&[]).is_none());
    }
}
