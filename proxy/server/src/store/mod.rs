//! The local record store: `DATA_DIR/records.jsonl` and `DATA_DIR/turns.jsonl` (append-only,
//! rotated by size), in-memory rings of recent records and turns for the admin API, and a live
//! feed of new ones.

mod journal;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use tokio::sync::broadcast;

use crate::config::StoreConfig;
use tokentap_record::turn::{TurnRecord, TURNS_FILE};
use tokentap_record::Record;

use journal::Journal;

const RECORDS_STEM: &str = "records";
const TURNS_STEM: &str = "turns";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create data directory {path}: {source}")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot serialize a record: {0}")]
    Serialize(#[from] sonic_rs::Error),
}

/// A record together with its JSON line, serialized once.
#[derive(Debug)]
pub(crate) struct StoredRecord {
    pub record: Record,
    pub json: String,
}

impl StoredRecord {
    /// Bytes this entry holds, estimated: its JSON line, and about as much again for the parsed
    /// record (the same strings and numbers, in structs).
    pub(crate) fn footprint(&self) -> usize {
        2 * self.json.len() + std::mem::size_of::<StoredRecord>()
    }
}

/// The recent records, newest last, bounded by count and by bytes.
#[derive(Default)]
struct Ring {
    records: VecDeque<Arc<StoredRecord>>,
    bytes: usize,
}

impl Ring {
    fn push(&mut self, stored: Arc<StoredRecord>, config: &StoreConfig) {
        self.bytes += stored.footprint();
        self.records.push_back(stored);
        self.trim(config);
    }

    /// Replaces the entry with the same request id (or pushes when it has left the ring).
    fn replace(&mut self, stored: Arc<StoredRecord>, config: &StoreConfig) {
        match self.records.iter().rposition(|s| s.record.request_id == stored.record.request_id) {
            Some(i) => {
                self.bytes = self.bytes - self.records[i].footprint() + stored.footprint();
                self.records[i] = stored;
                self.trim(config);
            }
            None => self.push(stored, config),
        }
    }

    /// Oldest first out until both bounds hold (the newest record always stays).
    fn trim(&mut self, config: &StoreConfig) {
        while self.records.len() > 1 && (self.records.len() > config.ring_size || self.bytes > config.ring_max_bytes) {
            if let Some(old) = self.records.pop_front() {
                self.bytes -= old.footprint();
            }
        }
    }
}

pub(crate) struct RecordStore {
    dir: PathBuf,
    config: StoreConfig,
    /// `records.jsonl`. Its counters are updated before the live feed hears of a record, so a
    /// feed subscriber always sees counters that include it.
    pub(crate) records: Journal,
    /// `turns.jsonl`.
    pub(crate) turns: Journal,
    ring: RwLock<Ring>,
    turn_ring: RwLock<TurnRing>,
    feed: broadcast::Sender<FeedItem>,
    /// Lines skipped when the rings were restored at start.
    restore_skipped_lines: u64,
    /// Where records and turns are serialized before their line is copied out at its exact size.
    scratch: Mutex<Vec<u8>>,
}

/// The serialization buffer is kept up to this size between lines (a larger one is let go).
const SCRATCH_KEPT_BYTES: usize = 256 << 10;

/// What the live feed carries: a stored (or updated) request record, or a closed turn.
#[derive(Debug, Clone)]
pub(crate) enum FeedItem {
    Record(Arc<StoredRecord>),
    Turn(Arc<StoredTurn>),
}

/// A turn record with its JSON line, serialized once.
#[derive(Debug)]
pub(crate) struct StoredTurn {
    pub turn: TurnRecord,
    pub json: String,
}

/// The recent turns, newest last, bounded by count (the ring's) and by bytes (an eighth of the
/// ring's).
#[derive(Default)]
struct TurnRing {
    turns: VecDeque<Arc<StoredTurn>>,
    bytes: usize,
}

impl TurnRing {
    /// Replaces the entry with the same turn id (or pushes when it has left the ring).
    fn replace(&mut self, stored: Arc<StoredTurn>, config: &StoreConfig) {
        match self.turns.iter().rposition(|t| t.turn.turn_id == stored.turn.turn_id) {
            Some(i) => {
                self.bytes = self.bytes - 2 * self.turns[i].json.len() + 2 * stored.json.len();
                self.turns[i] = stored;
                self.trim(config);
            }
            None => self.push(stored, config),
        }
    }

    fn push(&mut self, stored: Arc<StoredTurn>, config: &StoreConfig) {
        self.bytes += 2 * stored.json.len();
        self.turns.push_back(stored);
        self.trim(config);
    }

