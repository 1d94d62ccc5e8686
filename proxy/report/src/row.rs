//! The compact row the dashboard's request list shows: a few numbers per request instead of the
//! whole record (which carries every chunk), so a page of a thousand rows stays small.

use serde::Serialize;

use tokentap_record::goodput::{first_paint_ms, verdict};
use tokentap_record::Record;
use tokentap_record::SloConfig;

#[derive(Debug, Clone, Serialize)]
pub struct ListRow {
    pub request_id: String,
    pub started_at: String,
    pub t0_unix_ns: u64,
    pub route: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub method: String,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_answer_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_first_output_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
    pub stalls: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_first_paint_ms: Option<f64>,
    pub warm_up: bool,
    pub good: bool,
    /// "good", the failed outcome, or the objectives missed ("ttft_answer", "first_paint?" when unverified).
    pub verdict: String,
}

impl ListRow {
    pub fn of(record: &Record, slo: &SloConfig) -> ListRow {
        let m = record.analysis.as_ref().map(|a| &a.metrics);
        let v = verdict(record, slo);
        ListRow {
            request_id: record.request_id.clone(),
            started_at: record.started_at.clone(),
            t0_unix_ns: record.timeline.t0_unix_ns,
            route: record.route.clone(),
            model: record.conditions.model.clone(),
            method: record.method.clone(),
            path: record.path.clone(),
            status: record.status,
            outcome: record.outcome.as_str(),
            ttft_answer_ms: m.and_then(|m| m.ttft_answer_ms),
            time_to_first_output_ms: m.and_then(|m| m.time_to_first_output_ms),
            output_tps: m.and_then(|m| m.output_tps),
            output_tokens: m.and_then(|m| m.output_tokens.as_ref()).map(|t| t.total),
            e2e_ms: m.and_then(|m| m.e2e_ms),
            stalls: record.analysis.as_ref().map_or(0, |a| a.stalls.count),
            time_to_first_paint_ms: first_paint_ms(record),
            warm_up: record.conditions.warm_up,
            good: v.good,
            verdict: v.label(record.outcome),
        }
    }

    /// Case-insensitive match of `needle` against the row's text columns (the list's search box).
    pub fn matches_text(&self, needle: &str) -> bool {
        if needle.is_empty() {
            return true;
        }
        let needle = needle.to_lowercase();
        [
            self.request_id.as_str(),
            &self.route,
            self.model.as_deref().unwrap_or(""),
            &self.path,
            self.outcome,
            &self.verdict,
        ]
        .iter()
        .any(|field| field.to_lowercase().contains(&needle))
    }
}
