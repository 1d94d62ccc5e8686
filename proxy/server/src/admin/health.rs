//! Health: the version and counters (`/_tokentap/api/health`), and the metrics for Prometheus
//! (`/metrics`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::error::AdminError;
use super::{json, AdminState};

/// `GET /_tokentap/api/health`: version, pipeline counters, telemetry export counters.
pub(super) async fn health(State(state): State<Arc<AdminState>>) -> Response {
    let s = &state.stats;
    let queued = s.queued.load(Ordering::Relaxed);
    // `degraded` while records cannot be written to disk (they stay in memory and the feed), or
    // while the record worker is stuck or not running.
    let problems: Vec<String> = [
        state.store.write_failing().map(|why| format!("records are not being written to disk: {why}")),
        s.worker.problem(queued),
    ]
    .into_iter()
    .flatten()
    .collect();
    let body = serde_json::json!({
        "status": if problems.is_empty() { "ok" } else { "degraded" },
        "problem": (!problems.is_empty()).then(|| problems.join("; ")),
        "version": env!("CARGO_PKG_VERSION"),
        "records": {
            "submitted": s.submitted.load(Ordering::Relaxed),
            "written": state.store.written(),
            "dropped": s.dropped.load(Ordering::Relaxed),
            "shed": s.shed.load(Ordering::Relaxed),
            "queued": queued,
            "store_errors": state.store.write_errors(),
            "journal_recreated": state.store.journal_recreated(),
            "journal_gap": state.store.journal_gap(),
            "restore_skipped_lines": state.store.restore_skipped_lines(),
            "worker_panics": s.worker_panics.load(Ordering::Relaxed),
            "worker": s.worker.json(queued),
            "open": s.open_requests.load(Ordering::Relaxed),
            "kept_bytes": s.kept.used(),
            "kept_budget_hits": s.kept.hits(),
        },
        "browser_reports": {
            "accepted": s.browser_reports.load(Ordering::Relaxed),
            "joined": s.browser_joined.load(Ordering::Relaxed),
            "unmatched": s.browser_unmatched.load(Ordering::Relaxed),
            "refused_trace_full": s.browser_trace_full.load(Ordering::Relaxed),
            "refused_over_budget": s.browser_over_budget.load(Ordering::Relaxed),
        },
        "turns": s.turns.json(),
        "mcp_pairing": s.mcp_pairing.json(),
        "connections": s.connections.json(),
        "admin_connections": {
            "open": state.connections.open.load(Ordering::Relaxed),
            "max_open": state.limits.max_connections,
            "refused_over_cap": state.connections.refused_over_cap.load(Ordering::Relaxed),
            // Live feeds and record or turn waits (`wait_ms`) open now.
            "feed_subscribers": state.feed_subscribers.open(),
            "max_feed_subscribers": state.feed_max_subscribers,
        },
        "upstream": {
            "stale_connection_retries": s.stale_connection_retries.load(Ordering::Relaxed),
            "peers_closing_after_answer": s.peers_closing_after_answer.load(Ordering::Relaxed),
            "pool": s.upstream_pool.json(),
        },
        "self_overhead": { "scheduling_lag": s.scheduling_lag.json() },
        "records_file": state.store.records_path(),
        "telemetry": state.telemetry.health_json(),
    });
    json(StatusCode::OK, body.to_string())
}

/// `GET /metrics`: the Prometheus text format, or 404 when `[metrics] prometheus = false`.
pub(super) async fn prometheus(State(state): State<Arc<AdminState>>) -> Result<Response, AdminError> {
    let text = state.telemetry.prometheus_text().ok_or(AdminError::PrometheusOff)?;
    let headers = [(CONTENT_TYPE, tokentap_telemetry::prometheus::CONTENT_TYPE), (CACHE_CONTROL, "no-store")];
    Ok((headers, text).into_response())
}
