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

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::mpsc;

use crate::pipeline::PipelineStats;
use crate::store::{RecordFilter, RecordStore};
use tokentap_telemetry::Telemetry;

type AdminBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// Shared state of the admin server.
pub struct AdminState {
    pub store: Arc<RecordStore>,
    pub stats: Arc<PipelineStats>,
    /// Metrics for `/metrics`, export counters for the health answer.
    pub telemetry: Arc<Telemetry>,
    /// Origins allowed to read the API from a browser (the proxy's own origin, for the demo page).
    pub allowed_origins: Vec<String>,
    /// Objectives for the goodput verdicts of the dashboard and the summary.
    pub slo: tokentap_record::SloConfig,
}

/// Serves the admin API on an already-bound listener until the runtime stops.
pub async fn serve(listener: std::net::TcpListener, state: Arc<AdminState>) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(req, &state)) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn full(body: impl Into<Bytes>) -> AdminBody {
    Full::new(body.into()).boxed()
}

fn json_response(status: StatusCode, body: String) -> Response<AdminBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .body(full(body))
        .expect("static response parts")
}

fn error_response(status: StatusCode, message: &str) -> Response<AdminBody> {
    json_response(status, serde_json::json!({ "error": message }).to_string())
}

fn handle(req: Request<Incoming>, state: &AdminState) -> Response<AdminBody> {
    let origin = req.headers().get("origin").and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut resp = route(&req, state);
    if let Some(origin) = origin {
        if state.allowed_origins.contains(&origin) {
            let headers = resp.headers_mut();
            headers.insert("access-control-allow-origin", origin.parse().expect("origin was a header value"));
            headers.insert("vary", http::HeaderValue::from_static("origin"));
        }
    }
    resp
}

fn route(req: &Request<Incoming>, state: &AdminState) -> Response<AdminBody> {
    let path = req.uri().path();
    if req.method() == Method::OPTIONS {
        let mut resp = Response::builder().status(StatusCode::NO_CONTENT).body(full(Bytes::new())).expect("static");
        resp.headers_mut().insert("access-control-allow-methods", http::HeaderValue::from_static("GET, OPTIONS"));
        return resp;
    }
    if req.method() != Method::GET {
        return error_response(StatusCode::METHOD_NOT_ALLOWED, "the admin API is read-only: use GET");
    }
    if let Some((content_type, body)) = crate::dashboard::asset(path) {
        return Response::builder()
            .status(StatusCode::OK)
            .header("content-type", content_type)
            .header("cache-control", "no-cache")
            .body(full(body))
            .expect("static response parts");
    }
    let query = req.uri().query().unwrap_or("");
    match path {
        "/_tokentap/api/requests" => list_requests(query, state),
        "/_tokentap/api/list" => dashboard_list(query, state),
        "/_tokentap/api/summary" => summary(query, state),
        "/_tokentap/api/stream" => live_feed(state),
        "/_tokentap/api/health" => health(state),
        "/metrics" => prometheus_metrics(state),
        _ => match path.strip_prefix("/_tokentap/api/requests/") {
            Some(id) if !id.is_empty() => match state.store.get(id) {
                Some(stored) => json_response(StatusCode::OK, stored.json.clone()),
                None => error_response(StatusCode::NOT_FOUND, "no recent record with this request id"),
            },
            _ => match path.strip_prefix("/_tokentap/api/verdict/") {
                Some(id) if !id.is_empty() => match state.store.get(id) {
                    Some(stored) => {
                        let verdict = tokentap_report::verdict(&stored.record, &state.slo);
                        json_response(StatusCode::OK, serde_json::to_string(&verdict).unwrap_or_default())
                    }
                    None => error_response(StatusCode::NOT_FOUND, "no recent record with this request id"),
                },
                _ => error_response(StatusCode::NOT_FOUND, "unknown admin route; see /_tokentap/api/health"),
            },
        },
    }
}

fn query_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k), percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex_value(bytes[i + 1]), hex_value(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi * 16 + lo);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_value(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

fn list_requests(query: &str, state: &AdminState) -> Response<AdminBody> {
    let mut filter = RecordFilter::default();
    let mut limit = 100usize;
    for (key, value) in query_pairs(query) {
        match key.as_str() {
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=10_000).contains(&n) => limit = n,
                _ => return error_response(StatusCode::BAD_REQUEST, "limit must be 1..=10000"),
            },
            "route" => filter.route = Some(value),
            "outcome" => filter.outcome = Some(value),
            "model" => filter.model = Some(value),
            "status" => match value.parse() {
                Ok(s) => filter.status = Some(s),
                Err(_) => return error_response(StatusCode::BAD_REQUEST, "status must be a number"),
            },
            "since_unix_ns" => match value.parse() {
                Ok(s) => filter.since_unix_ns = Some(s),
                Err(_) => return error_response(StatusCode::BAD_REQUEST, "since_unix_ns must be a number"),
            },
            other => return error_response(StatusCode::BAD_REQUEST, &format!("unknown query parameter {other:?}")),
        }
    }
    let records = state.store.recent(&filter, limit);
    let mut body = String::from("{\"records\":[");
    for (i, stored) in records.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&stored.json);
    }
    body.push_str("]}");
    json_response(StatusCode::OK, body)
}

