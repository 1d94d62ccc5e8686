//! Goodput: whether one request met the service-level objectives of `[slo]`.
//!
//! A request is **good** when it succeeded (outcome `ok`) and met every configured objective
//! (docs/metrics.md, Goodput). An objective whose metric is undefined for the request cannot be
//! shown to be met, so the request is not good, with two exceptions:
//! - `tpot`: a response with fewer than two content events has no time per output token; there is
//!   no later token that could have been slow, so the objective does not apply;
//! - none other: a missing `ttft_answer` (tool-only answer) or a missing first paint (no browser
//!   report) leaves the request *unverified*, which counts as not good.

use serde::{Deserialize, Serialize};

use crate::schema::{Outcome, Record};

/// `[slo]`: service-level objectives. A request is *good* when it succeeded and met every objective
/// set here (docs/metrics.md, Goodput); an objective left out is not checked.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SloConfig {
    /// Largest acceptable `ttft_answer_ms` (first answer token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_answer_ms: Option<f64>,
    /// Largest acceptable `tpot_ms` (milliseconds per output token after the first content event).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    /// Largest acceptable `e2e_ms` (request start to the last body byte).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
    /// Largest acceptable browser `time_to_first_paint_ms` (needs the browser probe).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_paint_ms: Option<f64>,
}

impl SloConfig {
    /// Every objective must be a finite number of milliseconds greater than 0.
    pub fn validate(&self) -> Result<(), SloError> {
        for (key, value) in [
            ("slo.ttft_answer_ms", self.ttft_answer_ms),
            ("slo.tpot_ms", self.tpot_ms),
            ("slo.e2e_ms", self.e2e_ms),
            ("slo.first_paint_ms", self.first_paint_ms),
        ] {
            if let Some(v) = value {
                if !(v.is_finite() && v > 0.0) {
                    return Err(SloError {
                        key,
                        message: format!("{v} must be a number of milliseconds greater than 0"),
                    });
                }
            }
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self == &SloConfig::default()
    }
}

/// An objective that is not a positive, finite number of milliseconds.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct SloError {
    pub key: &'static str,
    pub message: String,
}

tokentap_analysis::named_enum! {
    /// The objectives of `[slo]`, named as in records and reports.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
    pub enum Objective {
        TtftAnswer = "ttft_answer",
        Tpot = "tpot",
        E2e = "e2e",
        FirstPaint = "first_paint",
    }
}

impl Objective {
    pub const ALL: [Objective; 4] = [Objective::TtftAnswer, Objective::Tpot, Objective::E2e, Objective::FirstPaint];
}

tokentap_analysis::named_enum! {
    /// How one request fared against one objective.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
    pub enum ObjectiveOutcome {
        Met = "met",
        Missed = "missed",
        /// The value is undefined where it should exist (e.g. no first answer token was seen).
        Unverified = "unverified",
        /// The value is undefined and cannot exist for this request (e.g. TPOT of a one-token answer).
        NotApplicable = "not_applicable",
    }
}

impl ObjectiveOutcome {
    /// Does not stand in the way of a good request.
    pub fn passes(self) -> bool {
        matches!(self, ObjectiveOutcome::Met | ObjectiveOutcome::NotApplicable)
    }
}

