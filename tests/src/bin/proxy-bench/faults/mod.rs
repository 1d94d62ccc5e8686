//! The fault table: one tokentap (recording on) under a steady streaming load while a fault is
//! injected and then removed. Per fault: the requests sent, how many streams failed or reached
//! their client altered, the records that did not reach disk (or the spans that did not reach the
//! collector), how many of those tokentap counted, and how long it took to recover.
//!
//! Each client checks its stream byte for byte: the upstream stamps each event with its send
//! time, so the client rebuilds the exact body the upstream wrote from the stamps it read and
//! compares (a dropped, duplicated, reordered or changed byte shows).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use tokentap_e2e::process::Proc;
use tokentap_e2e::{http1, ReservedReceiver};

use crate::load::{chunk_event, Schedule, STAMP_DIGITS, STAMP_MARKER};

/// One fault the table covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The collector refuses connections for a while, then comes up.
    CollectorDown,
    /// The collector accepts TCP connections and never answers, for the whole run.
    CollectorSilent,
    /// The data dir's file system fills up, then space frees.
    DiskFull,
    /// The data dir is deleted while tokentap runs.
    StoreRemoved,
    /// The record worker panics on some requests (a test-only hook).
    WorkerPanic,
    /// SIGTERM while streams are in flight.
    Sigterm,
    /// Clients that send one request on a kept-alive connection and then nothing, or trickle the
    /// next head a byte a second.
    KeepaliveSlowloris,
    /// `records.jsonl` replaced by a symbolic link to a file elsewhere, then removed.
    JournalSymlink,
    /// `records.jsonl` replaced by a FIFO nobody reads, then removed.
    JournalFifo,
    /// A line that is not UTF-8 appended to `records.jsonl` (a torn write); then the report and a
    /// restart read the journal back.
    JournalTornLine,
    /// Browser-style WebSocket sessions with the API key in `Sec-WebSocket-Protocol`, logging at
    /// `trace`.
    SubprotocolKey,
    /// Connections to the admin listener that send nothing, or trickle a head a byte a second.
    AdminSlowloris,
    /// One request whose chunked body is millions of one-byte chunks.
    OneByteRequest,
    /// One response whose chunked body is millions of one-byte chunks.
    OneByteResponse,
}

impl Fault {
    pub(crate) const ALL: [Fault; 14] = [
        Fault::CollectorDown,
        Fault::CollectorSilent,
        Fault::DiskFull,
        Fault::StoreRemoved,
        Fault::WorkerPanic,
        Fault::Sigterm,
        Fault::KeepaliveSlowloris,
        Fault::JournalSymlink,
        Fault::JournalFifo,
        Fault::JournalTornLine,
        Fault::SubprotocolKey,
        Fault::AdminSlowloris,
        Fault::OneByteRequest,
        Fault::OneByteResponse,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Fault::CollectorDown => "collector-down",
            Fault::CollectorSilent => "collector-silent",
            Fault::DiskFull => "disk-full",
            Fault::StoreRemoved => "store-removed",
            Fault::WorkerPanic => "worker-panic",
            Fault::Sigterm => "sigterm",
            Fault::KeepaliveSlowloris => "keepalive-slowloris",
            Fault::JournalSymlink => "journal-symlink",
            Fault::JournalFifo => "journal-fifo",
            Fault::JournalTornLine => "journal-torn-line",
            Fault::SubprotocolKey => "subprotocol-key",
            Fault::AdminSlowloris => "admin-slowloris",
            Fault::OneByteRequest => "one-byte-request",
            Fault::OneByteResponse => "one-byte-response",
        }
    }

    /// `all`, or a comma-separated list of names.
    pub(crate) fn parse_list(text: &str) -> Result<Vec<Fault>, String> {
        if text == "all" {
            return Ok(Fault::ALL.to_vec());
        }
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|name| {
                Fault::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| {
                    let names: Vec<_> = Fault::ALL.iter().map(|f| f.name()).collect();
                    format!("unknown fault {name:?}; one of: all, {}", names.join(", "))
                })
            })
            .collect()
    }

    /// What the fault is, for the table.
    fn description(self, plan: &Plan) -> String {
        let (during, after) = (plan.during.as_secs(), plan.after.as_secs());
        match self {
            Fault::CollectorDown => format!("collector refuses connections for {during} s, then starts"),
            Fault::CollectorSilent => "collector accepts TCP and never answers (whole run)".into(),
            Fault::DiskFull => format!("data dir's file system full for {during} s, then {after} s with space"),
            Fault::StoreRemoved => "data dir deleted (`rm -r`) mid-run".into(),
            Fault::WorkerPanic => format!("record worker panics on {} requests in {during} s", plan.panics),
            Fault::Sigterm => format!("SIGTERM with {} streams half-way", plan.streams),
            Fault::KeepaliveSlowloris => format!(
                "{ATTACKERS} connections send one request, then half stay silent and half trickle the next head at 1 byte/s \
(`keepalive_idle_s` = `head_timeout_s` = {SLOWLORIS_TIMEOUT_S})"
            ),
            Fault::JournalSymlink => {
                format!("records.jsonl replaced by a symlink to a file outside the data dir for {during} s, then removed")
            }
            Fault::JournalFifo => format!("records.jsonl replaced by a FIFO nobody reads for {during} s, then removed"),
            Fault::JournalTornLine => "a line that is not UTF-8 appended to records.jsonl mid-run; then `tokentap report` and a restart".into(),
            Fault::SubprotocolKey => format!(
                "{WS_SESSIONS} WebSocket sessions with the key in `Sec-WebSocket-Protocol` (`TOKENTAP_LOG=trace`)"
            ),
            Fault::AdminSlowloris => format!(
                "{ATTACKERS} connections to the admin listener: half send nothing, half trickle a head at 1 byte/s \
(`admin_head_timeout_s` = {ADMIN_HEAD_TIMEOUT_S}, `admin_max_connections` at its default)"
            ),
            Fault::OneByteRequest => format!(
                "one request whose chunked body is {FLOOD_CHUNKS} one-byte chunks, to an upstream that reads it all \
(`max_kept_bytes` = {} MiB)",
                FLOOD_BUDGET >> 20
            ),
            Fault::OneByteResponse => format!(
                "one response whose chunked body is {FLOOD_CHUNKS} one-byte chunks (`max_kept_bytes` = {} MiB)",
                FLOOD_BUDGET >> 20
            ),
        }
    }
}

