//! Who may send probe reports: allowed origins, trace ids tokentap saw recently (with a cap on the
//! reports accepted per request of the trace), a per-client rate limit and one budget for all
//! clients. These checks run on the proxy listener but never on a proxied request's path.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// Trace ids of recent proxied requests: a report must name one of them.
#[derive(Debug)]
pub(crate) struct RecentTraces {
    inner: Mutex<RecentInner>,
    capacity: usize,
    ttl: Duration,
}

/// Trace ids by their 32 bytes, kept inline: no allocation per proxied request, and about 95
/// bytes an entry instead of about 170 (two strings and their heap blocks).
#[derive(Debug, Default)]
struct RecentInner {
    order: VecDeque<(Instant, TraceKey)>,
    /// Per trace id: requests noted, reports accepted.
    seen: HashMap<TraceKey, (u32, u32)>,
}

type TraceKey = [u8; 32];

/// A trace id as tokentap writes it (32 hex digits: taken from a valid `traceparent`, made from a
/// turn id, or random) by its bytes; any other length names no trace tokentap saw.
fn trace_key(trace_id: &str) -> Option<TraceKey> {
    trace_id.as_bytes().try_into().ok()
}

/// Whether a report on a trace may be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReportSlot {
    /// Taken: one of the trace's report slots is now used (give it back with [`RecentTraces::release`]).
    Taken,
    /// The trace id was not proxied recently.
    Unknown,
    /// The trace already had its reports: `per_request` × the requests noted on it.
    Full,
}

impl RecentTraces {
    pub(crate) fn new(capacity: usize, ttl: Duration) -> Self {
        Self { inner: Mutex::new(RecentInner::default()), capacity, ttl }
    }

