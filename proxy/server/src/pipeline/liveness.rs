//! The record worker's liveness, as health reads it: a heartbeat the worker stamps after every
//! step (an item handled, an idle tick), and the panics that escaped one step and made the worker
//! start its loop again.
//!
//! A worker is *stuck* when items wait in its queue and it has made no progress for
//! `[analysis] worker_stuck_s`; it is *not running* when its thread ended while tokentap runs.
//! Either makes health `degraded` with the reason; the worker's loop is restarted in place after
//! a panic that escaped a step.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Shared between the worker (writer) and health (reader).
#[derive(Debug)]
pub(crate) struct WorkerLiveness {
    started: Instant,
    /// Milliseconds since `started` of the worker's last completed step.
    beat_ms: AtomicU64,
    /// How long without progress, with items waiting, counts as stuck (ms).
    stuck_after_ms: AtomicU64,
    running: AtomicBool,
    /// Times the worker's loop panicked outside one item's handling and was started again.
    restarts: AtomicU64,
    last_restart: Mutex<Option<String>>,
}

impl Default for WorkerLiveness {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            beat_ms: AtomicU64::new(0),
            stuck_after_ms: AtomicU64::new(30_000),
            running: AtomicBool::new(false),
            restarts: AtomicU64::new(0),
            last_restart: Mutex::new(None),
        }
    }
}

/// Set while the worker thread runs; cleared when the thread ends, however it ends.
pub(super) struct Running<'a>(&'a WorkerLiveness);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}

impl WorkerLiveness {
    /// The worker thread is being started (before it runs, so that health never sees a worker
    /// that is still starting as one that is not running).
    pub(super) fn start(&self, stuck_after: Duration) {
        self.stuck_after_ms.store(stuck_after.as_millis() as u64, Ordering::Relaxed);
        self.beat();
        self.running.store(true, Ordering::Release);
    }

    /// Held by the worker thread: when it ends, however it ends, health says so.
    pub(super) fn running(&self) -> Running<'_> {
        Running(self)
    }

    /// The worker completed a step.
    pub(super) fn beat(&self) {
        self.beat_ms.store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    pub(super) fn restarted(&self, why: String) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
        *self.last_restart.lock() = Some(why);
        self.beat();
    }

    fn since_beat(&self) -> Duration {
        let now = self.started.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.beat_ms.load(Ordering::Relaxed)))
    }

    /// Why the worker is not recording now, if it is not (`queued`: items waiting for it).
    pub(crate) fn problem(&self, queued: u64) -> Option<String> {
        if !self.running.load(Ordering::Acquire) {
            return Some("the record worker is not running: finished requests are not recorded".to_owned());
        }
        let idle = self.since_beat();
        let stuck_after = Duration::from_millis(self.stuck_after_ms.load(Ordering::Relaxed));
        (queued > 0 && idle >= stuck_after).then(|| {
            format!("the record worker is stuck: no progress for {} s with {queued} items queued", idle.as_secs())
        })
    }

    /// `/_tokentap/api/health` → `records.worker`.
    pub(crate) fn json(&self, queued: u64) -> serde_json::Value {
        let problem = self.problem(queued);
        let state = match (&problem, self.running.load(Ordering::Acquire)) {
            (_, false) => "not_running",
            (Some(_), true) => "stuck",
            (None, true) => "running",
        };
        serde_json::json!({
            "state": state,
            "since_progress_ms": self.since_beat().as_millis() as u64,
            "restarts": self.restarts.load(Ordering::Relaxed),
            "last_restart": *self.last_restart.lock(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stuck_only_with_items_waiting_and_no_progress() {
        let liveness = WorkerLiveness::default();
        assert!(liveness.problem(0).unwrap().contains("not running"));
        liveness.start(Duration::ZERO);
        let running = liveness.running();
        assert_eq!(liveness.problem(0), None, "an idle worker with an empty queue is fine");
        assert!(liveness.problem(3).unwrap().contains("stuck"));
        liveness.stuck_after_ms.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(liveness.problem(3), None);
        drop(running);
        assert_eq!(liveness.json(0)["state"], "not_running");
    }
}
