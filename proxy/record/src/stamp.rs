//! Stamps taken on the forwarding path, as the record keeps them (nanoseconds since t0).

use serde::{Deserialize, Serialize};

/// One upstream body chunk as the proxy saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkStamp {
    /// Byte offset of the chunk's first byte in the response body.
    pub offset: u64,
    /// Chunk length in bytes.
    pub len: u32,
    /// chunk.t_up: received from upstream, ns since t0.
    pub t_up_ns: u64,
    /// chunk.t_handoff: handed to the downstream connection, ns since t0.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub t_handoff_ns: Option<u64>,
    /// chunk.t_acked: the client's TCP had acknowledged all of the chunk's bytes (sampled: an
    /// upper bound, never before the handoff).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub t_acked_ns: Option<u64>,
    /// The client had certainly not acknowledged all of the chunk's bytes yet at this time: the
    /// reading of its socket before the one that saw them acknowledged (at least the handoff).
    /// The real ACK lies in (`t_ack_after_ns`, `t_acked_ns`]. Absent in records written before
    /// it was kept, and whenever `t_acked_ns` is.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub t_ack_after_ns: Option<u64>,
}

/// How the upstream connection for this request came to be.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UpstreamConnection {
    /// True when a pooled connection was reused (no connect or TLS cost).
    pub reused: bool,
    /// TCP connect time when the connection was new.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub connect_ms: Option<f64>,
    /// TLS handshake time when the connection was new and encrypted.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tls_ms: Option<f64>,
    /// Negotiated protocol.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub protocol: Option<HttpProtocol>,
    /// The upstream address connected to.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peer_addr: Option<String>,
    /// True when a reused pooled connection turned out closed by the server before any of the
    /// request reached it, and the request was sent again on a fresh connection (this one).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub retried_stale_connection: bool,
}

/// The HTTP version spoken with the upstream, named as in ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HttpProtocol {
    #[serde(rename = "http/1.0")]
    Http10,
    #[serde(rename = "http/1.1")]
    Http11,
    #[serde(rename = "h2")]
    H2,
    #[serde(rename = "h3")]
    H3,
}
