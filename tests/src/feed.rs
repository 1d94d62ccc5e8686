//! Following tokentap's live record feed (`GET /_tokentap/api/stream`).

use std::net::SocketAddr;
use std::time::Duration;

use crate::http1::{request_bytes, StreamedResponse};

/// A connection to the live feed; connect it before sending the requests whose records you want.
pub struct RecordFeed {
    stream: StreamedResponse,
    consumed: usize,
}

impl RecordFeed {
    pub fn connect(admin: SocketAddr) -> RecordFeed {
        let mut stream = StreamedResponse::open(admin, &request_bytes("GET", "/_tokentap/api/stream", &[], b""));
        stream.read_head();
        assert_eq!(stream.response.status, 200, "live feed refused");
        // The feed starts with a comment once subscribed: after it, no record can be missed.
        stream.read_body_until(2);
        RecordFeed { stream, consumed: 0 }
    }

    /// The next record on the feed (panics after 60 s of silence).
    pub fn next_record(&mut self) -> serde_json::Value {
        loop {
            let body = &self.stream.response.body[self.consumed..];
            if let Some(end) = body.windows(2).position(|w| w == b"\n\n") {
                let block = String::from_utf8_lossy(&body[..end]).into_owned();
                self.consumed += end + 2;
                let mut event = "";
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        event = if v == "record" { "record" } else { "other" };
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if event == "record" {
                    return serde_json::from_str(&data).expect("record JSON");
                }
                continue;
            }
            assert!(self.stream.read_some(), "live feed ended");
        }
    }

    /// The next record whose path is `path` (records of other requests are skipped).
    pub fn next_record_for(&mut self, path: &str) -> serde_json::Value {
        loop {
            let r = self.next_record();
            if r["path"] == path {
                return r;
            }
        }
    }

    /// The next closed agent turn on the feed (`event: turn`, a turn record); records and other
    /// events are skipped (panics after 60 s of silence).
    pub fn next_turn(&mut self) -> serde_json::Value {
        loop {
            let body = &self.stream.response.body[self.consumed..];
            if let Some(end) = body.windows(2).position(|w| w == b"\n\n") {
                let block = String::from_utf8_lossy(&body[..end]).into_owned();
                self.consumed += end + 2;
                let mut is_turn = false;
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        is_turn = v == "turn";
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if is_turn {
                    return serde_json::from_str(&data).expect("turn JSON");
                }
                continue;
            }
            assert!(self.stream.read_some(), "live feed ended");
        }
    }
}

/// Default time budget for a whole scenario.
pub const SCENARIO_TIMEOUT: Duration = Duration::from_secs(60);
