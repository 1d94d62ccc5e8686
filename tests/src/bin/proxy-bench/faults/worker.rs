//! The record worker panicking on some requests, and SIGTERM with streams in flight.

use super::*;

pub(super) async fn worker_panic(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let target = start(bin, dir.path(), &data, upstream, "", &[("TOKENTAP_TEST_WORKER_PANIC_PATH", PANIC_PATH)]);
    let admin = target.admin;
    let panic_tally = Arc::new(Tally::default());
    let events = plan.schedule.events;
    let addr = target.addr;
    let recovered: std::sync::Mutex<Option<Duration>> = std::sync::Mutex::new(None);
    let inject = {
        let panic_tally = panic_tally.clone();
        async move {
            let every = plan.during.div_f64(plan.panics.max(1) as f64);
            for _ in 0..plan.panics {
                let tally = panic_tally.clone();
                tokio::spawn(async move { tally.add(checked_stream(addr, PANIC_PATH, events).await) });
                tokio::time::sleep(every).await;
            }
        }
    };
    let tally = phases(&target, plan, async {}, async {
        // Recovery: after the last panic, the next record is written.
        let written_then = count(&health(admin).await, &["records", "written"]);
        let took = wait_health(admin, plan.after, |h| count(h, &["records", "written"]) > written_then).await;
        *recovered.lock().expect("recovery") = took;
    });
    // The panicking requests run during the load's fault window.
    let (tally, ()) = tokio::join!(tally, async {
        tokio::time::sleep(plan.before).await;
        inject.await;
    });
    settle(admin).await;
    let h = health(admin).await;
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let (panic_records, _) = journal_records(&data, PANIC_PATH);
    let panics = panic_tally.get();
    let mut out = row(Fault::WorkerPanic, &plan, tally);
    out.sent += panics.iter().sum::<u64>();
    out.failed += panics[2] + panics[3];
    out.altered += panics[1];
    out.expected = proxied(tally) + proxied(panics);
    out.lost = out.expected.saturating_sub(records + panic_records);
    out.counted = format!("worker_panics {}", count(&h, &["records", "worker_panics"]));
    out.recovery =
        format!("{} (last panic → next record written)", show(*recovered.lock().expect("recovery"), plan.after));
    out.note = format!(
        "lost = the panicking requests' records ({} on disk of {}); every other record on disk: {records} of {}; unreadable lines: {unreadable}",
        panic_records,
        proxied(panics),
        proxied(tally)
    );
    out
}

pub(super) async fn sigterm(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut target = start(bin, dir.path(), &data, upstream, "", &[]);
    // One stream per client, all started together (spread over one gap); the signal comes when
    // they are half-way.
    let tally = Arc::new(Tally::default());
    let addr = target.addr;
    let tasks: Vec<_> = (0..plan.streams)
        .map(|k| {
            let tally = tally.clone();
            let (events, offset) = (plan.schedule.events, plan.schedule.gap.mul_f64(k as f64 / plan.streams as f64));
            tokio::spawn(async move {
                tokio::time::sleep(offset).await;
                tally.add(checked_stream(addr, LOAD_PATH, events).await);
            })
        })
        .collect();
    let stream_time = plan.schedule.gap * plan.schedule.events as u32;
    tokio::time::sleep(stream_time / 2).await;
    let signalled = Instant::now();
    let _ = Command::new("kill").arg("-TERM").arg(target.proc.pid().to_string()).status();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused_new = TcpStream::connect(target.addr).await.is_err();
    for task in tasks {
        let _ = task.await;
    }
    let mut exited = None;
    while signalled.elapsed() < Duration::from_secs(150) {
        if target.proc.try_wait().is_some() {
            exited = Some(signalled.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let tally = tally.get();
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let mut out = row(Fault::Sigterm, &plan, tally);
    out.expected = proxied(tally);
    out.lost = out.expected.saturating_sub(records);
    out.counted = "–".into();
    out.recovery = format!("{} (signal → exit, all recorded)", show(exited, Duration::from_secs(150)));
    out.note = format!(
        "a new connection 100 ms after the signal: {}; unreadable lines: {unreadable}",
        if refused_new { "refused" } else { "accepted" }
    );
    out
}
