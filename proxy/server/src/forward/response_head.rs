//! The response head: what `upstream_response_filter` records of the upstream's head (status,
//! content type and encoding, protocol, server timings; informational heads passed on, a few at
//! most) and what `response_filter` changes in the head the client gets.

use std::time::Instant;

use http::header::{self, HeaderName};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{ErrorType, Result};

use tokentap_analysis::server_timing::{MAX_TIMING_HEADER_BYTES, TIMING_HEADERS};
use tokentap_record::HttpProtocol;

use super::failure::{upstream_error, ENDLESS_INFORMATIONAL, UNSOLICITED_UPGRADE};
use super::hop_by_hop::{KEEP_ALIVE, PROXY_CONNECTION};
use super::{header_str, RequestCtx, TapProxy, REQUEST_ID_HEADER};

static MCP_SESSION_ID: HeaderName = HeaderName::from_static(tokentap_analysis::mcp::SESSION_HEADER);

/// `TIMING_HEADERS` parsed once, in the same order.
static TIMING_HEADER_NAMES: [HeaderName; 8] = [
    HeaderName::from_static(TIMING_HEADERS[0]),
    HeaderName::from_static(TIMING_HEADERS[1]),
    HeaderName::from_static(TIMING_HEADERS[2]),
    HeaderName::from_static(TIMING_HEADERS[3]),
    HeaderName::from_static(TIMING_HEADERS[4]),
    HeaderName::from_static(TIMING_HEADERS[5]),
    HeaderName::from_static(TIMING_HEADERS[6]),
    HeaderName::from_static(TIMING_HEADERS[7]),
];

/// At most this many informational (1xx) heads are passed on before the answer, on a plain
/// request as on a WebSocket handshake; an upstream that sends more is answering nothing.
pub(crate) const MAX_INFORMATIONAL: u32 = 16;

/// The upstream's head is in: recorded, and its hop-by-hop headers dropped.
pub(super) fn take_upstream_head(
    session: &Session,
    upstream_response: &mut ResponseHeader,
    ctx: &mut RequestCtx,
) -> Result<()> {
    let entered = Instant::now();
    // A response byte arrived: this attempt is never retried.
    ctx.stale_probe = None;
    if upstream_response.status.is_informational() && upstream_response.status.as_u16() != 101 {
        // Passed on as it came, a few at most: an upstream that sends 1xx heads without end
        // is answering nothing, and each one would cost the client a read.
        ctx.informational += 1;
        if ctx.informational > MAX_INFORMATIONAL {
            return Err(upstream_error(
                ErrorType::Custom(ENDLESS_INFORMATIONAL),
                format!("more than {MAX_INFORMATIONAL} informational heads"),
            ));
        }
        return Ok(());
    }
    // A 101 the client did not ask for would turn the connection into a blind tunnel.
    if upstream_response.status.as_u16() == 101 && !session.is_upgrade_req() {
        return Err(upstream_error(ErrorType::Custom(UNSOLICITED_UPGRADE), "101 without an upgrade request".into()));
    }
    ctx.data.t_upstream_headers_ns = Some(ctx.data.anchor.since_t0(entered));
    ctx.data.status = Some(upstream_response.status.as_u16());
    ctx.data.response_content_type = header_str(upstream_response.headers.get(header::CONTENT_TYPE));
    ctx.data.response_content_encoding = header_str(upstream_response.headers.get(header::CONTENT_ENCODING));
    ctx.data.response_protocol = http_protocol(upstream_response.version);
    copy_timing_headers(upstream_response, &mut ctx.data.timing_headers);
    if let Some(length) = super::response_framing::content_length(&upstream_response.headers) {
        ctx.data.chunks.body.expect(length);
    }
    ctx.data.mcp_session_id = upstream_response
        .headers
        .get(&MCP_SESSION_ID)
        .filter(|v| v.len() <= 256)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if upstream_response.status.as_u16() == 101 {
        ctx.data.websocket_extensions = upstream_response
            .headers
            .get(header::SEC_WEBSOCKET_EXTENSIONS)
            .filter(|v| v.len() <= 256)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
    }
    if upstream_response.status.as_u16() != 101 {
        for name in [&header::CONNECTION, &KEEP_ALIVE, &PROXY_CONNECTION, &header::UPGRADE] {
            upstream_response.remove_header(name);
        }
    }
    ctx.charge(entered);
    Ok(())
}

