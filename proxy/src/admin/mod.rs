//! The admin API (its own listener, loopback by default): recent records, one record, a live feed.
//!
//! | route | answer |
//! |---|---|
//! | `GET /_tokentap/api/requests?limit=&route=&outcome=&model=&status=&since_unix_ns=` | `{"records":[…]}`, newest first |
//! | `GET /_tokentap/api/requests/{request_id}` | one record, or 404 |
//! | `GET /_tokentap/api/stream` | `text/event-stream`, one `record` event per new record |
//! | `GET /_tokentap/api/health` | version, pipeline counters, telemetry export counters |
//! | `GET /_tokentap/` | the dashboard (`dashboard`), its files under `/_tokentap/dashboard/` |
//! | `GET /_tokentap/api/list?limit=&offset=&q=&route=&model=&outcome=` | `{total, offset, rows, routes, models}`: compact rows, newest first |
//! | `GET /_tokentap/api/summary?window=&since=&until=&group_by=&include_warmup=` | a `report::Report` over the records in memory |
//! | `GET /_tokentap/api/verdict/{request_id}` | the record's goodput verdict against `[slo]` |
//! | `GET /metrics` | the metrics in the Prometheus text format (`[metrics] prometheus`) |
//!
//! Access (Host names, the token, framing) is `access`, before every route. Every error is JSON, `{"error": "…"}`, plus `"parameter"` when a query parameter was at fault
//! (`error`). Query strings are typed per endpoint (`query`); the live feed is `feed`; CORS for
//! the proxy's own pages is `cors`.

mod access;
mod cors;
mod error;
mod feed;
mod health;
mod list;
mod query;
mod records;
mod summary;

use std::sync::Arc;

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::pipeline::PipelineStats;
use crate::store::RecordStore;
use error::AdminError;
use tokentap_telemetry::Telemetry;

/// Shared state of the admin server.
pub(crate) struct AdminState {
    pub store: Arc<RecordStore>,
    pub stats: Arc<PipelineStats>,
    /// Metrics for `/metrics`, export counters for the health answer.
    pub telemetry: Arc<Telemetry>,
    /// Origins allowed to read the API from a browser (the proxy's own origin, for the demo page).
    pub allowed_origins: Vec<String>,
    /// Objectives for the goodput verdicts of the dashboard and the summary.
    pub slo: tokentap_record::SloConfig,
    /// `analysis.warmup_requests`, for the summary's note on warm-up requests left out.
    pub warmup_requests: u64,
    /// The token (if any) and the Host names the API answers to.
    pub access: crate::config::AdminAccess,
    /// Live feeds open at once, at most `feed_max_subscribers`; events formatted once for all.
    pub feed_max_subscribers: usize,
    pub feed_subscribers: feed::Subscribers,
    pub feed_events: feed::EventCache,
}

/// Serves the admin API on an already-bound listener until the runtime stops.
pub(crate) async fn serve(listener: std::net::TcpListener, state: Arc<AdminState>) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the admin API listens on a non-loopback address; it requires the admin token");
        }
    }
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    // axum's accept loop waits a second after an error such as EMFILE instead of spinning.
    axum::serve(listener, router(state)).await
}

fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/_tokentap/api/requests", get(records::list))
        .route("/_tokentap/api/requests/{request_id}", get(records::one))
        .route("/_tokentap/api/verdict/{request_id}", get(records::verdict))
        .route("/_tokentap/api/turns", get(records::turns))
        .route("/_tokentap/api/turns/{turn_id}", get(records::turn))
        .route("/_tokentap/api/list", get(list::rows))
        .route("/_tokentap/api/summary", get(summary::report))
        .route("/_tokentap/api/stream", get(feed::live))
        .route("/_tokentap/api/health", get(health::health))
        .route("/metrics", get(health::prometheus))
        .method_not_allowed_fallback(read_only)
        .fallback(dashboard_asset)
        .layer(axum::middleware::from_fn_with_state(state.clone(), cors::headers))
        .layer(axum::middleware::from_fn_with_state(state.clone(), access::check))
        .with_state(state)
}

/// A JSON answer, as every answer of the API but the dashboard's files: never cached.
fn json(status: StatusCode, body: String) -> Response {
    (status, [(CONTENT_TYPE, "application/json"), (CACHE_CONTROL, "no-store")], body).into_response()
}

async fn read_only() -> AdminError {
    AdminError::ReadOnly
}

/// Any other path: the dashboard's files, or a 404 pointing at the health answer.
async fn dashboard_asset(method: Method, uri: Uri) -> Result<Response, AdminError> {
    if method != Method::GET && method != Method::HEAD {
        return Err(AdminError::ReadOnly);
    }
    let (content_type, body) = crate::dashboard::asset(uri.path()).ok_or(AdminError::UnknownRoute)?;
    Ok(([(CONTENT_TYPE, content_type), (CACHE_CONTROL, "no-cache")], body).into_response())
}
