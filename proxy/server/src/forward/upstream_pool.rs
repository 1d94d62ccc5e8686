//! Kept-alive upstream connections of tokentap's HTTP/1.1 relay (`exchange`), between requests.
//!
//! pingora's connection pool spawns a task for every connection it is given back (to watch it
//! while idle), looks the peer's address up again on every reuse (`getpeername`) and keeps an LRU
//! beside a concurrent map: about 8.8K instructions per request under callgrind, 8 % of a request
//! forwarded with recording off. Here an idle connection waits in one list, newest last:
//! - taken newest first for its peer (`Peer::reuse_hash`), after a read that must not complete:
//!   a connection the server closed (end of stream, an error) or that has bytes nobody asked for
//!   is closed, not reused (as pingora's `test_reusable_stream` decides);
//! - given back only while open, never with an idle timeout of zero;
//! - at most `max` connections: the one idle longest is closed first;
//! - closed when its idle timeout (`[timeouts] idle_pool_s`) passes, taken or not, by one task
//!   that sleeps until the oldest connection's deadline.
//!
//! A server that closes an idle connection is noticed when the connection is next taken or when
//! its timeout passes, not at once (pingora's watch task closes it at once): until then its socket
//! waits half-closed, at most `max` of them.
//!
//! What it does is counted (`UpstreamPoolStats`, `/_tokentap/api/health` → `upstream.pool`): the
//! idle connections now, the reuses, and each connection closed by why.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use parking_lot::Mutex;
use pingora::protocols::Stream;
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::pipeline::UpstreamPoolStats;

/// One idle connection.
struct Idle {
    key: u64,
    stream: Stream,
    /// When it is closed if not taken again.
    until: Instant,
}

/// The relay's idle upstream connections (see the module's comment).
pub(crate) struct UpstreamPool {
    idle: Mutex<VecDeque<Idle>>,
    max: usize,
    /// Wakes the sweeper when the list was empty (it then sleeps until the new deadline).
    given_back: Notify,
    sweeping: AtomicBool,
    stats: Arc<UpstreamPoolStats>,
}

impl UpstreamPool {
    pub(crate) fn new(max: usize, stats: Arc<UpstreamPoolStats>) -> Arc<UpstreamPool> {
        stats.max_idle.store(max as u64, Ordering::Relaxed);
        Arc::new(UpstreamPool {
            idle: Mutex::new(VecDeque::new()),
            max,
            given_back: Notify::new(),
            sweeping: AtomicBool::new(false),
            stats,
        })
    }

    /// The newest idle connection to the peer `key` that is still open, if any.
    pub(crate) fn take(&self, key: u64) -> Option<Stream> {
        loop {
            let idle = {
                let mut list = self.idle.lock();
                let at = list.iter().rposition(|c| c.key == key)?;
                let idle = list.remove(at)?;
                self.stats.idle.fetch_sub(1, Ordering::Relaxed);
                idle
            };
            let mut stream = idle.stream;
            let closed = if idle.until <= Instant::now() {
                &self.stats.closed_idle_timeout
            } else if !still_open(&mut stream) {
                &self.stats.closed_by_upstream
            } else {
                self.stats.reused.fetch_add(1, Ordering::Relaxed);
                return Some(stream);
            };
            closed.fetch_add(1, Ordering::Relaxed);
            // Closed here, outside the lock; the next one is tried.
        }
    }

