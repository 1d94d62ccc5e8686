//! `[timeouts]`: how long tokentap waits on the upstream.

use serde::Deserialize;

use super::bounds::{check_all, DAY_S};
use super::ConfigError;

/// `[timeouts]`: how long tokentap waits on the upstream. Streams that think for minutes need long reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutConfig {
    /// TCP connect timeout.
    pub connect_ms: u64,
    /// TCP + TLS connect timeout.
    pub total_connect_ms: u64,
    /// Longest silence tolerated between two reads from the upstream (covers long reasoning phases).
    pub read_s: u64,
    /// Longest time a write to the upstream may take.
    pub write_s: u64,
    /// How long an idle pooled upstream connection is kept.
    pub idle_pool_s: u64,
    /// A pooled connection the server closed within this long of its last answer byte marks the
    /// upstream as one that closes after answering: its connections are not kept alive for ten
    /// minutes (0: never).
    pub closed_after_answer_ms: u64,
    /// A WebSocket session (realtime voice) is closed after this long without a byte in one
    /// direction, client or upstream; sessions last many minutes and a user may stay silent.
    pub websocket_idle_s: u64,
}

impl Default for TimeoutConfig {
    fn default() -> Self {
        Self {
            connect_ms: 10_000,
            total_connect_ms: 20_000,
            read_s: 900,
            write_s: 60,
            idle_pool_s: 60,
            closed_after_answer_ms: 1_000,
            websocket_idle_s: 3_600,
        }
    }
}

impl TimeoutConfig {
    /// Connects take at most 10 minutes; reads, writes and idle times at most a day.
    pub(super) fn validate(self) -> Result<Self, ConfigError> {
        check_all(&[
            ("timeouts.connect_ms", self.connect_ms, 1..=600_000),
            ("timeouts.total_connect_ms", self.total_connect_ms, 1..=600_000),
            ("timeouts.read_s", self.read_s, 1..=DAY_S),
            ("timeouts.write_s", self.write_s, 1..=DAY_S),
            ("timeouts.idle_pool_s", self.idle_pool_s, 0..=DAY_S),
            ("timeouts.closed_after_answer_ms", self.closed_after_answer_ms, 0..=600_000),
            ("timeouts.websocket_idle_s", self.websocket_idle_s, 1..=DAY_S),
        ])?;
        Ok(self)
    }
}
