//! `[connections]`: client connections to the proxy listener.

use serde::Deserialize;

use super::bounds::{check_all, DAY_S, MIB};
use super::ConfigError;

/// `[connections]`: client connections to the proxy listener. A connection over `max_open` gets a
/// 503 and is closed; a connection whose request head is not complete within `head_timeout_s` is
/// closed (the slow-header attack): the first head from the accept, a later one on a kept-alive
/// connection from its first byte. A kept-alive connection whose next request does not start
/// within `keepalive_idle_s` of the previous one's end is closed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionsConfig {
    /// Client connections open at once (default 10,000). Each one also needs an upstream
    /// connection, so the cap is lowered at start to fit half of the process's file descriptor
    /// limit (tokentap first raises its soft limit to the hard one), with a warning when it was set
    /// here.
    pub max_open: Option<usize>,
    /// Client connections one address may hold open at once; one more from it gets the same 503
    /// as over `max_open`, while other addresses are still served. Not set: no share per address
    /// (behind a load balancer or a NAT every client has the same address, so a share would cap
    /// them all together).
    pub max_open_per_client: Option<usize>,
    /// Longest time from accepting a connection to the end of its first request head, and from
    /// the first byte of a later request head to its end.
    pub head_timeout_s: u64,
    /// Longest time a kept-alive connection waits, after a request, for the next one to start.
    pub keepalive_idle_s: u64,
    /// Bytes of each client connection's read buffer (0: none, every read goes to the socket).
    /// pingora's own default is 64 KiB, allocated and zeroed per connection; client requests are
    /// small, and a read that does not fit takes one more system call, never more latency.
    pub read_buffer_bytes: usize,
    /// Who forwards an HTTP/1.1 exchange to an HTTP/1 upstream: `tokentap` (one loop per exchange,
    /// the default) or `pingora` (pingora's HTTP/1 proxy, two tasks joined by a channel; kept for
    /// one release). HTTP/1.0 clients, HTTP/2 clients and routes that may speak HTTP/2 upstream
    /// are forwarded by pingora either way.
    pub relay: Relay,
}

/// Who forwards an HTTP/1.1 exchange (`[connections] relay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Relay {
    /// tokentap's own loop (`forward/exchange.rs`): one task reads both sides.
    #[default]
    Tokentap,
    /// pingora's HTTP/1 proxy.
    Pingora,
}

/// Default client read buffer: none. tokentap's connection loop reads each request head into a
/// buffer of its own (`forward::client_connection`) and pingora's body reader reads 64 KiB at a
/// time, so both went past a buffer here; it only held 4 KiB per open connection
/// (BENCHMARKS.md, "Memory per open stream under 32 KiB, and agentgateway measured beside nginx").
/// A value above 0 puts one back (reads smaller than it then fill it first).
pub const DEFAULT_READ_BUFFER_BYTES: usize = 0;

impl Default for ConnectionsConfig {
    fn default() -> Self {
        // nginx's client_header_timeout is 60 s as well.
        // nginx's keepalive_timeout is 75 s; pingora's (for its first read only) 60 s.
        Self {
            max_open: None,
            max_open_per_client: None,
            head_timeout_s: 60,
            keepalive_idle_s: 60,
            read_buffer_bytes: DEFAULT_READ_BUFFER_BYTES,
            relay: Relay::Tokentap,
        }
    }
}

impl ConnectionsConfig {
    pub(super) fn validate(self) -> Result<Self, ConfigError> {
        if let Some(max_open) = self.max_open {
            check_all(&[("connections.max_open", max_open as u64, 1..=1_000_000)])?;
        }
        if let Some(share) = self.max_open_per_client {
            check_all(&[("connections.max_open_per_client", share as u64, 1..=1_000_000)])?;
        }
        check_all(&[
            ("connections.head_timeout_s", self.head_timeout_s, 1..=3600),
            ("connections.keepalive_idle_s", self.keepalive_idle_s, 1..=DAY_S),
            ("connections.read_buffer_bytes", self.read_buffer_bytes as u64, 0..=MIB),
        ])?;
        Ok(self)
    }
}
