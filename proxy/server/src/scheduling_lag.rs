//! Scheduling lag: how long a task made ready from outside the proxy's runtime waits before the
//! runtime polls it.
//!
//! Handoff lag (upstream body hook → client body hook) only covers the time between tokentap's own
//! hooks. Bytes that arrive on a socket first wait for the runtime to notice them and poll the
//! connection's task: behind other connections' work when the proxy is busy, or behind a thread's
//! wake-up when it was idle. That wait is part of what the proxy adds to every chunk, and no hook
//! can see it. A probe measures it from outside: a thread of its own spawns a tiny task onto the
//! proxy's runtime every 25–75 ms (jittered, so it does not beat with a periodic load) and notes how
//! long the task waited before it ran. The task does one channel send; nothing else runs on the
//! forwarding path.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;
use tokentap_analysis::distribution::percentile;

/// The samples kept for `/_tokentap/api/health` (about a minute at one sample per 50 ms; 4 bytes each).
pub(crate) const RECENT_SAMPLES: usize = 1_200;
/// A probe that has waited this long is counted at this value while the wait goes on.
pub(crate) const MAX_LAG: Duration = Duration::from_secs(10);
/// The gap between probes is drawn uniformly from this range.
const GAP_MS: std::ops::Range<u64> = 25..75;

/// The scheduling lag samples: the last [`RECENT_SAMPLES`] (µs) and totals since start.
#[derive(Debug, Default)]
pub(crate) struct SchedulingLag {
    recent: Mutex<VecDeque<u32>>,
    samples: AtomicU64,
    max_us: AtomicU64,
}

impl SchedulingLag {
    /// Adds one sample.
    pub(crate) fn observe(&self, lag: Duration) {
        let us = u32::try_from(lag.as_micros()).unwrap_or(u32::MAX);
        let mut recent = self.recent.lock();
        if recent.len() == RECENT_SAMPLES {
            recent.pop_front();
        }
        recent.push_back(us);
        drop(recent);
        self.samples.fetch_add(1, Ordering::Relaxed);
        self.max_us.fetch_max(u64::from(us), Ordering::Relaxed);
    }

    /// The `self_overhead.scheduling_lag` section of `/_tokentap/api/health`: percentiles of the
    /// recent samples (interpolated as everywhere in tokentap, rounded to whole µs), the total count
    /// and the largest since start. Percentiles are null before the first sample (the probe starts
    /// with the first proxied request).
    pub(crate) fn json(&self) -> serde_json::Value {
        let mut recent: Vec<f64> = self.recent.lock().iter().map(|&us| f64::from(us)).collect();
        recent.sort_by(f64::total_cmp);
        let rank = |p: f64| (!recent.is_empty()).then(|| percentile(&recent, p).round() as u64);
        serde_json::json!({
            "samples": self.samples.load(Ordering::Relaxed),
            "recent_samples": recent.len(),
            "p50_us": rank(50.0),
            "p90_us": rank(90.0),
            "p99_us": rank(99.0),
            "recent_max_us": recent.last().map(|&us| us as u64),
            "max_us": (!recent.is_empty()).then(|| self.max_us.load(Ordering::Relaxed)),
        })
    }
}

/// Where each sample goes besides [`SchedulingLag`] (the exported histogram).
pub(crate) type OnSample = Arc<dyn Fn(Duration) + Send + Sync>;

/// Starts the probe on the runtime of the first request that asks for it.
pub(crate) struct LagProbe {
    lag: Arc<SchedulingLag>,
    on_sample: OnSample,
    started: OnceLock<()>,
}

impl LagProbe {
    pub(crate) fn new(lag: Arc<SchedulingLag>, on_sample: OnSample) -> Self {
        Self { lag, on_sample, started: OnceLock::new() }
    }

    /// Starts the probe thread on the current runtime, once; later calls cost one atomic load.
    /// Outside a runtime it does nothing.
    pub(crate) fn start_once(&self) {
        if self.started.get().is_some() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        self.started.get_or_init(|| {
            let lag = self.lag.clone();
            let on_sample = self.on_sample.clone();
            let spawned = std::thread::Builder::new()
                .name("tokentap-lag-probe".into())
                .spawn(move || probe(&handle, &lag, &*on_sample));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "scheduling lag probe not started");
            }
        });
    }
}

