//! The admin API (its own listener, loopback by default): recent records, one record, a live feed.
//!
//! | route | answer |
//! |---|---|
//! | `GET /_tokentap/api/requests?limit=&route=&outcome=&model=&status=&since_unix_ns=` | `{"records":[…]}`, newest first |
//! | `GET /_tokentap/api/requests/{request_id}?wait_ms=` | one record, or 404 (after waiting up to `wait_ms` for it to be written) |
//! | `GET /_tokentap/api/turns?limit=&conversation_id=` | `{"turns":[…]}`, newest first |
//! | `GET /_tokentap/api/turns/{turn_id}?wait_ms=` | one closed turn, or 404 (after waiting up to `wait_ms`) |
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

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    /// The listener's connection cap and head deadline.
    pub limits: AdminLimits,
    pub connections: AdminConnections,
}

/// Limits of the admin listener's connections (`admin_max_connections`, `admin_head_timeout_s`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdminLimits {
    /// Connections open at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// From the accept, or from the end of the previous response (an idle kept-alive
    /// connection), to the end of the next request head.
    pub head_timeout: std::time::Duration,
}

/// Counters of the admin listener (health: `admin_connections`).
#[derive(Debug, Default)]
pub(crate) struct AdminConnections {
    pub open: AtomicUsize,
    pub refused_over_cap: AtomicU64,
}

/// What a connection over the admin cap is told before it is closed.
const OVER_CAP_RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
content-length: 56\r\nconnection: close\r\nretry-after: 1\r\n\r\n\
{\"error\":\"tokentap admin API: too many open connections\"}";

/// One admin connection's place under the cap; released on drop.
struct AdminSlot(Arc<AdminState>);

impl Drop for AdminSlot {
    fn drop(&mut self) {
        self.0.connections.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves the admin API on an already-bound listener until the runtime stops.
///
/// Its own accept loop rather than `axum::serve`: connections are capped, and HTTP/1.1's head
/// deadline (hyper's `header_read_timeout`, which runs from the accept and again from the end of
/// each response) closes slow heads, silent connections and idle kept-alive ones. HTTP/1.1 only,
/// served by hyper's HTTP/1 connection itself: a version-sniffing server (HTTP/2's preface) would
/// wait for the first bytes with no deadline at all, so a silent connection would stay open.
pub(crate) async fn serve(listener: std::net::TcpListener, state: Arc<AdminState>) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tokio::io::AsyncWriteExt;

    if let Ok(addr) = listener.local_addr() {
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the admin API listens on a non-loopback address; it requires the admin token");
        }
    }
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let limits = state.limits;
    let service = hyper_util::service::TowerToHyperService::new(router(state.clone()));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.head_timeout).keep_alive(true);
    let builder = Arc::new(builder);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors (EMFILE) and the like: wait instead of spinning.
                tracing::debug!(error = %e, "admin API accept failed");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        let open = &state.connections.open;
        if open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limits.max_connections).then_some(n + 1))
            .is_err()
        {
            state.connections.refused_over_cap.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let mut stream = stream;
                let write = async {
                    stream.write_all(OVER_CAP_RESPONSE).await?;
                    stream.shutdown().await
                };
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), write).await;
            });
            continue;
        }
        let slot = AdminSlot(state.clone());
        let (builder, service) = (builder.clone(), service.clone());
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = builder.serve_connection(TokioIo::new(stream), service).with_upgrades().await {
                tracing::debug!(error = %e, "admin API connection ended");
            }
        });
    }
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
