//! proxy-bench: what a proxy adds to streamed and non-streamed LLM traffic, side by side.
//!
//! Direct, nginx (`proxy_buffering off`) and one or more tokentap builds (recording on, and one
//! with recording off) are measured against the same in-process upstream. The proxy under test
//! runs pinned to one core; this load generator (upstream and clients, one clock) is pinned to the
//! other. For each level, every proxy is started fresh, and the arms run interleaved, in a rotated
//! order, `--repeats` times. Per event, latency = client arrival − upstream send.
//!
//!   scripts/bench-proxy.sh            # builds, runs the default sweep, writes BENCHMARKS.md
//!   target/release/proxy-bench --levels 1,100 --rates 1000 --repeats 1

mod arm;
mod callgrind;
mod faults;
mod lag;
mod load;
mod machine;
mod soak;
mod table;

use std::path::PathBuf;
use std::time::Duration;

use arm::Arm;
use load::{Schedule, Transport};
use table::{OpenLoopRow, StreamRow};

pub(crate) struct Args {
    levels: Vec<usize>,
    schedule: Schedule,
    repeats: usize,
    rates: Vec<f64>,
    rate_seconds: u64,
    connections: usize,
    tokentaps: Vec<(String, PathBuf)>,
    /// Labels of builds measured once more with pingora's HTTP/1 proxy as the relay.
    pingora_relay: Vec<String>,
    recording_off: bool,
    nginx: Option<PathBuf>,
    /// agentgateway's binary: two more arms, its LLM route and a plain route.
    agentgateway: Option<PathBuf>,
    proxy_core: usize,
    load_core: usize,
    threads: usize,
    /// Minutes of soak (0: no soak; the sweep runs instead).
    soak_minutes: u64,
    soak_streams: usize,
    soak_sample_s: u64,
    /// Faults to run instead of the sweep (empty: none).
    faults: Vec<faults::Fault>,
    fault_streams: usize,
    /// Where callgrind's profiles go (none: no instruction counts; the sweep runs instead).
    callgrind: Option<PathBuf>,
    callgrind_streams: usize,
    callgrind_requests: usize,
    callgrind_top: usize,
    callgrind_inclusive: Vec<String>,
}

