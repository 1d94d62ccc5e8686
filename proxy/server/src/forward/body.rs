//! Body stamping: the work of the three body hooks. This is the forwarding path: each reads the
//! clock, pushes a fixed-size stamp and keeps a `Bytes` handle, and the handoff reads the client
//! socket's TCP counters when due (one getsockopt), the upstream piece its socket's counters after
//! a gap (a getsockopt and an ioctl, `upstream_queue`). Nothing else: no parsing, no lock, no
//! allocation per byte, no logging.

use std::time::Instant;

use bytes::Bytes;
use pingora::protocols::SocketDigest;
use pingora::proxy::Session;
use pingora::Result;

use tokentap_record::ack::AckSample;

use super::{RequestCtx, TapProxy};

impl TapProxy {
    /// A piece of the request body (or of the client's WebSocket frames): kept within the bounds.
    #[inline]
    pub(super) fn stamp_request_piece(
        &self,
        body: Option<&Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if !ctx.recording {
            return Ok(());
        }
        let entered = Instant::now();
        let t = ctx.data.anchor.since_t0(entered);
        if let Some(piece) = body {
            let limits = &self.config.timeline;
            if ctx.data.upgrade {
                // The client's WebSocket frames: bytes and pieces capped per session.
                ctx.data.request_body.push_at_most(piece, t, limits.max_websocket_bytes, limits.max_chunks);
            } else {
                ctx.data.request_body.push_coalesced(piece, t, limits.max_request_bytes);
            }
        }
        if end_of_stream {
            ctx.data.t_request_body_end_ns = Some(t);
        }
        ctx.charge(entered);
        Ok(())
    }

    /// One piece from the upstream to the client, stamped as the two response body hooks stamp it
    /// (tokentap's relays call this instead of the hooks).
    pub(super) async fn deliver(
        &self,
        session: &mut Session,
        piece: Option<Bytes>,
        end: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        self.stamp_upstream_piece(piece.as_ref(), end, ctx);
        stamp_handoff(session, piece.as_ref(), end, ctx);
        session.write_response_body(piece, end).await.map_err(|e| e.into_down())
    }

    /// A piece of the upstream's response: stamped, and a handle to its bytes kept.
    #[inline]
    pub(super) fn stamp_upstream_piece(&self, body: Option<&Bytes>, end_of_stream: bool, ctx: &mut RequestCtx) {
        // Forwarding path: stamp and keep a handle to the bytes. Nothing else.
        if !ctx.recording {
            return;
        }
        let entered = Instant::now();
        if let Some(piece) = body {
            if !piece.is_empty() {
                let read = ctx.data.anchor.since_t0(entered);
                // After a gap, a getsockopt and an ioctl: bytes that waited in tokentap's socket (a
                // slow client held the previous write) are dated by their arrival (`upstream_queue`).
                let chunks = &mut ctx.data.chunks;
                let t = ctx.upstream_queue.arrival(read, chunks.last_chunk_ns, &mut chunks.upstream_held);
                let limits = &self.config.timeline;
                let cap = if ctx.data.upgrade { limits.max_websocket_bytes } else { limits.max_analysis_bytes };
                let buffer = ctx.read_buffer;
                ctx.data.chunks.on_upstream_chunk(piece, t, limits.max_chunks, cap, buffer);
            }
        }
        if end_of_stream {
            ctx.data.upstream_eos = true;
            // The duplicate descriptor goes now: it would keep a connection pingora closes open.
            ctx.upstream_queue.finished();
        }
        ctx.charge(entered);
    }
}

/// tokentap's relay, before it reads the upstream again: after a write that held it (a slow
/// client), the upstream socket is read first (`upstream_queue::before_read`): one clock read,
/// and after a gap a getsockopt and an ioctl.
#[inline]
pub(super) fn before_upstream_read(ctx: &mut RequestCtx) {
    if !ctx.recording || !ctx.upstream_queue.has_read() {
        return;
    }
    let now = ctx.data.anchor.since_t0(Instant::now());
    ctx.upstream_queue.before_read(now, &mut ctx.data.chunks.upstream_held);
}

/// A piece handed to the client: stamped by byte range and, when due, the client socket read.
#[inline]
pub(super) fn stamp_handoff(session: &Session, body: Option<&Bytes>, end_of_stream: bool, ctx: &mut RequestCtx) {
    // Forwarding path: stamp the handoff and, when due, read the client socket's TCP
    // counters (one getsockopt, for delivery from ACKs: `AckTracker::handoff_read_due`; the
    // piece that ends the response is not read, the tail reading follows it). Nothing else.
    if !ctx.recording {
        return;
    }
    let entered = Instant::now();
    let t = ctx.data.anchor.since_t0(entered);
    if let Some(piece) = body {
        if !piece.is_empty() && !ctx.internal {
            let body_before = ctx.data.chunks.handed_off_bytes;
            ctx.data.chunks.on_handoff(piece.len(), t);
            if ctx.data.ack.unavailable.is_none() && !end_of_stream && ctx.data.ack.handoff_read_due(t) {
                match sample_ack(session, t, body_before) {
                    Ok(reading) => ctx.data.ack.push_handoff(reading.sample, ctx.data.chunks.chunks.capacity()),
                    Err(reason) => ctx.data.ack.unavailable = Some(reason.to_string()),
                }
            }
        }
    }
    if end_of_stream {
        ctx.data.t_end_ns = Some(t);
    }
    ctx.charge(entered);
}

/// A reading of the client socket: the counters, and whether the connection can still
/// acknowledge anything (ESTABLISHED, or CLOSE_WAIT after the client's half-close). A client that
/// closed or reset its socket never acknowledges the tail: watching it would only burn CPU.
pub(super) struct SocketReading {
    pub(super) sample: AckSample,
    pub(super) open: bool,
}

const TCP_ESTABLISHED: u8 = 1;
const TCP_CLOSE_WAIT: u8 = 8;

/// Reads the client socket's TCP counters (one getsockopt), or says why it cannot.
pub(super) fn sample_ack(session: &Session, t_ns: u64, body_before: u64) -> Result<SocketReading, &'static str> {
    let downstream = session.as_downstream();
    if downstream.is_http2() {
        return Err("HTTP/2 client: streams share one socket, so its ACKs are not per response");
    }
    let socket = downstream
        .digest()
        .and_then(|d| d.socket_digest.as_ref())
        .ok_or("no TCP information for the client socket on this platform")?;
    sample_socket(socket, t_ns, body_before)
}

pub(super) fn sample_socket(socket: &SocketDigest, t_ns: u64, body_before: u64) -> Result<SocketReading, &'static str> {
    let info = socket.tcp_info().ok_or("no TCP information for the client socket on this platform")?;
    let written = info.tcpi_bytes_sent.saturating_sub(info.tcpi_bytes_retrans) + u64::from(info.tcpi_notsent_bytes);
    Ok(SocketReading {
        sample: AckSample {
            t_ns,
            body_before,
            written,
            acked: info.tcpi_bytes_acked,
            last_ack_ns: t_ns.saturating_sub(u64::from(info.tcpi_last_ack_recv) * 1_000_000),
        },
        open: matches!(info.tcpi_state, TCP_ESTABLISHED | TCP_CLOSE_WAIT),
    })
}
