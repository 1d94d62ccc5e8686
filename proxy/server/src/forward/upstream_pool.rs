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
}

impl UpstreamPool {
    pub(crate) fn new(max: usize) -> Arc<UpstreamPool> {
        Arc::new(UpstreamPool {
            idle: Mutex::new(VecDeque::new()),
            max,
            given_back: Notify::new(),
            sweeping: AtomicBool::new(false),
        })
    }

    /// The newest idle connection to the peer `key` that is still open, if any.
    pub(crate) fn take(&self, key: u64) -> Option<Stream> {
        loop {
            let idle = {
                let mut list = self.idle.lock();
                let at = list.iter().rposition(|c| c.key == key)?;
                list.remove(at)?
            };
            let mut stream = idle.stream;
            if idle.until > Instant::now() && still_open(&mut stream) {
                return Some(stream);
            }
            // Closed here, outside the lock; the next one is tried.
        }
    }

    /// A connection that can serve another request, kept for `idle_timeout`.
    pub(crate) fn give_back(self: &Arc<Self>, key: u64, mut stream: Stream, idle_timeout: Duration) {
        if idle_timeout.is_zero() || self.max == 0 || !still_open(&mut stream) {
            return;
        }
        let until = Instant::now() + idle_timeout;
        let (evicted, sooner) = {
            let mut list = self.idle.lock();
            // The sweeper sleeps until the oldest connection's deadline: woken when there was none,
            // or when this one's is sooner (a timeout shorter than the others').
            let sooner = list.front().is_none_or(|oldest| until < oldest.until);
            list.push_back(Idle { key, stream, until });
            let evicted = if list.len() > self.max { list.pop_front() } else { None };
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
                let (keep, expired) = std::mem::take(&mut *list).into_iter().partition(|c| c.until > now);
                *list = keep;
                expired
            };
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

    /// A connected pair: tokentap's side as pingora's `Stream`, the server's as tokio's.
    async fn pair() -> (Stream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (Box::new(pingora::protocols::l4::stream::Stream::from(client)), server)
    }

    #[tokio::test]
    async fn the_newest_open_connection_of_the_peer_is_taken() {
        let pool = UpstreamPool::new(8);
        let (a, _sa) = pair().await;
        let (b, _sb) = pair().await;
        let (other, _so) = pair().await;
        let (a_id, b_id) = (a.id(), b.id());
        pool.give_back(1, a, Duration::from_secs(60));
        pool.give_back(1, b, Duration::from_secs(60));
        pool.give_back(2, other, Duration::from_secs(60));
        assert_eq!(pool.take(1).map(|s| s.id()), Some(b_id));
        assert_eq!(pool.take(1).map(|s| s.id()), Some(a_id));
        assert!(pool.take(1).is_none());
        assert_eq!(pool.len(), 1, "the other peer's connection stays");
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_or_wrote_to_is_not_reused() {
        let pool = UpstreamPool::new(8);
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
        assert_eq!(pool.len(), 0);
        // A closed connection is not even kept.
        let (late, server_late) = pair().await;
        drop(server_late);
        let mut late = late;
        let mut byte = [0u8; 1];
        assert_eq!(late.read(&mut byte).await.unwrap(), 0);
        pool.give_back(7, late, Duration::from_secs(60));
        assert_eq!(pool.len(), 0);
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
        let pool = UpstreamPool::new(2);
        let mut servers = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..3 {
            let (s, server) = pair().await;
            ids.push(s.id());
            servers.push(server);
            pool.give_back(3, s, Duration::from_secs(60));
        }
        assert_eq!(pool.len(), 2);
        assert_eq!(pool.take(3).map(|s| s.id()), Some(ids[2]));
        assert_eq!(pool.take(3).map(|s| s.id()), Some(ids[1]));
        assert!(pool.take(3).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_are_closed_when_their_timeout_passes() {
        let pool = UpstreamPool::new(8);
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
        assert_eq!(pool.len(), 0);
        // Given back to an empty list, the next one is swept too.
        let (s2, mut server2) = pair().await;
        pool.give_back(4, s2, Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(tokio::io::AsyncReadExt::read(&mut server2, &mut byte).await.unwrap(), 0);
        assert!(pool.take(4).is_none());
    }
}
