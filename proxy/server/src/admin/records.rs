//! Records: the recent ones (filtered), one by request id, and one's goodput verdict; turns: the
//! recent ones and one by turn id.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use tokio::sync::broadcast::error::RecvError;

use super::error::AdminError;
use super::query::{Params, RequestsQuery, TurnsQuery, WaitQuery};
use super::{json, AdminState};
use crate::store::{FeedItem, StoredRecord};

/// `GET /_tokentap/api/requests`: `{"records":[…]}`, newest first, each as stored.
pub(super) async fn list(State(state): State<Arc<AdminState>>, Params(query): Params<RequestsQuery>) -> Response {
    let limit = query.limit();
    let records = state.store.recent(&query.filter(), limit);
    json(StatusCode::OK, json_list("records", records.iter().map(|s| s.json.as_str())))
}

/// `GET /_tokentap/api/requests/{request_id}?wait_ms=`: the record as stored. With `wait_ms`, a
/// record not written yet (its response still streaming, or just ended) is waited for that long
/// before the 404, so a page that asks right after its stream ends needs no polling.
pub(super) async fn one(
    State(state): State<Arc<AdminState>>,
    id: Result<Path<String>, PathRejection>,
    Params(query): Params<WaitQuery>,
) -> Result<Response, AdminError> {
    let Ok(Path(id)) = id else { return Err(AdminError::NoRecord) };
    let stored = wait_for(
        &state,
        query.wait(),
        || state.store.get(&id),
        |item| match item {
            FeedItem::Record(stored) if stored.record.request_id == id => Some(stored),
            _ => None,
        },
    )
    .await
    .ok_or(AdminError::NoRecord)?;
    Ok(json(StatusCode::OK, stored.json.clone()))
}

/// What `get` finds, or else the first item of the live feed `written` picks within `wait` (none:
/// no wait). A waiter holds one of the live feed's subscriber slots (`admin_max_feed_subscribers`);
/// with none free it does not wait.
async fn wait_for<T>(
    state: &AdminState,
    wait: Option<Duration>,
    get: impl Fn() -> Option<Arc<T>>,
    written: impl Fn(FeedItem) -> Option<Arc<T>>,
) -> Option<Arc<T>> {
    let Some(wait) = wait else { return get() };
    let Some(_slot) = state.feed_subscribers.take(state.feed_max_subscribers) else { return get() };
    // Subscribed before the first look: an item written in between is seen on the feed.
    let mut feed = state.store.subscribe();
    if let Some(found) = get() {
        return Some(found);
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, feed.recv()).await {
            Ok(Ok(item)) => {
                if let Some(found) = written(item) {
                    return Some(found);
                }
            }
            // Fell behind the feed: the item may have gone by, and is then in the store.
            Ok(Err(RecvError::Lagged(_))) => {
                if let Some(found) = get() {
                    return Some(found);
                }
            }
            Ok(Err(RecvError::Closed)) | Err(_) => return get(),
        }
    }
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

/// `GET /_tokentap/api/turns/{turn_id}?wait_ms=`: the turn as stored; with `wait_ms`, a turn not
/// closed yet is waited for that long before the 404.
pub(super) async fn turn(
    State(state): State<Arc<AdminState>>,
    id: Result<Path<String>, PathRejection>,
    Params(query): Params<WaitQuery>,
) -> Result<Response, AdminError> {
    let Ok(Path(id)) = id else { return Err(AdminError::NoTurn) };
    let stored = wait_for(
        &state,
        query.wait(),
        || state.store.get_turn(&id),
        |item| match item {
            FeedItem::Turn(stored) if stored.turn.turn_id == id => Some(stored),
            _ => None,
        },
    )
    .await
    .ok_or(AdminError::NoTurn)?;
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
