//! The upstream choice: the peer a request goes to (`upstream_peer`: DNS, SNI, timeouts, ALPN,
//! the route's CA) and the connection it got (`connected_to_upstream`: new or reused, connect and
//! TLS time, a reused connection already closed by the server caught before any write).

use std::time::Duration;

use pingora::protocols::{Digest, ALPN};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType, Result};

use tokentap_record::UpstreamConnection;

use super::failure::{upstream_error, DNS_LOOKUP_FAILED};
use super::{stale_connection, RequestCtx, TapProxy};

impl TapProxy {
    /// The peer for the request's route, with the timeouts of `[timeouts]`.
    pub(super) async fn choose_peer(&self, ctx: &mut RequestCtx) -> Result<Box<HttpPeer>> {
        let route =
            ctx.data.route.clone().ok_or_else(|| Error::explain(ErrorType::InternalError, "no route selected"))?;
        let addr = route.resolve().await.map_err(|message| upstream_error(DNS_LOOKUP_FAILED, message))?;
        let peer_addr = addr.to_string();
        // An upstream that closes right after answering gets `Connection: close` (no pooling).
        // Never on a route that may speak HTTP/2, where a `connection` header is malformed.
        let h2 = route.upstream.tls && route.http2;
        ctx.close_upstream_connection = !h2 && self.closing_peers.closes(&peer_addr, std::time::Instant::now());
        ctx.data.peer_addr = Some(peer_addr);
        // SNI is always the upstream host name: an empty SNI would disable certificate checks.
        let mut peer = HttpPeer::new(addr, route.upstream.tls, route.upstream.host.clone());
        let t = &self.config.timeouts;
        let options = &mut peer.options;
        options.connection_timeout = Some(Duration::from_millis(t.connect_ms));
        options.total_connection_timeout = Some(Duration::from_millis(t.total_connect_ms));
        let read_s = if ctx.data.upgrade { t.websocket_idle_s } else { t.read_s };
        options.read_timeout = Some(Duration::from_secs(read_s));
        options.write_timeout = Some(Duration::from_secs(t.write_s));
        options.idle_timeout = Some(Duration::from_secs(t.idle_pool_s));
        if h2 {
            options.alpn = ALPN::H2H1;
            // One stream per connection hides other streams' flow control from the timings.
            options.max_h2_streams = 1;
        }
        if let Some(ca) = &route.ca {
            options.ca = Some(ca.clone());
        }
        Ok(Box::new(peer))
    }
}

impl TapProxy {
    /// Remembers the request's upstream as one that closes after answering when the server closed
    /// a pooled connection `idle` after its last answer byte (`closing_peers`).
    pub(super) fn note_closed_pooled_connection(&self, ctx: &RequestCtx, idle: Duration) {
        let Some(peer) = ctx.data.peer_addr.as_deref() else { return };
        if self.closing_peers.closed_after(peer, idle, std::time::Instant::now()) {
            self.finalize.count_peer_closing_after_answer();
            tracing::warn!(
                upstream = peer,
                "the upstream closed a kept-alive connection {} ms after answering without saying so; \
                 its connections are not reused for the next {} s",
                idle.as_millis(),
                super::closing_peers::REMEMBERED.as_secs()
            );
        }
    }
}

/// The connection the request got: recorded, and a reused one probed for staleness.
pub(super) fn note_connection(
    proxy: &TapProxy,
    reused: bool,
    fd: std::os::unix::io::RawFd,
    digest: Option<&Digest>,
    ctx: &mut RequestCtx,
) -> Result<()> {
    ctx.upstream_queue.connected(Some(fd));
    let mut connection = UpstreamConnection {
        reused,
        peer_addr: ctx.data.peer_addr.clone(),
        retried_stale_connection: ctx.retried_stale_connection,
        ..Default::default()
    };
    // Only a reused connection can be stale, and a request is retried at most once.
    #[cfg(unix)]
    if reused && !ctx.retried_stale_connection {
        // tokentap's relay holds its connection until the probe is used or dropped; pingora's
        // proxy closes it before its error comes back, so the probe keeps a duplicate.
        let reuse = if ctx.exchange {
            stale_connection::Reuse::before_held_write(fd)
        } else {
            stale_connection::Reuse::before_write(fd)
        };
        match reuse {
            stale_connection::Reuse::Open(probe) => ctx.stale_probe = Some(probe),
            stale_connection::Reuse::ClosedByServer { idle } => {
                proxy.note_closed_pooled_connection(ctx, idle);
                // Nothing is written on a connection the server has already closed.
                ctx.closed_before_write = true;
                ctx.data.connection = Some(connection);
                return Err(Error::explain(
                    ErrorType::ConnectionClosed,
                    "pooled connection already closed by the server",
                )
                .into_up());
            }
            stale_connection::Reuse::Unknown => {}
        }
    }
    if !reused {
        if let Some(digest) = digest {
            let durations: Vec<Option<Duration>> =
                digest.timing_digest.iter().map(|t| t.as_ref().and_then(|t| t.establishment_duration)).collect();
            connection.connect_ms = durations.first().copied().flatten().map(|d| d.as_secs_f64() * 1e3);
            if digest.ssl_digest.is_some() {
                connection.tls_ms = durations.get(1).copied().flatten().map(|d| d.as_secs_f64() * 1e3);
            }
        }
    }
    ctx.data.connection = Some(connection);
    Ok(())
}