    /// A connection that can serve another request, kept for `idle_timeout`.
    pub(crate) fn give_back(self: &Arc<Self>, key: u64, mut stream: Stream, idle_timeout: Duration) {
        if idle_timeout.is_zero() || self.max == 0 {
            return;
        }
        if !still_open(&mut stream) {
            self.stats.closed_by_upstream.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let until = Instant::now() + idle_timeout;
        let (evicted, sooner) = {
            let mut list = self.idle.lock();
            // The sweeper sleeps until the oldest connection's deadline: woken when there was none,
            // or when this one's is sooner (a timeout shorter than the others').
            let sooner = list.front().is_none_or(|oldest| until < oldest.until);
            list.push_back(Idle { key, stream, until });
            self.stats.idle.fetch_add(1, Ordering::Relaxed);
            let evicted = if list.len() > self.max { list.pop_front() } else { None };
            if evicted.is_some() {
                self.stats.idle.fetch_sub(1, Ordering::Relaxed);
                self.stats.closed_pool_full.fetch_add(1, Ordering::Relaxed);
            }
            (evicted, sooner)
        };
        drop(evicted);
        if !self.sweeping.swap(true, Ordering::AcqRel) {
            tokio::spawn(Self::sweep(self.clone()));
        } else if sooner {
            self.given_back.notify_one();
        }
    }

    /// Idle connections now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.idle.lock().len()
    }

    /// Closes connections whose idle timeout passed: sleeps until the soonest deadline, or until
    /// a connection is given back with a sooner one (or to an empty list).
    async fn sweep(pool: Arc<UpstreamPool>) {
        loop {
            let given_back = pool.given_back.notified();
            let next = pool.idle.lock().iter().map(|c| c.until).min();
            match next {
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = given_back => {}
                    }
                }
                None => given_back.await,
            }
            let now = Instant::now();
            let expired: VecDeque<Idle> = {
                let mut list = pool.idle.lock();
                let (keep, expired): (VecDeque<Idle>, VecDeque<Idle>) =
                    std::mem::take(&mut *list).into_iter().partition(|c| c.until > now);
                *list = keep;
                pool.stats.idle.fetch_sub(expired.len() as u64, Ordering::Relaxed);
                expired
            };
            pool.stats.closed_idle_timeout.fetch_add(expired.len() as u64, Ordering::Relaxed);
            // Closed outside the lock.
            drop(expired);
        }
    }
}

