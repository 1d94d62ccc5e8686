//! Headers that belong to one connection, not to the request (RFC 9110 §7.6.1): never forwarded
//! as the client sent them, whichever relay forwards the request.
//!
//! The names are parsed once (`HeaderName`s): a lookup by `&str` parses the name on every call,
//! a few hundred instructions each, and a request's head is looked up a few dozen times.
//! (Headers tokentap inserts keep `&str` names: pingora writes a `HeaderName` it is given in
//! title case, a `&str` as written.)

use http::header::{self, HeaderName};
use pingora::http::RequestHeader;

pub(super) static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
pub(super) static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
static HTTP2_SETTINGS: HeaderName = HeaderName::from_static("http2-settings");

/// Hop-by-hop headers (RFC 9110 §7.6.1) that are not forwarded.
static HOP_BY_HOP: [&HeaderName; 7] = [
    &header::CONNECTION,
    &KEEP_ALIVE,
    &PROXY_CONNECTION,
    &header::PROXY_AUTHENTICATE,
    &header::PROXY_AUTHORIZATION,
    &header::TRAILER,
    &header::UPGRADE,
];

/// Framing and protocol-switch headers of the client's connection that tokentap's relays never
/// forward as sent (RFC 9110 §7.6.1, RFC 9113 §3.2.1); the other hop-by-hop ones are dropped by
/// [`drop_from`] in `write_upstream_head` (the `upstream_request_filter` hook).
pub(super) static CLIENT_FRAMING: [&HeaderName; 3] = [&header::TE, &header::TRANSFER_ENCODING, &HTTP2_SETTINGS];

/// Drops the hop-by-hop headers from a head going upstream; an upgrade request keeps its
/// `Connection` and `Upgrade`.
pub(super) fn drop_from(request: &mut RequestHeader, upgrade: bool) {
    for name in HOP_BY_HOP {
        if upgrade && (name == header::CONNECTION || name == header::UPGRADE) {
            continue;
        }
        request.remove_header(name);
    }
}
