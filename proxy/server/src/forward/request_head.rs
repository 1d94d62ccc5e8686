//! The request head: what `request_filter` records of the client's head (method, redacted path
//! and headers, trace context), the route it picks, and the head as it goes upstream
//! (`upstream_request_filter`: path rewritten, hop-by-hop headers dropped, `traceparent`).

use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};

use tokentap_record::trace::{split_traceparent_query, TraceContext};

use super::failure::error_message;
use super::privacy::{redact_path, Redactor};
use super::{exchange, header_str, hop_by_hop, internal, tunnel, RequestCtx, TapProxy};

static TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
static PAGE_TRACE: http::HeaderName =
    http::HeaderName::from_static(tokentap_record::browser::arrival::PAGE_TRACE_HEADER);

/// Request header bytes (names and values) a record keeps; a client can send a head of up to
/// pingora's limit (about 1 MiB), and each record in memory would hold a copy.
pub(crate) const MAX_KEPT_HEADER_BYTES: usize = 16 << 10;
/// The name of the entry that says how much of the request head was not kept.
pub(crate) const HEADERS_NOT_KEPT: &str = "tokentap-headers-not-kept";

impl TapProxy {
    /// The client's head is in: served here (`/_tokentap/`), answered 404 (no route), relayed
    /// (a WebSocket handshake), or recorded and left to pingora (`Ok(false)`).
    pub(super) async fn take_request_head(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let entered = Instant::now();
        // The head is in: the connection no longer waits for one (its deadline stops).
        crate::admission::request_started(session.stream());
        // A client that pipelines (sends request N+1 before reading response N) is served in
        // order on the same connection (RFC 9112 §9.3.2) instead of having N+1 dropped.
        session.set_pipelining_enabled(true);
        let req = session.req_header();
        let path_and_query = req.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/").to_string();

        if is_internal(&path_and_query) {
            ctx.internal = true;
            // Boxed, as the WebSocket relay below: awaited inline, the rarer branches' futures
            // would size this one, and so every relayed exchange's memory while it streams.
            Box::pin(internal::serve(session, &path_and_query, &self.pages, &self.ingest, &self.finalize)).await?;
            return Ok(true);
        }

        ctx.recording = self.config.timeline.enabled;
        if ctx.recording {
            self.lag_probe.start_once();
            ctx.data.method = req.method.as_str().to_string();
            // A browser's WebSocket cannot send headers: the probe puts its trace context in the
            // query instead, which is read here and never forwarded.
            let (stripped, query_traceparent) = split_traceparent_query(&path_and_query);
            ctx.data.path = redact_path(stripped.as_deref().unwrap_or(&path_and_query));
            ctx.data.request_headers = kept_headers(&req.headers, &self.redactor);
            ctx.data.request_content_type = header_str(req.headers.get(http::header::CONTENT_TYPE));
            if let Some(length) = super::response_framing::content_length(&req.headers) {
                ctx.data.request_body.expect(length);
            }
            let turns = &self.config.turns;
            let turn_header = turns.enabled.then(|| req.headers.get(turns.turn_header.as_str())).flatten();
            let trace = TraceContext::from_incoming_or_turn(
                req.headers.get(&TRACEPARENT).map(|v| v.as_bytes()).or(query_traceparent.map(str::as_bytes)),
                turn_header.map(|v| v.as_bytes()),
            );
            if self.ingest.config.enabled {
                self.ingest.recent.note(&trace.trace_id);
                // An app server that names the page's trace lets the page's report in.
                let page_trace = req.headers.get(&PAGE_TRACE);
                if let Some(id) =
                    page_trace.and_then(|v| v.to_str().ok()).and_then(tokentap_record::browser::arrival::page_trace_id)
                {
                    self.ingest.recent.note(id);
                }
            }
            ctx.data.trace = Some(trace);
        }

        let Some(route) = self.config.routes.find(req.uri.path()).cloned() else {
            ctx.no_route = true;
            write_no_route(session).await?;
            ctx.charge(entered);
            return Ok(true);
        };
        let (in_flight_before, index) = route.begin_request();
        if ctx.recording {
            ctx.data.concurrency_at_t0 = in_flight_before;
            ctx.data.route_request_index = index;
            ctx.data.open = Some(self.finalize.open_request());
            ctx.finalize = Some(self.finalize.clone());
        }
        let relayed_here = exchange::relays(&self.config, session, &route);
        ctx.data.route = Some(route);
        if relayed_here {
            // An HTTP/1.1 exchange: relayed by tokentap's own loop (`exchange`), not pingora's.
            ctx.charge(entered);
            ctx.exchange = true;
            self.relay_exchange(session, ctx).await?;
            return Ok(true);
        }
        if session.is_upgrade_req() {
            // A WebSocket session. The client may stay silent for minutes (pingora's default: 60 s).
            ctx.data.upgrade = true;
            session.set_read_timeout(Some(Duration::from_secs(self.config.timeouts.websocket_idle_s)));
            // A WebSocket handshake without a body is relayed by tokentap itself (`tunnel`),
            // through the same hooks; any other upgrade request (an `h2c` offer) is left to
            // pingora, which sends a body before it reads the answer and drops the offer.
            if tunnel::is_websocket_handshake(session.req_header()) && session.is_body_empty() {
                ctx.charge(entered);
                ctx.relayed = true;
                if let Err(e) = Box::pin(self.relay_upgrade(session, ctx)).await {
                    // pingora would log this as a failed request filter; say what it is instead.
                    tracing::warn!(request_id = %ctx.data.request_id, "WebSocket session ended: {}", error_message(&e));
                    return Err(e);
                }
                return Ok(true);
            }
        }
        ctx.charge(entered);
        Ok(false)
    }

