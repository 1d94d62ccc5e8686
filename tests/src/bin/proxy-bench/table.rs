//! Percentiles and the markdown tables proxy-bench prints (and scripts/bench-proxy.sh copies into
//! BENCHMARKS.md).

use crate::lag::LagHistogram;
use std::fmt::Write;
use std::path::Path;

use crate::arm::Arm;
use crate::load::{OpenLoopResult, StreamResult};
use crate::machine::CpuUsed;
use crate::Args;

pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = q / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

/// Other processes' CPU over the measured windows, as a share of one core.
fn busy_share(others_ns: u64, wall_ns: u128) -> f64 {
    if wall_ns == 0 {
        0.0
    } else {
        others_ns as f64 / wall_ns as f64
    }
}

/// More than this share of a core used by other processes makes a row suspect.
const BUSY_WARNING: f64 = 0.10;

#[derive(Default)]
struct Cpu {
    proxy_ns: u64,
    others_ns: u64,
    wall_ns: u128,
}

impl Cpu {
    fn add(&mut self, used: CpuUsed) {
        self.proxy_ns += used.proxy_ns;
        self.others_ns += used.others_ns;
        self.wall_ns += used.wall.as_nanos();
    }
}

/// What tokentap says about itself in its records: handoff lag (upstream read → client write).
pub(crate) struct SelfOverhead {
    pub(crate) lag_p50_us: f64,
    pub(crate) lag_p99_us: f64,
}

impl SelfOverhead {
    /// Medians over the records of the per-record p50 and p99 handoff lags.
    pub(crate) fn from_journal(path: &Path) -> Option<SelfOverhead> {
        let text = std::fs::read_to_string(path).ok()?;
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        for line in text.lines() {
            let Ok(record) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            let overhead = &record["self_overhead"];
            if let (Some(a), Some(b)) =
                (overhead["handoff_lag_p50_us"].as_f64(), overhead["handoff_lag_p99_us"].as_f64())
            {
                p50.push(a);
                p99.push(b);
            }
        }
        p50.sort_by(f64::total_cmp);
        p99.sort_by(f64::total_cmp);
        (!p50.is_empty())
            .then(|| SelfOverhead { lag_p50_us: percentile(&p50, 50.0), lag_p99_us: percentile(&p99, 50.0) })
    }
}

pub(crate) struct StreamRow {
    pub(crate) arm: String,
    pub(crate) level: usize,
    latencies: Vec<f64>,
    streams: usize,
    failed: usize,
    cpu: Cpu,
    pub(crate) idle_rss_kib: Option<u64>,
    /// With every stream of the level open, in the first round (no record of the level yet).
    pub(crate) open_rss_kib: Option<u64>,
    pub(crate) peak_rss_kib: Option<u64>,
    pub(crate) self_overhead: Option<SelfOverhead>,
    scheduling_lag: Option<LagHistogram>,
}

impl StreamRow {
    pub(crate) fn new(arm: String, level: usize) -> StreamRow {
        StreamRow {
            arm,
            level,
            latencies: Vec::new(),
            streams: 0,
            failed: 0,
            cpu: Cpu::default(),
            idle_rss_kib: None,
            open_rss_kib: None,
            peak_rss_kib: None,
            self_overhead: None,
            scheduling_lag: None,
        }
    }

    pub(crate) fn add_lag(&mut self, round: &LagHistogram) {
        self.scheduling_lag.get_or_insert_with(LagHistogram::default).add(round);
    }

    pub(crate) fn add(&mut self, results: Vec<StreamResult>, used: CpuUsed) {
        for r in results {
            self.streams += 1;
            self.failed += usize::from(r.failed);
            self.latencies.extend(r.latencies_us);
        }
        self.cpu.add(used);
    }

    fn sorted(&mut self) -> &[f64] {
        self.latencies.sort_by(f64::total_cmp);
        &self.latencies
    }
}

pub(crate) struct OpenLoopRow {
    pub(crate) arm: String,
    pub(crate) rate: f64,
    latencies: Vec<f64>,
    failed: usize,
    cpu: Cpu,
    scheduling_lag: Option<LagHistogram>,
}

impl OpenLoopRow {
    pub(crate) fn new(arm: String, rate: f64) -> OpenLoopRow {
        OpenLoopRow { arm, rate, latencies: Vec::new(), failed: 0, cpu: Cpu::default(), scheduling_lag: None }
    }

