//! The turn record (`turns.jsonl`, docs/records.md) and the turn reference each request record
//! carries. Times are milliseconds since the turn's t0 (its first request's t0).

use serde::{Deserialize, Serialize};

pub use crate::schema::{TurnLink, TurnRef};
use crate::Outcome;

pub const TURN_RECORD_VERSION: u32 = 1;

/// The turn journal's file name in the data directory (rotated files get a numeric suffix).
pub const TURNS_FILE: &str = "turns.jsonl";

tokentap_analysis::named_enum! {
    /// How a turn ended.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum TurnStatus {
        /// A response finished without tool calls: the final answer.
        Complete = "complete",
        /// The last step failed and nothing followed within the idle time.
        Failed = "failed",
        /// Tool calls were left unanswered: no request carried their results within
        /// `[turns] idle_close_s`, or the user moved on to a new message.
        Incomplete = "incomplete",
        /// Closed early to stay within `[turns]` memory bounds.
        Evicted = "evicted",
        /// Still open when tokentap stopped.
        Shutdown = "shutdown",
    }
}

/// One model call of the turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStep {
    pub step: u32,
    pub request_id: String,
    pub span_id: String,
    pub link: TurnLink,
    /// The request's t0.
    pub start_ms: f64,
    /// The response's end (t_end).
    pub end_ms: f64,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Time to first answer token, from the step's own t0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_answer_ms: Option<f64>,
    /// Time to the first tool-call event, from the step's own t0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_tool_ms: Option<f64>,
    pub tool_calls: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
}

/// One tool call, from the moment it was ready to the request that carried its result
/// (`execute_tool`). The time also holds the client's own work and the network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRun {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The step whose response made the call.
    pub step: u32,
    /// Its last argument fragment (or the end of its block) handed to the client.
    pub ready_ms: f64,
    /// The step whose request carried the result, and that request's arrival (its t0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_step: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_ms: Option<f64>,
    /// result − ready; absent while unanswered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// The call's arguments as parsed values, hashed (written only when hashes are fleet-keyed).
    #[serde(
        with = "tokentap_analysis::conversation::fleet_hex",
        skip_serializing_if = "tokentap_analysis::conversation::fleet_hex::hidden",
        default
    )]
    pub arguments_hash: Option<u64>,
    /// The MCP `tools/call` that executed it, when one passed tokentap: the tool server's time and
    /// the harness's before and after it (`turn::mcp_join`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<ToolRunMcp>,
}

/// How a join was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinedBy {
    /// The model's tool name is the server's.
    NameExact,
    /// The model's name is the server's with a prefix or suffix (`mcp_srv__tool`, `srv_tool`).
    NameAffixed,
    /// The model's name is a prefixed name cut and given a hash suffix (`…_1a2b3c4d`).
    NameTruncated,
    /// The MCP call ran inside the tool run's window (ready … result request).
    Window,
    /// The `tools/call` arguments are the model's, as parsed values (key order, whitespace,
    /// escapes and number spelling aside).
    Arguments,
}

/// The MCP side of a tool run (`ToolRun::mcp`). Times in ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRunMcp {
    /// The tokentap record of the MCP exchange.
    pub request_id: String,
    pub jsonrpc_id: String,
    /// The tool's name on the server.
    pub tool: String,
    /// The MCP call's duration: the tool server's time as the wire shows it.
    pub server_ms: f64,
    /// The call was ready → the MCP request reached tokentap: the harness before the call.
    pub harness_before_ms: f64,
    /// The MCP response arrived → the request carrying the result: the harness after it.
    pub harness_after_ms: f64,
    pub joined_by: Vec<JoinedBy>,
}

/// What a stretch of the critical path was spent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentKind {
    /// A model call was running (request sent … response end).
    Model,
    /// Tool calls were out (ready … the request with their results); includes client work.
    Tool,
    /// Neither: the client's own time between steps.
    Client,
}

