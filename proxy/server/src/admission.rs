//! Admission of client connections to the proxy listener: a cap on how many are open at once, a
//! deadline for every request head and an idle timeout between requests (`[connections]`).
//!
//! pingora reads request heads with a per-read timeout only (none at all between the requests of
//! a kept-alive HTTP/1.1 connection), so a client that sends one header byte every few seconds, or
//! one request and then nothing, holds its connection (and its file descriptor) forever, and
//! nothing limits how many connections are open. [`Admitted`] wraps pingora's HTTP application:
//! each new connection takes a slot or gets a 503, and its stream is wrapped in [`Guarded`], which
//! releases the slot when the connection is dropped and ends the connection when a request head
//! has not arrived by its deadline. The first head's deadline runs from the accept; after each
//! request the proxy tells the stream ([`request_ended`]), and the next head must start within
//! `keepalive_idle_s` and, once started, end within `head_timeout_s`. The wrapper passes every byte
//! through untouched; while a head is awaited it looks for the blank line that ends it (a scan of
//! the bytes read, no copy), and while a request is served, reads and writes cost one branch. One
//! timer per connection, reset per request.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::tls::TlsRef;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream, TimingDigest,
    UniqueID, UniqueIDType, ALPN,
};
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Sleep;

use crate::config::ConnectionsConfig;

/// File descriptors kept free for the admin API, the journal and the upstream pool's spares.
const RESERVED_FDS: u64 = 128;

/// The limits in force (after fitting the cap to the file descriptor limit).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    pub max_open: u64,
    /// Connections one client address may hold at once (`None`: no share per address).
    pub max_open_per_client: Option<u64>,
    pub head_timeout: Duration,
    /// How long a kept-alive connection may wait, after a request, for the next one to start.
    pub keepalive_idle: Duration,
}

impl ConnectionLimits {
    /// The configured limits, with `max_open` lowered to fit: every client connection needs an
    /// upstream connection too, so at most half of the descriptors left after a reserve. Returns
    /// the limits and, when the cap was lowered, the configured value.
    pub(crate) fn fitted(config: &ConnectionsConfig) -> (Self, Option<u64>) {
        let configured = config.max_open.map_or(DEFAULT_MAX_OPEN, |n| n as u64);
        let fit = open_file_limit().map(|n| (n.saturating_sub(RESERVED_FDS) / 2).max(1));
        let max_open = fit.map_or(configured, |fit| configured.min(fit));
        let lowered = (max_open < configured && config.max_open.is_some()).then_some(configured);
        let limits = Self {
            max_open,
            max_open_per_client: config.max_open_per_client.map(|n| n as u64),
            head_timeout: Duration::from_secs(config.head_timeout_s),
            keepalive_idle: Duration::from_secs(config.keepalive_idle_s),
        };
        (limits, lowered)
    }
}

/// `[connections] max_open` when not set.
pub(crate) const DEFAULT_MAX_OPEN: u64 = 10_000;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (as servers commonly do: the soft default is
/// often 1,024). Best effort.
pub(crate) fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if let (Some(soft), Some(hard)) = (limit.current, limit.maximum) {
        if soft < hard {
            if let Err(e) = setrlimit(Resource::Nofile, Rlimit { current: Some(hard), maximum: Some(hard) }) {
                tracing::debug!(error = %e, "could not raise the open file limit");
            }
        }
    }
}

