//! Typed records: what tokentap writes (the live feed, the admin API, the journals), read into the
//! record crate's own types ([`Record`], [`TurnRecord`]).
//!
//! Every read checks the round trip: the typed value serialises back to exactly the JSON tokentap
//! wrote. A test that reads the type therefore sees all the JSON said, and a field tokentap writes
//! that the record crate does not know (or a type it writes differently) fails the read.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

pub use tokentap_analysis::mcp::{McpEra, McpExchange, McpOperation, McpOperationStatus, McpTransport};
pub use tokentap_record::turn::{
    CriticalSegment, JoinedBy, SegmentKind, ToolRun, TurnRecord, TurnStatus, TurnStep, TurnTotals, TURNS_FILE,
};
pub use tokentap_record::{Outcome, Record, TurnLink, TurnRef, RECORDS_FILE};

/// `json` read as `T`, checked to serialise back to exactly `json`; `what` names it in a failure.
pub fn typed<T: DeserializeOwned + Serialize>(json: &Value, what: &str) -> T {
    // The record crate writes conversation hashes (turn keys, tool call argument hashes) only in a
    // process whose hashes are fleet-keyed. This process hashes nothing: marking it fleet-keyed
    // makes it write back exactly the hashes a fleet-keyed tokentap wrote (and none when it wrote
    // none).
    static WRITE_HASHES_BACK: std::sync::Once = std::sync::Once::new();
    WRITE_HASHES_BACK.call_once(|| {
        tokentap_analysis::conversation::use_fleet_key(b"tokentap-e2e: hashes are only read back");
    });
    let value: T = serde_json::from_value(json.clone())
        .unwrap_or_else(|e| panic!("{what} does not read as the record crate's type: {e}\n{json}"));
    let back = serde_json::to_value(&value).unwrap_or_else(|e| panic!("{what} does not serialise again: {e}"));
    assert_eq!(&back, json, "{what} does not round-trip through the record crate's type");
    value
}

/// The records of a JSON lines journal (`records.jsonl`, `turns.jsonl`), in file order.
pub fn journal<T: DeserializeOwned + Serialize>(path: &std::path::Path) -> Vec<T> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let json: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display()));
            typed(&json, &path.display().to_string())
        })
        .collect()
}

impl crate::RecordFeed {
    /// The next request record on the feed, typed.
    pub fn record(&mut self) -> Record {
        typed(&self.next_record(), "a record on the live feed")
    }

    /// The next request record whose path is `path`, typed (records of other requests are skipped).
    pub fn record_for(&mut self, path: &str) -> Record {
        typed(&self.next_record_for(path), "a record on the live feed")
    }

    /// The next closed turn on the feed, typed.
    pub fn turn(&mut self) -> TurnRecord {
        typed(&self.next_turn(), "a turn on the live feed")
    }
}

impl crate::Tokentap {
    /// `GET /_tokentap/api/requests/{request_id}`, which must answer 200, typed.
    pub fn request_record(&self, request_id: &str) -> Record {
        let (status, json) = self.admin_get(&format!("/_tokentap/api/requests/{request_id}"));
        assert_eq!(status, 200, "request record {request_id}: {json}");
        typed(&json, &format!("request record {request_id}"))
    }

    /// `GET /_tokentap/api/turns/{turn_id}`, which must answer 200, typed.
    pub fn turn_record(&self, turn_id: &str) -> TurnRecord {
        let (status, json) = self.admin_get(&format!("/_tokentap/api/turns/{turn_id}"));
        assert_eq!(status, 200, "turn {turn_id}: {json}");
        typed(&json, &format!("turn {turn_id}"))
    }

    /// `GET /_tokentap/api/turns?{query}`, which must answer 200: its `turns`, typed, newest first.
    pub fn turn_records(&self, query: &str) -> Vec<TurnRecord> {
        let (status, list) = self.admin_get(&format!("/_tokentap/api/turns?{query}"));
        assert_eq!(status, 200, "{list}");
        let turns = list["turns"].as_array().unwrap_or_else(|| panic!("no turns list: {list}"));
        turns.iter().map(|t| typed(t, "a turn of /_tokentap/api/turns")).collect()
    }

    /// The turn journal (`turns.jsonl` in the data directory), typed.
    pub fn journal_turns(&self) -> Vec<TurnRecord> {
        journal(&self.data_dir.path().join(TURNS_FILE))
    }

    /// The request journal (`records.jsonl` in the data directory), typed.
    pub fn journal_records(&self) -> Vec<Record> {
        journal(&self.records_file())
    }
}