    fn trim(&mut self, config: &StoreConfig) {
        while self.turns.len() > 1 && (self.turns.len() > config.ring_size || self.bytes > config.ring_max_bytes / 8) {
            if let Some(old) = self.turns.pop_front() {
                self.bytes -= 2 * old.json.len();
            }
        }
    }
}

/// The `ring_size` records written last to the journal (the last version of each), as the ring
/// would hold them had tokentap not restarted. Reads
/// the journal's files newest first, one at a time, and stops once the ring is full, so start-up
/// holds at most one file's records besides the ring. Unreadable lines (not a record, not UTF-8)
/// are skipped; returns how many with the ring.
fn rebuild_ring(dir: &Path, config: &StoreConfig) -> (Ring, u64) {
    let ring_size = config.ring_size;
    let mut newest_first: Vec<Record> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut skipped = 0;
    for file in tokentap_report::records_files(dir).iter().rev() {
        if newest_first.len() >= ring_size {
            break;
        }
        let loaded = match tokentap_report::load_files(std::slice::from_ref(file)) {
            Ok(loaded) => loaded,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a journal file; its records are not restored");
                continue;
            }
        };
        skipped += loaded.skipped_lines;
        for record in loaded.records.into_iter().rev() {
            if newest_first.len() >= ring_size {
                break;
            }
            if seen.insert(record.request_id.clone()) {
                newest_first.push(record);
            }
        }
    }
    let mut ring = Ring::default();
    for record in newest_first.into_iter().rev() {
        if let Ok(json) = serde_json::to_string(&record) {
            ring.push(Arc::new(StoredRecord { record, json }), config);
        }
    }
    (ring, skipped)
}

/// Which records a listing returns.
#[derive(Debug, Default, Clone)]
pub(crate) struct RecordFilter {
    pub route: Option<String>,
    pub outcome: Option<String>,
    pub model: Option<String>,
    pub status: Option<u16>,
    /// Only records whose t0 is at or after this Unix time in nanoseconds.
    pub since_unix_ns: Option<u64>,
    /// Only records of this W3C trace.
    pub trace_id: Option<String>,
}

impl RecordFilter {
    pub(crate) fn matches(&self, r: &Record) -> bool {
        self.route.as_ref().is_none_or(|v| *v == r.route)
            && self.outcome.as_ref().is_none_or(|v| v == r.outcome.as_str())
            && self.model.as_ref().is_none_or(|v| Some(v) == r.conditions.model.as_ref())
            && self.status.is_none_or(|v| Some(v) == r.status)
            && self.since_unix_ns.is_none_or(|v| r.timeline.t0_unix_ns >= v)
            && self.trace_id.as_ref().is_none_or(|v| *v == r.trace_id)
    }
}

pub(crate) use tokentap_record::RECORDS_FILE;

