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

/// `GET /_tokentap/api/summary`: a `report::Report`.
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
    Ok(json(StatusCode::OK, serde_json::to_string(&report).unwrap_or_default()))
}
