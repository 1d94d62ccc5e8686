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
//! how long its window lasted. The "less clock" columns leave that out: the threads that run by
//! the clock alone ([`CLOCK_ROOTS`]) are subtracted as counted in the window itself, and what
//! else the process did while idle (its runtime waking for the probe's task), measured over an
//! idle window after the warm-up, is subtracted for the window's length.
//!
//! A window ends when the proxy is quiet again. Under valgrind the clock-driven work alone takes
//! 1–2 % of a core, so "quiet" is measured against the process's own CPU time over the idle
//! window, not a fixed threshold (with 1 % of a core a round waited for minutes, or not, at
//! random, and its window's length was noise).

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

/// Functions that run by the clock alone, each the body of a thread of its own: pingora's timer
/// thread (a tick every millisecond) and tokentap's scheduling-lag probe (one task every
/// 25–75 ms, and the sample's export).
const CLOCK_ROOTS: [&str; 2] =
    ["pingora_timeout::timer::TimerManager::clock_thread", "tokentap::scheduling_lag::probe"];

/// The body of the runtime's thread, where pingora forwards (and tokentap's tasks beside it run:
/// the tail watch), and the body of tokentap's record worker thread.
const RUNTIME_ROOT: &str = "tokio::runtime::scheduler::multi_thread::worker::run";
const RECORD_WORKER_ROOT: &str = "tokentap::pipeline::run_worker";

impl Profile {
    /// A thread body's instructions in this window (the largest inclusive cost of a function of
    /// that name, without the hash suffix: a recursive entry counts once).
    fn root(&self, root: &str) -> u64 {
        self.inclusive.iter().filter(|(name, _)| without_hash(name) == root).map(|(_, c)| *c).max().unwrap_or(0)
    }

    /// Where a tokentap's instructions ran: the forwarding runtime's thread, the record worker's,
    /// the rest (clock threads, the blocking pool). None for a process without a tokio runtime.
    fn threads(&self) -> Option<(u64, u64, u64)> {
        let runtime = self.root(RUNTIME_ROOT);
        if runtime == 0 {
            return None;
        }
        let worker = self.root(RECORD_WORKER_ROOT);
        Some((runtime, worker, self.total.saturating_sub(runtime + worker)))
    }

