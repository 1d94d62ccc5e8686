//! A closed turn as spans and metric observations: the `invoke_agent` span (parent of the steps'
//! request spans, which went out when each request ended) and one `execute_tool` span per
//! answered tool call; `gen_ai.invoke_agent.duration`, `gen_ai.execute_tool.duration` and the
//! `tokentap.turn.*` histograms.

use tokentap_record::turn::{TurnRecord, TurnStatus};

use super::{attr, child_span_id, hex_bytes, label, ms_to_ns, AttrValue, Attributes, Labels, MetricId, Observation};
use super::{SpanKind, SpanPlan, SpanStatus};

const INVOKE_AGENT: &str = "invoke_agent";
const EXECUTE_TOOL: &str = "execute_tool";

fn int(v: u32) -> AttrValue {
    AttrValue::Int(i64::from(v))
}

/// The span id of a turn's `execute_tool` span for its tool run `index` (hex), derived from the
/// turn's agent span: the MCP span of the `tools/call` that ran the call is its child.
pub fn execute_tool_span_id(agent_span_id: &str, index: usize, call_id: Option<&str>) -> Option<String> {
    let agent = hex_bytes::<8>(agent_span_id)?;
    Some(child_span_id(agent, &execute_tool_key(index, call_id)).iter().map(|b| format!("{b:02x}")).collect())
}

fn execute_tool_key(index: usize, call_id: Option<&str>) -> String {
    format!("{EXECUTE_TOOL}:{index}:{}", call_id.unwrap_or(""))
}

/// The turn's spans: none for a turn without tool calls (its one request span says it all).
pub fn turn_spans(turn: &TurnRecord) -> Vec<SpanPlan> {
    let (Some(trace_id), Some(agent)) =
        (hex_bytes::<16>(&turn.trace_id), turn.agent_span_id.as_deref().and_then(hex_bytes::<8>))
    else {
        return Vec::new();
    };
    let t0 = turn.t0_unix_ns;
    let at = |ms: f64| t0.saturating_add(ms_to_ns(ms));
    let last_end = turn.steps.iter().map(|s| s.end_ms).fold(turn.totals.e2e_ms, f64::max);
    let t = &turn.totals;
    let mut attributes: Attributes = vec![
        (attr::OPERATION_NAME, AttrValue::Str(INVOKE_AGENT.into())),
        (attr::CONVERSATION_ID, AttrValue::Str(turn.conversation_id.clone())),
        (attr::TURN_ID, AttrValue::Str(turn.turn_id.clone())),
        (attr::TURN_STATUS, AttrValue::Str(turn.status.as_str().into())),
        (attr::TURN_STEPS, int(t.steps)),
        (attr::TURN_TOOL_CALLS, int(t.tool_calls)),
        (attr::TURN_UNANSWERED_TOOL_CALLS, int(t.unanswered_tool_calls)),
        (attr::TURN_E2E_MS, AttrValue::F64(t.e2e_ms)),
        (attr::TURN_MODEL_MS, AttrValue::F64(t.model_ms)),
        (attr::TURN_TOOL_MS, AttrValue::F64(t.tool_ms)),
        (attr::TURN_CLIENT_MS, AttrValue::F64(t.client_ms)),
        (attr::ROUTE, AttrValue::Str(turn.route.clone())),
    ];
    if let Some(v) = t.input_tokens {
        attributes.push((attr::TURN_INPUT_TOKENS, AttrValue::Int(i64::try_from(v).unwrap_or(i64::MAX))));
    }
    if let Some(v) = t.output_tokens {
        attributes.push((attr::TURN_OUTPUT_TOKENS, AttrValue::Int(i64::try_from(v).unwrap_or(i64::MAX))));
    }
    let status = match turn.status {
        TurnStatus::Failed => SpanStatus::Error("the turn's last step failed".into()),
        _ => SpanStatus::Unset,
    };
    // A fragment (a turn another instance began) hangs its spans under the agent span that
    // instance exports; it sends none of its own.
    let mut spans = Vec::new();
    spans.extend((!turn.fragment).then(|| SpanPlan {
        trace_id,
        span_id: agent,
        parent_span_id: turn.parent_span_id.as_deref().and_then(hex_bytes::<8>),
        sampled: true,
        name: INVOKE_AGENT.into(),
        kind: SpanKind::Internal,
        start_unix_ns: t0,
        end_unix_ns: at(last_end),
        attributes,
        events: Vec::new(),
        dropped_events: 0,
        status,
    }));
    for (i, run) in turn.tool_runs.iter().enumerate() {
        let Some(result_ms) = run.result_ms else { continue };
        let name = run.name.clone().unwrap_or_else(|| "unknown".into());
        let mut attributes: Attributes = vec![
            (attr::OPERATION_NAME, AttrValue::Str(EXECUTE_TOOL.into())),
            (attr::TOOL_NAME, AttrValue::Str(name.clone())),
            (attr::TOOL_TYPE, AttrValue::Str("function".into())),
            (attr::TURN_STEP, int(run.step)),
        ];
        if let Some(id) = &run.call_id {
            attributes.push((attr::TOOL_CALL_ID, AttrValue::Str(id.clone())));
        }
        if let Some(step) = run.result_step {
            attributes.push((attr::TOOL_RESULT_STEP, int(step)));
        }
        // Run by an MCP call that passed tokentap: the conventions' MCP attributes on this span
        // (the MCP operation's own CLIENT span is exported with its exchange), and the split.
        if let Some(m) = &run.mcp {
            attributes.push((attr::MCP_METHOD_NAME, AttrValue::Str("tools/call".into())));
            attributes.push((attr::JSONRPC_REQUEST_ID, AttrValue::Str(m.jsonrpc_id.clone())));
            attributes.push((attr::TOOL_SERVER_MS, AttrValue::F64(m.server_ms)));
            attributes.push((attr::TOOL_HARNESS_BEFORE_MS, AttrValue::F64(m.harness_before_ms)));
            attributes.push((attr::TOOL_HARNESS_AFTER_MS, AttrValue::F64(m.harness_after_ms)));
            attributes.push((attr::TOOL_MCP_REQUEST_ID, AttrValue::Str(m.request_id.clone())));
        }
        spans.push(SpanPlan {
            trace_id,
            span_id: child_span_id(agent, &execute_tool_key(i, run.call_id.as_deref())),
            parent_span_id: Some(agent),
            sampled: true,
            name: format!("{EXECUTE_TOOL} {name}"),
            kind: SpanKind::Internal,
            start_unix_ns: at(run.ready_ms),
            end_unix_ns: at(result_ms).max(at(run.ready_ms)),
            attributes,
            events: Vec::new(),
            dropped_events: 0,
            status: SpanStatus::Unset,
        });
    }
    spans
}