    /// Whether tokentap serves a request itself, decided from its head before pingora parses it
    /// (`client_connection`): the decisions `take_request_head` makes, on the same predicates.
    /// `false` (pingora's proxy serves the request, calling the same hooks) whenever
    /// `take_request_head` would leave the request to pingora, and whenever the head is one
    /// pingora's parser treats as its own (`CONNECT`, a target that is not a plain URI).
    pub(super) fn serves_itself(&self, head: &httparse::Request<'_, '_>) -> bool {
        let (Some(method), Some(target), Some(version)) = (head.method, head.path, head.version) else {
            return false;
        };
        let version = match version {
            1 => http::Version::HTTP_11,
            0 => http::Version::HTTP_10,
            _ => return false,
        };
        if method == "CONNECT" {
            return false;
        }
        let Ok(uri) = http::Uri::try_from(target) else { return false };
        if is_internal(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")) {
            return true;
        }
        let Some(route) = self.config.routes.find(uri.path()) else { return true };
        let header = |name: &str| head.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value);
        // pingora's `is_upgrade_req`: HTTP/1.1 with an `Upgrade` header.
        let upgrade = version == http::Version::HTTP_11 && header("upgrade").is_some();
        if exchange::relays_head(&self.config, version, upgrade, route) {
            return true;
        }
        // A WebSocket handshake without a body (`tunnel`); a body is one pingora's reader would
        // see: any transfer coding, or a length other than 0.
        upgrade
            && tunnel::is_websocket_upgrade(version, header("upgrade"))
            && header("transfer-encoding").is_none()
            && header("content-length").is_none_or(|v| v.trim_ascii() == b"0")
    }

    /// The head as it goes upstream: the route's path, its host, no hop-by-hop headers (nor the
    /// turn headers when stripped), and the request's `traceparent` when injected.
    pub(super) fn write_upstream_head(
        &self,
        session: &Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let entered = Instant::now();
        let route =
            ctx.data.route.clone().ok_or_else(|| Error::explain(ErrorType::InternalError, "no route selected"))?;
        let path_and_query = upstream_request.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/").to_string();
        let path_and_query = split_traceparent_query(&path_and_query).0.unwrap_or(path_and_query);
        let new_path = route.upstream_path(&path_and_query);
        // From the String itself: `parse` would copy it.
        let uri = http::Uri::try_from(new_path)
            .map_err(|e| Error::because(ErrorType::InternalError, "rewritten upstream path is not a URI", e))?;
        upstream_request.set_uri(uri);
        upstream_request.insert_header(http::header::HOST, route.upstream.host_header().clone())?;
        let upgrade = session.is_upgrade_req();
        hop_by_hop::drop_from(upstream_request, upgrade);
        if ctx.close_upstream_connection && !upgrade {
            upstream_request.insert_header("connection", "close")?;
        }
        if self.config.turns.strip_headers {
            upstream_request.remove_header(self.config.turns.turn_header.as_str());
            upstream_request.remove_header(self.config.turns.conversation_header.as_str());
        }
        if self.config.inject_traceparent {
            if let Some(trace) = &ctx.data.trace {
                upstream_request.insert_header("traceparent", trace.traceparent())?;
            }
        }
        ctx.data.t_upstream_request_ns = Some(ctx.data.anchor.since_t0(Instant::now()));
        ctx.charge(entered);
        Ok(())
    }
}

