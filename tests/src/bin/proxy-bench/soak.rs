//! The soak: one tokentap (recording on) under a steady number of concurrent streams for many
//! minutes, each stream replaced by a new one as it ends, with the proxy's RSS, CPU and the
//! streams' latency sampled at a fixed interval. Flat RSS and CPU are what it is for.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::load::{stream_client, Schedule};
use crate::machine;

/// One sample of the soak.
pub(crate) struct Sample {
    pub(crate) at_s: f64,
    pub(crate) rss_kib: u64,
    pub(crate) cpu_share: f64,
    pub(crate) streams_done: u64,
    pub(crate) streams_failed: u64,
    pub(crate) p50_us: Option<f64>,
    pub(crate) p99_us: Option<f64>,
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64))
}

/// Runs `streams` concurrent streams against `addr` for `duration`, sampling `pid` every `every`.
pub(crate) fn run(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    pid: u32,
    streams: usize,
    schedule: Schedule,
    duration: Duration,
    every: Duration,
) -> Vec<Sample> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let latencies: Arc<Mutex<Vec<f64>>> = Arc::default();
    let begin = Instant::now();
    let mut samples = Vec::new();
    rt.block_on(async {
        let start = tokio::time::Instant::now() + Duration::from_millis(20);
        let mut tasks = Vec::with_capacity(streams);
        for k in 0..streams {
            let (stop, done, failed, latencies) = (stop.clone(), done.clone(), failed.clone(), latencies.clone());
            // Starts spread over one gap, as in the stream rounds.
            let first = start + schedule.gap.mul_f64(k as f64 / streams as f64);
            tasks.push(tokio::spawn(async move {
                let mut at = first;
                while !stop.load(Ordering::Relaxed) {
                    let result = stream_client(addr, schedule.events, schedule.transport, at).await;
                    if result.failed {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut all) = latencies.lock() {
                        all.extend_from_slice(&result.latencies_us);
                    }
                    at = tokio::time::Instant::now();
                }
            }));
        }
        let mut cpu_before = machine::cpu_ns(pid);
        let mut wall_before = Instant::now();
        let mut counted = (0, 0);
        let deadline = tokio::time::Instant::now() + duration;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tick.tick().await;
            let cpu = machine::cpu_ns(pid);
            let wall = Instant::now();
            let mut batch = std::mem::take(&mut *latencies.lock().expect("latency list"));
            batch.sort_by(f64::total_cmp);
            let (d, f) = (done.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
            samples.push(Sample {
                at_s: begin.elapsed().as_secs_f64(),
                rss_kib: machine::status_kib(pid, "VmRSS:"),
                cpu_share: (cpu - cpu_before) as f64 / (wall - wall_before).as_nanos().max(1) as f64,
                streams_done: d - counted.0,
                streams_failed: f - counted.1,
                p50_us: percentile(&batch, 50.0),
                p99_us: percentile(&batch, 99.0),
            });
            eprintln!(
                "[soak] {:>6.0} s  RSS {:>7.1} MiB  CPU {:>5.1} %  streams {:>6}  failed {}",
                begin.elapsed().as_secs_f64(),
                machine::status_kib(pid, "VmRSS:") as f64 / 1024.0,
                100.0 * (cpu - cpu_before) as f64 / (wall - wall_before).as_nanos().max(1) as f64,
                d - counted.0,
                f - counted.1
            );
            counted = (d, f);
            cpu_before = cpu;
            wall_before = wall;
            if tokio::time::Instant::now() >= deadline {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        for task in tasks {
            let _ = task.await;
        }
    });
    samples
}

/// The soak table (markdown), with a summary line: RSS after the first minute and at the end,
/// and the CPU range after the first minute.
pub(crate) fn table(samples: &[Sample], streams: usize, every: Duration) -> String {
    let mut out = format!(
        "Soak: {streams} concurrent streams, each replaced by a new one as it ends; sampled every {} s.\n\n",
        every.as_secs()
    );
    out.push_str("| t (s) | RSS MiB | CPU (% of a core) | streams ended | failed | event latency p50 / p99 µs |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    let show = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.0}"));
    // Every sample for short runs; one a minute beyond ten minutes (all are summarised below).
    let stride = if samples.len() > 60 { (60 / every.as_secs().max(1)).max(1) as usize } else { 1 };
    for (i, s) in samples.iter().enumerate() {
        if i % stride != 0 && i + 1 != samples.len() {
            continue;
        }
        out.push_str(&format!(
            "| {:.0} | {:.1} | {:.1} | {} | {} | {} / {} |\n",
            s.at_s,
            s.rss_kib as f64 / 1024.0,
            100.0 * s.cpu_share,
            s.streams_done,
            s.streams_failed,
            show(s.p50_us),
            show(s.p99_us)
        ));
    }
    let settled: Vec<&Sample> = samples.iter().filter(|s| s.at_s >= 60.0).collect();
    if let (Some(first), Some(last)) = (settled.first(), settled.last()) {
        let cpu: Vec<f64> = settled.iter().map(|s| 100.0 * s.cpu_share).collect();
        let (lo, hi) = cpu.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &c| (lo.min(c), hi.max(c)));
        let peak = settled.iter().map(|s| s.rss_kib).max().unwrap_or(0);
        let failed: u64 = samples.iter().map(|s| s.streams_failed).sum();
        let ended: u64 = samples.iter().map(|s| s.streams_done).sum();
        out.push_str(&format!(
            "\nAfter the first minute: RSS {:.1} MiB at {:.0} s, {:.1} MiB at {:.0} s (peak {:.1} MiB); CPU {lo:.1}–{hi:.1} % of a core; {failed} of {ended} streams failed.\n",
            first.rss_kib as f64 / 1024.0,
            first.at_s,
            last.rss_kib as f64 / 1024.0,
            last.at_s,
            peak as f64 / 1024.0,
        ));
    }
    out
}