const USAGE: &str = "proxy-bench [--levels 1,100,500,1000,2000,5000] [--events 40] [--gap-ms 50] [--repeats 2]
  [--transport sse|websocket]   (how streams travel: SSE responses, or server frames of WebSocket sessions)
  [--rates 100,1000,3000] [--rate-seconds 5] [--connections 64]
  [--tokentap LABEL=PATH]... [--pingora-relay LABEL]... [--recording-off true|false] [--nginx PATH|none]
  [--agentgateway PATH]   (a peer: agentgateway's LLM route and a plain route of it, one worker thread each)
      (--pingora-relay: that build once more with `[connections] relay = \"pingora\"`)
  [--proxy-core 0] [--load-core 1] [--threads 1]
  [--soak-minutes M [--soak-streams 200] [--soak-sample-s 10]]   (the last --tokentap only, instead of the sweep)
  [--faults all|collector-down,collector-silent,disk-full,store-removed,worker-panic,sigterm,
            keepalive-slowloris,journal-symlink,journal-fifo,journal-torn-line,subprotocol-key [--fault-streams 50]]
      (the fault table: the last --tokentap only, instead of the sweep)
  [--callgrind DIR [--callgrind-streams 20] [--callgrind-requests 500] [--callgrind-top 12]
                   [--callgrind-inclusive NAME,NAME]]
      (instructions per event and per request under valgrind's callgrind, every arm but direct,
       instead of the sweep; NAME: substrings of functions whose inclusive cost is listed)";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        levels: vec![1, 100, 500, 1000, 2000, 5000],
        schedule: Schedule { events: 40, gap: Duration::from_millis(50), transport: Transport::Sse },
        repeats: 2,
        rates: vec![100.0, 1000.0, 3000.0],
        rate_seconds: 5,
        connections: 64,
        tokentaps: Vec::new(),
        pingora_relay: Vec::new(),
        recording_off: true,
        nginx: Some(tokentap_e2e::nginx::nginx_bin()),
        agentgateway: None,
        proxy_core: 0,
        load_core: 1,
        threads: 1,
        soak_minutes: 0,
        soak_streams: 200,
        soak_sample_s: 10,
        faults: Vec::new(),
        fault_streams: 50,
        callgrind: None,
        callgrind_streams: 20,
        callgrind_requests: 500,
        callgrind_top: 12,
        callgrind_inclusive: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.into());
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |what: &str| format!("{flag}: {value:?} is not {what}");
        let list =
            |v: &str| v.split(',').filter(|s| !s.is_empty()).map(str::trim).map(str::to_string).collect::<Vec<_>>();
        match flag.as_str() {
            "--levels" => {
                args.levels = list(&value)
                    .iter()
                    .map(|s| s.parse())
                    .collect::<Result<_, _>>()
                    .map_err(|_| bad("a list of counts"))?
            }
            "--events" => args.schedule.events = value.parse().map_err(|_| bad("a count"))?,
            "--transport" => {
                args.schedule.transport = Transport::parse(&value).ok_or_else(|| bad("sse or websocket"))?
            }
            "--gap-ms" => args.schedule.gap = Duration::from_millis(value.parse().map_err(|_| bad("milliseconds"))?),
            "--repeats" => args.repeats = value.parse().map_err(|_| bad("a count"))?,
            "--rates" => {
                args.rates = list(&value)
                    .iter()
                    .map(|s| s.parse())
                    .collect::<Result<_, _>>()
                    .map_err(|_| bad("a list of rates"))?
            }
            "--rate-seconds" => args.rate_seconds = value.parse().map_err(|_| bad("seconds"))?,
            "--connections" => args.connections = value.parse().map_err(|_| bad("a count"))?,
            "--tokentap" => {
                let (label, path) = value.split_once('=').ok_or_else(|| bad("LABEL=PATH"))?;
                args.tokentaps.push((label.to_string(), PathBuf::from(path)));
            }
            "--pingora-relay" => args.pingora_relay.push(value.clone()),
            "--recording-off" => args.recording_off = value.parse().map_err(|_| bad("true or false"))?,
            "--nginx" => args.nginx = (value != "none").then(|| PathBuf::from(&value)),
            "--agentgateway" => args.agentgateway = Some(PathBuf::from(&value)),
            "--proxy-core" => args.proxy_core = value.parse().map_err(|_| bad("a core number"))?,
            "--load-core" => args.load_core = value.parse().map_err(|_| bad("a core number"))?,
            "--threads" => args.threads = value.parse().map_err(|_| bad("a count"))?,
            "--soak-minutes" => args.soak_minutes = value.parse().map_err(|_| bad("minutes"))?,
            "--soak-streams" => args.soak_streams = value.parse().map_err(|_| bad("a count"))?,
            "--soak-sample-s" => args.soak_sample_s = value.parse().map_err(|_| bad("seconds"))?,
            "--faults" => args.faults = faults::Fault::parse_list(&value)?,
            "--fault-streams" => args.fault_streams = value.parse().map_err(|_| bad("a count"))?,
            "--callgrind" => args.callgrind = Some(PathBuf::from(&value)),
            "--callgrind-streams" => args.callgrind_streams = value.parse().map_err(|_| bad("a count"))?,
            "--callgrind-requests" => args.callgrind_requests = value.parse().map_err(|_| bad("a count"))?,
            "--callgrind-top" => args.callgrind_top = value.parse().map_err(|_| bad("a count"))?,
            "--callgrind-inclusive" => args.callgrind_inclusive = list(&value),
            other => return Err(format!("unknown flag {other}\n{USAGE}")),
        }
    }
    if args.tokentaps.is_empty() {
        args.tokentaps.push(("tokentap".into(), tokentap_e2e::process::bin_dir().join("tokentap")));
    }
    if let Some(label) = args.pingora_relay.iter().find(|l| !args.tokentaps.iter().any(|(t, _)| t == *l)) {
        return Err(format!("--pingora-relay {label}: no --tokentap {label}=PATH"));
    }
    if args.levels.contains(&0) || args.repeats == 0 || args.schedule.events == 0 || args.connections == 0 {
        return Err("levels, repeats, events and connections must be at least 1".into());
    }
    if args.rates.iter().any(|r| !r.is_finite() || *r <= 0.0) {
        return Err("rates must be positive".into());
    }
    Ok(args)
}

