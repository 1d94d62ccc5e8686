//! The dashboard's summary: percentiles, stall rate and goodput over the records in memory
//! (`report::build_report`, the same report `tokentap report --json` prints).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::AdminError;
use super::query::{Params, SummaryQuery};
use super::{json, AdminState};
use crate::store::RecordFilter;

/// `GET /_tokentap/api/summary`: a `report::Report`, plus `warmup_requests` (how many requests
/// per route count as warm-up, for the page's note when it leaves them out).
pub(super) async fn report(
    State(state): State<Arc<AdminState>>,
    Params(query): Params<SummaryQuery>,
) -> Result<Response, AdminError> {
    let mut options = tokentap_report::ReportOptions {
        slo: state.slo.clone(),
        source: "records in memory (admin API)".into(),
        ..Default::default()
    };
    query.apply(&mut options, std::time::SystemTime::now())?;
    options.keep_samples = true;
    let records = state.store.recent(&RecordFilter::default(), usize::MAX);
    let mut report = tokentap_report::build_report(records.iter().map(|s| &s.record), &options);
    // Agent and voice turns in the same window, for the page's turn sections.
    let turns: Vec<_> = state.store.recent_turns(None, usize::MAX).iter().map(|t| t.turn.clone()).collect();
    report.turns = Some(tokentap_report::turns::summarize_turns(&turns, options.since_unix_ns, options.until_unix_ns));
    let mut body = serde_json::to_value(&report).unwrap_or_default();
    if let Some(object) = body.as_object_mut() {
        object.insert("warmup_requests".into(), state.warmup_requests.into());
        // Per group and metric, the distribution's shape for the page's plot: at most
        // `ECDF_POINTS` evenly spaced quantiles of the sorted samples.
        if let Some(groups) = object.get_mut("groups").and_then(|g| g.as_array_mut()) {
            for (json, group) in groups.iter_mut().zip(&report.groups) {
                if let Some(g) = json.as_object_mut() {
                    g.insert("ecdf".into(), ecdf(&group.samples));
                }
            }
        }
        if let Some(overall) = object.get_mut("overall").and_then(|g| g.as_object_mut()) {
            overall.insert("ecdf".into(), ecdf(&report.overall.samples));
        }
        // The turn and realtime sections' distributions, by their field names.
        if let (Some(json), Some(turns)) = (object.get_mut("turns").and_then(|t| t.as_object_mut()), &report.turns) {
            json.insert("ecdf".into(), ecdf(&turns.samples));
        }
        if let (Some(json), Some(realtime)) =
            (object.get_mut("realtime").and_then(|t| t.as_object_mut()), &report.realtime)
        {
            json.insert("ecdf".into(), ecdf(&realtime.samples));
        }
    }
    Ok(json(StatusCode::OK, body.to_string()))
}

/// Points of an empirical CDF kept per metric: enough for a plot, bounded whatever the sample count.
const ECDF_POINTS: usize = 200;

/// Each metric's sorted samples, thinned to at most [`ECDF_POINTS`] evenly spaced quantiles
/// (the first and the last kept).
fn ecdf(samples: &std::collections::BTreeMap<&'static str, Vec<f64>>) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (metric, values) in samples {
        if values.is_empty() {
            continue;
        }
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let kept: Vec<f64> = if n <= ECDF_POINTS {
            sorted
        } else {
            (0..ECDF_POINTS).map(|i| sorted[i * (n - 1) / (ECDF_POINTS - 1)]).collect()
        };
        out.insert((*metric).to_owned(), serde_json::json!({ "n": n, "values": kept }));
    }
    serde_json::Value::Object(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plot_points_are_bounded_and_keep_both_ends() {
        let mut samples = std::collections::BTreeMap::new();
        samples.insert("e2e_ms", (0..10_000).rev().map(f64::from).collect::<Vec<_>>());
        let out = super::ecdf(&samples);
        let values = out["e2e_ms"]["values"].as_array().unwrap();
        assert_eq!(values.len(), super::ECDF_POINTS);
        assert_eq!(out["e2e_ms"]["n"], 10_000);
        assert_eq!(values[0], 0.0);
        assert_eq!(values[values.len() - 1], 9_999.0);
    }
}