/// A voice turn's end-of-speech to heard time, once the browser joined both ends (observed once
/// per turn by the caller: when the turn first gets it).
pub fn voice_turn_observations(turn: &TurnRecord) -> Vec<Observation> {
    let Some(v) = turn.voice.as_ref().and_then(|v| v.voice_to_voice_ms) else { return Vec::new() };
    let labels: Labels = vec![(attr::ROUTE, label(&turn.route))];
    vec![Observation { metric: MetricId::VoiceToVoice, labels: labels.into(), value: v / 1e3 }]
}

/// The turn's metric observations. Durations of agent turns only (turns with tool calls) go to
/// `gen_ai.invoke_agent.duration`; every turn feeds the `tokentap.turn.*` histograms.
pub fn turn_observations(turn: &TurnRecord) -> Vec<Observation> {
    let labels: Labels = vec![(attr::ROUTE, label(&turn.route)), (attr::TURN_STATUS, turn.status.as_str().to_owned())];
    let t = &turn.totals;
    let shared: super::metrics::SharedLabels = labels.clone().into();
    let mut out = Vec::new();
    // A fragment's totals are partial: its tool runs count, the turn's times do not.
    if !turn.fragment {
        out = vec![
            Observation { metric: MetricId::TurnModelTime, labels: shared.clone(), value: t.model_ms / 1e3 },
            Observation { metric: MetricId::TurnToolTime, labels: shared.clone(), value: t.tool_ms / 1e3 },
            Observation { metric: MetricId::TurnClientTime, labels: shared.clone(), value: t.client_ms / 1e3 },
            Observation { metric: MetricId::TurnSteps, labels: shared.clone(), value: f64::from(t.steps) },
        ];
    }
    if turn.agent_span_id.is_some() && !turn.fragment {
        let mut agent = labels;
        agent.insert(0, (attr::OPERATION_NAME, INVOKE_AGENT.to_owned()));
        out.push(Observation { metric: MetricId::InvokeAgentDuration, labels: agent.into(), value: t.e2e_ms / 1e3 });
    }
    for run in &turn.tool_runs {
        let Some(ms) = run.duration_ms else { continue };
        let labels = vec![
            (attr::OPERATION_NAME, EXECUTE_TOOL.to_owned()),
            (attr::TOOL_NAME, label(run.name.as_deref().unwrap_or("unknown"))),
            (attr::ROUTE, label(&turn.route)),
        ];
        out.push(Observation { metric: MetricId::ExecuteToolDuration, labels: labels.into(), value: ms / 1e3 });
    }
    out
}
