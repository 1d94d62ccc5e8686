//! MCP sessions (the handshake era's `Mcp-Session-Id`) followed across the records of their
//! exchanges, for `mcp.client.session.duration`: a session runs from the start of the exchange
//! that set its id (the answer to `initialize`; else the first exchange seen with it) to the end
//! of its last exchange. It ends with a `DELETE` answered 2xx, a 404 for it (the server forgot it),
//! or silence: sessions often end without a `DELETE`. Bounded: at most [`MAX_SESSIONS`] open; the
//! one idle longest is closed to make room.

use std::collections::HashMap;

use serde::Serialize;

use crate::Record;

/// Open sessions followed at most.
pub const MAX_SESSIONS: usize = 10_000;
/// A session without an exchange for this long is closed, its end its last exchange's end.
pub const SESSION_IDLE_NS: u64 = 10 * 60 * 1_000_000_000;

/// Why a session was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionEnd {
    /// The client's `DELETE` was answered 2xx.
    Deleted,
    /// The server answered 404 for it.
    NotFound,
    /// Its HTTP+SSE stream ended (under that transport a session lives as long as its `GET`).
    StreamEnded,
    /// No exchange for [`SESSION_IDLE_NS`].
    Idle,
    /// Closed to stay within [`MAX_SESSIONS`].
    Evicted,
    /// tokentap stopped.
    Shutdown,
}

impl SessionEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionEnd::Deleted => "deleted",
            SessionEnd::NotFound => "not_found",
            SessionEnd::StreamEnded => "stream_ended",
            SessionEnd::Idle => "idle",
            SessionEnd::Evicted => "evicted",
            SessionEnd::Shutdown => "shutdown",
        }
    }
}

/// A closed session.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedSession {
    pub session_id: String,
    pub route: String,
    pub protocol_version: Option<String>,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub exchanges: u64,
    pub ended_by: SessionEnd,
}

impl ClosedSession {
    pub fn duration_ns(&self) -> u64 {
        self.end_unix_ns.saturating_sub(self.start_unix_ns)
    }
}

#[derive(Debug)]
struct Open {
    route: String,
    protocol_version: Option<String>,
    start_unix_ns: u64,
    last_unix_ns: u64,
    exchanges: u64,
}

/// The open sessions, by id.
#[derive(Debug, Default)]
pub struct McpSessions {
    open: HashMap<String, Open>,
}

fn record_end_unix_ns(r: &Record) -> u64 {
    let rel = [r.timeline.t_end_ns, r.timeline.chunks.last().map(|c| c.t_up_ns), r.timeline.t_upstream_headers_ns]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0);
    r.timeline.t0_unix_ns.saturating_add(rel)
}

impl McpSessions {
    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    fn close(&mut self, id: &str, ended_by: SessionEnd) -> Option<ClosedSession> {
        let open = self.open.remove(id)?;
        Some(ClosedSession {
            session_id: id.to_string(),
            route: open.route,
            protocol_version: open.protocol_version,
            start_unix_ns: open.start_unix_ns,
            end_unix_ns: open.last_unix_ns,
            exchanges: open.exchanges,
            ended_by,
        })
    }

    /// Takes one record; returns the sessions it closed (its own, or one evicted for room).
    pub fn observe(&mut self, record: &Record) -> Vec<ClosedSession> {
        let Some(exchange) = &record.mcp else { return Vec::new() };
        let Some(id) = exchange.session_id.as_deref() else { return Vec::new() };
        let mut closed = Vec::new();
        let end = record_end_unix_ns(record);
        if !self.open.contains_key(id) {
            if exchange.session_ended {
                // Ending a session never seen open (e.g. tokentap started after it): nothing to time.
                return closed;
            }
            if self.open.len() >= MAX_SESSIONS {
                let oldest = self.open.iter().min_by_key(|(_, o)| o.last_unix_ns).map(|(k, _)| k.clone());
                closed.extend(oldest.and_then(|k| self.close(&k, SessionEnd::Evicted)));
            }
            self.open.insert(
                id.to_string(),
                Open {
                    route: record.route.clone(),
                    protocol_version: None,
                    start_unix_ns: record.timeline.t0_unix_ns,
                    last_unix_ns: end,
                    exchanges: 0,
                },
            );
        }
        let open = self.open.get_mut(id).expect("inserted above");
        open.exchanges += 1;
        open.last_unix_ns = open.last_unix_ns.max(end);
        // An HTTP+SSE session's stream began before its POSTs, and its record comes last.
        open.start_unix_ns = open.start_unix_ns.min(record.timeline.t0_unix_ns);
        if open.protocol_version.is_none() {
            open.protocol_version = exchange.protocol_version.clone();
        }
        if exchange.session_ended {
            let by = if record.status == Some(404) {
                SessionEnd::NotFound
            } else if exchange.get_stream && exchange.transport == tokentap_analysis::mcp::McpTransport::HttpSse {
                SessionEnd::StreamEnded
            } else {
                SessionEnd::Deleted
            };
            closed.extend(self.close(id, by));
        }
        closed
    }