    /// Notes a trace id (called once per proxied request, at its start).
    pub(crate) fn note(&self, trace_id: &str) {
        let Some(key) = trace_key(trace_id) else { return };
        let now = Instant::now();
        let mut inner = self.inner.lock();
        inner.seen.entry(key).or_insert((0, 0)).0 += 1;
        inner.order.push_back((now, key));
        while inner.order.len() > self.capacity
            || inner.order.front().is_some_and(|(t, _)| now.duration_since(*t) > self.ttl)
        {
            let Some((_, old)) = inner.order.pop_front() else { break };
            if let Some((n, _)) = inner.seen.get_mut(&old) {
                *n -= 1;
                if *n == 0 {
                    inner.seen.remove(&old);
                }
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, trace_id: &str) -> bool {
        trace_key(trace_id).is_some_and(|key| self.inner.lock().seen.contains_key(&key))
    }

    /// Takes one report slot of `trace_id`, which has `per_request` for each request noted on it.
    pub(crate) fn take_report(&self, trace_id: &str, per_request: u32) -> ReportSlot {
        let Some(key) = trace_key(trace_id) else { return ReportSlot::Unknown };
        let mut inner = self.inner.lock();
        match inner.seen.get_mut(&key) {
            None => ReportSlot::Unknown,
            Some((requests, reports)) if *reports >= requests.saturating_mul(per_request) => ReportSlot::Full,
            Some((_, reports)) => {
                *reports += 1;
                ReportSlot::Taken
            }
        }
    }

    /// Gives back a slot taken by [`Self::take_report`] for a report that was not accepted after all.
    pub(crate) fn release(&self, trace_id: &str) {
        let Some(key) = trace_key(trace_id) else { return };
        if let Some((_, reports)) = self.inner.lock().seen.get_mut(&key) {
            *reports = reports.saturating_sub(1);
        }
    }
}

/// A token bucket per client address.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl RateLimiter {
    pub(crate) fn new(per_second: f64, burst: f64) -> Self {
        Self { per_second, burst, buckets: Mutex::new(HashMap::new()) }
    }

    /// True when the client may send one more report now.
    pub(crate) fn allow(&self, client: IpAddr) -> bool {
        self.allow_at(client, Instant::now())
    }

    fn allow_at(&self, client: IpAddr, now: Instant) -> bool {
        let mut buckets = self.buckets.lock();
        if buckets.len() > 10_000 {
            // Forget idle clients rather than grow without bound.
            let burst = self.burst;
            let rate = self.per_second;
            buckets.retain(|_, (tokens, at)| *tokens + now.duration_since(*at).as_secs_f64() * rate < burst);
        }
        let (tokens, at) = buckets.entry(client).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.per_second).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Decides whether a browser page at `origin` may post reports to a proxy reached as `host`.
/// Same-origin pages always may; others only when configured.
pub(crate) fn origin_allowed(origin: Option<&str>, host: Option<&str>, allowed: &[String]) -> bool {
    let Some(origin) = origin else {
        // No Origin header: not a cross-origin browser request.
        return true;
    };
    if allowed.iter().any(|a| a == "*" || a == origin) {
        return true;
    }
    match host {
        Some(host) => origin == format!("http://{host}") || origin == format!("https://{host}"),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0af7651916cd43dd8448eb211c80319c";
    const B: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const C: &str = "00000000000000000000000000000001";

    #[test]
    fn a_trace_id_is_kept_by_its_bytes_and_any_other_length_names_no_trace() {
        assert_eq!(trace_key(A).map(|k| k.to_vec()), Some(A.as_bytes().to_vec()));
        for other in [&A[1..], &format!("{A}0"), "", "a"] {
            assert_eq!(trace_key(other), None, "{other:?}");
        }
        let recent = RecentTraces::new(10, Duration::from_secs(60));
        recent.note("not a trace id");
        assert_eq!(recent.take_report("not a trace id", 2), ReportSlot::Unknown);
        recent.note(A);
        // Case matters, as it did for the ids as strings.
        assert_eq!(recent.take_report(&A.to_uppercase(), 2), ReportSlot::Unknown);
        assert_eq!(recent.take_report(A, 2), ReportSlot::Taken);
    }

    #[test]
    fn recent_traces_expire_by_capacity() {
        let recent = RecentTraces::new(2, Duration::from_secs(60));
        recent.note(A);
        recent.note(B);
        assert!(recent.contains(A));
        recent.note(C);
        assert!(!recent.contains(A));
        assert!(recent.contains(B) && recent.contains(C));
    }

    #[test]
    fn reports_per_trace_are_capped_by_its_requests() {
        let recent = RecentTraces::new(10, Duration::from_secs(60));
        assert_eq!(recent.take_report(A, 2), ReportSlot::Unknown);
        recent.note(A);
        assert_eq!(recent.take_report(A, 2), ReportSlot::Taken);
        assert_eq!(recent.take_report(A, 2), ReportSlot::Taken);
        assert_eq!(recent.take_report(A, 2), ReportSlot::Full);
        recent.release(A);
        assert_eq!(recent.take_report(A, 2), ReportSlot::Taken);
        // A second request on the same trace brings two more slots.
        recent.note(A);
        assert_eq!(recent.take_report(A, 2), ReportSlot::Taken);
        assert_eq!(recent.take_report(A, 2), ReportSlot::Taken);
        assert_eq!(recent.take_report(A, 2), ReportSlot::Full);
    }

    #[test]
    fn rate_limit_allows_a_burst_then_refills() {
        let limiter = RateLimiter::new(10.0, 3.0);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let t = Instant::now();
        assert!((0..3).all(|_| limiter.allow_at(ip, t)));
        assert!(!limiter.allow_at(ip, t));
        assert!(limiter.allow_at(ip, t + Duration::from_millis(150)));
        let other: IpAddr = "127.0.0.2".parse().unwrap();
        assert!(limiter.allow_at(other, t));
    }

    #[test]
    fn origins() {
        let allowed = vec!["https://app.example".to_string()];
        assert!(origin_allowed(None, Some("127.0.0.1:8787"), &allowed));
        assert!(origin_allowed(Some("http://127.0.0.1:8787"), Some("127.0.0.1:8787"), &allowed));
        assert!(origin_allowed(Some("https://app.example"), Some("127.0.0.1:8787"), &allowed));
        assert!(!origin_allowed(Some("https://evil.example"), Some("127.0.0.1:8787"), &allowed));
    }
}
