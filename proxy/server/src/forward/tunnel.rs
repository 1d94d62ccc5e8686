//! WebSocket sessions (HTTP/1.1 `Upgrade`), relayed by tokentap itself.
//!
//! pingora 0.9.1's HTTP/1 proxy can end a tunnel the moment it opens: its upstream half takes the
//! end of the upgrade request's own empty body for the end of the tunnel when it reads the `101`
//! first, and the client gets the `101`, then EOF (cloudflare/pingora#946, not fixed in a
//! release). Which comes first is a coin toss whenever the upstream answers before the proxy polls
//! its two halves: a fast local upstream on a busy machine loses sessions. So an upgrade request
//! is relayed here, by one loop that reads both sides and does what the hooks do, in the same
//! order as pingora's proxy: `upstream_peer`, `connected_to_upstream`, `upstream_request_filter`,
//! `upstream_response_filter`, `response_filter`, then the body hooks for every piece either way
//! (through the functions the hooks delegate to, as `exchange` does).
//!
//! After the `101` the tunnel ends when either side ends, as in pingora's proxy. An answer other
//! than `101` (a refused upgrade) is relayed as an ordinary response. Only WebSocket handshakes
//! without a body come here (every browser's and SDK's); any other upgrade request is left to
//! pingora, whose proxy turns an offer such as `h2c` into a plain request.
//!
//! The upstream connection is always a new one, read and written by the relay's own client
//! (`upstream_client`): no 64 KiB body buffer per session and no copy per frame, as for exchanges.

use pingora::http::RequestHeader;
use pingora::protocols::http::HttpTask;
use pingora::protocols::ALPN;
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType, Result};

use super::hop_by_hop::CLIENT_FRAMING;
use super::read_deadline::{self, ReadDeadline};
use super::response_head::MAX_INFORMATIONAL;
use super::{RequestCtx, TapProxy};

/// An upstream failure, named as `error_while_proxy` names one (never retried).
fn upstream_failed(e: Box<Error>, peer: &HttpPeer) -> Box<Error> {
    super::failure::while_proxying(e.into_up(), peer)
}

/// Whether a request is a WebSocket handshake (`Upgrade: websocket`, RFC 6455 §4.1), the one
/// upgrade relayed here; pingora's proxy turns any other upgrade offer into a plain request.
pub(crate) fn is_websocket_handshake(request: &RequestHeader) -> bool {
    is_websocket_upgrade(request.version, request.headers.get("upgrade").map(|v| v.as_bytes()))
}

/// [`is_websocket_handshake`] from the version and the first `Upgrade` header's value.
pub(super) fn is_websocket_upgrade(version: http::Version, upgrade: Option<&[u8]>) -> bool {
    version == http::Version::HTTP_11 && upgrade.is_some_and(|v| v.eq_ignore_ascii_case(b"websocket"))
}

/// At most this many `Connection` tokens are read (a bound on a hostile header's work).
const MAX_CONNECTION_TOKENS: usize = 16;