    /// Closes the sessions idle since before `now_unix_ns − SESSION_IDLE_NS`.
    pub fn close_idle(&mut self, now_unix_ns: u64) -> Vec<ClosedSession> {
        let cutoff = now_unix_ns.saturating_sub(SESSION_IDLE_NS);
        let idle: Vec<String> =
            self.open.iter().filter(|(_, o)| o.last_unix_ns < cutoff).map(|(k, _)| k.clone()).collect();
        idle.iter().filter_map(|k| self.close(k, SessionEnd::Idle)).collect()
    }

    /// Closes every open session (tokentap stops).
    pub fn close_all(&mut self) -> Vec<ClosedSession> {
        let ids: Vec<String> = self.open.keys().cloned().collect();
        ids.iter().filter_map(|k| self.close(k, SessionEnd::Shutdown)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(t0_ms: u64, session: &str, status: u16, ended: bool) -> Record {
        let mut r = crate::fixtures::stream_record(1);
        r.timeline.t0_unix_ns = t0_ms * 1_000_000;
        r.timeline.t_end_ns = Some(1_000_000);
        r.timeline.chunks.clear();
        r.timeline.t_upstream_headers_ns = None;
        r.status = Some(status);
        r.mcp = Some(
            serde_json::from_value(serde_json::json!({
                "session_id": session, "session_ended": ended, "protocol_version": "2025-11-25", "operations": []
            }))
            .unwrap(),
        );
        r
    }

    #[test]
    fn a_session_runs_from_its_first_exchange_to_its_delete() {
        let mut s = McpSessions::default();
        assert!(s.observe(&exchange(1_000, "a", 200, false)).is_empty());
        assert!(s.observe(&exchange(1_500, "a", 202, false)).is_empty());
        let closed = s.observe(&exchange(3_000, "a", 200, true));
        assert_eq!(closed.len(), 1);
        assert_eq!((closed[0].duration_ns(), closed[0].exchanges), (2_001_000_000, 3));
        assert_eq!(closed[0].ended_by, SessionEnd::Deleted);
        assert!(s.is_empty());
        // A DELETE for a session never seen opens nothing.
        assert!(s.observe(&exchange(4_000, "b", 200, true)).is_empty() && s.is_empty());
    }

    #[test]
    fn silent_sessions_close_when_idle_and_404_ends_one() {
        let mut s = McpSessions::default();
        s.observe(&exchange(0, "a", 200, false));
        s.observe(&exchange(0, "b", 200, false));
        assert!(s.close_idle(SESSION_IDLE_NS).is_empty());
        s.observe(&exchange(SESSION_IDLE_NS / 1_000_000, "b", 200, false));
        let idle = s.close_idle(SESSION_IDLE_NS + 2_000_000);
        assert_eq!(idle.iter().map(|c| c.session_id.as_str()).collect::<Vec<_>>(), ["a"]);
        assert_eq!(idle[0].ended_by, SessionEnd::Idle);
        let gone = s.observe(&exchange(SESSION_IDLE_NS / 1_000_000 + 5, "b", 404, true));
        assert_eq!(gone[0].ended_by, SessionEnd::NotFound);
    }
}
