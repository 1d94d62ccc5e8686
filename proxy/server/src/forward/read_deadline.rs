//! The answer body's read timeout in tokentap's relay, kept by one timer per exchange.
//!
//! pingora's HTTP/1 client puts every body read under its own timeout (`[timeouts] read_s`):
//! each read registers a timer and drops it when the piece arrives, once per piece of a streamed
//! answer. The relay keeps the same deadline with one timer: each read notes when it started, and
//! the timer, when it fires, ends the exchange only if the read in progress has waited the whole
//! timeout; otherwise it is set again for that read's deadline. A read that waits `read_s` fails
//! as pingora's would (`ReadTimedout`), and a read started after a slow write to the client is
//! timed from its own start, as before.

use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

pub(super) struct ReadDeadline {
    timeout: Duration,
    read_started: Instant,
    /// Boxed: tokio's timer entry is cache-line aligned and would raise the alignment, and so the
    /// size, of every open exchange's future.
    timer: Pin<Box<Sleep>>,
}

impl ReadDeadline {
    pub(super) fn new(timeout: Duration) -> Self {
        let now = Instant::now();
        Self { timeout, read_started: now, timer: Box::pin(tokio::time::sleep_until(now + timeout)) }
    }

    /// A read of the upstream starts now.
    #[inline]
    pub(super) fn read_starts(&mut self) {
        self.read_started = Instant::now();
    }

    /// Resolves once the read in progress has waited the whole timeout; returns the timeout.
    /// Cancel-safe: dropped and called again, it waits for the same deadline.
    pub(super) async fn expired(&mut self) -> Duration {
        loop {
            self.timer.as_mut().await;
            let due = self.read_started + self.timeout;
            if Instant::now() >= due {
                return self.timeout;
            }
            self.timer.as_mut().reset(due);
        }
    }
}

/// [`ReadDeadline::expired`] of a deadline that may not be set yet: without one it never
/// resolves (a `select!` branch that waits on it is also guarded by `is_some`).
pub(super) async fn expired(deadline: &mut Option<ReadDeadline>) -> Duration {
    match deadline {
        Some(deadline) => deadline.expired().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_read_that_waits_the_whole_timeout_expires_and_reads_that_keep_coming_do_not() {
        let timeout = Duration::from_secs(10);
        let mut deadline = ReadDeadline::new(timeout);
        let start = Instant::now();
        // Reads start every 6 s for 60 s: each waits less than the timeout.
        for _ in 0..10 {
            tokio::select! {
                _ = deadline.expired() => panic!("expired with reads every 6 s"),
                () = tokio::time::sleep(Duration::from_secs(6)) => deadline.read_starts(),
            }
        }
        assert_eq!(start.elapsed(), Duration::from_secs(60));
        // Then a read that waits: it expires exactly the timeout after it started.
        let last = Instant::now();
        assert_eq!(deadline.expired().await, timeout);
        assert_eq!(last.elapsed(), timeout);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_started_late_is_timed_from_its_own_start() {
        let timeout = Duration::from_secs(10);
        let mut deadline = ReadDeadline::new(timeout);
        // The first read's timer would fire at 10 s; a read started at 9 s runs to 19 s.
        tokio::time::sleep(Duration::from_secs(9)).await;
        deadline.read_starts();
        let started = Instant::now();
        deadline.expired().await;
        assert_eq!(started.elapsed(), timeout);
    }
}