/// One stretch of the critical path, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriticalSegment {
    pub kind: SegmentKind,
    pub start_ms: f64,
    pub end_ms: f64,
    /// The model step (model segments) or the step that carried the results (tool segments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
    /// Tool segments: the calls whose results that step carried.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_ids: Vec<String>,
}

/// The turn's totals (docs/metrics.md, "Turns"). `model_ms + tool_ms + client_ms = e2e_ms`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnTotals {
    /// First request's t0 → the final answer's last content (else the last step's end).
    pub e2e_ms: f64,
    /// Time inside model calls (the union of the steps' t0 … t_end).
    pub model_ms: f64,
    /// Time with tool calls out and no model call running.
    pub tool_ms: f64,
    /// The rest: neither a model call nor a tool call out.
    pub client_ms: f64,
    pub steps: u32,
    pub tool_calls: u32,
    /// Tool calls whose result never arrived.
    pub unanswered_tool_calls: u32,
    /// The tool runs' MCP server time, summed over the runs joined to an MCP call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_server_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
}

/// One user turn, as written to `turns.jsonl` and served at `/_tokentap/api/turns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub record_version: u32,
    pub turn_id: String,
    pub conversation_id: String,
    /// Turns of this conversation before this one.
    pub turn_index: u32,
    pub trace_id: String,
    /// The `invoke_agent` span (turns with tool calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_span_id: Option<String>,
    /// The client's span the first request named in its `traceparent` (the agent span's parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
    /// RFC 3339 time of the first request's t0.
    pub started_at: String,
    pub t0_unix_ns: u64,
    pub route: String,
    pub status: TurnStatus,
    pub totals: TurnTotals,
    pub steps: Vec<TurnStep>,
    pub tool_runs: Vec<ToolRun>,
    pub critical_path: Vec<CriticalSegment>,
    /// This instance did not see the turn start: its first step here continues a turn (tool
    /// results) that another instance of a fleet began. Its steps are listed, its totals are
    /// partial, and it exports no `invoke_agent` span of its own; `tokentap report --records`
    /// over the instances' journals rebuilds the whole turn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fragment: bool,
    /// Steps linked to the turn beyond `[turns] max_steps` (counted in the totals, not listed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub steps_not_listed: u32,
    /// What the browser probe saw, once a report for the first or the last step joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser: Option<TurnBrowser>,
    /// Voice turns: the transcription before the model call and the speech requests that read the
    /// answer out (`voice.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voice: Option<super::voice::TurnVoice>,
}

/// The turn as the user saw it in the browser (ms since the turn's t0, like the rest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnBrowser {
    /// The first step's `user_send` mark (the user pressed send); may be before 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_send_ms: Option<f64>,
    /// The last step's last paint of answer text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_paint_ms: Option<f64>,
    /// From `user_send` (else the turn's t0) to the final paint (else the final answer's last
    /// content): the wait the user had.
    pub e2e_ms: f64,
}

impl TurnRecord {
    /// Adds what the browser saw, from the records of the turn's first and last steps (either may
    /// carry a joined probe report). Returns whether anything changed.
    pub fn apply_browser(&mut self, first: Option<&crate::Record>, last: Option<&crate::Record>) -> bool {
        let start_of =
            |record: &crate::Record| self.steps.iter().find(|s| s.request_id == record.request_id).map(|s| s.start_ms);
        let user_send_ms = first.and_then(|r| {
            let mark = r.browser.as_ref()?.marks.iter().find(|m| m.name == "user_send")?.t_ms;
            Some(start_of(r)? + mark)
        });
        let final_paint_ms = last.and_then(|r| Some(start_of(r)? + r.browser.as_ref()?.last_paint_ms?));
        if user_send_ms.is_none() && final_paint_ms.is_none() {
            return false;
        }
        let from = user_send_ms.unwrap_or(0.0);
        let to = final_paint_ms.unwrap_or(self.totals.e2e_ms);
        let browser = Some(TurnBrowser { user_send_ms, final_paint_ms, e2e_ms: (to - from).max(0.0) });
        let changed = browser != self.browser;
        self.browser = browser;
        changed
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
