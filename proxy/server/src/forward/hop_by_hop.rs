//! Headers that belong to one connection, not to the request (RFC 9110 §7.6.1): never forwarded
//! as the client sent them, whichever relay forwards the request.

use pingora::http::RequestHeader;

/// Hop-by-hop headers (RFC 9110 §7.6.1) that are not forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "trailer",
    "upgrade",
];

/// Framing and protocol-switch headers of the client's connection that tokentap's relays never
/// forward as sent (RFC 9110 §7.6.1, RFC 9113 §3.2.1); the other hop-by-hop ones are dropped by
/// [`drop_from`] in `write_upstream_head` (the `upstream_request_filter` hook).
pub(super) const CLIENT_FRAMING: &[&str] = &["te", "transfer-encoding", "http2-settings"];

/// Drops the hop-by-hop headers from a head going upstream; an upgrade request keeps its
/// `Connection` and `Upgrade`.
pub(super) fn drop_from(request: &mut RequestHeader, upgrade: bool) {
    for name in HOP_BY_HOP {
        if upgrade && (*name == "connection" || *name == "upgrade") {
            continue;
        }
        request.remove_header(*name);
    }
}