/// One objective's result for one request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObjectiveResult {
    pub objective: Objective,
    pub limit_ms: f64,
    /// The request's value; absent when undefined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_ms: Option<f64>,
    pub result: ObjectiveOutcome,
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
                ObjectiveOutcome::Missed => Some(o.objective.as_str().to_string()),
                ObjectiveOutcome::Unverified => Some(format!("{}?", o.objective.as_str())),
                ObjectiveOutcome::Met | ObjectiveOutcome::NotApplicable => None,
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
    let mut check =
        |objective: Objective, limit: Option<f64>, value: Option<f64>, undefined_result: ObjectiveOutcome| {
            if let Some(limit_ms) = limit {
                let result = match value {
                    Some(v) if v <= limit_ms => ObjectiveOutcome::Met,
                    Some(_) => ObjectiveOutcome::Missed,
                    None => undefined_result,
                };
                objectives.push(ObjectiveResult { objective, limit_ms, value_ms: value, result });
            }
        };
    let unverified = ObjectiveOutcome::Unverified;
    check(Objective::TtftAnswer, slo.ttft_answer_ms, metrics.and_then(|m| m.ttft_answer_ms), unverified);
    let tokens_withheld = record.analysis.as_ref().is_some_and(|a| a.flags.token_text_truncated);
    let tpot_undefined =
        if tokens_withheld || metrics.is_none() { unverified } else { ObjectiveOutcome::NotApplicable };
    check(Objective::Tpot, slo.tpot_ms, metrics.and_then(|m| m.tpot_ms), tpot_undefined);
    check(Objective::E2e, slo.e2e_ms, metrics.and_then(|m| m.e2e_ms), unverified);
    check(Objective::FirstPaint, slo.first_paint_ms, first_paint_ms(record), unverified);
    let good = succeeded && objectives.iter().all(|o| o.result.passes());
    Verdict { good, succeeded, objectives }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_records_are_the_names_in_reports() {
        for objective in Objective::ALL {
            assert_eq!(serde_json::to_value(objective).unwrap(), objective.as_str());
        }
        for outcome in [
            ObjectiveOutcome::Met,
            ObjectiveOutcome::Missed,
            ObjectiveOutcome::Unverified,
            ObjectiveOutcome::NotApplicable,
        ] {
            assert_eq!(serde_json::to_value(outcome).unwrap(), outcome.as_str());
        }
    }

    fn record(outcome: &str, metrics: serde_json::Value) -> Record {
        serde_json::from_value(serde_json::json!({
            "record_version": 1, "request_id": "a", "trace_id": "0af7651916cd43dd8448eb211c80319c",
            "span_id": "b7ad6b7169203331", "started_at": "2026-01-01T00:00:00Z", "route": "/",
            "upstream": "http://x", "method": "POST", "path": "/v1/chat/completions", "status": 200,
            "outcome": outcome, "request_headers": [],
            "conditions": {"request_bytes": 10, "concurrency_at_t0": 0, "warm_up": false, "tokentap_version": "0"},
            "request": {},
            "timeline": {"t0_unix_ns": 1, "chunk_count": 0, "body_bytes": 0, "chunks_truncated": false,
                         "analysis_bytes_truncated": false, "chunks": []},
            "analysis": {"format": "openai_chat", "event_counts": {}, "metrics": metrics,
                         "stalls": {"threshold_ms": 1000.0, "count": 0, "total_ms": 0.0, "heartbeat_only": 0},
                         "flags": {}},
            "self_overhead": {"hook_time_us": 1.0}
        }))
        .expect("test record")
    }

    fn slo() -> SloConfig {
        SloConfig { ttft_answer_ms: Some(500.0), tpot_ms: Some(50.0), e2e_ms: None, first_paint_ms: None }
    }

    #[test]
    fn good_needs_success_and_every_objective() {
        let m = serde_json::json!({"ttft_answer_ms": 400.0, "tpot_ms": 20.0, "body_bytes": 1, "chunk_count": 1});
        assert!(verdict(&record("ok", m.clone()), &slo()).good);
        assert!(!verdict(&record("http_error", m.clone()), &slo()).good);
        let slow = serde_json::json!({"ttft_answer_ms": 600.0, "tpot_ms": 20.0, "body_bytes": 1, "chunk_count": 1});
        let v = verdict(&record("ok", slow), &slo());
        assert!(!v.good);
        assert_eq!(v.label(Outcome::Ok), "ttft_answer");
        // Nothing configured: every successful request is good.
        assert!(verdict(&record("ok", m), &SloConfig::default()).good);
    }

    #[test]
    fn undefined_values_are_unverified_except_tpot_of_a_single_event() {
        let no_ttft = serde_json::json!({"tpot_ms": 20.0, "body_bytes": 1, "chunk_count": 1});
        let v = verdict(&record("ok", no_ttft), &slo());
        assert!(!v.good);
        assert_eq!(v.label(Outcome::Ok), "ttft_answer?");
        let single_event = serde_json::json!({"ttft_answer_ms": 100.0, "body_bytes": 1, "chunk_count": 1});
        let v = verdict(&record("ok", single_event), &slo());
        assert!(v.good, "{v:?}");
        assert_eq!(v.objectives[1].result, ObjectiveOutcome::NotApplicable);
        let paint = SloConfig { first_paint_ms: Some(800.0), ..SloConfig::default() };
        let m = serde_json::json!({"ttft_answer_ms": 100.0, "body_bytes": 1, "chunk_count": 1});
        assert_eq!(verdict(&record("ok", m), &paint).label(Outcome::Ok), "first_paint?");
    }
}