    pub(crate) fn add_lag(&mut self, round: &LagHistogram) {
        self.scheduling_lag.get_or_insert_with(LagHistogram::default).add(round);
    }

    pub(crate) fn add(&mut self, result: OpenLoopResult, used: CpuUsed) {
        self.latencies.extend(result.latencies_us);
        self.failed += result.failed;
        self.cpu.add(used);
    }
}

pub(crate) fn command_output(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(if o.stdout.is_empty() { &o.stderr } else { &o.stdout }).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

pub(crate) fn preamble(command: &str, arms: &[Arm], args: &Args) -> String {
    let mut s = String::new();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let _ = writeln!(s, "Command: `{command}`\n");
    let _ = writeln!(
        s,
        "Run of {} on {} ({} cores, Linux {}). Proxy under test pinned to core {}, load generator \
(upstream and clients, one process, one clock) pinned to core {}. {} events per stream, {} ms apart, \
stream starts spread over one gap; each level starts every proxy fresh and runs the arms interleaved \
in rotated order, {} time(s).",
        command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        cpu,
        crate::machine::cores(),
        command_output("uname", &["-r"]),
        args.proxy_core,
        args.load_core,
        args.schedule.events,
        args.schedule.gap.as_millis(),
        args.repeats
    );
    for arm in arms {
        match arm {
            Arm::Direct => {}
            Arm::Nginx { bin } => {
                let _ = writeln!(
                    s,
                    "- nginx: `{}` ({}), one worker, `proxy_buffering off`, HTTP/1.1 keep-alive upstream, access log on.",
                    bin.display(),
                    command_output(&bin.display().to_string(), &["-v"])
                );
            }
            Arm::Agentgateway { bin, .. } => {
                let _ = writeln!(
                    s,
                    "- {}: `{}`, `workerThreads: 1`, its log to a file; {}.",
                    arm.name(),
                    bin.display(),
                    if matches!(arm, Arm::Agentgateway { llm: true, .. }) {
                        "an `ai` backend with the OpenAI provider (`hostOverride` to the upstream), which parses the stream's events"
                    } else {
                        "a `host` backend (a plain HTTP route)"
                    }
                );
            }
            Arm::Tokentap { label, bin, recording, pingora_relay } => {
                let _ = writeln!(
                    s,
                    "- {}: `{}`, `threads = {}`, {}.",
                    arm.name(),
                    bin.display(),
                    args.threads,
                    if *pingora_relay {
                        "recording and analysis on, `[connections] relay = \"pingora\"`"
                    } else if *recording {
                        "recording and analysis on (defaults)"
                    } else {
                        "`[timeline] enabled = false` (no stamps, no records)"
                    }
                );
                let _ = label;
            }
        }
    }
    s
}

fn mib(kib: Option<u64>) -> String {
    kib.map(|k| format!("{:.1}", k as f64 / 1024.0)).unwrap_or_else(|| "–".into())
}

pub(crate) fn stream_table(rows: &mut [StreamRow], args: &Args) -> String {
    let mut s = String::new();
    let carried = match args.schedule.transport {
        crate::load::Transport::Sse => "server-sent events in an HTTP response",
        crate::load::Transport::WebSocket => "server frames of WebSocket sessions",
    };
    let _ = writeln!(s, "Streaming ({carried}): per-event latency (arrival − send). \"Added\" = arm − direct at the same percentile. Late = more than one gap ({} ms) after its send.\n", args.schedule.gap.as_millis());
    let _ = writeln!(s, "| streams | arm | p50 µs | p99 µs | added p50 / p99 µs | late events | failed streams | CPU ms per 1k events | idle → peak RSS MiB | KiB per open stream | self-reported handoff lag p50 / p99 µs | self-reported scheduling lag p50 / p99 µs |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    let gap_us = args.schedule.gap.as_secs_f64() * 1e6;
    let mut warnings = Vec::new();
    let mut direct = (0usize, f64::NAN, f64::NAN);
    // Rows come level by level, direct first within a level.
    for row in rows.iter_mut() {
        let level = row.level;
        let sorted = row.sorted();
        let (p50, p99) = (percentile(sorted, 50.0), percentile(sorted, 99.0));
        let late = sorted.iter().filter(|&&l| l > gap_us).count();
        let events = sorted.len();
        if row.arm == "direct" {
            direct = (level, p50, p99);
        }
        let added = if row.arm != "direct" && direct.0 == level {
            format!("{:.0} / {:.0}", p50 - direct.1, p99 - direct.2)
        } else {
            "–".into()
        };
        // Below 100 streams the proxy's idle work (timers, the round's start and end) dominates.
        let cpu = if row.arm == "direct" || events == 0 || level < 100 {
            "–".into()
        } else {
            format!("{:.1}", row.cpu.proxy_ns as f64 / 1e6 / (events as f64 / 1000.0))
        };
        let per_stream = match (row.idle_rss_kib, row.open_rss_kib) {
            (Some(idle), Some(open)) if level > 0 => format!("{:.1}", open.saturating_sub(idle) as f64 / level as f64),
            _ => "–".into(),
        };
        let scheduling = row.scheduling_lag.as_ref().map_or_else(|| "–".into(), LagHistogram::cell);
        let lag = row
            .self_overhead
            .as_ref()
            .map(|o| format!("{:.0} / {:.0}", o.lag_p50_us, o.lag_p99_us))
            .unwrap_or_else(|| "–".into());
        let busy = busy_share(row.cpu.others_ns, row.cpu.wall_ns);
        let flag = if busy > BUSY_WARNING {
            warnings.push(format!(
                "⚠ {} streams, {}: other processes used {:.0} % of a core during the measurement; treat the row as suspect.",
                level,
                row.arm,
                busy * 100.0
            ));
            " ⚠"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "| {level} | {}{flag} | {p50:.0} | {p99:.0} | {added} | {late} of {events} ({:.2} %) | {} of {} | {cpu} | {} → {} | {per_stream} | {lag} | {scheduling} |",
            row.arm,
            if events > 0 { late as f64 * 100.0 / events as f64 } else { 0.0 },
            row.failed,
            row.streams,
            mib(row.idle_rss_kib),
            mib(row.peak_rss_kib),
        );
    }
    for w in warnings {
        let _ = writeln!(s, "\n{w}");
    }
    s
}

pub(crate) fn open_loop_table(rows: &[OpenLoopRow], args: &Args) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Non-streaming, open loop: requests sent on an absolute schedule over {} kept-alive connections for {} s per run; latency = response read − send (from the scheduled send when the connection was still busy then).\n",
        args.connections, args.rate_seconds
    );
    let _ = writeln!(
        s,
        "| requests/s | arm | p50 µs | p99 µs | p99.9 µs | added p50 / p99 µs | failed | CPU ms per 1k requests | self-reported scheduling lag p50 / p99 µs |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    let mut direct = (f64::NAN, f64::NAN, f64::NAN);
    let mut warnings = Vec::new();
    for row in rows {
        let mut sorted = row.latencies.clone();
        sorted.sort_by(f64::total_cmp);
        let (p50, p99, p999) = (percentile(&sorted, 50.0), percentile(&sorted, 99.0), percentile(&sorted, 99.9));
        if row.arm == "direct" {
            direct = (row.rate, p50, p99);
        }
        let added = if row.arm != "direct" && direct.0 == row.rate {
            format!("{:.0} / {:.0}", p50 - direct.1, p99 - direct.2)
        } else {
            "–".into()
        };
        let cpu = if row.arm == "direct" || sorted.is_empty() {
            "–".into()
        } else {
            format!("{:.1}", row.cpu.proxy_ns as f64 / 1e6 / (sorted.len() as f64 / 1000.0))
        };
        let busy = busy_share(row.cpu.others_ns, row.cpu.wall_ns);
        let flag = if busy > BUSY_WARNING {
            warnings.push(format!(
                "⚠ {} requests/s, {}: other processes used {:.0} % of a core.",
                row.rate,
                row.arm,
                busy * 100.0
            ));
            " ⚠"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "| {} | {}{flag} | {p50:.0} | {p99:.0} | {p999:.0} | {added} | {} of {} | {cpu} | {} |",
            row.rate,
            row.arm,
            row.failed,
            row.failed + sorted.len(),
            row.scheduling_lag.as_ref().map_or_else(|| "–".into(), LagHistogram::cell)
        );
    }
    for w in warnings {
        let _ = writeln!(s, "\n{w}");
    }
    s
}