impl RecordStore {
    pub(crate) fn open(dir: &Path, config: StoreConfig) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir { path: dir.to_path_buf(), source })?;
        let records = Journal::open(dir, RECORDS_STEM, config.max_file_bytes, config.max_files)?;
        let turns = Journal::open(dir, TURNS_STEM, config.max_file_bytes, config.max_files)?;
        let (feed, _) = broadcast::channel(256);
        let (ring, skipped) = rebuild_ring(dir, &config);
        if !ring.records.is_empty() {
            tracing::info!(
                records = ring.records.len(),
                bytes = ring.bytes,
                "recent records restored from the journal"
            );
        }
        let (turn_ring, turns_skipped) = rebuild_turn_ring(dir, &config);
        let restore_skipped_lines = skipped + turns_skipped;
        if restore_skipped_lines > 0 {
            tracing::warn!(lines = restore_skipped_lines, "unreadable journal lines skipped at restore");
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            ring: RwLock::new(ring),
            turn_ring: RwLock::new(turn_ring),
            config,
            records,
            turns,
            feed,
            restore_skipped_lines,
            scratch: Mutex::new(Vec::with_capacity(16 << 10)),
        })
    }

    /// One JSON line, in a string of its own size: the ring's byte count is what it holds (a
    /// `to_string` grows by doubling and keeps the slack), and the buffer, already grown, costs
    /// no reallocations.
    fn json_line(&self, value: &impl serde::Serialize) -> Result<String, StoreError> {
        let mut scratch = self.scratch.lock();
        scratch.clear();
        // The same bytes serde_json writes (a test compares them), escaped a vector at a time. It
        // writes UTF-8 only; checking it is one pass (no per-chunk decoding).
        let line = sonic_rs::to_writer(&mut *scratch, value).map(|()| {
            std::str::from_utf8(&scratch).map_or_else(|_| String::from_utf8_lossy(&scratch).into_owned(), str::to_owned)
        });
        if scratch.capacity() > SCRATCH_KEPT_BYTES {
            *scratch = Vec::with_capacity(16 << 10);
        }
        Ok(line?)
    }

    /// Journal lines that could not be read back at start (not a record, not UTF-8), skipped.
    pub(crate) fn restore_skipped_lines(&self) -> u64 {
        self.restore_skipped_lines
    }

    pub(crate) fn records_path(&self) -> PathBuf {
        self.dir.join(RECORDS_FILE)
    }

    /// Writes one record (one JSON line), adds it to the ring and the live feed.
    pub(crate) fn append(&self, record: Record) -> Result<(), StoreError> {
        let json = self.json_line(&record)?;
        let stored = Arc::new(StoredRecord { record, json });
        let write_result = self.records.append(&stored.json);
        self.ring.write().push(stored.clone(), &self.config);
        let _ = self.feed.send(FeedItem::Record(stored));
        write_result
    }

    /// Writes one closed turn to `turns.jsonl`, adds it to the turn ring and the live feed.
    pub(crate) fn append_turn(&self, turn: TurnRecord) -> Result<(), StoreError> {
        let json = self.json_line(&turn)?;
        let stored = Arc::new(StoredTurn { turn, json });
        let write_result = self.turns.append(&stored.json);
        self.turn_ring.write().push(stored.clone(), &self.config);
        let _ = self.feed.send(FeedItem::Turn(stored));
        write_result
    }

    /// Writes a newer version of a turn (e.g. with what the browser saw): a new line in
    /// `turns.jsonl`, the ring entry replaced, the live feed told.
    pub(crate) fn update_turn(&self, turn: TurnRecord) -> Result<(), StoreError> {
        let json = self.json_line(&turn)?;
        let stored = Arc::new(StoredTurn { turn, json });
        let write_result = self.turns.rewrite(&stored.json);
        self.turn_ring.write().replace(stored.clone(), &self.config);
        let _ = self.feed.send(FeedItem::Turn(stored));
        write_result
    }

    /// Recent turns, newest first; `conversation` keeps those of one conversation.
    pub(crate) fn recent_turns(&self, conversation: Option<&str>, limit: usize) -> Vec<Arc<StoredTurn>> {
        let ring = self.turn_ring.read();
        ring.turns
            .iter()
            .rev()
            .filter(|t| conversation.is_none_or(|c| t.turn.conversation_id == c))
            .take(limit)
            .cloned()
            .collect()
    }

    pub(crate) fn get_turn(&self, turn_id: &str) -> Option<Arc<StoredTurn>> {
        let ring = self.turn_ring.read();
        ring.turns.iter().rev().find(|t| t.turn.turn_id == turn_id).cloned()
    }

    /// Records appended to the journal since start.
    pub(crate) fn written(&self) -> u64 {
        self.records.written()
    }

    /// Times `records.jsonl` (or `turns.jsonl`) was found removed or replaced and was recreated.
    pub(crate) fn journal_recreated(&self) -> u64 {
        self.records.recreated() + self.turns.recreated()
    }

    /// Lines that went to a removed or replaced journal before tokentap noticed (at most one
    /// check interval's worth each time); they are in the ring and the feed, not on disk.
    pub(crate) fn journal_gap(&self) -> u64 {
        self.records.gap() + self.turns.gap()
    }

    /// Why journal writes are failing now (`None` once one succeeds again).
    pub(crate) fn write_failing(&self) -> Option<String> {
        self.records.failing().or_else(|| self.turns.failing())
    }

    /// Journal writes that failed (the record stays in the ring and the feed).
    pub(crate) fn write_errors(&self) -> u64 {
        self.records.write_errors() + self.turns.write_errors()
    }

    /// Recent records matching `filter`, newest first.
    pub(crate) fn recent(&self, filter: &RecordFilter, limit: usize) -> Vec<Arc<StoredRecord>> {
        let ring = self.ring.read();
        ring.records.iter().rev().filter(|s| filter.matches(&s.record)).take(limit).cloned().collect()
    }

    pub(crate) fn get(&self, request_id: &str) -> Option<Arc<StoredRecord>> {
        let ring = self.ring.read();
        ring.records.iter().rev().find(|s| s.record.request_id == request_id).cloned()
    }

    /// The most recent record of trace `trace_id` whose parent span is `parent_span_id` (the
    /// browser probe's span), or else the most recent record of the trace.
    pub(crate) fn find_by_trace(&self, trace_id: &str, parent_span_id: &str) -> Option<Arc<StoredRecord>> {
        let ring = self.ring.read();
        let mut same_trace = ring.records.iter().rev().filter(|s| s.record.trace_id == trace_id);
        let first = same_trace.next()?;
        if first.record.parent_span_id.as_deref() == Some(parent_span_id) {
            return Some(first.clone());
        }
        same_trace.find(|s| s.record.parent_span_id.as_deref() == Some(parent_span_id)).or(Some(first)).cloned()
    }

    /// The newest record whose request named `trace_id` in the page-trace header (an app server
    /// that did not propagate the page's `traceparent` to its model call).
    pub(crate) fn find_by_page_trace(&self, trace_id: &str) -> Option<Arc<StoredRecord>> {
        let ring = self.ring.read();
        ring.records
            .iter()
            .rev()
            .find(|s| tokentap_record::browser::arrival::page_trace_of(&s.record.request_headers) == Some(trace_id))
            .cloned()
    }

    /// The other end of a multi-hop chain: for an ingress record, the latest egress record whose
    /// parent span is its span; for an egress record, the ingress record whose span is its parent.
    pub(crate) fn find_chain_peer(&self, record: &Record) -> Option<Arc<StoredRecord>> {
        use crate::route::RouteRole;
        let ring = self.ring.read();
        let mut same_trace = ring
            .records
            .iter()
            .rev()
            .filter(|s| s.record.trace_id == record.trace_id && s.record.request_id != record.request_id);
        match record.route_role? {
            RouteRole::Ingress => same_trace.find(|s| {
                s.record.route_role == Some(RouteRole::Egress)
                    && s.record.parent_span_id.as_deref() == Some(record.span_id.as_str())
            }),
            RouteRole::Egress => {
                let parent = record.parent_span_id.as_deref()?;
                same_trace.find(|s| s.record.route_role == Some(RouteRole::Ingress) && s.record.span_id == parent)
            }
        }
        .cloned()
    }

    /// Writes a newer version of a record (e.g. with the browser timeline joined): a new line in the
    /// journal, the ring entry replaced in place, and the live feed told.
    pub(crate) fn update(&self, record: Record) -> Result<(), StoreError> {
        let json = self.json_line(&record)?;
        let stored = Arc::new(StoredRecord { record, json });
        let write_result = self.records.rewrite(&stored.json);
        self.ring.write().replace(stored.clone(), &self.config);
        let _ = self.feed.send(FeedItem::Record(stored));
        write_result
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<FeedItem> {
        self.feed.subscribe()
    }
}

