//! The store faults: a full file system, the data dir removed, the journal's path replaced by a
//! link or a FIFO, a torn line read back.

use super::*;

/// Mounts a small tmpfs at `dir` (root only); false when that is not possible here.
pub(super) fn mount_tmpfs(dir: &Path, size_mib: u64) -> bool {
    std::fs::create_dir_all(dir).is_ok()
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success())
}

/// Writes `path` until the file system is full.
pub(super) fn fill(path: &Path) {
    use std::io::Write;
    let Ok(mut file) = std::fs::File::create(path) else { return };
    let block = vec![0u8; 1 << 20];
    while file.write_all(&block).is_ok() {}
    // The last partial block: fill what remains byte by byte in smaller writes.
    let small = vec![0u8; 4096];
    while file.write_all(&small).is_ok() {}
    while file.write_all(&[0]).is_ok() {}
    let _ = file.flush();
}

pub(super) async fn disk_full(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    if !mount_tmpfs(&data, 256) {
        let mut out = row(Fault::DiskFull, &plan, [0; 4]);
        out.note = "skipped: mounting a tmpfs for the data dir needs root".into();
        return out;
    }
    let target = start(bin, dir.path(), &data, upstream, "", &[]);
    let filler = data.join("filler");
    let recovered: std::sync::Mutex<Option<Duration>> = std::sync::Mutex::new(None);
    let health_ok: std::sync::Mutex<Option<Duration>> = std::sync::Mutex::new(None);
    let admin = target.admin;
    let tally = phases(
        &target,
        plan,
        async {
            let filler = filler.clone();
            let _ = tokio::task::spawn_blocking(move || fill(&filler)).await;
        },
        async {
            let _ = std::fs::remove_file(&filler);
            let written_then = count(&health(admin).await, &["records", "written"]);
            let begin = Instant::now();
            let took = wait_health(admin, plan.after, |h| count(h, &["records", "written"]) > written_then).await;
            *recovered.lock().expect("recovery") = took;
            let ok = wait_health(admin, plan.after, |h| h["status"] == "ok").await.map(|_| begin.elapsed());
            *health_ok.lock().expect("recovery") = ok;
        },
    )
    .await;
    let h = health(admin).await;
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let mut out = row(Fault::DiskFull, &plan, tally);
    out.expected = proxied(tally);
    out.lost = out.expected.saturating_sub(records);
    out.counted = format!("store_errors {}", count(&h, &["records", "store_errors"]));
    out.recovery = format!(
        "{} (space freed → next record on disk); health `ok` again after {}",
        show(*recovered.lock().expect("recovery"), plan.after),
        show(*health_ok.lock().expect("recovery"), plan.after)
    );
    out.note = format!(
        "unreadable lines on disk after recovery: {unreadable}; health `degraded` while full; the records missing from disk stay in memory (ring, feed)"
    );
    drop(target);
    let _ = Command::new("umount").arg(&data).status();
    out
}

pub(super) async fn store_removed(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let target = start(bin, dir.path(), &data, upstream, "", &[]);
    let admin = target.admin;
    let written_at_removal = std::sync::Mutex::new(0u64);
    let recovered: std::sync::Mutex<Option<Duration>> = std::sync::Mutex::new(None);
    let tally = phases(
        &target,
        plan,
        async {
            *written_at_removal.lock().expect("count") = count(&health(admin).await, &["records", "written"]);
            let _ = std::fs::remove_dir_all(&data);
            let took = wait_health(admin, plan.during, |h| count(h, &["records", "journal_recreated"]) > 0).await;
            *recovered.lock().expect("recovery") = took;
        },
        async {},
    )
    .await;
    let h = health(admin).await;
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let written_after = count(&h, &["records", "written"]).saturating_sub(*written_at_removal.lock().expect("count"));
    let mut out = row(Fault::StoreRemoved, &plan, tally);
    out.expected = written_after;
    out.lost = written_after.saturating_sub(records);
    out.counted = format!(
        "journal_gap {}, journal_recreated {}",
        count(&h, &["records", "journal_gap"]),
        count(&h, &["records", "journal_recreated"])
    );
    out.recovery = format!("{} (removal → journal recreated)", show(*recovered.lock().expect("recovery"), plan.during));
    out.note = format!(
        "expected = records written after the removal; the {} written before it went with the deleted dir; unreadable lines: {unreadable}",
        *written_at_removal.lock().expect("count")
    );
    out
}

