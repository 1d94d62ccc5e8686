//! Requests tokentap answers itself on the proxy listener, under `/_tokentap/`: the demo page, the
//! browser probe's files, its clock endpoint and the report ingest. They are never proxied and
//! never recorded.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::Result;

use crate::config::ProbeConfig;
use crate::forward::probe_ingest::{origin_allowed, RateLimiter, RecentTraces, ReportSlot};
use crate::pages::Pages;
use crate::pipeline::{FinalizeQueue, RefusedReport};
use tokentap_record::browser::ProbeReport;

pub(crate) const PROBE_INGEST_PATH: &str = "/_tokentap/v1/probe";
pub(crate) const CLOCK_PATH: &str = "/_tokentap/v1/clock";

/// State of the probe ingest.
pub(crate) struct ProbeIngest {
    pub config: ProbeConfig,
    pub recent: RecentTraces,
    limiter: RateLimiter,
    /// One bucket for every client together: each accepted report rewrites a whole record.
    budget: RateLimiter,
}

/// The one key of the budget shared by all clients.
const ALL_CLIENTS: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

impl ProbeIngest {
    pub(crate) fn new(config: ProbeConfig) -> Self {
        let recent = RecentTraces::new(config.max_recent_traces, Duration::from_secs(config.trace_ttl_s));
        let limiter = RateLimiter::new(config.reports_per_second, f64::from(config.burst));
        let budget = RateLimiter::new(config.total_reports_per_second, f64::from(config.total_burst));
        Self { config, recent, limiter, budget }
    }
}

/// A response to write: status, content type, body, extra headers.
struct Answer {
    status: u16,
    content_type: &'static str,
    body: Bytes,
    headers: Vec<(&'static str, String)>,
}

impl Answer {
    fn json(status: u16, value: serde_json::Value) -> Self {
        Answer { status, content_type: "application/json", body: Bytes::from(value.to_string()), headers: Vec::new() }
    }

    fn rejected(status: u16, reason: impl Into<String>) -> Self {
        Self::json(
            status,
            serde_json::json!({ "error": { "type": "tokentap_probe_rejected", "message": reason.into() } }),
        )
    }
}

/// Serves one `/_tokentap/…` request on the proxy listener.
pub(crate) async fn serve(
    session: &mut Session,
    path_and_query: &str,
    pages: &Pages,
    ingest: &Arc<ProbeIngest>,
    queue: &FinalizeQueue,
) -> Result<()> {
    let req = session.req_header();
    let method = req.method.as_str().to_string();
    let path = path_and_query.split('?').next().unwrap_or("").to_string();
    let origin = req.headers.get("origin").and_then(|v| v.to_str().ok()).map(str::to_string);
    let host = req.headers.get("host").and_then(|v| v.to_str().ok()).map(str::to_string);
    let cross_origin_ok = origin_allowed(origin.as_deref(), host.as_deref(), &ingest.config.allowed_origins);

    let mut answer = if path == PROBE_INGEST_PATH || path == CLOCK_PATH {
        if !ingest.config.enabled {
            Answer::rejected(404, "the browser probe is disabled ([probe] enabled = false)")
        } else if method == "OPTIONS" {
            if cross_origin_ok {
                let mut a = Answer { status: 204, content_type: "text/plain", body: Bytes::new(), headers: Vec::new() };
                a.headers.push(("access-control-allow-methods", "GET, POST, OPTIONS".into()));
                a.headers.push(("access-control-allow-headers", "content-type".into()));
                a.headers.push(("access-control-max-age", "600".into()));
                a
            } else {
                Answer::rejected(403, "origin not allowed; add it to [probe] allowed_origins")
            }
        } else if !cross_origin_ok {
            Answer::rejected(403, "origin not allowed; add it to [probe] allowed_origins")
        } else if path == CLOCK_PATH {
            if method == "GET" {
                let now = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64() * 1e3)
                    .unwrap_or(0.0);
                Answer::json(200, serde_json::json!({ "server_time_ms": now }))
            } else {
                Answer::rejected(405, "use GET")
            }
        } else if method != "POST" {
            Answer::rejected(405, "use POST")
        } else {
            ingest_report(session, ingest, queue).await
        }
    } else {
        let page = pages.serve(&method, path_and_query);
        Answer { status: page.status, content_type: page.content_type, body: page.body, headers: Vec::new() }
    };
    if let (Some(origin), true) = (origin, cross_origin_ok) {
        answer.headers.push(("access-control-allow-origin", origin));
        answer.headers.push(("vary", "origin".into()));
    }

    let mut resp = ResponseHeader::build(answer.status, Some(4 + answer.headers.len()))?;
    resp.insert_header("content-type", answer.content_type)?;
    resp.insert_header("content-length", answer.body.len().to_string())?;
    resp.insert_header("cache-control", "no-store")?;
    for (name, value) in answer.headers {
        resp.append_header(name, value)?;
    }
    let head_only = method == "HEAD" || answer.body.is_empty();
    session.write_response_header(Box::new(resp), head_only).await?;
    if !head_only {
        session.write_response_body(Some(answer.body), true).await?;
    }
    Ok(())
}

async fn ingest_report(session: &mut Session, ingest: &ProbeIngest, queue: &FinalizeQueue) -> Answer {
    let req = session.req_header();
    let content_type = req.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    if !(content_type.starts_with("text/plain") || content_type.starts_with("application/json")) {
        return Answer::rejected(415, "content type must be text/plain (sendBeacon) or application/json");
    }
    let client = session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip());
    if let Some(ip) = client {
        if !ingest.limiter.allow(ip) {
            return Answer::rejected(429, "too many reports from this client; slow down");
        }
    }
    let cap = ingest.config.max_report_bytes;
    if let Some(len) =
        req.headers.get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok())
    {
        if len > cap {
            return Answer::rejected(413, format!("report larger than {cap} bytes"));
        }
    }
    let mut body = BytesMut::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(piece)) => {
                if body.len() + piece.len() > cap {
                    return Answer::rejected(413, format!("report larger than {cap} bytes"));
                }
                body.extend_from_slice(&piece);
            }
            Ok(None) => break,
            Err(_) => return Answer::rejected(400, "could not read the report body"),
        }
    }
    let report = match ProbeReport::parse(&body) {
        Ok(r) => r,
        Err(e) => return Answer::rejected(400, e.to_string()),
    };
    let trace_id = report.trace_id.clone();
    match ingest.recent.take_report(&trace_id, ingest.config.max_reports_per_request) {
        ReportSlot::Taken => {}
        ReportSlot::Unknown => {
            return Answer::rejected(
                404,
                "unknown or expired trace id: tokentap has not proxied a request of this trace recently",
            )
        }
        ReportSlot::Full => {
            queue.count_refused_report(RefusedReport::TraceFull);
            return Answer::rejected(
                429,
                format!(
                    "this trace already has its reports ([probe] max_reports_per_request = {} per request)",
                    ingest.config.max_reports_per_request
                ),
            );
        }
    }
    if !ingest.budget.allow(ALL_CLIENTS) {
        ingest.recent.release(&trace_id);
        queue.count_refused_report(RefusedReport::OverBudget);
        return Answer::rejected(429, "too many reports from all clients together; slow down");
    }
    if !queue.submit_report(report) {
        ingest.recent.release(&trace_id);
        return Answer::rejected(503, "tokentap is busy; report dropped");
    }
    Answer::json(202, serde_json::json!({ "accepted": true }))
}
