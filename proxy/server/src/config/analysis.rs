//! `[analysis]`: stalls, warm-up and the record worker.

use serde::Deserialize;

use super::bounds::{check_all, HOUR_MS};
use super::ConfigError;

/// `[analysis]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnalysisConfig {
    /// A gap between content-bearing events at least this long is a stall.
    pub stall_threshold_ms: u64,
    /// The first N requests of each route after start are marked `warm_up`.
    pub warmup_requests: u64,
    /// Completed requests waiting for analysis; when full, new ones are dropped and counted.
    pub queue_capacity: usize,
    /// CPU priority of the record worker (analysis, store, telemetry) against forwarding.
    pub worker_priority: WorkerPriority,
    /// The record worker is reported stuck (health `degraded`) when it has made no progress for
    /// this long while items wait in its queue.
    pub worker_stuck_s: u64,
}

/// How the record worker shares the CPU with forwarding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum WorkerPriority {
    /// Linux `SCHED_IDLE`: the worker runs only on CPU time nothing else wants, so recording never
    /// takes CPU from forwarding; under saturation detail is shed, then records dropped (counted).
    Idle,
    /// `nice` 10: the worker gets about a tenth of a contended core.
    Low,
    /// The same priority as forwarding.
    Normal,
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        Self {
            stall_threshold_ms: 1000,
            warmup_requests: 3,
            queue_capacity: 1024,
            worker_priority: WorkerPriority::Idle,
            worker_stuck_s: 30,
        }
    }
}

impl AnalysisConfig {
    pub(super) fn validate(self) -> Result<Self, ConfigError> {
        check_all(&[
            ("analysis.stall_threshold_ms", self.stall_threshold_ms, 1..=HOUR_MS),
            ("analysis.warmup_requests", self.warmup_requests, 0..=1_000_000),
            ("analysis.queue_capacity", self.queue_capacity as u64, 1..=65_536),
            ("analysis.worker_stuck_s", self.worker_stuck_s, 1..=86_400),
        ])?;
        Ok(self)
    }
}