pub(super) async fn journal_replaced(bin: &Path, upstream: SocketAddr, fault: Fault, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let outside = dir.path().join("outside.jsonl");
    std::fs::write(&outside, b"").expect("outside file");
    let target = start(bin, dir.path(), &data, upstream, "", &[]);
    let admin = target.admin;
    let journal = data.join("records.jsonl");
    let degraded: std::sync::Mutex<(Option<Duration>, String)> = Default::default();
    let recovered: std::sync::Mutex<Option<Duration>> = Default::default();
    let tally = phases(
        &target,
        plan,
        async {
            let _ = std::fs::remove_file(&journal);
            if fault == Fault::JournalSymlink {
                std::os::unix::fs::symlink(&outside, &journal).expect("symlink");
            } else {
                let made = Command::new("mkfifo").arg(&journal).status();
                assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
            }
            let took = wait_health(admin, plan.during, |h| h["status"] == "degraded").await;
            let problem = health(admin).await["problem"].as_str().unwrap_or("").to_string();
            *degraded.lock().expect("degraded") = (took, problem);
        },
        async {
            let written_then = count(&health(admin).await, &["records", "written"]);
            let _ = std::fs::remove_file(&journal);
            let took = wait_health(admin, plan.after, |h| {
                count(h, &["records", "written"]) > written_then && h["status"] == "ok"
            })
            .await;
            *recovered.lock().expect("recovery") = took;
        },
    )
    .await;
    let h = health(admin).await;
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let mut out = row(fault, &plan, tally);
    out.expected = proxied(tally);
    out.lost = out.expected.saturating_sub(records);
    out.counted = format!(
        "store_errors {}, journal_gap {}",
        count(&h, &["records", "store_errors"]),
        count(&h, &["records", "journal_gap"])
    );
    out.recovery = format!(
        "{} (path freed → next record on disk, health `ok`)",
        show(*recovered.lock().expect("recovery"), plan.after)
    );
    let (took, problem) = degraded.lock().expect("degraded").clone();
    out.note = format!(
        "health `degraded` {} after the swap (\"{problem}\"); bytes written outside the data dir: {}; unreadable lines: {unreadable}",
        show(took, plan.during),
        std::fs::metadata(&outside).map_or(0, |m| m.len())
    );
    out
}

pub(super) async fn journal_torn_line(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let target = start(bin, dir.path(), &data, upstream, "", &[]);
    let journal = data.join("records.jsonl");
    let tally = phases(
        &target,
        plan,
        async {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new().append(true).open(&journal).expect("journal");
            let _ = file.write_all(b"{\"record_version\":1,\"request_id\":\"torn-\xff\xfe\",\"path\":\"/v1/chat\n");
        },
        async {},
    )
    .await;
    drop(target);
    let report =
        Command::new(bin).args(["report", "--json", "--data-dir"]).arg(&data).output().expect("run tokentap report");
    let json: Value = serde_json::from_slice(&report.stdout).unwrap_or(Value::Null);
    let stderr = String::from_utf8_lossy(&report.stderr).trim().to_string();
    let reported = count(&json, &["records_total"]);
    let restarted = start(bin, dir.path(), &data, upstream, "", &[]);
    let h = health(restarted.admin).await;
    let listed = tokio::task::spawn_blocking({
        let admin = restarted.admin;
        move || {
            let response = http1::get(admin, "/_tokentap/api/requests?limit=10000", &[]);
            let v: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
            v["records"].as_array().map_or(0, |a| a.len() as u64)
        }
    })
    .await
    .unwrap_or(0);
    let mut out = row(Fault::JournalTornLine, &plan, tally);
    out.expected = proxied(tally);
    out.lost = out.expected.saturating_sub(reported);
    out.counted = format!(
        "report: \"{stderr}\" (exit {}); restart: restore_skipped_lines {}",
        report.status.code().unwrap_or(-1),
        count(&h, &["records", "restore_skipped_lines"])
    );
    out.recovery = "n/a (read-back)".into();
    out.note = format!("records in the report: {reported}; restored at restart: {listed}; lost = expected − reported");
    out
}
