//! A closed turn's breakdown: its steps and tool runs relative to the turn's t0, the totals
//! (model, tool and client time add up to the turn's e2e) and the critical path.

use super::schema::{CriticalSegment, SegmentKind, ToolRun, TurnStep, TurnTotals};

/// A step with absolute times, as the tracker keeps it.
#[derive(Debug, Clone)]
pub(crate) struct StepSpan {
    pub(crate) step: TurnStep,
    pub(crate) start_unix_ns: u64,
    pub(crate) end_unix_ns: u64,
    pub(crate) last_content_unix_ns: Option<u64>,
}

/// A tool call with absolute times.
#[derive(Debug, Clone)]
pub(crate) struct CallSpan {
    pub(crate) call_id: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) step: u32,
    pub(crate) ready_unix_ns: u64,
    pub(crate) arguments_hash: Option<u64>,
    pub(crate) result: Option<(u32, u64)>,
}

pub(crate) struct Breakdown {
    pub(crate) totals: TurnTotals,
    pub(crate) steps: Vec<TurnStep>,
    pub(crate) tool_runs: Vec<ToolRun>,
    pub(crate) critical_path: Vec<CriticalSegment>,
}

fn ms(t0: u64, t: u64) -> f64 {
    t.saturating_sub(t0) as f64 / 1e6
}

/// Sorted, merged intervals clipped to `[lo, hi]`.
fn union(mut intervals: Vec<(u64, u64)>, lo: u64, hi: u64) -> Vec<(u64, u64)> {
    intervals.retain_mut(|(a, b)| {
        *a = (*a).max(lo);
        *b = (*b).min(hi);
        a < b
    });
    intervals.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
    for (a, b) in intervals {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

fn length(intervals: &[(u64, u64)]) -> u64 {
    intervals.iter().map(|(a, b)| b - a).sum()
}

/// Length of `a` minus its overlap with `b` (both merged and sorted).
fn minus(a: &[(u64, u64)], b: &[(u64, u64)]) -> u64 {
    let mut total = 0;
    for &(start, end) in a {
        let mut covered = 0;
        for &(bs, be) in b {
            let (s, e) = (start.max(bs), end.min(be));
            if s < e {
                covered += e - s;
            }
        }
        total += (end - start) - covered;
    }
    total
}

pub(crate) fn compute(t0: u64, steps: &[StepSpan], calls: &[CallSpan], steps_total: u32) -> Breakdown {
    let last = steps.iter().max_by_key(|s| s.end_unix_ns);
    // The final answer's last content when the turn ended with one, else the last step's end.
    let end = steps
        .last()
        .and_then(|s| s.last_content_unix_ns.filter(|_| s.step.tool_calls == 0))
        .or(last.map(|s| s.end_unix_ns))
        .unwrap_or(t0)
        .max(t0);
    let model = union(steps.iter().map(|s| (s.start_unix_ns, s.end_unix_ns)).collect(), t0, end);
    let tools = union(calls.iter().filter_map(|c| c.result.map(|(_, at)| (c.ready_unix_ns, at))).collect(), t0, end);
    let e2e = end - t0;
    let model_ns = length(&model);
    let tool_ns = minus(&tools, &model);
    let client_ns = e2e.saturating_sub(model_ns + tool_ns);

    let mut critical_path = Vec::new();
    let mut cursor = t0;
    for s in steps {
        let start = s.start_unix_ns.max(cursor);
        if start > cursor {
            let answered: Vec<String> = calls
                .iter()
                .filter(|c| c.result.is_some_and(|(step, _)| step == s.step.step))
                .filter_map(|c| c.call_id.clone())
                .collect();
            let kind = if calls.iter().any(|c| c.result.is_some_and(|(step, _)| step == s.step.step)) {
                SegmentKind::Tool
            } else {
                SegmentKind::Client
            };
            critical_path.push(CriticalSegment {
                kind,
                start_ms: ms(t0, cursor),
                end_ms: ms(t0, start),
                step: (kind == SegmentKind::Tool).then_some(s.step.step),
                call_ids: answered,
            });
        }
        let stop = s.end_unix_ns.min(end).max(start);
        if stop > start {
            critical_path.push(CriticalSegment {
                kind: SegmentKind::Model,
                start_ms: ms(t0, start),
                end_ms: ms(t0, stop),
                step: Some(s.step.step),
                call_ids: Vec::new(),
            });
        }
        cursor = cursor.max(stop);
    }

    let sum = |f: fn(&TurnStep) -> Option<u64>| -> Option<u64> {
        steps.iter().filter_map(|s| f(&s.step)).fold(None, |acc, v| Some(acc.unwrap_or(0) + v))
    };
    let totals = TurnTotals {
        e2e_ms: e2e as f64 / 1e6,
        model_ms: model_ns as f64 / 1e6,
        tool_ms: tool_ns as f64 / 1e6,
        client_ms: client_ns as f64 / 1e6,
        steps: steps_total,
        tool_calls: calls.len() as u32,
        unanswered_tool_calls: calls.iter().filter(|c| c.result.is_none()).count() as u32,
        tool_server_ms: None,
        input_tokens: sum(|s| s.input_tokens),
        output_tokens: sum(|s| s.output_tokens),
    };
    let tool_runs = calls
        .iter()
        .map(|c| ToolRun {
            call_id: c.call_id.clone(),
            name: c.name.clone(),
            step: c.step,
            ready_ms: ms(t0, c.ready_unix_ns),
            result_step: c.result.map(|(step, _)| step),
            result_ms: c.result.map(|(_, at)| ms(t0, at)),
            duration_ms: c.result.map(|(_, at)| at.saturating_sub(c.ready_unix_ns) as f64 / 1e6),
            arguments_hash: c.arguments_hash,
            mcp: None,
        })
        .collect();
    Breakdown { totals, steps: steps.iter().map(|s| s.step.clone()).collect(), tool_runs, critical_path }
}