/// True when a read on the idle connection does not complete at once: no end of stream, no
/// error, no bytes the server sent unasked.
fn still_open(stream: &mut Stream) -> bool {
    let mut byte = [0u8; 1];
    // Unconstrained: the runtime's cooperative budget must not make a ready read look pending.
    tokio::task::unconstrained(stream.read(&mut byte)).now_or_never().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    fn pool(max: usize) -> Arc<UpstreamPool> {
        UpstreamPool::new(max, Arc::default())
    }

    /// The pool's counters, as `/_tokentap/api/health` shows them.
    fn counted(pool: &UpstreamPool, idle: u64, reused: u64, by_upstream: u64, full: u64, timeout: u64) {
        let max = pool.max as u64;
        assert_eq!(
            pool.stats.json(),
            serde_json::json!({
                "idle": idle, "max_idle": max, "reused": reused, "closed_by_upstream": by_upstream,
                "closed_pool_full": full, "closed_idle_timeout": timeout,
            })
        );
        assert_eq!(pool.len() as u64, idle, "the idle gauge is the list's length");
    }

    /// A connected pair: tokentap's side as pingora's `Stream`, the server's as tokio's.
    async fn pair() -> (Stream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (Box::new(pingora::protocols::l4::stream::Stream::from(client)), server)
    }

    #[tokio::test]
    async fn the_newest_open_connection_of_the_peer_is_taken() {
        let pool = pool(8);
        let (a, _sa) = pair().await;
        let (b, _sb) = pair().await;
        let (other, _so) = pair().await;
        let (a_id, b_id) = (a.id(), b.id());
        pool.give_back(1, a, Duration::from_secs(60));
        pool.give_back(1, b, Duration::from_secs(60));
        pool.give_back(2, other, Duration::from_secs(60));
        counted(&pool, 3, 0, 0, 0, 0);
        assert_eq!(pool.take(1).map(|s| s.id()), Some(b_id));
        assert_eq!(pool.take(1).map(|s| s.id()), Some(a_id));
        assert!(pool.take(1).is_none());
        assert_eq!(pool.len(), 1, "the other peer's connection stays");
        counted(&pool, 1, 2, 0, 0, 0);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_or_wrote_to_is_not_reused() {
        let pool = pool(8);
        let (closed, server_closed) = pair().await;
        let (written, mut server_wrote) = pair().await;
        let (open, _server_open) = pair().await;
        let open_id = open.id();
        pool.give_back(7, open, Duration::from_secs(60));
        pool.give_back(7, written, Duration::from_secs(60));
        pool.give_back(7, closed, Duration::from_secs(60));
        drop(server_closed);
        server_wrote.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
        // Both reach tokentap's sockets before the next take (waited for, not slept for).
        wait_readable(&pool, 7).await;
        assert_eq!(pool.take(7).map(|s| s.id()), Some(open_id), "the closed and written ones are skipped");
        counted(&pool, 0, 1, 2, 0, 0);
        // A closed connection is not even kept.
        let (late, server_late) = pair().await;
        drop(server_late);
        let mut late = late;
        let mut byte = [0u8; 1];
        assert_eq!(late.read(&mut byte).await.unwrap(), 0);
        pool.give_back(7, late, Duration::from_secs(60));
        counted(&pool, 0, 1, 3, 0, 0);
    }

    /// Waits until every idle connection of `key` but the oldest has something to read.
    async fn wait_readable(pool: &UpstreamPool, key: u64) {
        loop {
            let pending: Vec<bool> = {
                let mut list = pool.idle.lock();
                list.iter_mut().filter(|c| c.key == key).map(|c| still_open(&mut c.stream)).collect()
            };
            if pending.iter().skip(1).all(|open| !open) {
                return;
            }
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn at_most_max_are_kept_and_the_longest_idle_goes_first() {
        let pool = pool(2);
        let mut servers = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..3 {
            let (s, server) = pair().await;
            ids.push(s.id());
            servers.push(server);
            pool.give_back(3, s, Duration::from_secs(60));
        }
        counted(&pool, 2, 0, 0, 1, 0);
        assert_eq!(pool.take(3).map(|s| s.id()), Some(ids[2]));
        assert_eq!(pool.take(3).map(|s| s.id()), Some(ids[1]));
        assert!(pool.take(3).is_none());
        counted(&pool, 0, 2, 0, 1, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_are_closed_when_their_timeout_passes() {
        let pool = pool(8);
        // Both connected before a timer exists: with the clock paused, a runtime waiting for
        // I/O may jump to the next timer.
        let (s, mut server) = pair().await;
        let (zero, _z) = pair().await;
        pool.give_back(4, s, Duration::from_secs(60));
        pool.give_back(4, zero, Duration::ZERO);
        assert_eq!(pool.len(), 1, "an idle timeout of zero keeps nothing");
        tokio::time::advance(Duration::from_secs(59)).await;
        tokio::task::yield_now().await;
        assert_eq!(pool.len(), 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        // The sweeper closed it: the server reads the end of the stream.
        let mut byte = [0u8; 1];
        assert_eq!(tokio::io::AsyncReadExt::read(&mut server, &mut byte).await.unwrap(), 0);
        counted(&pool, 0, 0, 0, 0, 1);
        // Given back to an empty list, the next one is swept too.
        let (s2, mut server2) = pair().await;
        pool.give_back(4, s2, Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(tokio::io::AsyncReadExt::read(&mut server2, &mut byte).await.unwrap(), 0);
        assert!(pool.take(4).is_none());
        counted(&pool, 0, 0, 0, 0, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_past_its_timeout_is_not_taken_before_the_sweeper_runs() {
        let pool = pool(8);
        // No sweeper: as if it had not woken yet when the connection is asked for.
        pool.sweeping.store(true, Ordering::Release);
        let (s, _server) = pair().await;
        pool.give_back(5, s, Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(10)).await;
        counted(&pool, 1, 0, 0, 0, 0);
        assert!(pool.take(5).is_none());
        counted(&pool, 0, 0, 0, 0, 1);
    }
}