/// The dashboard's request list: compact rows of the records in memory, filtered and paginated
/// here so the page never downloads whole records (with every chunk) just to show a table.
fn dashboard_list(query: &str, state: &AdminState) -> Response<AdminBody> {
    let mut filter = RecordFilter::default();
    let (mut limit, mut offset, mut text) = (100usize, 0usize, String::new());
    for (key, value) in query_pairs(query) {
        match key.as_str() {
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=10_000).contains(&n) => limit = n,
                _ => return error_response(StatusCode::BAD_REQUEST, "limit must be 1..=10000"),
            },
            "offset" => match value.parse::<usize>() {
                Ok(n) => offset = n,
                Err(_) => return error_response(StatusCode::BAD_REQUEST, "offset must be a number"),
            },
            "q" => text = value,
            "route" if !value.is_empty() => filter.route = Some(value),
            "model" if !value.is_empty() => filter.model = Some(value),
            "outcome" if !value.is_empty() => filter.outcome = Some(value),
            "route" | "model" | "outcome" => {}
            other => return error_response(StatusCode::BAD_REQUEST, &format!("unknown query parameter {other:?}")),
        }
    }
    let all = state.store.recent(&RecordFilter::default(), usize::MAX);
    let mut routes = std::collections::BTreeSet::new();
    let mut models = std::collections::BTreeSet::new();
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
        if !row.matches_text(&text) {
            continue;
        }
        if total >= offset && rows.len() < limit {
            rows.push(row);
        }
        total += 1;
    }
    let body =
        serde_json::json!({ "total": total, "offset": offset, "rows": rows, "routes": routes, "models": models });
    json_response(StatusCode::OK, body.to_string())
}

/// Percentiles, stall rate and goodput over the records in memory (`report::build_report`).
fn summary(query: &str, state: &AdminState) -> Response<AdminBody> {
    let now = std::time::SystemTime::now();
    let mut options = tokentap_report::ReportOptions {
        slo: state.slo.clone(),
        source: "records in memory (admin API)".into(),
        ..Default::default()
    };
    for (key, value) in query_pairs(query) {
        let time = || tokentap_report::summary::parse_time(&value, now);
        match key.as_str() {
            "window" | "since" if value.is_empty() || value == "all" => {}
            "window" | "since" => match time() {
                Ok(t) => options.since_unix_ns = Some(t),
                Err(e) => return error_response(StatusCode::BAD_REQUEST, &e),
            },
            "until" if !value.is_empty() => match time() {
                Ok(t) => options.until_unix_ns = Some(t),
                Err(e) => return error_response(StatusCode::BAD_REQUEST, &e),
            },
            "until" => {}
            "group_by" => match tokentap_report::GroupKey::parse_list(&value) {
                Ok(keys) => options.group_by = keys,
                Err(e) => return error_response(StatusCode::BAD_REQUEST, &e),
            },
            "include_warmup" => options.include_warmup = matches!(value.as_str(), "true" | "1" | "yes" | ""),
            other => return error_response(StatusCode::BAD_REQUEST, &format!("unknown query parameter {other:?}")),
        }
    }
    let records = state.store.recent(&RecordFilter::default(), usize::MAX);
    let report = tokentap_report::build_report(records.iter().map(|s| &s.record), &options);
    json_response(StatusCode::OK, serde_json::to_string(&report).unwrap_or_default())
}

fn health(state: &AdminState) -> Response<AdminBody> {
    let s = &state.stats;
    let body = serde_json::json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "records": {
            "submitted": s.submitted.load(Ordering::Relaxed),
            "written": state.store.written(),
            "dropped": s.dropped.load(Ordering::Relaxed),
            "store_errors": state.store.write_errors(),
        },
        "browser_reports": {
            "accepted": s.browser_reports.load(Ordering::Relaxed),
            "joined": s.browser_joined.load(Ordering::Relaxed),
            "unmatched": s.browser_unmatched.load(Ordering::Relaxed),
        },
        "records_file": state.store.records_path(),
        "telemetry": state.telemetry.health_json(),
    });
    json_response(StatusCode::OK, body.to_string())
}

fn prometheus_metrics(state: &AdminState) -> Response<AdminBody> {
    match state.telemetry.prometheus_text() {
        Some(text) => Response::builder()
            .status(StatusCode::OK)
            .header("content-type", tokentap_telemetry::prometheus::CONTENT_TYPE)
            .header("cache-control", "no-store")
            .body(full(text))
            .expect("static response parts"),
        None => error_response(StatusCode::NOT_FOUND, "the Prometheus endpoint is off ([metrics] prometheus = false)"),
    }
}

/// A response body fed by a channel: each message is one SSE event.
struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|m| m.map(|b| Ok(Frame::data(b))))
    }
}

fn live_feed(state: &AdminState) -> Response<AdminBody> {
    let mut feed = state.store.subscribe();
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        if tx.send(Bytes::from_static(b": tokentap live feed\n\n")).await.is_err() {
            return;
        }
        loop {
            let message = match feed.recv().await {
                Ok(stored) => Bytes::from(format!("event: record\ndata: {}\n\n", stored.json)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    Bytes::from(format!("event: lagged\ndata: {{\"missed\":{n}}}\n\n"))
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            if tx.send(message).await.is_err() {
                return;
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(BodyExt::boxed(ChannelBody { rx }))
        .expect("static response parts")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_query_values() {
        assert_eq!(percent_decode("a%20b+c"), "a b c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
        let pairs: Vec<_> = query_pairs("limit=5&model=gpt%2D4o").collect();
        assert_eq!(pairs, vec![("limit".into(), "5".into()), ("model".into(), "gpt-4o".into())]);
    }
}