    /// Instructions the clock-driven threads ran in this window (their functions' inclusive cost,
    /// names compared without the hash suffix).
    fn clock_roots(&self) -> u64 {
        CLOCK_ROOTS
            .iter()
            .map(|root| {
                self.inclusive.iter().filter(|(name, _)| without_hash(name) == *root).map(|(_, c)| *c).sum::<u64>()
            })
            .sum()
    }
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
/// records (the record worker's share counts), and the process is quiet (less than `busy` of CPU
/// per 50 ms). Returns whether both happened in time.
fn settle(target: &arm::Running, pid: u32, records: usize, busy: Duration) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    if let Some(dir) = &target.dir {
        let journal = dir.path().join("data").join("records.jsonl");
        let recording = std::fs::read_to_string(dir.path().join("tokentap.toml"))
            .is_ok_and(|config| !config.contains("enabled = false"));
        let written = || std::fs::read(&journal).map(|b| b.iter().filter(|&&c| c == b'\n').count()).unwrap_or(0);
        while recording && written() < records {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    machine::wait_quiet(pid, deadline.saturating_duration_since(std::time::Instant::now()), busy)
}

/// "Quiet" before the idle rate is known: 5 % of a core (the instrumented proxy's clock-driven
/// work is 1–2 %, its traffic work near 100 %).
const QUIET_BEFORE_IDLE: Duration = Duration::from_micros(2_500);

/// "Quiet" once the idle rate is known: three times the idle CPU time per span, at least
/// [`QUIET_BEFORE_IDLE`].
fn quiet_after_idle(idle_cpu: Duration, idle_window: Duration) -> Duration {
    let spans = idle_window.as_secs_f64() / machine::QUIET_SPAN.as_secs_f64();
    Duration::from_secs_f64(3.0 * idle_cpu.as_secs_f64() / spans.max(1.0)).max(QUIET_BEFORE_IDLE)
}

/// One counted round: its profile, how long its window lasted, and its count less the
/// clock-driven work.
struct Round {
    profile: Profile,
    window: Duration,
    less_clock: u64,
    /// Whether the proxy did the round's work and went quiet before the deadline.
    settled: bool,
}

struct Measured {
    arm: String,
    events: usize,
    failed_streams: usize,
    stream: Round,
    requests: usize,
    failed_requests: usize,
    request: Round,
    /// Instructions per second while idle, all of them and those outside the clock-driven threads.
    idle_per_s: f64,
    idle_rest_per_s: f64,
}

/// How long the idle window lasts (the clock-driven work's rate is taken over it).
const IDLE_WINDOW: Duration = Duration::from_secs(4);

/// A window's count without the clock-driven threads' instructions counted in it and without
/// what else the process does while idle (`idle_rest_per_s`) for as long as the window lasted.
fn less_clock(profile: &Profile, idle_rest_per_s: f64, window: Duration) -> u64 {
    let rest = profile.total.saturating_sub(profile.clock_roots());
    (rest as f64 - idle_rest_per_s * window.as_secs_f64()).max(0.0).round() as u64
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
    if !settle(&target, pid, records, QUIET_BEFORE_IDLE) {
        eprintln!("[callgrind] {name}: the warm-up did not settle; the idle window is not idle");
    }

    eprintln!("[callgrind] {name}: idle for {} s", IDLE_WINDOW.as_secs());
    control("-z", pid);
    let started = Instant::now();
    let cpu_before = machine::cpu_ns(pid);
    std::thread::sleep(IDLE_WINDOW);
    let idle_cpu = Duration::from_nanos(machine::cpu_ns(pid).saturating_sub(cpu_before));
    let idle_window = started.elapsed();
    control("-d", pid);
    let idle = parse(&newest_dump(&plan.out, &prefix, pid));
    if idle.clock_roots() == 0 && idle.total > 4 * IDLE_WINDOW.as_secs() * 10_000 {
        eprintln!("[callgrind] {name}: none of {CLOCK_ROOTS:?} found in the idle profile (inlined?): \"less clock\" leaves only the rest of idle out");
    }
    let busy = quiet_after_idle(idle_cpu, idle_window);
    let idle_per_s = idle.total as f64 / idle_window.as_secs_f64();
    let idle_rest_per_s = idle.total.saturating_sub(idle.clock_roots()) as f64 / idle_window.as_secs_f64();
    eprintln!(
        "[callgrind] {name}: idle {:.0} instructions/s ({:.0} outside the clock's threads), {:.2} % of a core; quiet below {} µs per {} ms",
        idle_per_s,
        idle_rest_per_s,
        100.0 * idle_cpu.as_secs_f64() / idle_window.as_secs_f64(),
        busy.as_micros(),
        machine::QUIET_SPAN.as_millis()
    );
    let mut round = |work: &mut dyn FnMut() -> usize| -> Round {
        control("-z", pid);
        let started = Instant::now();
        records += work();
        let settled = settle(&target, pid, records, busy);
        let window = started.elapsed();
        control("-d", pid);
        let profile = parse(&newest_dump(&plan.out, &prefix, pid));
        if !settled {
            eprintln!("[callgrind] {name}: the round did not settle in time; its count is marked");
        }
        Round { less_clock: less_clock(&profile, idle_rest_per_s, window), profile, window, settled }
    };

    eprintln!("[callgrind] {name}: {} streams of {} events", plan.streams, plan.schedule.events);
    let mut results = Vec::new();
    let stream = round(&mut || {
        results = rt.block_on(load::stream_round(target.addr, plan.streams, plan.schedule));
        results.iter().filter(|r| !r.failed).count()
    });
    let events = results.iter().map(|r| r.latencies_us.len()).sum();
    let failed_streams = results.iter().filter(|r| r.failed).count();

    eprintln!("[callgrind] {name}: {} non-streaming requests", plan.requests);
    // 100 requests/s over 8 kept-alive connections: slow enough that the instrumented proxy keeps up.
    let rate = 100.0;
    let seconds = plan.requests as f64 / rate;
    let mut result = load::OpenLoopResult::default();
    let request = round(&mut || {
        result = rt.block_on(load::open_loop(target.addr, rate, Duration::from_secs_f64(seconds), 8));
        result.latencies_us.len()
    });
    drop(target);
    Measured {
        arm: name,
        events,
        failed_streams,
        stream,
        requests: result.latencies_us.len(),
        failed_requests: result.failed,
        request,
        idle_per_s,
        idle_rest_per_s,
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
            Arm::Agentgateway { bin, .. } => {
                let _ = writeln!(s, "- {}: `{}`, `workerThreads: 1`.", arm.name(), bin.display());
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

/// A demangled name without its hash suffix (`::h` and 16 hex digits).
fn without_hash(name: &str) -> &str {
    match name.rfind("::h") {
        Some(i) if name[i + 3..].chars().all(|c| c.is_ascii_hexdigit()) && name.len() - i == 19 => &name[..i],
        _ => name,
    }
}

/// A demangled name without its hash suffix and generic noise, shortened for a table cell.
fn short(name: &str) -> String {
    let name = without_hash(name).replace('|', "\\|");
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
requests/s over 8 kept-alive connections), from the zeroed counters after a warm-up to the proxy's quiet \
after the round; \"less clock\": the same less the instructions of the threads that run by the clock alone \
(pingora's timer thread, tokentap's scheduling-lag probe) counted in the window, and less what else the \
proxy ran while idle (over a {} s idle window after the warm-up) for as long as the window lasted. ⚠: the \
round did not settle in time.\n",
        plan.streams,
        plan.schedule.events,
        plan.schedule.gap.as_millis(),
        IDLE_WINDOW.as_secs()
    );
    let _ = writeln!(
        s,
        "| arm | instructions per event | less clock | events (failed streams), window s | instructions per request \
| less clock | requests (failed), window s | idle instructions per second (outside the clock's threads) |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    let mark = |r: &Round| if r.settled { "" } else { " ⚠" };
    for m in measured {
        let _ = writeln!(
            s,
            "| {} | {} | {}{} | {} ({}), {:.1} | {} | {}{} | {} ({}), {:.1} | {} ({}) |",
            m.arm,
            per(m.stream.profile.total, m.events),
            per(m.stream.less_clock, m.events),
            mark(&m.stream),
            m.events,
            m.failed_streams,
            m.stream.window.as_secs_f64(),
            per(m.request.profile.total, m.requests),
            per(m.request.less_clock, m.requests),
            mark(&m.request),
            m.requests,
            m.failed_requests,
            m.request.window.as_secs_f64(),
            thousands(m.idle_per_s.round() as u64),
            thousands(m.idle_rest_per_s.round() as u64)
        );
    }
    let _ = writeln!(
        s,
        "\nBy thread (not less clock): the runtime's thread, where pingora forwards (`{RUNTIME_ROOT}`, with the tasks \
that run beside it: the tail watch, the lag probe's wake-ups), tokentap's record worker (`{RECORD_WORKER_ROOT}`), and \
the rest (the clock's threads, the blocking pool). nginx's one worker process does all of its work in one thread.\n"
    );
    let _ = writeln!(
        s,
        "| arm | per event: runtime thread | record worker | rest | per request: runtime thread | record worker | rest |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for m in measured {
        let cells = |profile: &Profile, n: usize| match profile.threads() {
            Some((runtime, worker, rest)) => format!("{} | {} | {}", per(runtime, n), per(worker, n), per(rest, n)),
            None => format!("{} | – | –", per(profile.total, n)),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            m.arm,
            cells(&m.stream.profile, m.events),
            cells(&m.request.profile, m.requests)
        );
    }
    for m in measured {
        for (what, profile, n) in [("event", &m.stream.profile, m.events), ("request", &m.request.profile, m.requests)]
        {
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
        assert_eq!(without_hash("a::b::h0123456789abcdef"), "a::b");
        assert_eq!(without_hash("a::b::hello"), "a::b::hello");
    }

    #[test]
    fn instructions_are_split_by_the_thread_they_ran_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        // Two thread starts: one runs the runtime (70, of which a recursive entry), one the record
        // worker (20); 10 are the starts' own.
        std::fs::write(
            &path,
            "events: Ir\nsummary: 100\nfn=(1) start\n1 10\n\
cfn=(2) tokio::runtime::scheduler::multi_thread::worker::run::h0123456789abcdef\ncalls=1 0\n1 70\n\
cfn=(3) tokentap::pipeline::run_worker\ncalls=1 0\n1 20\n\
fn=(2)\n1 40\ncfn=(2)\ncalls=1 0\n1 30\nfn=(3)\n1 20\n",
        )
        .unwrap();
        let p = parse(&path);
        assert_eq!(p.threads(), Some((70, 20, 10)));
    }

    #[test]
    fn the_clock_driven_threads_are_left_out_as_counted_and_the_rest_of_idle_by_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        // A thread root (`start`) calls pingora's clock thread (30) and a worker (50); the worker
        // calls the lag probe's thread body (10, hash suffix and all). 10 more are the root's own.
        std::fs::write(
            &path,
            "events: Ir\nsummary: 100\nfn=(1) start\n1 10\ncfn=(2) pingora_timeout::timer::TimerManager::clock_thread\n\
calls=1 0\n1 30\ncfn=(3) worker\ncalls=1 0\n1 60\nfn=(2)\n1 30\nfn=(3)\n1 50\n\
cfn=(4) tokentap::scheduling_lag::probe::h0123456789abcdef\ncalls=1 0\n1 10\nfn=(4)\n1 10\n",
        )
        .unwrap();
        let p = parse(&path);
        assert_eq!(p.clock_roots(), 40);
        assert_eq!(p.threads(), None, "no runtime thread in this profile");
        // 60 outside the clock's threads, less 4 a second for 2.5 s.
        assert_eq!(less_clock(&p, 4.0, Duration::from_millis(2500)), 50);
        assert_eq!(less_clock(&p, 100.0, Duration::from_secs(1)), 0);
        let busy = quiet_after_idle(Duration::from_millis(80), Duration::from_secs(4));
        assert_eq!(busy, Duration::from_micros(3_000));
        assert_eq!(quiet_after_idle(Duration::ZERO, Duration::from_secs(4)), QUIET_BEFORE_IDLE);
    }
}