/// The load and the phases of one fault run.
#[derive(Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) streams: usize,
    pub(crate) schedule: Schedule,
    pub(crate) before: Duration,
    pub(crate) during: Duration,
    pub(crate) after: Duration,
    /// Requests sent to the panicking path during the worker-panic fault.
    pub(crate) panics: u64,
}

/// One row of the fault table.
pub(crate) struct FaultRow {
    fault: Fault,
    description: String,
    /// Streams started (and, for worker-panic, the panicking requests).
    sent: u64,
    /// Streams that did not complete for their client (cut, refused).
    failed: u64,
    /// Streams complete but not byte-exact.
    altered: u64,
    /// Records (or spans, for the collector faults) that should exist.
    expected: u64,
    /// Of those, not on disk (or not at the collector).
    lost: u64,
    /// What tokentap counted for them (its own counters).
    counted: String,
    recovery: String,
    note: String,
}

mod clients;
mod collector;
mod flood;
mod store;
mod streams;
mod target;
mod worker;

use clients::{
    admin_slowloris, keepalive_slowloris, subprotocol_key, ADMIN_HEAD_TIMEOUT_S, ATTACKERS, SLOWLORIS_TIMEOUT_S,
    WS_SESSIONS,
};
use collector::collector;
use flood::{one_byte_flood, Direction, FLOOD_BUDGET, FLOOD_CHUNKS};
use store::{disk_full, journal_replaced, journal_torn_line, store_removed};
use streams::*;
use target::*;
use worker::{sigterm, worker_panic};

fn show(d: Option<Duration>, limit: Duration) -> String {
    d.map_or(format!("not within {} s", limit.as_secs()), |d| format!("{:.2} s", d.as_secs_f64()))
}

/// Runs each fault with a fresh tokentap and returns the table's rows.
pub(crate) fn run(
    rt: &tokio::runtime::Runtime,
    bin: &Path,
    upstream: SocketAddr,
    faults: &[Fault],
    plan: Plan,
) -> Vec<FaultRow> {
    let mut rows = Vec::new();
    for &fault in faults {
        eprintln!("[faults] {}", fault.name());
        let row = match fault {
            Fault::CollectorDown | Fault::CollectorSilent => rt.block_on(collector(bin, upstream, fault, plan)),
            Fault::DiskFull => rt.block_on(disk_full(bin, upstream, plan)),
            Fault::StoreRemoved => rt.block_on(store_removed(bin, upstream, plan)),
            Fault::WorkerPanic => rt.block_on(worker_panic(bin, upstream, plan)),
            Fault::Sigterm => rt.block_on(sigterm(bin, upstream, plan)),
            Fault::KeepaliveSlowloris => rt.block_on(keepalive_slowloris(bin, upstream, plan)),
            Fault::JournalSymlink | Fault::JournalFifo => rt.block_on(journal_replaced(bin, upstream, fault, plan)),
            Fault::JournalTornLine => rt.block_on(journal_torn_line(bin, upstream, plan)),
            Fault::SubprotocolKey => rt.block_on(subprotocol_key(bin, upstream, plan)),
            Fault::AdminSlowloris => rt.block_on(admin_slowloris(bin, upstream, plan)),
            Fault::OneByteRequest => rt.block_on(one_byte_flood(bin, upstream, Direction::Request, plan)),
            Fault::OneByteResponse => rt.block_on(one_byte_flood(bin, upstream, Direction::Response, plan)),
        };
        eprintln!(
            "[faults] {}: {} sent, {} failed, {} altered, {} lost of {}",
            fault.name(),
            row.sent,
            row.failed,
            row.altered,
            row.lost,
            row.expected
        );
        rows.push(row);
    }
    rows
}

