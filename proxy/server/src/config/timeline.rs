//! `[timeline]`: per-request memory bounds.

use serde::Deserialize;

use super::bounds::{check_all, GIB, MIB};
use super::ConfigError;

/// `[timeline]`: per-request memory bounds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimelineConfig {
    /// Record requests at all. `false` makes tokentap a plain forwarding proxy: no stamps, no
    /// records, no analysis, no telemetry per request (to measure what recording costs).
    pub enabled: bool,
    /// Chunk entries kept per request; beyond it counts continue and the record says `chunks_truncated`.
    pub max_chunks: usize,
    /// Response bytes kept per request for analysis; beyond it analysis sees a prefix and says so.
    pub max_analysis_bytes: usize,
    /// Request body bytes kept per request for analysis (model, prompt size…).
    pub max_request_bytes: usize,
    /// Bytes kept per WebSocket session and direction for the realtime analysis (instead of
    /// `max_request_bytes` and `max_analysis_bytes`); still drawn from `max_kept_bytes`. A session
    /// past it is analysed as a prefix (the record says which direction was cut). 64 MiB holds
    /// about 17 minutes of 24 kHz PCM appended as base64.
    pub max_websocket_bytes: usize,
    /// Request and response bytes kept for analysis by all requests in flight (and queued for the
    /// record worker) together; a request that finds it spent keeps no more (its analysis sees a
    /// prefix and says so) and is counted (`records.kept_budget_hits`).
    pub max_kept_bytes: usize,
    /// After the last write, how long tokentap watches the client acknowledge the tail (ms).
    pub ack_drain_ms: u64,
}

impl Default for TimelineConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_chunks: 50_000,
            max_analysis_bytes: 16 << 20,
            max_request_bytes: 4 << 20,
            max_websocket_bytes: 64 << 20,
            max_kept_bytes: 512 << 20,
            ack_drain_ms: 10_000,
        }
    }
}

impl TimelineConfig {
    pub(super) fn validate(self) -> Result<Self, ConfigError> {
        check_all(&[
            ("timeline.max_chunks", self.max_chunks as u64, 1..=1_000_000),
            ("timeline.max_analysis_bytes", self.max_analysis_bytes as u64, 0..=256 * MIB),
            ("timeline.max_request_bytes", self.max_request_bytes as u64, 0..=64 * MIB),
            ("timeline.max_websocket_bytes", self.max_websocket_bytes as u64, 0..=4 * GIB),
            ("timeline.max_kept_bytes", self.max_kept_bytes as u64, 0..=64 * GIB),
            ("timeline.ack_drain_ms", self.ack_drain_ms, 0..=60_000),
        ])?;
        Ok(self)
    }
}