/// tokentap's own pages and reports (`internal`).
fn is_internal(path_and_query: &str) -> bool {
    path_and_query.starts_with("/_tokentap/") || path_and_query == "/_tokentap"
}

/// tokentap's 404 for a path no route matches.
async fn write_no_route(session: &mut Session) -> Result<()> {
    let body = Bytes::from(format!(
        "{{\"error\":{{\"type\":\"tokentap_no_route\",\"message\":\"tokentap has no route for path {}\"}}}}",
        serde_json::Value::String(session.req_header().uri.path().to_string())
    ));
    let mut resp = ResponseHeader::build(404, Some(3))?;
    resp.insert_header("content-type", "application/json")?;
    resp.insert_header("content-length", body.len().to_string())?;
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body), true).await?;
    Ok(())
}

/// The request's headers for the record: redacted, and at most [`MAX_KEPT_HEADER_BYTES`]; when
/// more were sent, a last entry [`HEADERS_NOT_KEPT`] says how many headers and bytes were left out.
fn kept_headers(headers: &http::HeaderMap, redactor: &Redactor) -> Vec<(String, String)> {
    let mut kept = Vec::with_capacity(headers.len().min(32));
    let mut bytes = 0;
    let (mut left_out, mut left_out_bytes) = (0usize, 0usize);
    for (name, value) in headers {
        let size = name.as_str().len() + value.len();
        if bytes + size > MAX_KEPT_HEADER_BYTES {
            left_out += 1;
            left_out_bytes += size;
            continue;
        }
        bytes += size;
        kept.push((name.as_str().to_string(), redactor.header_value(name.as_str(), value.as_bytes())));
    }
    if left_out > 0 {
        kept.push((HEADERS_NOT_KEPT.to_string(), format!("{left_out} headers, {left_out_bytes} bytes")));
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::super::privacy;
    use super::*;

    #[test]
    fn a_huge_request_head_is_kept_up_to_the_byte_bound() {
        let mut headers = http::HeaderMap::new();
        headers.insert("authorization", http::HeaderValue::from_static("Bearer sk-secret"));
        for i in 0..40 {
            let name = http::HeaderName::try_from(format!("x-filler-{i}")).unwrap();
            headers.insert(name, http::HeaderValue::from_str(&"v".repeat(1000)).unwrap());
        }
        let kept = kept_headers(&headers, &Redactor::new(&[]));
        let bytes: usize = kept[..kept.len() - 1].iter().map(|(n, v)| n.len() + v.len()).sum();
        assert!(bytes <= MAX_KEPT_HEADER_BYTES, "{bytes}");
        let (name, value) = kept.last().unwrap();
        assert_eq!(name, HEADERS_NOT_KEPT);
        assert!(value.ends_with(" bytes") && value.contains(" headers, "), "{value}");
        assert_eq!(kept[0].1, privacy::REDACTED);
        // A small head is kept whole, with no marker.
        let mut small = http::HeaderMap::new();
        small.insert("content-type", http::HeaderValue::from_static("application/json"));
        assert_eq!(kept_headers(&small, &Redactor::new(&[])), vec![("content-type".into(), "application/json".into())]);
    }
}
