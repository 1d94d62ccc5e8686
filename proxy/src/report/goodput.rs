//! Goodput: whether one request met the service-level objectives of `[slo]`.
//!
//! A request is **good** when it succeeded (outcome `ok`) and met every configured objective
//! (docs/metrics.md, Goodput). An objective whose metric is undefined for the request cannot be
//! shown to be met, so the request is not good, with two exceptions:
//! - `tpot`: a response with fewer than two content events has no time per output token; there is
//!   no later token that could have been slow, so the objective does not apply;
//! - none other: a missing `ttft_answer` (tool-only answer) or a missing first paint (no browser
//!   report) leaves the request *unverified*, which counts as not good.

use serde::Serialize;

use crate::config::SloConfig;
use crate::record::{Outcome, Record};

/// One objective's result for one request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObjectiveResult {
    /// `ttft_answer`, `tpot`, `e2e` or `first_paint`.
    pub objective: &'static str,
    pub limit_ms: f64,
    /// The request's value; absent when undefined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_ms: Option<f64>,
    /// `met`, `missed`, `unverified` (value undefined) or `not_applicable`.
    pub result: &'static str,
}

/// The goodput verdict of one request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// Succeeded and met every configured objective.
    pub good: bool,
    /// Outcome `ok`.
    pub succeeded: bool,
    pub objectives: Vec<ObjectiveResult>,
}

impl Verdict {
    /// Short text for lists: "good", or what failed ("http_error", "ttft_answer", "first_paint?").
    pub fn label(&self, outcome: Outcome) -> String {
        if self.good {
            return "good".into();
        }
        if !self.succeeded {
            return outcome.as_str().into();
        }
        let failed: Vec<String> = self
            .objectives
            .iter()
            .filter_map(|o| match o.result {
                "missed" => Some(o.objective.to_string()),
                "unverified" => Some(format!("{}?", o.objective)),
                _ => None,
            })
            .collect();
        failed.join(" ")
    }
}

/// The record's `time_to_first_paint_ms`, when a browser report was joined.
pub fn first_paint_ms(record: &Record) -> Option<f64> {
    record.browser.as_ref().and_then(|b| b.time_to_first_paint_ms)
}

/// Judges `record` against `slo`.
pub fn verdict(record: &Record, slo: &SloConfig) -> Verdict {
    let succeeded = record.outcome == Outcome::Ok;
    let metrics = record.analysis.as_ref().map(|a| &a.metrics);
    let mut objectives = Vec::new();
    let mut check = |objective: &'static str, limit: Option<f64>, value: Option<f64>, undefined_result: &'static str| {
        if let Some(limit_ms) = limit {
            let result = match value {
                Some(v) if v <= limit_ms => "met",
                Some(_) => "missed",
                None => undefined_result,
            };
            objectives.push(ObjectiveResult { objective, limit_ms, value_ms: value, result });
        }
    };
    check("ttft_answer", slo.ttft_answer_ms, metrics.and_then(|m| m.ttft_answer_ms), "unverified");
    let tokens_withheld = record.analysis.as_ref().is_some_and(|a| a.flags.token_text_truncated);
    let tpot_undefined = if tokens_withheld || metrics.is_none() { "unverified" } else { "not_applicable" };
    check("tpot", slo.tpot_ms, metrics.and_then(|m| m.tpot_ms), tpot_undefined);
    check("e2e", slo.e2e_ms, metrics.and_then(|m| m.e2e_ms), "unverified");
    check("first_paint", slo.first_paint_ms, first_paint_ms(record), "unverified");
    let good = succeeded && objectives.iter().all(|o| matches!(o.result, "met" | "not_applicable"));
    Verdict { good, succeeded, objectives }
}
