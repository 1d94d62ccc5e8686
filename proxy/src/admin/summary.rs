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
    let records = state.store.recent(&RecordFilter::default(), usize::MAX);
    let report = tokentap_report::build_report(records.iter().map(|s| &s.record), &options);
    let mut body = serde_json::to_value(&report).unwrap_or_default();
    if let Some(object) = body.as_object_mut() {
        object.insert("warmup_requests".into(), state.warmup_requests.into());
    }
    Ok(json(StatusCode::OK, body.to_string()))
}