/// The turns written last to `turns.jsonl` (current file, then the newest rotated one), as many
/// as the turn ring holds. Unreadable lines are skipped.
fn rebuild_turn_ring(dir: &Path, config: &StoreConfig) -> (TurnRing, u64) {
    let mut ring = TurnRing::default();
    let mut skipped = 0;
    for name in [format!("{TURNS_STEM}.1.jsonl"), TURNS_FILE.to_owned()] {
        let path = dir.join(&name);
        if !path.exists() {
            continue;
        }
        let read = tokentap_report::for_each_line(&path, |line| {
            let parsed = std::str::from_utf8(line).ok().and_then(|text| {
                let turn = serde_json::from_str::<TurnRecord>(text).ok()?;
                Some(StoredTurn { turn, json: text.to_owned() })
            });
            match parsed {
                Some(stored) => ring.replace(Arc::new(stored), config),
                None => skipped += 1,
            }
        });
        if let Err(e) = read {
            tracing::warn!(error = %e, "cannot read a journal file; its turns are not restored");
        }
    }
    (ring, skipped)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    use super::*;

    fn record(id: &str, route: &str, outcome: &str, t0: u64) -> Record {
        serde_json::from_value(serde_json::json!({
            "record_version": 1, "request_id": id, "trace_id": "0af7651916cd43dd8448eb211c80319c",
            "span_id": "b7ad6b7169203331", "started_at": "2026-01-01T00:00:00Z", "route": route,
            "upstream": "http://x", "method": "POST", "path": "/v1/chat/completions", "status": 200,
            "outcome": outcome, "request_headers": [],
            "conditions": {"request_bytes": 10, "concurrency_at_t0": 0, "warm_up": false, "tokentap_version": "0"},
            "request": {},
            "timeline": {"t0_unix_ns": t0, "chunk_count": 0, "body_bytes": 0, "chunks_truncated": false,
                         "analysis_bytes_truncated": false, "chunks": []},
            "self_overhead": {"hook_time_us": 1.0}
        }))
        .expect("test record")
    }

    fn config(max_file_bytes: u64, ring_size: usize) -> StoreConfig {
        StoreConfig { max_file_bytes, max_files: 2, ring_size, ring_max_bytes: 64 << 20 }
    }

    #[test]
    fn a_journal_that_is_not_a_regular_file_is_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join(RECORDS_FILE)).unwrap();
        let error = RecordStore::open(dir.path(), config(1 << 20, 10)).err().expect("refused");
        assert!(error.to_string().contains("not a regular file"), "{error}");
    }

    #[test]
    fn a_stored_line_is_the_record_as_json_at_its_own_size() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path(), config(1 << 20, 10)).unwrap();
        let mut big = record("big", "/", "ok", 1);
        big.path = "x".repeat(SCRATCH_KEPT_BYTES * 2);
        for record in [record("a", "/", "ok", 0), big, record("b", "/", "ok", 2)] {
            let expected = serde_json::to_string(&record).unwrap();
            store.append(record).unwrap();
            let stored = store.ring.read().records.back().cloned().unwrap();
            assert_eq!(stored.json, expected);
            assert_eq!(stored.json.capacity(), stored.json.len());
            assert!(store.scratch.lock().capacity() <= SCRATCH_KEPT_BYTES, "the buffer is let go after a long line");
        }
    }

    /// The line is written by sonic-rs; readers (and earlier journals) know serde_json's bytes.
    fn assert_same_line_as_serde_json(value: &impl serde::Serialize, store: &RecordStore) {
        let expected = serde_json::to_string(value).unwrap();
        assert_eq!(store.json_line(value).unwrap(), expected);
    }

    #[test]
    fn lines_are_serde_json_bytes_for_every_part_of_a_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path(), config(1 << 20, 10)).unwrap();
        // A streamed answer with its analysis, stamps, diagnosis and a browser timeline joined.
        let streamed = tokentap_record::fixtures::stream_record(40);
        assert!(streamed.analysis.is_some() && !streamed.timeline.chunks.is_empty());
        assert_same_line_as_serde_json(&streamed, &store);
        let browser = tokentap_record::fixtures::smooth_browser(streamed);
        assert!(browser.browser.is_some());
        assert_same_line_as_serde_json(&browser, &store);
        // Floats a record can hold that JSON cannot: serde_json writes null for each.
        let mut odd = record("odd", "/", "ok", 0);
        for (i, value) in
            [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 5e-324, 1e300, 0.1 + 0.2].into_iter().enumerate()
        {
            odd.self_overhead.hook_time_us = value;
            odd.self_overhead.handoff_lag_p99_us = Some(value * i as f64);
            assert_same_line_as_serde_json(&odd, &store);
        }
    }

    mod lines {
        use super::*;
        use proptest::prelude::*;

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                "\\PC{0,40}",
                prop::collection::vec(
                    prop::sample::select(vec![
                        '"', '\\', '/', '\n', '\r', '\t', '\u{0}', '\u{1f}', '\u{7f}', '\u{2028}', 'é', '東', '👍',
                        'a', ' '
                    ]),
                    0..80,
                )
                .prop_map(|chars| chars.into_iter().collect()),
            ]
        }

        proptest! {
            /// Any text in a record's strings and any float in its numbers: the same bytes as
            /// serde_json's.
            #[test]
            fn any_text_and_float_gives_serde_json_bytes(
                path in text(),
                header in (text(), text()),
                body in text(),
                float in any::<f64>(),
                whole in any::<u64>(),
            ) {
                let dir = tempfile::tempdir().unwrap();
                let store = RecordStore::open(dir.path(), config(1 << 20, 10)).unwrap();
                let mut r = record(&path, &body, "ok", whole);
                r.path = path;
                r.request_headers = vec![header.clone(), (body.clone(), header.0)];
                r.self_overhead.hook_time_us = float;
                r.content = Some(tokentap_record::CapturedContent {
                    request_body: body.clone(),
                    request_body_truncated: true,
                    response_body: body,
                    response_body_truncated: false,
                });
                let expected = serde_json::to_string(&r).unwrap();
                prop_assert_eq!(store.json_line(&r).unwrap(), expected);
            }
        }
    }

    #[test]
    fn the_ring_is_bounded_in_bytes_and_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let one = {
            let record = record("x0", "/", "ok", 0);
            let json = serde_json::to_string(&record).unwrap();
            StoredRecord { record, json }.footprint()
        };
        let store =
            RecordStore::open(dir.path(), StoreConfig { ring_max_bytes: 3 * one + one / 2, ..config(1 << 20, 100) })
                .unwrap();
        for i in 0..10 {
            store.append(record(&format!("x{i}"), "/", "ok", i)).unwrap();
        }
        let kept: Vec<String> =
            store.recent(&RecordFilter::default(), 100).iter().map(|s| s.record.request_id.clone()).collect();
        assert_eq!(kept, ["x9", "x8", "x7"]);
        let ring = store.ring.read();
        assert!(
            ring.bytes <= 3 * one + one / 2 && ring.bytes == ring.records.iter().map(|s| s.footprint()).sum::<usize>()
        );
        drop(ring);
        // A record larger than the whole budget still stays, alone, as the newest.
        let store = RecordStore::open(dir.path(), StoreConfig { ring_max_bytes: 1, ..config(1 << 20, 100) }).unwrap();
        assert_eq!(store.recent(&RecordFilter::default(), 100).len(), 1);
    }

    #[test]
    fn a_removed_journal_is_recreated_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut store = RecordStore::open(&data, config(1 << 20, 10)).unwrap();
        store.records.check_every = std::time::Duration::ZERO;
        store.append(record("a", "/", "ok", 1)).unwrap();
        std::fs::remove_dir_all(&data).unwrap();
        store.append(record("b", "/", "ok", 2)).unwrap();
        assert_eq!(store.journal_recreated(), 1);
        let text = std::fs::read_to_string(data.join(RECORDS_FILE)).unwrap();
        assert!(text.contains("\"request_id\":\"b\"") && !text.contains("\"request_id\":\"a\""), "{text}");
        // A replaced file (same name, another inode) is noticed as well.
        std::fs::rename(data.join(RECORDS_FILE), data.join("moved.jsonl")).unwrap();
        std::fs::write(data.join(RECORDS_FILE), b"").unwrap();
        store.append(record("c", "/", "ok", 3)).unwrap();
        assert_eq!(store.journal_recreated(), 2);
        assert!(std::fs::read_to_string(data.join(RECORDS_FILE)).unwrap().contains("\"request_id\":\"c\""));
        // An upper bound: the line written just before each removal was not yet confirmed.
        assert_eq!(store.journal_gap(), 2);
    }

    #[test]
    fn records_written_to_a_removed_journal_between_checks_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut store = RecordStore::open(&data, config(1 << 20, 10)).unwrap();
        store.records.check_every = std::time::Duration::from_secs(3600);
        store.append(record("a", "/", "ok", 1)).unwrap();
        std::fs::remove_dir_all(&data).unwrap();
        store.append(record("b", "/", "ok", 2)).unwrap();
        store.append(record("c", "/", "ok", 3)).unwrap();
        store.records.check_every = std::time::Duration::ZERO;
        store.append(record("d", "/", "ok", 4)).unwrap();
        assert_eq!(store.journal_recreated(), 1);
        // a (before the removal: removed with the file, as the operator asked), b and c.
        assert_eq!(store.journal_gap(), 3);
        assert!(std::fs::read_to_string(data.join(RECORDS_FILE)).unwrap().contains("\"request_id\":\"d\""));
    }

    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo").arg(path).status().expect("run mkfifo");
        assert!(status.success());
    }

    #[test]
    fn a_link_or_a_fifo_in_the_journals_place_is_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere.jsonl");
        std::fs::write(&elsewhere, b"").unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::os::unix::fs::symlink(&elsewhere, data.join(RECORDS_FILE)).unwrap();
        let e = RecordStore::open(&data, config(1 << 20, 10)).err().expect("a symlink is refused");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::remove_file(data.join(RECORDS_FILE)).unwrap();
        mkfifo(&data.join(RECORDS_FILE));
        let e = RecordStore::open(&data, config(1 << 20, 10)).err().expect("a FIFO is refused");
        assert!(e.to_string().contains("FIFO"), "{e}");
        assert_eq!(std::fs::read(&elsewhere).unwrap(), b"");
    }

    #[test]
    fn a_journal_replaced_by_a_link_or_a_fifo_fails_every_write_until_it_is_a_file_again() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere.jsonl");
        std::fs::write(&elsewhere, b"").unwrap();
        let data = dir.path().join("data");
        let mut store = RecordStore::open(&data, config(1 << 20, 10)).unwrap();
        store.records.check_every = std::time::Duration::ZERO;
        store.append(record("a", "/", "ok", 1)).unwrap();
        let path = data.join(RECORDS_FILE);
        // A link: not followed, and nothing goes to the old (unlinked) file either.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let e = store.append(record("b", "/", "ok", 2)).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(store.write_failing().is_some_and(|why| why.contains("symbolic link")));
        store.records.check_every = std::time::Duration::from_secs(3600);
        store.append(record("c", "/", "ok", 3)).unwrap_err();
        assert_eq!(std::fs::read(&elsewhere).unwrap(), b"", "the link was followed");
        // A FIFO with no reader: `open` would block the worker; it fails at once instead.
        std::fs::remove_file(&path).unwrap();
        mkfifo(&path);
        let e = store.append(record("d", "/", "ok", 4)).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        // A FIFO with a reader: `open` would succeed; it is refused by its type.
        let reader = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&path).unwrap();
        let e = store.append(record("e", "/", "ok", 5)).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        drop(reader);
        assert_eq!(store.write_errors(), 4);
        assert_eq!(store.written(), 1);
        // A regular file again: written to at once, and the failure is over.
        std::fs::remove_file(&path).unwrap();
        store.append(record("f", "/", "ok", 6)).unwrap();
        assert!(store.write_failing().is_none());
        assert!(std::fs::read_to_string(&path).unwrap().contains("\"request_id\":\"f\""));
        assert_eq!(store.journal_recreated(), 1);
        // The records that could not be written are still served from memory.
        assert!(["b", "c", "d", "e"].iter().all(|id| store.get(id).is_some()));
    }

    #[test]
    fn a_line_that_is_not_utf8_is_skipped_and_the_others_are_restored() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = RecordStore::open(dir.path(), config(1 << 20, 100)).unwrap();
            for i in 0..10 {
                store.append(record(&format!("r{i}"), "/", "ok", i)).unwrap();
            }
        }
        // One byte of the fourth line is not UTF-8 (a torn write, a bad disk sector).
        let path = dir.path().join(RECORDS_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        let line_starts: Vec<usize> = std::iter::once(0)
            .chain(bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1))
            .collect();
        let at = line_starts[3] + bytes[line_starts[3]..].windows(4).position(|w| w == b"r3\",").unwrap() + 1;
        bytes[at] = 0xff;
        std::fs::write(&path, bytes).unwrap();
        let store = RecordStore::open(dir.path(), config(1 << 20, 100)).unwrap();
        assert_eq!(store.recent(&RecordFilter::default(), 100).len(), 9);
        assert_eq!(store.restore_skipped_lines(), 1);
    }

    #[test]
    fn a_restart_restores_the_newest_records_across_rotated_files() {
        let dir = tempfile::tempdir().unwrap();
        {
            // Small files: the five records spread over records.jsonl and its rotated siblings.
            let store = RecordStore::open(dir.path(), config(1500, 10)).unwrap();
            for i in 0..5 {
                store.append(record(&format!("r{i}"), "/", "ok", i)).unwrap();
            }
            // A newer version of r1 (as when a browser report joins) wins over the first.
            store.update(record("r1", "/joined", "ok", 1)).unwrap();
        }
        assert!(dir.path().join("records.1.jsonl").exists(), "the test needs rotated files");
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(RECORDS_FILE))
            .unwrap()
            .write_all(b"{half a line\n")
            .unwrap();
        let store = RecordStore::open(dir.path(), config(1500, 3)).unwrap();
        let ids: Vec<String> =
            store.recent(&RecordFilter::default(), 10).iter().map(|s| s.record.request_id.clone()).collect();
        // The records written last, at most ring_size: r1 was written again after r4.
        assert_eq!(ids, ["r4", "r1", "r3"], "at most ring_size, the last written");
        let store = RecordStore::open(dir.path(), config(1500, 10)).unwrap();
        let restored = store.get("r1").expect("r1 restored");
        assert_eq!(restored.record.route, "/joined", "the last version of a record wins");
        assert_eq!(store.recent(&RecordFilter::default(), 10).len(), 5);
    }

    #[test]
    fn chain_peers_are_found_by_trace_and_span_in_either_direction() {
        use crate::route::RouteRole;
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path(), config(1 << 20, 10)).unwrap();
        let mut ingress = record("in", "/app", "ok", 1);
        ingress.route_role = Some(RouteRole::Ingress);
        let mut egress = record("eg", "/provider", "ok", 2);
        egress.route_role = Some(RouteRole::Egress);
        egress.span_id = "1111111111111111".into();
        egress.parent_span_id = Some(ingress.span_id.clone());
        // An egress call of another span in the same trace, and a record without a role.
        let mut other = egress.clone();
        other.request_id = "other".into();
        other.parent_span_id = Some("2222222222222222".into());
        store.append(record("plain", "/", "ok", 0)).unwrap();
        store.append(other).unwrap();
        assert!(store.find_chain_peer(&egress).is_none(), "the ingress record is not stored yet");
        store.append(egress.clone()).unwrap();
        assert_eq!(store.find_chain_peer(&ingress).unwrap().record.request_id, "eg");
        store.append(ingress.clone()).unwrap();
        assert_eq!(store.find_chain_peer(&egress).unwrap().record.request_id, "in");
        assert!(store.find_chain_peer(&record("plain", "/", "ok", 0)).is_none());
    }

    #[test]
    fn appends_lines_and_serves_newest_first_with_filters() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path(), config(1 << 20, 10)).unwrap();
        store.append(record("a", "/", "ok", 1)).unwrap();
        store.append(record("b", "/x", "http_error", 2)).unwrap();
        store.append(record("c", "/", "ok", 3)).unwrap();
        let text = std::fs::read_to_string(store.records_path()).unwrap();
        assert_eq!(text.lines().count(), 3);
        let back: Record = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(back, record("a", "/", "ok", 1));
        let ids =
            |f: &RecordFilter, n| store.recent(f, n).iter().map(|s| s.record.request_id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&RecordFilter::default(), 10), ["c", "b", "a"]);
        assert_eq!(ids(&RecordFilter::default(), 2), ["c", "b"]);
        assert_eq!(ids(&RecordFilter { route: Some("/".into()), ..Default::default() }, 10), ["c", "a"]);
        assert_eq!(ids(&RecordFilter { outcome: Some("http_error".into()), ..Default::default() }, 10), ["b"]);
        assert_eq!(ids(&RecordFilter { since_unix_ns: Some(2), ..Default::default() }, 10), ["c", "b"]);
        assert!(store.get("b").is_some());
        assert!(store.get("zz").is_none());
    }

    #[test]
    fn rotates_by_size_and_keeps_the_ring_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let one_line = serde_json::to_string(&record("r0", "/", "ok", 0)).unwrap().len() as u64 + 1;
        let store = RecordStore::open(dir.path(), config(one_line * 3, 4)).unwrap();
        for i in 0..10 {
            store.append(record(&format!("r{i}"), "/", "ok", i)).unwrap();
        }
        let lines = |name: &str| std::fs::read_to_string(dir.path().join(name)).map(|t| t.lines().count()).unwrap_or(0);
        // 10 records, 3 per file: records.jsonl has the newest, two rotated files are kept.
        assert_eq!(lines("records.jsonl"), 1);
        assert_eq!(lines("records.1.jsonl"), 3);
        assert_eq!(lines("records.2.jsonl"), 3);
        assert!(!dir.path().join("records.3.jsonl").exists());
        assert_eq!(store.recent(&RecordFilter::default(), 100).len(), 4);
    }

    #[test]
    fn live_feed_sees_new_records() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path(), config(1 << 20, 10)).unwrap();
        let mut feed = store.subscribe();
        store.append(record("a", "/", "ok", 1)).unwrap();
        let FeedItem::Record(stored) = feed.try_recv().unwrap() else { panic!("a record event") };
        assert_eq!(stored.record.request_id, "a");
    }

    fn turn(id: &str, conversation: &str) -> TurnRecord {
        serde_json::from_value(serde_json::json!({
            "record_version": 1, "turn_id": id, "conversation_id": conversation, "turn_index": 0,
            "trace_id": "0af7651916cd43dd8448eb211c80319c", "started_at": "2027-01-15T08:00:00Z",
            "t0_unix_ns": 1, "route": "/", "status": "complete", "totals": {"e2e_ms": 1.0, "model_ms": 1.0,
            "tool_ms": 0.0, "client_ms": 0.0, "steps": 1, "tool_calls": 0, "unanswered_tool_calls": 0},
            "steps": [], "tool_runs": [], "critical_path": []
        }))
        .unwrap()
    }

    #[test]
    fn turns_are_journaled_served_and_restored_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::open(dir.path(), config(1 << 20, 10)).unwrap();
        let mut feed = store.subscribe();
        for (id, conversation) in [("t1", "c1"), ("t2", "c2"), ("t3", "c1")] {
            store.append_turn(turn(id, conversation)).unwrap();
        }
        assert!(matches!(feed.try_recv().unwrap(), FeedItem::Turn(t) if t.turn.turn_id == "t1"));
        let lines = std::fs::read_to_string(dir.path().join(TURNS_FILE)).unwrap();
        assert_eq!(lines.lines().count(), 3);
        let ids = |turns: Vec<Arc<StoredTurn>>| turns.iter().map(|t| t.turn.turn_id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(store.recent_turns(None, 10)), ["t3", "t2", "t1"]);
        assert_eq!(ids(store.recent_turns(Some("c1"), 10)), ["t3", "t1"]);
        drop(store);
        let store = RecordStore::open(dir.path(), config(1 << 20, 10)).unwrap();
        assert_eq!(ids(store.recent_turns(None, 2)), ["t3", "t2"]);
        assert!(store.get_turn("t1").is_some());
        assert_eq!(store.written(), 0, "turns are not counted as records");
    }
}
