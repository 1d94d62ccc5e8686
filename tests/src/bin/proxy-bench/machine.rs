//! What the machine and the processes under test did: CPU time (ns, from schedstat), memory
//! (VmRSS, VmHWM), busy time of everything else, core pinning and descriptor limits.

use std::time::{Duration, Instant};

/// CPU time a process has used, in ns: the sum over its threads of `/proc/PID/task/*/schedstat`
/// (nanosecond resolution, unlike the 10 ms ticks of `/proc/PID/stat`).
pub(crate) fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// A `/proc/PID/status` memory field (`VmRSS:`, `VmHWM:`) in KiB.
pub(crate) fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

/// Busy time of all CPUs (everything but idle and iowait), ns, from `/proc/stat`.
pub(crate) fn machine_busy_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else { return 0 };
    let ticks: Vec<u64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest is already in user).
    let busy: u64 = ticks.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, v)| v).sum();
    busy * (1_000_000_000 / clock_ticks_per_second())
}

fn clock_ticks_per_second() -> u64 {
    // USER_HZ is 100 on every Linux architecture tokentap targets.
    100
}

/// Waits until `pid` has been idle (less than 1 % of a core over 200 ms) or `limit` passes.
pub(crate) fn wait_idle(pid: u32, limit: Duration) {
    wait_quiet(pid, limit, Duration::from_micros(500));
}

/// Waits until `pid` has used less than `busy` of CPU in each of four 50 ms spans in a row, or
/// `limit` passes. Returns whether it went quiet.
pub(crate) fn wait_quiet(pid: u32, limit: Duration, busy: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let busy = u64::try_from(busy.as_nanos()).unwrap_or(u64::MAX);
    let mut last = cpu_ns(pid);
    let mut quiet = 0;
    while quiet < 4 {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(QUIET_SPAN);
        let now = cpu_ns(pid);
        quiet = if now.saturating_sub(last) < busy { quiet + 1 } else { 0 };
        last = now;
    }
    true
}

/// The span [`wait_quiet`] compares CPU time over.
pub(crate) const QUIET_SPAN: Duration = Duration::from_millis(50);

/// Pins every thread of this process to `core` (taskset from util-linux).
pub(crate) fn pin_self(core: usize) -> Result<(), String> {
    let pid = std::process::id().to_string();
    let status = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", &core.to_string(), &pid])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("taskset: {e}"))?;
    status.success().then_some(()).ok_or_else(|| format!("taskset exited with {status}"))
}

/// Online cores of the machine (not of this process's affinity mask).
pub(crate) fn cores() -> usize {
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|c| c.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(1)
        .max(1)
}

/// The soft limit on open files of this process.
pub(crate) fn open_files_limit() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Max open files")).and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU used over one measured interval: by the process under test, by this load generator, and
/// by everything else on the machine (which should be ~0).
pub(crate) struct CpuWindow {
    pid: u32,
    proxy0: u64,
    self0: u64,
    machine0: u64,
    started: Instant,
}

pub(crate) struct CpuUsed {
    pub(crate) proxy_ns: u64,
    pub(crate) others_ns: u64,
    pub(crate) wall: Duration,
}

impl CpuWindow {
    pub(crate) fn start(pid: Option<u32>) -> CpuWindow {
        let pid = pid.unwrap_or(0);
        CpuWindow {
            pid,
            proxy0: if pid > 0 { cpu_ns(pid) } else { 0 },
            self0: cpu_ns(std::process::id()),
            machine0: machine_busy_ns(),
            started: Instant::now(),
        }
    }

    pub(crate) fn stop(&self) -> CpuUsed {
        let proxy_ns = if self.pid > 0 { cpu_ns(self.pid).saturating_sub(self.proxy0) } else { 0 };
        let self_ns = cpu_ns(std::process::id()).saturating_sub(self.self0);
        let machine_ns = machine_busy_ns().saturating_sub(self.machine0);
        CpuUsed { proxy_ns, others_ns: machine_ns.saturating_sub(proxy_ns + self_ns), wall: self.started.elapsed() }
    }
}
