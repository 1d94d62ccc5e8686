//! Instructions per forwarded event and per non-streaming request, counted by valgrind's
//! callgrind: repeatable where CPU time on a shared machine is not. Each proxy runs under
//! `valgrind --tool=callgrind` (all threads in one profile, so the record worker counts); after a
//! warm-up its counters are zeroed (`callgrind_control -z`), one streaming round runs, the proxy
//! is left to go idle (deferred record work counts), the counters are dumped
//! (`callgrind_control -d`), and the same again for non-streaming requests. Only user-space
//! instructions are counted: the kernel's side of a system call (a `getsockopt`, a `write`) is
//! not, so syscall counts matter beside these figures.
//!
//! A process also works by the clock, traffic or not (pingora's timer thread ticks every
//! millisecond, tokentap's scheduling-lag probe every 25–75 ms), so a round's count grows with
//! how long its window lasted, which depends on the machine's load. An idle window after the
//! warm-up measures that rate; the "less idle" columns subtract it for each window's length.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::arm::{self, Arm};
use crate::load::{self, Schedule};
use crate::machine;

/// What to run under callgrind.
pub(crate) struct Plan {
    pub(crate) out: PathBuf,
    pub(crate) streams: usize,
    pub(crate) requests: usize,
    pub(crate) schedule: Schedule,
    pub(crate) top: usize,
    /// Functions whose inclusive cost is shown (substrings of demangled names).
    pub(crate) inclusive: Vec<String>,
}

/// One dump's profile: self cost per function, inclusive cost (self plus calls) per function.
#[derive(Default)]
struct Profile {
    total: u64,
    self_cost: HashMap<String, u64>,
    inclusive: HashMap<String, u64>,
}

/// Reads a callgrind profile (`events: Ir`, name compression on): a cost line after `calls=` is
/// the call's inclusive cost; every other cost line is the current function's own.
fn parse(path: &Path) -> Profile {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut names: HashMap<String, String> = HashMap::new();
    let mut profile = Profile::default();
    let mut current = String::new();
    let mut next_is_call = false;
    // `fn=(12) name` defines id 12; `fn=(12)` refers to it.
    let mut resolve = |spec: &str| -> String {
        let spec = spec.trim();
        if let Some(rest) = spec.strip_prefix('(') {
            if let Some((id, name)) = rest.split_once(')') {
                let name = name.trim();
                if name.is_empty() {
                    return names.get(id).cloned().unwrap_or_default();
                }
                names.insert(id.to_string(), name.to_string());
                return name.to_string();
            }
        }
        spec.to_string()
    };
    for line in text.lines() {
        if let Some(spec) = line.strip_prefix("fn=") {
            current = resolve(spec);
            continue;
        }
        if let Some(spec) = line.strip_prefix("cfn=") {
            // Defines names too; the call's target is not needed here.
            resolve(spec);
            continue;
        }
        if let Some(total) = line.strip_prefix("summary:").or_else(|| line.strip_prefix("totals:")) {
            profile.total = profile.total.max(total.trim().parse().unwrap_or(0));
            continue;
        }
        if line.starts_with("calls=") {
            next_is_call = true;
            continue;
        }
        let first = line.chars().next();
        let is_cost = matches!(first, Some(c) if c.is_ascii_digit() || c == '+' || c == '-' || c == '*');
        if !is_cost {
            continue;
        }
        let Some(cost) = line.split_whitespace().nth(1).and_then(|c| c.parse::<u64>().ok()) else {
            next_is_call = false;
            continue;
        };
        *profile.inclusive.entry(current.clone()).or_default() += cost;
        if !next_is_call {
            *profile.self_cost.entry(current.clone()).or_default() += cost;
        }
        next_is_call = false;
    }
    profile
}

/// Runs `callgrind_control FLAG PID`; panics when it fails (the figures would be wrong).
fn control(flag: &str, pid: u32) {
    let status = Command::new("callgrind_control")
        .arg(flag)
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("callgrind_control: {e} (install valgrind)"));
    assert!(status.success(), "callgrind_control {flag} {pid} failed");
}

/// The newest dump of `pid` under `prefix` (`PREFIX.PID.N`, highest N).
fn newest_dump(dir: &Path, prefix: &str, pid: u32) -> PathBuf {
    let stem = format!("{prefix}.{pid}.");
    std::fs::read_dir(dir)
        .expect("read the callgrind directory")
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let n: u32 = name.strip_prefix(&stem)?.parse().ok()?;
            Some((n, e.path()))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("no callgrind dump {stem}* in {}", dir.display()))
}