/// The soft `RLIMIT_NOFILE`, or `None` when it cannot be read or is unlimited.
fn open_file_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Counters for `/_tokentap/api/health` → `connections` and `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct ConnectionStats {
    /// Client connections open now.
    pub open: AtomicU64,
    pub accepted: AtomicU64,
    /// Connections answered with a 503 and closed because `max_open` were open.
    pub refused_over_cap: AtomicU64,
    /// Connections answered with a 503 and closed because their address held
    /// `max_open_per_client` already.
    pub refused_over_client_share: AtomicU64,
    /// Connections closed because a request head was not complete in time.
    pub head_timeouts: AtomicU64,
    /// Kept-alive connections closed because no next request started within `keepalive_idle_s`.
    pub idle_closed: AtomicU64,
    /// Connections tokentap's connection loop handed to pingora's proxy, with a request it does not
    /// serve itself and every later one (`forward::client_connection`).
    pub handed_to_pingora: AtomicU64,
    /// The cap in force.
    pub max_open: AtomicU64,
    /// Request heads partly received now (bytes arrived, the blank line not yet).
    pub heads_partial: AtomicU64,
    /// Set once shutdown has let go of the connections still reading a request head (after
    /// waiting for the partly received ones); the drain waits for it.
    pub released_at_shutdown: AtomicBool,
}

impl ConnectionStats {
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "open": self.open.load(Ordering::Relaxed),
            "max_open": self.max_open.load(Ordering::Relaxed),
            "accepted": self.accepted.load(Ordering::Relaxed),
            "refused_over_cap": self.refused_over_cap.load(Ordering::Relaxed),
            "refused_over_client_share": self.refused_over_client_share.load(Ordering::Relaxed),
            "head_timeouts": self.head_timeouts.load(Ordering::Relaxed),
            "idle_closed": self.idle_closed.load(Ordering::Relaxed),
            "handed_to_pingora": self.handed_to_pingora.load(Ordering::Relaxed),
            "heads_partial": self.heads_partial.load(Ordering::Relaxed),
        })
    }

    /// Takes a slot when fewer than `max` connections are open.
    fn try_open(self: &Arc<Self>, max: u64, share: Option<ShareSlot>) -> Option<Slot> {
        let taken = self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
        match taken {
            Ok(_) => {
                self.accepted.fetch_add(1, Ordering::Relaxed);
                Some(Slot { stats: self.clone(), _share: share })
            }
            Err(_) => {
                self.refused_over_cap.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

/// One open connection's place under the cap (and its address's share); released on drop.
struct Slot {
    stats: Arc<ConnectionStats>,
    _share: Option<ShareSlot>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.stats.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The connections open per client address, for `max_open_per_client`. Only addresses with a
/// connection open have an entry, so it holds at most `max_open` of them.
#[derive(Debug, Default)]
struct ClientShares {
    open: parking_lot::Mutex<HashMap<IpAddr, u64>>,
}

impl ClientShares {
    /// Takes one of `address`'s `max` places, or `None` when it holds them all.
    fn take(self: &Arc<Self>, address: IpAddr, max: u64) -> Option<ShareSlot> {
        let mut open = self.open.lock();
        let n = open.entry(address).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(ShareSlot { shares: self.clone(), address })
    }
}

/// One connection's place in its address's share; released on drop.
struct ShareSlot {
    shares: Arc<ClientShares>,
    address: IpAddr,
}

impl Drop for ShareSlot {
    fn drop(&mut self) {
        let mut open = self.shares.open.lock();
        if let Some(n) = open.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// pingora's HTTP application behind the connection cap and the head deadlines.
pub(crate) struct Admitted<A> {
    inner: Arc<A>,
    limits: ConnectionLimits,
    stats: Arc<ConnectionStats>,
    shares: Arc<ClientShares>,
}

impl<A> Admitted<A> {
    pub(crate) fn new(inner: A, limits: ConnectionLimits, stats: Arc<ConnectionStats>) -> Self {
        stats.max_open.store(limits.max_open, Ordering::Relaxed);
        Self { inner: Arc::new(inner), limits, stats, shares: Arc::default() }
    }

    /// The client address's place when a share per address is configured: `Ok(None)` when none
    /// is (or the peer has no IP address), `Err(())` when the address holds its whole share.
    fn client_share(&self, stream: &Stream) -> Result<Option<ShareSlot>, ()> {
        let Some(max) = self.limits.max_open_per_client else { return Ok(None) };
        let digest = stream.get_socket_digest();
        let Some(address) = digest.as_ref().and_then(|d| d.peer_addr()).and_then(|a| a.as_inet()).map(|a| a.ip())
        else {
            return Ok(None);
        };
        match self.shares.take(address, max) {
            Some(slot) => Ok(Some(slot)),
            None => {
                self.stats.refused_over_client_share.fetch_add(1, Ordering::Relaxed);
                Err(())
            }
        }
    }
}

/// What a connection over the cap is told before it is closed.
const OVER_CAP_RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
content-length: 91\r\nconnection: close\r\nretry-after: 1\r\n\r\n\
{\"error\":{\"type\":\"tokentap_over_capacity\",\"message\":\"tokentap: too many open connections\"}}";

/// How long the 503 may take to write to a refused connection.
const REFUSE_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// At shutdown, how long request heads already partly received may take to complete before the
/// connections still reading a head are closed. A real client's head arrives in one or two
/// packets; a slow-header client cannot hold the shutdown longer than this.
pub(crate) const SHUTDOWN_HEAD_WAIT: Duration = Duration::from_secs(2);

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for Admitted<A> {
    async fn process_new(self: &Arc<Self>, stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        let Ok(share) = self.client_share(&stream) else {
            refuse(stream).await;
            return None;
        };
        let Some(slot) = self.stats.try_open(self.limits.max_open, share) else {
            refuse(stream).await;
            return None;
        };
        let guarded: Stream = Box::new(Guarded::new(stream, slot, self.limits));
        // The connection gets a task of its own, sized to its own future: pingora's accept task
        // holds the handshake's future beside the application's (about 8.6 KiB) for as long as
        // the connection is open. pingora awaits nothing after this and tracks no connection
        // task; a stream the application hands back for reuse is served again in the same task
        // (so pingora never hands this wrapper a stream that is guarded already).
        let (app, shutdown) = (self.clone(), shutdown.clone());
        tokio::spawn(async move {
            let mut next = app.inner.process_new(guarded, &shutdown).await;
            while let Some(stream) = next {
                next = app.inner.process_new(stream, &shutdown).await;
            }
        });
        None
    }

    /// Shutdown: pingora's cleanup closes every connection still reading a request head, so a
    /// request whose head was partly received at the signal would be cut without an answer. Those
    /// heads get up to [`SHUTDOWN_HEAD_WAIT`] to complete (their requests are then served and
    /// drained like any other) before the rest are let go.
    async fn cleanup(&self) {
        let partial = self.stats.heads_partial.load(Ordering::Acquire);
        if partial > 0 {
            tracing::info!(heads = partial, "shutdown: waiting for request heads partly received");
            let deadline = tokio::time::Instant::now() + SHUTDOWN_HEAD_WAIT;
            while self.stats.heads_partial.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // A head that just completed is parsed by its own task, which opens its request: give
            // it that moment before the drain looks at the open requests.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.inner.cleanup().await;
        self.stats.released_at_shutdown.store(true, Ordering::Release);
    }
}

async fn refuse(mut stream: Stream) {
    let write = async {
        stream.write_all(OVER_CAP_RESPONSE).await?;
        stream.flush().await
    };
    // Best effort: a client that does not read is simply closed.
    let _ = tokio::time::timeout(REFUSE_WRITE_TIMEOUT, write).await;
    Shutdown::shutdown(&mut *stream).await;
}

/// A client connection under the cap. While a request head is awaited, reads race its deadline.
pub(crate) struct Guarded {
    inner: Stream,
    /// The head being awaited: the first from the accept, later ones from the end of the request
    /// before; `None` while a request is served.
    head: Option<HeadWatch>,
    /// The one timer of the connection, reset for each head.
    deadline: Pin<Box<Sleep>>,
    /// What the proxy said last about the requests ([`NEXT_HEAD`], [`HEAD_PARSED`]), taken by the
    /// next read. Written through a shared reference (the proxy's hooks see the stream as `&`),
    /// read with exclusive access, so reading it costs a plain load.
    told: AtomicU8,
    limits: ConnectionLimits,
    _slot: Slot,
}

/// Nothing new since the last read.
const NOTHING: u8 = 0;
/// A request ended: the next head is awaited (unless it was read ahead, see [`HEAD_PARSED`]).
const NEXT_HEAD: u8 = 1;
/// A request head was parsed: no head is awaited. Covers a pipelined head that pingora had read
/// ahead with the request before and so never came through this stream's reads.
const HEAD_PARSED: u8 = 2;

impl fmt::Debug for Guarded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guarded").field("inner", &self.inner).field("awaiting_head", &self.head.is_some()).finish()
    }
}

impl Guarded {
    fn new(inner: Stream, slot: Slot, limits: ConnectionLimits) -> Self {
        Self {
            inner,
            head: Some(HeadWatch::default()),
            deadline: Box::pin(tokio::time::sleep(limits.head_timeout)),
            told: AtomicU8::new(NOTHING),
            limits,
            _slot: slot,
        }
    }

    /// The head is complete, timed out or abandoned: stop watching it.
    fn end_head(&mut self) {
        if self.head.take().is_some_and(|h| h.started) {
            self._slot.stats.heads_partial.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Acts on what the proxy said since the last read.
    fn take_told(&mut self) {
        match std::mem::replace(self.told.get_mut(), NOTHING) {
            NEXT_HEAD => {
                self.end_head();
                self.head = Some(HeadWatch { idle: true, ..HeadWatch::default() });
                self.deadline.as_mut().reset(tokio::time::Instant::now() + self.limits.keepalive_idle);
            }
            HEAD_PARSED => self.end_head(),
            _ => {}
        }
    }

    /// Counts why the connection is being closed and stops watching; the error for the read.
    fn timed_out(&mut self) -> io::Error {
        let idle = self.head.as_ref().is_some_and(|h| h.idle);
        let stats = &self._slot.stats;
        if idle {
            stats.idle_closed.fetch_add(1, Ordering::Relaxed);
        } else {
            stats.head_timeouts.fetch_add(1, Ordering::Relaxed);
        }
        self.end_head();
        if idle {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "no next request within [connections] keepalive_idle_s on a kept-alive connection",
            )
        } else {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "the request head was not complete within [connections] head_timeout_s",
            )
        }
    }
}

/// The proxy's hook at the end of each request: the connection's next request head is awaited,
/// within `keepalive_idle_s` for its first byte and `head_timeout_s` from there to its end.
/// A no-op for a stream tokentap did not guard (HTTP/2, subrequests).
pub(crate) fn request_ended(stream: Option<&Stream>) {
    tell(stream, NEXT_HEAD);
}

/// The proxy's hook at the start of each request (its head parsed): no head is awaited any more.
pub(crate) fn request_started(stream: Option<&Stream>) {
    tell(stream, HEAD_PARSED);
}

fn tell(stream: Option<&Stream>, what: u8) {
    if let Some(guarded) = stream.and_then(|s| s.as_any().downcast_ref::<Guarded>()) {
        guarded.told.store(what, Ordering::Relaxed);
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.end_head();
    }
}

/// Looks for the end of a request head (`\r\n\r\n`, split anywhere across reads).
#[derive(Default)]
struct HeadWatch {
    /// How many bytes of `\r\n\r\n` the bytes read so far end with.
    matched: u8,
    /// Some bytes of the head have arrived (counted in `heads_partial`).
    started: bool,
    /// Between requests, no byte of the next head yet: the deadline is the idle timeout.
    idle: bool,
}

impl HeadWatch {
    /// Feeds bytes just read; true once the head's blank line has been seen. A match begun in
    /// earlier bytes is finished byte by byte; the rest is searched with `memmem` (a request head
    /// is hundreds of bytes, read on the forwarding path).
    fn saw_end(&mut self, bytes: &[u8]) -> bool {
        let mut at = 0;
        while self.matched > 0 && at < bytes.len() {
            if self.step(bytes[at]) {
                return true;
            }
            at += 1;
        }
        let rest = &bytes[at..];
        if rest.is_empty() {
            return false;
        }
        if memchr::memmem::find(rest, HEAD_END).is_some() {
            return true;
        }
        // No end here: how much of one the bytes end with.
        self.matched = (1..HEAD_END.len()).rev().find(|&n| rest.ends_with(&HEAD_END[..n])).unwrap_or(0) as u8;
        false
    }

    /// One byte of the search; true when it completes `\r\n\r\n`.
    fn step(&mut self, b: u8) -> bool {
        self.matched = if b == HEAD_END[self.matched as usize] {
            self.matched + 1
        } else if b == b'\r' {
            1
        } else {
            0
        };
        self.matched as usize == HEAD_END.len()
    }
}

/// The blank line that ends a request head.
const HEAD_END: &[u8; 4] = b"\r\n\r\n";

impl AsyncRead for Guarded {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if *this.told.get_mut() != NOTHING {
            this.take_told();
        }
        let Some(head) = this.head.as_mut() else {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        };
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = &buf.filled()[before..];
                if head.saw_end(read) {
                    this.end_head();
                } else if this.deadline.is_elapsed() {
                    return Poll::Ready(Err(this.timed_out()));
                } else if !read.is_empty() && !head.started {
                    head.started = true;
                    this._slot.stats.heads_partial.fetch_add(1, Ordering::AcqRel);
                    if head.idle {
                        // The next head began: from now on it has the head deadline.
                        head.idle = false;
                        this.deadline.as_mut().reset(tokio::time::Instant::now() + this.limits.head_timeout);
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(this.timed_out())),
                Poll::Pending => Poll::Pending,
            },
            failed => failed,
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for Guarded {
    async fn shutdown(&mut self) {
        Shutdown::shutdown(&mut *self.inner).await;
    }
}

impl UniqueID for Guarded {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for Guarded {
    fn get_ssl(&self) -> Option<&TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<pingora::protocols::tls::SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for Guarded {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for Guarded {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.set_proxy_digest(digest);
    }
}

impl GetSocketDigest for Guarded {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.inner.set_socket_digest(digest);
    }
}

#[async_trait]
impl Peek for Guarded {
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> HeadWatch {
        HeadWatch::default()
    }

    #[tokio::test]
    async fn head_end_found_at_every_split() {
        let head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";
        let end = head.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        for split in 0..=head.len() {
            let mut w = watch();
            let (a, b) = head.split_at(split);
            let found = w.saw_end(a) || w.saw_end(b);
            assert!(found, "split at {split}");
        }
        // Byte by byte: found exactly at the last byte of the blank line.
        let mut w = watch();
        let at = head.iter().position(|&b| w.saw_end(&[b])).unwrap();
        assert_eq!(at + 1, end);
    }

    #[tokio::test]
    async fn near_misses_are_not_the_end() {
        for bytes in [&b"GET / HTTP/1.1\r\nhost: x\r\n"[..], b"\r\n\r", b"\r\r\n\n", b"\n\n\r\n", b"\r\n\n\r\n"] {
            let mut w = watch();
            assert!(!w.saw_end(bytes), "{:?}", String::from_utf8_lossy(bytes));
        }
        let mut w = watch();
        assert!(w.saw_end(b"\r\r\n\r\n"));
    }

    proptest::proptest! {
        /// Found at the same byte as a byte-by-byte search, however the bytes are split.
        #[test]
        fn head_end_is_found_where_a_byte_by_byte_search_finds_it(
            bytes in proptest::collection::vec(proptest::sample::select(vec![b'\r', b'\n', b'a']), 0..64),
            cuts in proptest::collection::vec(0usize..64, 0..6),
        ) {
            let mut reference = watch();
            let expected = bytes.iter().position(|&b| reference.step(b));
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c <= bytes.len()).collect();
            cuts.push(bytes.len());
            cuts.sort_unstable();
            let mut w = watch();
            let (mut from, mut found) = (0, None);
            for cut in cuts {
                if w.saw_end(&bytes[from..cut]) {
                    found = Some(cut);
                    break;
                }
                from = cut;
            }
            match expected {
                // Found in the piece that holds the end's last byte.
                Some(at) => proptest::prop_assert!(found.is_some_and(|cut| at < cut && at >= from), "{:?} {:?}", expected, found),
                None => proptest::prop_assert_eq!(found, None),
            }
        }
    }

    #[test]
    fn over_cap_response_is_well_formed() {
        let text = std::str::from_utf8(OVER_CAP_RESPONSE).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
        serde_json::from_str::<serde_json::Value>(body).unwrap();
    }

    #[test]
    fn cap_counts_and_releases() {
        let stats = Arc::new(ConnectionStats::default());
        let a = stats.try_open(2, None).unwrap();
        let _b = stats.try_open(2, None).unwrap();
        assert!(stats.try_open(2, None).is_none());
        assert_eq!(stats.refused_over_cap.load(Ordering::Relaxed), 1);
        drop(a);
        assert!(stats.try_open(2, None).is_some());
        assert_eq!(stats.accepted.load(Ordering::Relaxed), 3);
        assert_eq!(stats.open.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn client_shares_count_per_address_and_forget_closed_ones() {
        let shares = Arc::new(ClientShares::default());
        let (one, two): (IpAddr, IpAddr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let a = shares.take(one, 2).unwrap();
        let b = shares.take(one, 2).unwrap();
        assert!(shares.take(one, 2).is_none(), "over its share");
        let c = shares.take(two, 2).unwrap();
        drop(a);
        let a = shares.take(one, 2).expect("a place came back");
        // An address with nothing open has no entry: the table is bounded by the open connections.
        drop((a, b, c));
        assert!(shares.open.lock().is_empty());
    }

    #[test]
    fn cap_fits_the_descriptor_limit() {
        let config = ConnectionsConfig { max_open: Some(1_000_000), ..ConnectionsConfig::default() };
        let (limits, lowered) = ConnectionLimits::fitted(&config);
        match open_file_limit() {
            Some(n) => {
                assert_eq!(limits.max_open, (n.saturating_sub(RESERVED_FDS) / 2).clamp(1, 1_000_000));
                assert_eq!(lowered.is_some(), limits.max_open < 1_000_000);
            }
            None => assert_eq!(limits.max_open, 1_000_000),
        }
        // The default is fitted silently.
        let (limits, lowered) = ConnectionLimits::fitted(&ConnectionsConfig::default());
        assert!(limits.max_open <= DEFAULT_MAX_OPEN);
        assert_eq!(lowered, None);
    }
}
