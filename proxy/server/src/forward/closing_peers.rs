//! Upstreams that close kept-alive connections right after answering without saying so
//! (llama.cpp's server after a streamed answer: `Keep-Alive: timeout=5, max=100`, then a FIN a few
//! microseconds after the last chunk). A request that reuses such a connection races the server's
//! FIN; when the request gets there first, the server takes it in and closes without answering,
//! which no TCP counter can tell from a server that read the request and failed, so it is not
//! retried (ARCHITECTURE.md, "One retry"). What tokentap can do is stop racing: once a pooled
//! connection to an upstream is found closed by the server soon after its last answer byte
//! (`[timeouts] closed_after_answer_ms`, 1 s by default: keep-alive timeouts are seconds, 2 s
//! gunicorn, 5 s uvicorn, Node and cpp-httplib, 75 s nginx), requests to that upstream say
//! `Connection: close` for [`REMEMBERED`], so none of its connections is pooled. Asked once per
//! request (one atomic load while nothing is remembered), learned only on a failure path.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long an upstream is remembered after the last such close.
pub(crate) const REMEMBERED: Duration = Duration::from_secs(600);
/// At most this many upstreams remembered (a few dozen bytes each); the oldest are forgotten.
const MAX_PEERS: usize = 256;

/// The upstreams (by socket address) whose connections tokentap does not keep alive.
pub(crate) struct ClosingPeers {
    soon_after_answer: Duration,
    /// Whether any upstream was ever remembered: until then no request takes the lock.
    any: AtomicBool,
    peers: Mutex<HashMap<String, Instant>>,
}

impl ClosingPeers {
    /// A close sooner than `soon_after_answer` after the last answer byte counts (zero: none does).
    pub(crate) fn new(soon_after_answer: Duration) -> Self {
        Self { soon_after_answer, any: AtomicBool::new(false), peers: Mutex::default() }
    }

    /// Remembers `peer` when the server closed a pooled connection `idle` after its last answer
    /// byte; true when it was not remembered before (say so once).
    pub(crate) fn closed_after(&self, peer: &str, idle: Duration, now: Instant) -> bool {
        if idle >= self.soon_after_answer {
            return false;
        }
        let mut peers = self.peers.lock();
        peers.retain(|_, seen| now.saturating_duration_since(*seen) < REMEMBERED);
        if peers.len() >= MAX_PEERS && !peers.contains_key(peer) {
            if let Some(oldest) = peers.iter().min_by_key(|(_, seen)| **seen).map(|(p, _)| p.clone()) {
                peers.remove(&oldest);
            }
        }
        self.any.store(true, Ordering::Relaxed);
        peers.insert(peer.to_string(), now).is_none()
    }

    /// Whether requests to `peer` say `Connection: close`.
    pub(crate) fn closes(&self, peer: &str, now: Instant) -> bool {
        if !self.any.load(Ordering::Relaxed) {
            return false;
        }
        let peers = self.peers.lock();
        peers.get(peer).is_some_and(|seen| now.saturating_duration_since(*seen) < REMEMBERED)
    }

    /// Upstreams remembered now.
    #[cfg(test)]
    fn count(&self, now: Instant) -> usize {
        self.peers.lock().values().filter(|seen| now.saturating_duration_since(**seen) < REMEMBERED).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEER: &str = "127.0.0.1:8080";

    #[test]
    fn a_close_soon_after_the_answer_is_remembered_for_a_while() {
        let peers = ClosingPeers::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert!(!peers.closes(PEER, t0));
        assert!(peers.closed_after(PEER, Duration::from_micros(40), t0));
        assert!(!peers.closed_after(PEER, Duration::from_micros(40), t0), "said once");
        assert!(peers.closes(PEER, t0 + REMEMBERED - Duration::from_secs(1)));
        assert!(!peers.closes(PEER, t0 + REMEMBERED));
        assert!(!peers.closes("127.0.0.1:8081", t0));
    }

    #[test]
    fn a_keep_alive_timeout_is_not_a_close_after_answering() {
        let peers = ClosingPeers::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert!(!peers.closed_after(PEER, Duration::from_secs(5), t0));
        assert!(!peers.closes(PEER, t0));
        assert_eq!(peers.count(t0), 0);
        let never = ClosingPeers::new(Duration::ZERO);
        assert!(!never.closed_after(PEER, Duration::ZERO, t0));
    }

    #[test]
    fn memory_is_bounded_by_forgetting_the_oldest() {
        let peers = ClosingPeers::new(Duration::from_secs(1));
        let t0 = Instant::now();
        for i in 0..MAX_PEERS + 10 {
            peers.closed_after(&format!("10.0.0.1:{i}"), Duration::ZERO, t0 + Duration::from_millis(i as u64));
        }
        let now = t0 + Duration::from_secs(1);
        assert_eq!(peers.count(now), MAX_PEERS);
        assert!(!peers.closes("10.0.0.1:0", now));
        assert!(peers.closes(&format!("10.0.0.1:{}", MAX_PEERS + 9), now));
    }
}