/// Waits until the proxy has done the round's work: a recording tokentap has written `records`
/// records (the record worker's share counts), and the process is idle.
fn settle(target: &arm::Running, pid: u32, records: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    if let Some(dir) = &target.dir {
        let journal = dir.path().join("data").join("records.jsonl");
        let recording = std::fs::read_to_string(dir.path().join("tokentap.toml"))
            .is_ok_and(|config| !config.contains("enabled = false"));
        while recording && std::time::Instant::now() < deadline {
            let written = std::fs::read(&journal).map(|b| b.iter().filter(|&&c| c == b'\n').count()).unwrap_or(0);
            if written >= records {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    machine::wait_idle(pid, Duration::from_secs(300));
}

struct Measured {
    arm: String,
    events: usize,
    failed_streams: usize,
    stream: Profile,
    stream_less_idle: u64,
    requests: usize,
    failed_requests: usize,
    request: Profile,
    request_less_idle: u64,
    /// Instructions per second while idle (the clock-driven work).
    idle_per_s: f64,
}

/// How long the idle window lasts (the clock-driven work's rate is taken over it).
const IDLE_WINDOW: Duration = Duration::from_secs(4);

/// A window's count without what the process does by the clock over that long.
fn less_idle(total: u64, idle_per_s: f64, window: Duration) -> u64 {
    (total as f64 - idle_per_s * window.as_secs_f64()).max(0.0).round() as u64
}

fn slug(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

fn measure(rt: &tokio::runtime::Runtime, arm: &Arm, upstream: SocketAddr, core: usize, plan: &Plan) -> Measured {
    let name = arm.name();
    let prefix = slug(&name);
    let wrap: Vec<String> = vec![
        "valgrind".into(),
        "--tool=callgrind".into(),
        format!("--callgrind-out-file={}/{prefix}.%p", plan.out.display()),
        "--dump-instr=no".into(),
        "--collect-jumps=no".into(),
    ];
    eprintln!("[callgrind] {name}: starting under valgrind");
    let target = arm::start_wrapped(arm, upstream, core, 1, &wrap);
    let pid = target.pid().expect("a proxy process");
    // Warm-up: what is loaded or allocated once (the tokenizer, pools, the first connections).
    let warm = Schedule { events: 3, gap: Duration::from_millis(5), transport: plan.schedule.transport };
    let warm_streams = rt.block_on(load::stream_round(target.addr, 2, warm));
    let warm_requests = rt.block_on(load::open_loop(target.addr, 50.0, Duration::from_secs(1), 4));
    let mut records = warm_streams.iter().filter(|r| !r.failed).count() + warm_requests.latencies_us.len();
    settle(&target, pid, records);

    eprintln!("[callgrind] {name}: idle for {} s", IDLE_WINDOW.as_secs());
    control("-z", pid);
    let started = Instant::now();
    std::thread::sleep(IDLE_WINDOW);
    let idle_window = started.elapsed();
    control("-d", pid);
    let idle = parse(&newest_dump(&plan.out, &prefix, pid));

    eprintln!("[callgrind] {name}: {} streams of {} events", plan.streams, plan.schedule.events);
    control("-z", pid);
    let started = Instant::now();
    let results = rt.block_on(load::stream_round(target.addr, plan.streams, plan.schedule));
    records += results.iter().filter(|r| !r.failed).count();
    settle(&target, pid, records);
    let stream_window = started.elapsed();
    control("-d", pid);
    let stream = parse(&newest_dump(&plan.out, &prefix, pid));
    let events = results.iter().map(|r| r.latencies_us.len()).sum();
    let failed_streams = results.iter().filter(|r| r.failed).count();

    eprintln!("[callgrind] {name}: {} non-streaming requests", plan.requests);
    control("-z", pid);
    let started = Instant::now();
    // 100 requests/s over 8 kept-alive connections: slow enough that the instrumented proxy keeps up.
    let rate = 100.0;
    let seconds = plan.requests as f64 / rate;
    let result = rt.block_on(load::open_loop(target.addr, rate, Duration::from_secs_f64(seconds), 8));
    records += result.latencies_us.len();
    settle(&target, pid, records);
    let request_window = started.elapsed();
    control("-d", pid);
    let request = parse(&newest_dump(&plan.out, &prefix, pid));
    drop(target);
    let idle_per_s = idle.total as f64 / idle_window.as_secs_f64();
    Measured {
        arm: name,
        events,
        failed_streams,
        stream_less_idle: less_idle(stream.total, idle_per_s, stream_window),
        stream,
        requests: result.latencies_us.len(),
        failed_requests: result.failed,
        request_less_idle: less_idle(request.total, idle_per_s, request_window),
        request,
        idle_per_s,
    }
}

pub(crate) fn run(
    rt: &tokio::runtime::Runtime,
    arms: &[Arm],
    upstream: SocketAddr,
    core: usize,
    plan: &Plan,
) -> String {
    std::fs::create_dir_all(&plan.out).expect("create the callgrind directory");
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Run of {} ({}), each proxy pinned to core {core} under `valgrind --tool=callgrind`, one at a time:",
        crate::table::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        crate::table::command_output("valgrind", &["--version"]),
    );
    for arm in arms {
        match arm {
            Arm::Direct => {}
            Arm::Nginx { bin } => {
                let _ = writeln!(
                    s,
                    "- nginx: `{}` ({}), one worker, `proxy_buffering off`, keep-alive upstream, access log on.",
                    bin.display(),
                    crate::table::command_output(&bin.display().to_string(), &["-v"])
                );
            }
            Arm::Tokentap { bin, recording, pingora_relay, .. } => {
                let how = match (*recording, *pingora_relay) {
                    (true, false) => "recording and analysis on (defaults)",
                    (true, true) => "recording and analysis on, `[connections] relay = \"pingora\"`",
                    (false, _) => "`[timeline] enabled = false`",
                };
                let _ = writeln!(s, "- {}: `{}`, `threads = 1`, {how}.", arm.name(), bin.display());
            }
        }
    }
    let measured: Vec<Measured> =
        arms.iter().filter(|a| !matches!(a, Arm::Direct)).map(|a| measure(rt, a, upstream, core, plan)).collect();
    s.push('\n');
    s.push_str(&table(&measured, plan));
    s
}

fn per(cost: u64, n: usize) -> String {
    if n == 0 {
        return "–".into();
    }
    thousands((cost as f64 / n as f64).round() as u64)
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A demangled name without its hash suffix and generic noise, shortened for a table cell.
fn short(name: &str) -> String {
    let name = match name.rfind("::h") {
        Some(i) if name[i + 3..].chars().all(|c| c.is_ascii_hexdigit()) && name.len() - i == 19 => &name[..i],
        _ => name,
    };
    let name = name.replace('|', "\\|");
    if name.chars().count() > 110 {
        format!("{}…", name.chars().take(110).collect::<String>())
    } else {
        name
    }
}

fn table(measured: &[Measured], plan: &Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Instructions (valgrind callgrind, `Ir`: user space only, all threads) per streamed event ({} streams of {} \
events, {} ms apart; the streams' request and record work counted in) and per non-streaming request (100 \
requests/s over 8 kept-alive connections), from the zeroed counters after a warm-up to the proxy's idle \
after the round; \"less idle\": the same less the instructions the proxy runs by the clock alone \
(measured over a {} s idle window after the warm-up) for as long as the window lasted.\n",
        plan.streams,
        plan.schedule.events,
        plan.schedule.gap.as_millis(),
        IDLE_WINDOW.as_secs()
    );
    let _ = writeln!(
        s,
        "| arm | instructions per event | less idle | events (failed streams) | instructions per request | less idle \
| requests (failed) | idle instructions per second |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    for m in measured {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} ({}) | {} | {} | {} ({}) | {} |",
            m.arm,
            per(m.stream.total, m.events),
            per(m.stream_less_idle, m.events),
            m.events,
            m.failed_streams,
            per(m.request.total, m.requests),
            per(m.request_less_idle, m.requests),
            m.requests,
            m.failed_requests,
            thousands(m.idle_per_s.round() as u64)
        );
    }
    for m in measured {
        for (what, profile, n) in [("event", &m.stream, m.events), ("request", &m.request, m.requests)] {
            let _ = writeln!(s, "\n{}, per {what}: the top {} functions by own instructions\n", m.arm, plan.top);
            let _ = writeln!(s, "| function | own instructions per {what} | share |");
            let _ = writeln!(s, "|---|---|---|");
            let mut rows: Vec<(&String, &u64)> = profile.self_cost.iter().collect();
            rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            for (name, cost) in rows.into_iter().take(plan.top) {
                let share = 100.0 * *cost as f64 / profile.total.max(1) as f64;
                let _ = writeln!(s, "| `{}` | {} | {share:.1} % |", short(name), per(*cost, n));
            }
            let picked: Vec<_> = plan
                .inclusive
                .iter()
                .filter_map(|needle| {
                    let cost: u64 = profile
                        .inclusive
                        .iter()
                        .filter(|(name, _)| name.contains(needle.as_str()))
                        .map(|(_, c)| *c)
                        .max()?;
                    Some((needle, cost))
                })
                .collect();
            if !picked.is_empty() {
                let _ = writeln!(s, "\n| including what it calls | instructions per {what} | share |");
                let _ = writeln!(s, "|---|---|---|");
                for (needle, cost) in picked {
                    let share = 100.0 * cost as f64 / profile.total.max(1) as f64;
                    let _ = writeln!(s, "| `{needle}` | {} | {share:.1} % |", per(cost, n));
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_and_inclusive_costs_come_apart_at_calls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        std::fs::write(
            &path,
            "events: Ir\nsummary: 100\nfn=(1) main\n3 10\ncalls=1 0\n5 60\n+1 5\nfn=(2) work\n1 60\ncfn=(1)\n\
fn=(1)\n* 25\n",
        )
        .unwrap();
        let p = parse(&path);
        assert_eq!(p.total, 100);
        assert_eq!(p.self_cost["main"], 40);
        assert_eq!(p.inclusive["main"], 100);
        assert_eq!(p.self_cost["work"], 60);
        assert_eq!(short("tokentap::forward::f::h0123456789abcdef"), "tokentap::forward::f");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(less_idle(1_000_000, 100_000.0, Duration::from_millis(2500)), 750_000);
        assert_eq!(less_idle(1_000, 100_000.0, Duration::from_secs(1)), 0);
    }
}
