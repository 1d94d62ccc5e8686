//! Records: the recent ones (filtered), one by request id, and one's goodput verdict; turns: the
//! recent ones and one by turn id.

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::error::AdminError;
use super::query::{Params, RequestsQuery, TurnsQuery};
use super::{json, AdminState};
use crate::store::StoredRecord;

/// `GET /_tokentap/api/requests`: `{"records":[…]}`, newest first, each as stored.
pub(super) async fn list(State(state): State<Arc<AdminState>>, Params(query): Params<RequestsQuery>) -> Response {
    let limit = query.limit();
    let records = state.store.recent(&query.filter(), limit);
    json(StatusCode::OK, json_list("records", records.iter().map(|s| s.json.as_str())))
}

/// `GET /_tokentap/api/requests/{request_id}`: the record as stored.
pub(super) async fn one(
    State(state): State<Arc<AdminState>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, AdminError> {
    let stored = find(&state, id)?;
    Ok(json(StatusCode::OK, stored.json.clone()))
}

/// `GET /_tokentap/api/verdict/{request_id}`: the record's goodput verdict against `[slo]`.
pub(super) async fn verdict(
    State(state): State<Arc<AdminState>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, AdminError> {
    let stored = find(&state, id)?;
    let verdict = tokentap_report::verdict(&stored.record, &state.slo);
    Ok(json(StatusCode::OK, serde_json::to_string(&verdict).unwrap_or_default()))
}

/// The record of a path's request id (an id that does not even decode has no record either).
fn find(state: &AdminState, id: Result<Path<String>, PathRejection>) -> Result<Arc<StoredRecord>, AdminError> {
    let Ok(Path(id)) = id else { return Err(AdminError::NoRecord) };
    state.store.get(&id).ok_or(AdminError::NoRecord)
}

/// `GET /_tokentap/api/turns`: `{"turns":[…]}`, newest first, each as stored in `turns.jsonl`.
pub(super) async fn turns(State(state): State<Arc<AdminState>>, Params(query): Params<TurnsQuery>) -> Response {
    let turns = state.store.recent_turns(query.conversation_id.as_deref(), query.limit());
    json(StatusCode::OK, json_list("turns", turns.iter().map(|t| t.json.as_str())))
}

/// `GET /_tokentap/api/turns/{turn_id}`: the turn as stored.
pub(super) async fn turn(
    State(state): State<Arc<AdminState>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, AdminError> {
    let Ok(Path(id)) = id else { return Err(AdminError::NoTurn) };
    let stored = state.store.get_turn(&id).ok_or(AdminError::NoTurn)?;
    Ok(json(StatusCode::OK, stored.json.clone()))
}

/// `{"<key>":[…]}` from JSON lines stored as they are.
fn json_list<'a>(key: &str, lines: impl Iterator<Item = &'a str>) -> String {
    let mut body = format!("{{\"{key}\":[");
    for (i, line) in lines.enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(line);
    }
    body.push_str("]}");
    body
}