/// Spawns one task at a time and notes how long it waited; returns when the runtime is gone.
/// Never inlined (it runs once per process, as its thread's body): instruction profiles find the
/// probe's clock-driven work under this name (`proxy-bench --callgrind` leaves it out).
#[inline(never)]
fn probe(runtime: &tokio::runtime::Handle, lag: &SchedulingLag, on_sample: &(dyn Fn(Duration) + Send + Sync)) {
    let mut rng = rand::thread_rng();
    loop {
        std::thread::sleep(Duration::from_millis(rng.gen_range(GAP_MS)));
        let (tx, rx) = sync_channel::<Duration>(1);
        let sent = Instant::now();
        // Dropped unrun (closing `tx`) when the runtime has shut down.
        drop(runtime.spawn(async move {
            let _ = tx.send(sent.elapsed());
        }));
        let waited = loop {
            match rx.recv_timeout(MAX_LAG) {
                Ok(waited) => break waited,
                // Still not run: count the wait so far, and keep waiting for this one.
                Err(RecvTimeoutError::Timeout) => {
                    lag.observe(MAX_LAG);
                    on_sample(MAX_LAG);
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        };
        lag.observe(waited);
        on_sample(waited);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_of_the_recent_samples_and_memory_is_bounded() {
        let lag = SchedulingLag::default();
        let empty = lag.json();
        assert_eq!(empty["samples"], 0);
        assert!(empty["p50_us"].is_null() && empty["max_us"].is_null());
        // A first, slow period that later samples push out of the recent window.
        for _ in 0..RECENT_SAMPLES {
            lag.observe(Duration::from_millis(40));
        }
        for us in 1..=(RECENT_SAMPLES as u64) {
            lag.observe(Duration::from_micros(us));
        }
        let j = lag.json();
        assert_eq!(j["samples"], 2 * RECENT_SAMPLES as u64);
        assert_eq!(j["recent_samples"], RECENT_SAMPLES);
        // 600.5 interpolated between the two middle samples, rounded.
        assert_eq!(j["p50_us"], 601);
        assert_eq!(j["p90_us"], 1_080);
        assert_eq!(j["p99_us"], 1_188);
        assert_eq!(j["recent_max_us"], 1_200);
        // The largest since start is kept apart from the window.
        assert_eq!(j["max_us"], 40_000);
        assert_eq!(lag.recent.lock().len(), RECENT_SAMPLES);
    }

    #[test]
    fn a_wait_longer_than_u32_microseconds_is_clamped() {
        let lag = SchedulingLag::default();
        lag.observe(Duration::from_secs(10_000));
        assert_eq!(lag.json()["p50_us"], u32::MAX);
    }

    #[test]
    fn the_probe_measures_how_long_a_blocked_runtime_kept_its_task_waiting() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let lag = Arc::new(SchedulingLag::default());
        let exported = Arc::new(AtomicU64::new(0));
        let probe = {
            let exported = exported.clone();
            LagProbe::new(lag.clone(), Arc::new(move |_| _ = exported.fetch_add(1, Ordering::Relaxed)))
        };
        let held = Duration::from_millis(50);
        runtime.block_on(async {
            probe.start_once();
            probe.start_once();
            // Hold the runtime's only thread from the moment the probe's task exists (it cannot
            // run meanwhile) until `held` after that: the task waits at least `held`.
            let metrics = tokio::runtime::Handle::current().metrics();
            while metrics.num_alive_tasks() == 0 {
                std::thread::yield_now();
            }
            let seen = Instant::now();
            while seen.elapsed() < held {
                std::thread::yield_now();
            }
            // Let it run, and wait for the probe thread to hand its sample on: it is kept first,
            // then exported, so the export is the one to wait for.
            while exported.load(Ordering::Relaxed) == 0 {
                tokio::task::yield_now().await;
            }
        });
        let first = lag.recent.lock()[0];
        assert!(u128::from(first) >= held.as_micros(), "{first} µs");
        drop(runtime);
    }
}