/// The handshake's head as the upstream gets it, as pingora's proxy sends it: the headers the
/// client's `Connection` names and the other hop-by-hop headers dropped, then exactly
/// `Connection: Upgrade` and `Upgrade: websocket`.
fn websocket_handshake_head(request: &mut RequestHeader) -> Result<()> {
    let nominated: Vec<http::HeaderName> = request
        .headers
        .get_all(http::header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .take(MAX_CONNECTION_TOKENS)
        .filter_map(|token| http::HeaderName::from_bytes(token.trim_ascii()).ok())
        .collect();
    for name in nominated {
        request.remove_header(&name);
    }
    for name in CLIENT_FRAMING.iter().chain(&[&http::header::CONNECTION, &http::header::UPGRADE]) {
        request.remove_header(*name);
    }
    request.insert_header("connection", "Upgrade")?;
    request.insert_header("upgrade", "websocket")?;
    Ok(())
}

impl TapProxy {
    /// Relays one upgrade request: its head up, the answer down and, after a `101`, both
    /// directions until either side ends. An error carries its side (client or upstream).
    pub(super) async fn relay_upgrade(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<()> {
        let mut peer = self.choose_peer(ctx).await?;
        // WebSocket is HTTP/1.1 only (RFC 6455): never offer h2 for an upgrade.
        peer.options.alpn = ALPN::H1;
        // Always a new connection (an upgraded one is never pooled, and a handshake on a stale
        // pooled one would not be retried).
        let mut upstream = self.exchanges.connect(&peer).await?;
        upstream.read_timeout = peer.options.read_timeout;
        upstream.write_timeout = peer.options.write_timeout;
        let digest = upstream.digest();
        super::upstream::note_connection(self, false, upstream.id(), Some(&digest), ctx)?;

        let mut request = session.req_header().clone();
        request.set_version(http::Version::HTTP_11);
        self.write_upstream_head(session, &mut request, ctx)?;
        websocket_handshake_head(&mut request)?;
        upstream.write_head(&request).await.map_err(|e| upstream_failed(e, &peer))?;
        upstream.finish_body().await.map_err(|e| upstream_failed(e, &peer))?;
        // The upgrade request's own body is empty and already over (pingora's proxy reports it
        // the same way, right after the head).
        self.stamp_request_piece(None, true, ctx)?;

        let mut informational = 0;
        let upgraded = loop {
            let task = upstream.read_task().await.map_err(|e| upstream_failed(e, &peer))?;
            let HttpTask::Header(mut answer, end) = task else {
                let e = Error::explain(ErrorType::InvalidHTTPHeader, "no response head");
                return Err(upstream_failed(e, &peer));
            };
            let status = answer.status.as_u16();
            if status == 101 && !upstream.upgraded() {
                let e =
                    Error::explain(ErrorType::InvalidHTTPHeader, "a 101 that is not an HTTP/1.1 switch of protocols");
                return Err(upstream_failed(e, &peer));
            }
            if answer.status.is_informational() && status != 101 {
                // 1xx before the answer: passed on as it came, a few at most.
                informational += 1;
                if informational > MAX_INFORMATIONAL {
                    let e = Error::explain(ErrorType::InvalidHTTPHeader, "informational answers without end");
                    return Err(upstream_failed(e, &peer));
                }
                super::response_head::take_upstream_head(session, &mut answer, ctx)?;
                session.write_response_header(answer, false).await.map_err(|e| e.into_down())?;
                continue;
            }
            super::response_head::take_upstream_head(session, &mut answer, ctx)?;
            self.write_client_head(session, &mut answer, ctx)?;
            session.write_response_header(answer, end).await.map_err(|e| e.into_down())?;
            if end {
                self.deliver(session, None, true, ctx).await?;
                return Ok(());
            }
            break status == 101;
        };

        // Each read of the upstream (the tunnel's, or a refused upgrade's body) waits at most
        // `[timeouts] read_s`, as each of pingora's reads did: one timer for the session.
        let mut deadline = upstream.read_timeout.take().map(ReadDeadline::new);
        loop {
            if let Some(deadline) = deadline.as_mut() {
                deadline.read_starts();
            }
            tokio::select! {
                piece = session.downstream_session.read_body_or_idle(false), if upgraded => {
                    let piece = piece.map_err(|e| e.into_down())?;
                    let end = piece.is_none();
                    self.stamp_request_piece(piece.as_ref(), end, ctx)?;
                    if let Some(bytes) = piece.filter(|b| !b.is_empty()) {
                        upstream.write_body(&bytes).await.map_err(|e| upstream_failed(e, &peer))?;
                    }
                    if end {
                        // The client closed: the tunnel is over.
                        return Ok(());
                    }
                }
                task = upstream.read_task() => {
                    let (piece, end) = match task.map_err(|e| upstream_failed(e, &peer))? {
                        HttpTask::Body(piece, end) => {
                            let end = end || piece.is_none();
                            (piece, end)
                        }
                        HttpTask::Done | HttpTask::Trailer(_) => (None, true),
                        HttpTask::Failed(e) => return Err(upstream_failed(e, &peer)),
                        HttpTask::Header(..) | HttpTask::UpgradedBody(..) => {
                            let e = Error::explain(ErrorType::InvalidHTTPHeader, "a second response head");
                            return Err(upstream_failed(e, &peer));
                        }
                    };
                    ctx.read_buffer = Some(upstream.read_buffer());
                    self.deliver(session, piece, end, ctx).await?;
                    if end {
                        return Ok(());
                    }
                }
                timeout = read_deadline::expired(&mut deadline), if deadline.is_some() => {
                    let e = Error::explain(ErrorType::ReadTimedout, format!("reading body, timeout: {timeout:?}"));
                    return Err(upstream_failed(e, &peer));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> RequestHeader {
        let mut request = RequestHeader::build("GET", b"/v1/realtime", None).unwrap();
        for (name, value) in headers {
            request.append_header(name.to_string(), *value).unwrap();
        }
        request
    }

    #[test]
    fn the_handshake_head_keeps_what_the_upstream_needs_and_drops_hop_by_hop_headers() {
        /// Client headers, headers present upstream, headers absent upstream.
        type Case = (&'static [(&'static str, &'static str)], &'static [&'static str], &'static [&'static str]);
        let cases: &[Case] = &[
            (
                &[("connection", "keep-alive, Upgrade"), ("upgrade", "WebSocket"), ("sec-websocket-key", "k")],
                &["sec-websocket-key"],
                &["keep-alive"],
            ),
            (
                &[("connection", "Upgrade, X-Hop"), ("x-hop", "1"), ("upgrade", "websocket"), ("te", "trailers")],
                &[],
                &["x-hop", "te"],
            ),
            (
                &[("connection", ", ,bad name, Upgrade"), ("upgrade", "websocket"), ("http2-settings", "AA")],
                &[],
                &["http2-settings"],
            ),
        ];
        for (headers, present, absent) in cases {
            let mut head = request(headers);
            websocket_handshake_head(&mut head).unwrap();
            assert_eq!(head.headers.get_all("connection").iter().collect::<Vec<_>>(), ["Upgrade"], "{headers:?}");
            assert_eq!(head.headers.get_all("upgrade").iter().collect::<Vec<_>>(), ["websocket"], "{headers:?}");
            for name in *present {
                assert!(head.headers.contains_key(*name), "{name} kept: {headers:?}");
            }
            for name in *absent {
                assert!(!head.headers.contains_key(*name), "{name} dropped: {headers:?}");
            }
        }
    }

    #[test]
    fn only_websocket_handshakes_are_relayed_here() {
        assert!(is_websocket_handshake(&request(&[("upgrade", "websocket")])));
        assert!(is_websocket_handshake(&request(&[("upgrade", "WebSocket")])));
        assert!(!is_websocket_handshake(&request(&[("upgrade", "h2c")])));
        assert!(!is_websocket_handshake(&request(&[])));
    }
}