fn arms(args: &Args) -> Vec<Arm> {
    let mut arms = vec![Arm::Direct];
    if let Some(bin) = &args.nginx {
        arms.push(Arm::Nginx { bin: bin.clone() });
    }
    if let Some(bin) = &args.agentgateway {
        arms.push(Arm::Agentgateway { bin: bin.clone(), llm: true });
        arms.push(Arm::Agentgateway { bin: bin.clone(), llm: false });
    }
    for (label, bin) in &args.tokentaps {
        arms.push(Arm::Tokentap { label: label.clone(), bin: bin.clone(), recording: true, pingora_relay: false });
        if args.pingora_relay.contains(label) {
            arms.push(Arm::Tokentap { label: label.clone(), bin: bin.clone(), recording: true, pingora_relay: true });
        }
    }
    if args.recording_off {
        // The last build given, with recording off: forwarding only.
        let (label, bin) = args.tokentaps.last().expect("one tokentap");
        arms.push(Arm::Tokentap { label: label.clone(), bin: bin.clone(), recording: false, pingora_relay: false });
    }
    arms
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let cores = machine::cores();
    if cores <= args.proxy_core.max(args.load_core) || args.proxy_core == args.load_core {
        eprintln!("proxy-bench needs two distinct cores (this machine has {cores}); see --proxy-core/--load-core");
        std::process::exit(2);
    }
    let needed = 2 * args.levels.iter().max().copied().unwrap_or(1) as u64 + 256;
    if machine::open_files_limit() < needed {
        eprintln!(
            "the open-files limit is {} but {needed} are needed: run `ulimit -n 65536` first (scripts/bench-proxy.sh does)",
            machine::open_files_limit()
        );
        std::process::exit(2);
    }
    if let Err(e) = machine::pin_self(args.load_core) {
        eprintln!("cannot pin the load generator to core {}: {e}", args.load_core);
        std::process::exit(2);
    }
    load::now_ns();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let upstream = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
        let addr = listener.local_addr().expect("upstream address");
        tokio::spawn(load::upstream(listener, args.schedule));
        addr
    });
    if !args.faults.is_empty() {
        let (_, bin) = args.tokentaps.last().expect("one tokentap").clone();
        let plan = faults::Plan {
            streams: args.fault_streams.max(1),
            schedule: args.schedule,
            before: Duration::from_secs(3),
            during: Duration::from_secs(6),
            after: Duration::from_secs(6),
            panics: 20,
        };
        println!(
            "Command: `{}`\n\nRun of {} on {} cores, tokentap `{}` (threads = 1, recording on, not pinned).\n",
            args_line(),
            table::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            cores,
            bin.display()
        );
        let rows = faults::run(&rt, &bin, upstream, &args.faults, plan);
        println!("{}", faults::table(&rows, &plan));
        return;
    }
    if let Some(out) = &args.callgrind {
        let arms = arms(&args);
        println!("Command: `{}`\n", args_line());
        let plan = callgrind::Plan {
            out: out.clone(),
            streams: args.callgrind_streams.max(1),
            requests: args.callgrind_requests.max(1),
            schedule: args.schedule,
            top: args.callgrind_top,
            inclusive: args.callgrind_inclusive.clone(),
        };
        println!("{}", callgrind::run(&rt, &arms, upstream, args.proxy_core, &plan));
        return;
    }
    if args.soak_minutes > 0 {
        let (label, bin) = args.tokentaps.last().expect("one tokentap").clone();
        let arm = Arm::Tokentap { label, bin, recording: true, pingora_relay: false };
        println!("{}", table::preamble(&args_line(), std::slice::from_ref(&arm), &args));
        let target = arm::start(&arm, upstream, args.proxy_core, args.threads);
        let Some(pid) = target.pid() else { unreachable!("tokentap is a process") };
        let warm = Schedule { events: 3, gap: Duration::from_millis(5), transport: args.schedule.transport };
        let _ = rt.block_on(load::stream_round(target.addr, 1, warm));
        let every = Duration::from_secs(args.soak_sample_s.max(1));
        let samples = soak::run(
            &rt,
            target.addr,
            pid,
            args.soak_streams.max(1),
            args.schedule,
            Duration::from_secs(args.soak_minutes * 60),
            every,
        );
        println!("{}", soak::table(&samples, args.soak_streams, every));
        return;
    }
    let arms = arms(&args);
    println!("{}", table::preamble(&args_line(), &arms, &args));

    let mut stream_rows: Vec<StreamRow> = Vec::new();
    for &level in &args.levels {
        eprintln!("[bench] {level} concurrent streams");
        stream_rows.extend(stream_level(&rt, &args, &arms, upstream, level));
    }
    println!("{}", table::stream_table(&mut stream_rows, &args));

    let mut open_rows: Vec<OpenLoopRow> = Vec::new();
    if !args.rates.is_empty() {
        let running: Vec<_> = arms.iter().map(|a| arm::start(a, upstream, args.proxy_core, args.threads)).collect();
        for &rate in &args.rates {
            eprintln!("[bench] open loop, {rate} requests/s");
            let mut rows: Vec<OpenLoopRow> = arms.iter().map(|a| OpenLoopRow::new(a.name(), rate)).collect();
            for repeat in 0..args.repeats {
                for i in rotated(arms.len(), repeat) {
                    let target = &running[i];
                    let lag_before = target.admin.and_then(lag::LagHistogram::fetch);
                    let window = machine::CpuWindow::start(target.pid());
                    let duration = Duration::from_secs(args.rate_seconds);
                    let result = rt.block_on(load::open_loop(target.addr, rate, duration, args.connections));
                    if let Some(after) = target.admin.and_then(lag::LagHistogram::fetch) {
                        rows[i].add_lag(&after.since(lag_before.as_ref()));
                    }
                    if let Some(pid) = target.pid() {
                        machine::wait_idle(pid, Duration::from_secs(30));
                    }
                    rows[i].add(result, window.stop());
                }
            }
            open_rows.extend(rows);
        }
    }
    if !open_rows.is_empty() {
        println!("{}", table::open_loop_table(&open_rows, &args));
    }
}

