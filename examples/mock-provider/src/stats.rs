//! Request counters for tests: every provider request ends as exactly one of completed, cancelled
//! (the client went away first) or reset (the mock aborted it on purpose). Changes are published on
//! a watch channel so `/_mock/wait` can long-poll instead of tests sleeping.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

/// A snapshot of the counters, as served by `GET /_mock/stats`.
#[derive(Serialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MockStats {
    /// Provider requests received (including ones answered with an error).
    pub requests: u64,
    /// Responses whose last byte was handed to the connection.
    pub completed: u64,
    /// Responses abandoned because the client went away (connection closed / stream reset).
    pub cancelled: u64,
    /// Responses the mock aborted on purpose (`x-mock-reset-at`).
    pub reset: u64,
    /// Requests not yet resolved.
    pub in_flight: u64,
}

/// Thresholds for `/_mock/wait`: every given counter must reach at least its value.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StatsThresholds {
    pub(crate) requests: Option<u64>,
    pub(crate) completed: Option<u64>,
    pub(crate) cancelled: Option<u64>,
    pub(crate) reset: Option<u64>,
}

impl StatsThresholds {
    fn reached(&self, s: &MockStats) -> bool {
        let at_least = |want: Option<u64>, have: u64| want.is_none_or(|w| have >= w);
        at_least(self.requests, s.requests)
            && at_least(self.completed, s.completed)
            && at_least(self.cancelled, s.cancelled)
            && at_least(self.reset, s.reset)
    }
}

#[derive(Debug)]
pub(crate) struct StatsHub {
    sender: watch::Sender<MockStats>,
}

impl StatsHub {
    pub(crate) fn new() -> Arc<StatsHub> {
        Arc::new(StatsHub { sender: watch::Sender::new(MockStats::default()) })
    }

    pub(crate) fn snapshot(&self) -> MockStats {
        *self.sender.borrow()
    }

    /// Counts a new provider request; the returned outcome must be resolved (or dropped = cancelled).
    pub(crate) fn begin(self: &Arc<Self>) -> RequestOutcome {
        self.sender.send_modify(|s| {
            s.requests += 1;
            s.in_flight += 1;
        });
        RequestOutcome { hub: Arc::clone(self), resolved: false }
    }

    /// Waits until the thresholds are reached: `Ok(stats)`, or `Err(stats)` at the timeout.
    pub(crate) async fn wait_for(
        &self,
        thresholds: StatsThresholds,
        timeout: Duration,
    ) -> Result<MockStats, MockStats> {
        let mut receiver = self.sender.subscribe();
        let reached = tokio::time::timeout(timeout, async {
            receiver.wait_for(|s| thresholds.reached(s)).await.map(|stats| *stats)
        })
        .await;
        match reached {
            Ok(Ok(stats)) => Ok(stats),
            _ => Err(self.snapshot()),
        }
    }

    fn resolve(&self, field: fn(&mut MockStats) -> &mut u64) {
        self.sender.send_modify(|s| {
            *field(s) += 1;
            s.in_flight -= 1;
        });
    }
}

/// The fate of one request. Dropping it unresolved counts as cancelled: hyper drops the response
/// body (or the service future) as soon as it sees the client connection or h2 stream go away.
#[derive(Debug)]
pub(crate) struct RequestOutcome {
    hub: Arc<StatsHub>,
    resolved: bool,
}

impl RequestOutcome {
    pub(crate) fn completed(mut self) {
        self.resolved = true;
        self.hub.resolve(|s| &mut s.completed);
    }

    pub(crate) fn reset(mut self) {
        self.resolved = true;
        self.hub.resolve(|s| &mut s.reset);
    }
}

impl Drop for RequestOutcome {
    fn drop(&mut self) {
        if !self.resolved {
            self.hub.resolve(|s| &mut s.cancelled);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn outcomes_are_counted_once() {
        let hub = StatsHub::new();
        hub.begin().completed();
        hub.begin().reset();
        drop(hub.begin());
        let in_flight = hub.begin();
        assert_eq!(hub.snapshot(), MockStats { requests: 4, completed: 1, cancelled: 1, reset: 1, in_flight: 1 });
        let waiting = {
            let hub = Arc::clone(&hub);
            tokio::spawn(async move {
                hub.wait_for(StatsThresholds { cancelled: Some(2), ..Default::default() }, Duration::from_secs(30))
                    .await
            })
        };
        drop(in_flight);
        assert_eq!(waiting.await.unwrap().unwrap().cancelled, 2);
        let timed_out = hub.wait_for(StatsThresholds { reset: Some(5), ..Default::default() }, Duration::ZERO).await;
        assert!(timed_out.is_err());
    }
}