impl TapProxy {
    /// The head the client gets: framed for an HTTP/1.0 client, and the request id when enabled.
    pub(super) fn write_client_head(
        &self,
        session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &RequestCtx,
    ) -> Result<()> {
        // An HTTP/1.0 client gets no transfer coding (RFC 9112 §6.1; it cannot read chunked
        // encoding): a body of unknown length is delimited by closing the connection instead, also
        // when the client asked to keep it (`Connection: keep-alive`). Same bytes, framed the way
        // it can read.
        if session.req_header().version == http::Version::HTTP_10 && upstream_response.status.as_u16() != 101 {
            upstream_response.remove_header(&header::TRANSFER_ENCODING);
            let no_body = session.req_header().method == http::Method::HEAD
                || matches!(upstream_response.status.as_u16(), 204 | 304);
            if !no_body && upstream_response.headers.get(header::CONTENT_LENGTH).is_none() {
                upstream_response.insert_header("connection", "close")?;
                session.set_keepalive(None);
            }
        }
        if self.config.response_request_id_header && !ctx.internal {
            upstream_response.insert_header(REQUEST_ID_HEADER, ctx.data.request_id.as_str())?;
        }
        Ok(())
    }
}

/// Copies the few response headers that carry the server's own timings (`TIMING_HEADERS`), each
/// at most `MAX_TIMING_HEADER_BYTES`; the record worker parses them. An overlong value is kept
/// empty, so the worker counts it as rejected rather than reading a prefix of it.
fn copy_timing_headers(response: &ResponseHeader, into: &mut Vec<(&'static str, String)>) {
    for (name, parsed) in TIMING_HEADERS.into_iter().zip(&TIMING_HEADER_NAMES) {
        if let Some(value) = response.headers.get(parsed) {
            let bytes = value.as_bytes();
            let kept = if bytes.len() <= MAX_TIMING_HEADER_BYTES {
                String::from_utf8_lossy(bytes).into_owned()
            } else {
                String::new()
            };
            into.push((name, kept));
        }
    }
}

/// The upstream response's HTTP version as the record names it.
fn http_protocol(version: http::Version) -> Option<HttpProtocol> {
    match version {
        http::Version::HTTP_10 => Some(HttpProtocol::Http10),
        http::Version::HTTP_11 => Some(HttpProtocol::Http11),
        http::Version::HTTP_2 => Some(HttpProtocol::H2),
        http::Version::HTTP_3 => Some(HttpProtocol::H3),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parsed_timing_names_are_the_timing_headers() {
        let parsed: Vec<&str> = TIMING_HEADER_NAMES.iter().map(HeaderName::as_str).collect();
        assert_eq!(parsed, TIMING_HEADERS);
    }

    #[test]
    fn timing_headers_are_copied_by_name_in_any_case_and_overlong_ones_kept_empty() {
        let mut head = ResponseHeader::build(200, None).unwrap();
        head.append_header("OpenAI-Processing-Ms", "312").unwrap();
        head.append_header("x-generated-tokens", "40").unwrap();
        head.append_header("x-queue-time", "9".repeat(MAX_TIMING_HEADER_BYTES + 1)).unwrap();
        head.append_header("x-other-time", "5").unwrap();
        let mut copied = Vec::new();
        copy_timing_headers(&head, &mut copied);
        assert_eq!(
            copied,
            [
                ("openai-processing-ms", "312".to_string()),
                ("x-queue-time", String::new()),
                ("x-generated-tokens", "40".to_string())
            ]
        );
    }
}