/// Arm indices in the order of this repeat: the first arm moves by one each time.
fn rotated(n: usize, repeat: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |k| (k + repeat) % n)
}

fn stream_level(
    rt: &tokio::runtime::Runtime,
    args: &Args,
    arms: &[Arm],
    upstream: std::net::SocketAddr,
    level: usize,
) -> Vec<StreamRow> {
    let running: Vec<_> = arms.iter().map(|a| arm::start(a, upstream, args.proxy_core, args.threads)).collect();
    let mut rows: Vec<StreamRow> = arms.iter().map(|a| StreamRow::new(a.name(), level)).collect();
    // One short stream through each proxy first, so that what is loaded lazily (the tokenizer's
    // tables) counts in the idle figure, not per stream.
    let warm = Schedule { events: 3, gap: Duration::from_millis(5), transport: args.schedule.transport };
    for (i, target) in running.iter().enumerate() {
        let _ = rt.block_on(load::stream_round(target.addr, 1, warm));
        if let Some(pid) = target.pid() {
            machine::wait_idle(pid, Duration::from_secs(30));
            rows[i].idle_rss_kib = Some(machine::status_kib(pid, "VmRSS:"));
        }
    }
    for repeat in 0..args.repeats {
        for i in rotated(arms.len(), repeat) {
            let target = &running[i];
            // Memory with every stream of the level open: sampled halfway through the first
            // round, before this level has produced any record (the record ring fills later).
            let open_rss = (repeat == 0).then(|| target.pid()).flatten().map(|pid| {
                let at = args.schedule.gap * args.schedule.events as u32 / 2;
                std::thread::spawn(move || {
                    std::thread::sleep(at);
                    machine::status_kib(pid, "VmRSS:")
                })
            });
            let lag_before = target.admin.and_then(lag::LagHistogram::fetch);
            let window = machine::CpuWindow::start(target.pid());
            let results = rt.block_on(load::stream_round(target.addr, level, args.schedule));
            if let Some(after) = target.admin.and_then(lag::LagHistogram::fetch) {
                rows[i].add_lag(&after.since(lag_before.as_ref()));
            }
            if let Some(sampler) = open_rss {
                rows[i].open_rss_kib = sampler.join().ok();
            }
            if let Some(pid) = target.pid() {
                // The record pipeline finishes off the forwarding path: its CPU counts too.
                machine::wait_idle(pid, Duration::from_secs(60));
            }
            rows[i].add(results, window.stop());
        }
    }
    for (i, target) in running.iter().enumerate() {
        if let Some(pid) = target.pid() {
            rows[i].peak_rss_kib = Some(machine::status_kib(pid, "VmHWM:"));
        }
        if let Some(file) = target.records_file() {
            rows[i].self_overhead = table::SelfOverhead::from_journal(&file);
        }
    }
    rows
}

fn args_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("target/release/proxy-bench {}", args.join(" ")).trim_end().to_string()
}
