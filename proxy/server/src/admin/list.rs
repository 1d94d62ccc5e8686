//! The dashboard's request list: compact rows of the records in memory, filtered and paginated
//! here so the page never downloads whole records (with every chunk) just to show a table.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::query::{ListQuery, Params};
use super::{json, AdminState};
use crate::store::RecordFilter;

/// `GET /_tokentap/api/list`: `{total, offset, rows, routes, models}`, newest first; `routes`
/// and `models` list every value in memory, for the page's filter boxes.
pub(super) async fn rows(State(state): State<Arc<AdminState>>, Params(query): Params<ListQuery>) -> Response {
    let (filter, limit, offset) = (query.filter(), query.limit(), query.offset());
    let all = state.store.recent(&RecordFilter::default(), usize::MAX);
    let mut routes = BTreeSet::new();
    let mut models = BTreeSet::new();
    let mut total = 0usize;
    let mut rows = Vec::new();
    for stored in &all {
        let r = &stored.record;
        routes.insert(r.route.as_str());
        if let Some(m) = &r.conditions.model {
            models.insert(m.as_str());
        }
        if !filter.matches(r) {
            continue;
        }
        let row = tokentap_report::ListRow::of(r, &state.slo);
        if !row.matches_text(&query.q) {
            continue;
        }
        if total >= offset && rows.len() < limit {
            rows.push(row);
        }
        total += 1;
    }
    let body =
        serde_json::json!({ "total": total, "offset": offset, "rows": rows, "routes": routes, "models": models });
    json(StatusCode::OK, body.to_string())
}