/// The phases shared by most faults: load for `before`, `inject`, `during`, `remove`, `after`;
/// then the load stops and the pipeline settles. Returns the stream tally.
async fn phases<I, R>(target: &Target, plan: Plan, inject: I, remove: R) -> [u64; 4]
where
    I: std::future::Future<Output = ()>,
    R: std::future::Future<Output = ()>,
{
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let tasks = spawn_load(target.addr, &plan, &stop, &tally);
    tokio::time::sleep(plan.before).await;
    inject.await;
    tokio::time::sleep(plan.during).await;
    remove.await;
    tokio::time::sleep(plan.after).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    settle(target.admin).await;
    tally.get()
}

fn row(fault: Fault, plan: &Plan, tally: [u64; 4]) -> FaultRow {
    let [exact, altered, cut, refused] = tally;
    FaultRow {
        fault,
        description: fault.description(plan),
        sent: exact + altered + cut + refused,
        failed: cut + refused,
        altered,
        expected: 0,
        lost: 0,
        counted: String::new(),
        recovery: "–".into(),
        note: String::new(),
    }
}

/// Records that reached tokentap: every stream that got a response head.
fn proxied(tally: [u64; 4]) -> u64 {
    tally[0] + tally[1] + tally[2]
}

/// The fault table (markdown).
pub(crate) fn table(rows: &[FaultRow], plan: &Plan) -> String {
    let mut out = format!(
        "Faults: {} concurrent streams ({} events, {} ms apart, each replaced as it ends); {} s of load, the fault, {} s, removal, {} s.\n\
Every stream is checked byte for byte against what the upstream wrote. \"Lost\" = records not on disk (collector faults: \
requests whose trace never reached the collector); \"counted\" = what tokentap's own counters say about them.\n\n",
        plan.streams,
        plan.schedule.events,
        plan.schedule.gap.as_millis(),
        plan.before.as_secs(),
        plan.during.as_secs(),
        plan.after.as_secs()
    );
    out.push_str(
        "| fault | what | requests | failed | bytes altered | lost / expected | counted | recovery | note |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} / {} | {} | {} | {} |\n",
            r.fault.name(),
            r.description,
            r.sent,
            r.failed,
            r.altered,
            r.lost,
            r.expected,
            r.counted,
            r.recovery,
            r.note
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(stamps: &[u64]) -> Vec<u8> {
        let body = expected_body(stamps);
        let mut raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for piece in body.chunks(37) {
            raw.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            raw.extend_from_slice(piece);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\n");
        raw
    }

    #[test]
    fn judges_exact_altered_cut_and_refused() {
        let stamps = [11_111, 22_222, 33_333];
        let raw = wire(&stamps);
        assert_eq!(judge(&raw, 3), Outcome::Exact);
        let mut changed = raw.clone();
        let at = changed.windows(4).position(|w| w == b" tok").expect("content");
        changed[at + 1] = b'T';
        assert_eq!(judge(&changed, 3), Outcome::Altered);
        assert_eq!(judge(&raw, 4), Outcome::Altered, "an event missing");
        assert_eq!(judge(&raw[..raw.len() - 5], 3), Outcome::Cut);
        assert_eq!(judge(b"", 3), Outcome::Refused);
        assert_eq!(judge(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n", 3), Outcome::Cut);
    }

    #[test]
    fn fault_names_parse() {
        assert_eq!(Fault::parse_list("all").unwrap().len(), Fault::ALL.len());
        assert_eq!(Fault::parse_list("journal-fifo").unwrap(), vec![Fault::JournalFifo]);
        assert_eq!(Fault::parse_list("disk-full,sigterm").unwrap(), vec![Fault::DiskFull, Fault::Sigterm]);
        assert!(Fault::parse_list("meteor").is_err());
    }
}
