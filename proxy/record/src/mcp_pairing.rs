//! MCP requests paired with answers that came in another exchange of their session: under the
//! HTTP+SSE transport every `POST`ed request is answered `202` and its response arrives on the
//! session's `GET` stream; under Streamable HTTP a request's stream may end after events with ids
//! and the client resume it with a `GET` carrying `Last-Event-ID`, on which the rest arrives.
//!
//! The analysis records such a request as `Detached` in its own exchange, and hands over the
//! messages an exchange could not pair (`McpExchange::foreign`). The worker passes every MCP
//! record through [`McpPending::observe`] before it is observed or stored: detached requests wait
//! here, keyed by (session, id); a later exchange's foreign response completes one, and the whole
//! operation (its start, first progress, end, result) is added to that exchange's record, with
//! `request_record` naming the exchange of the request. Progress notifications on the other
//! exchange count for the waiting request by its progress token.
//!
//! The two records may reach the worker in either order (an exchange's record is complete when
//! its exchange ends, and the answer's stream may end first): an answer whose request is not
//! waiting waits itself, keyed the same way, for at most [`EARLY_ANSWER_TTL_NS`]; the detached
//! request that comes later is completed on its own record, with `answer_record` naming the
//! exchange of the answer.
//!
//! Bounded in bytes ([`MAX_PENDING_BYTES`], the oldest dropped first) and in time
//! ([`PENDING_TTL_NS`]); a session that ends (a `DELETE`, a 404, the end of an HTTP+SSE stream)
//! drops its waiting requests. Everything dropped is counted ([`PairingStats`]).

use std::collections::{HashMap, VecDeque};

use serde::Serialize;
use tokentap_analysis::mcp::{id_key, ForeignMessage, McpDirection, McpOperation, McpOperationStatus};

use crate::Record;

/// Bytes of waiting requests kept at most (ids, names, session ids, and a fixed cost each).
pub const MAX_PENDING_BYTES: usize = 4 << 20;
/// A request waiting longer than this for its answer is dropped.
pub const PENDING_TTL_NS: u64 = 10 * 60 * 1_000_000_000;
/// The fixed cost of one waiting request besides its strings (the map entries, the operation).
const ENTRY_BYTES: usize = 320;
/// Bytes of answers waiting for their requests kept at most.
pub const MAX_EARLY_ANSWER_BYTES: usize = 1 << 20;
/// An answer waits this long at most for the record of its request.
pub const EARLY_ANSWER_TTL_NS: u64 = 60 * 1_000_000_000;
/// The fixed cost of one waiting answer besides its strings.
const EARLY_ENTRY_BYTES: usize = 192;

/// What pairing did, counted since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PairingStats {
    /// Requests paired with an answer from another exchange.
    pub paired: u64,
    /// Requests now waiting.
    pub waiting: u64,
    /// Requests dropped unanswered: waited past the TTL.
    pub expired: u64,
    /// Requests dropped unanswered: the oldest, to stay within the byte bound.
    pub evicted: u64,
    /// Requests dropped unanswered: their session ended.
    pub session_ended: u64,
    /// Answers whose request's record came later, paired then (included in `paired`).
    pub answered_first: u64,
    /// Answers dropped: no request came for them in time, or over the byte bound.
    pub answers_dropped: u64,
}

/// (session, id key).
type Key = (String, String);

#[derive(Debug)]
struct Waiting {
    op: McpOperation,
    start_unix_ns: u64,
    first_progress_unix_ns: Option<u64>,
    request_record: String,
    cost: usize,
    seq: u64,
}

/// An answer whose request's record has not come yet.
#[derive(Debug)]
struct EarlyAnswer {
    end_unix_ns: u64,
    is_error: bool,
    error: Option<tokentap_analysis::mcp::JsonRpcError>,
    result_type: Option<String>,
    bytes: u64,
    answer_record: String,
    cost: usize,
    seq: u64,
}

/// The detached requests of all sessions, waiting for their answers.
#[derive(Debug, Default)]
pub struct McpPending {
    /// Answers waiting for their requests, and their arrival order (seq, key, end).
    early: HashMap<Key, EarlyAnswer>,
    early_order: VecDeque<(u64, Key, u64)>,
    early_bytes: usize,
    waiting: HashMap<Key, Waiting>,
    /// (session, progress token) → id key.
    tokens: HashMap<Key, String>,
    /// Insertion order, for eviction and expiry (entries already gone are skipped).
    order: VecDeque<(u64, Key, u64)>,
    bytes: usize,
    seq: u64,
    stats: PairingStats,
}

fn at(t0_unix_ns: u64, rel_ns: i64) -> u64 {
    t0_unix_ns.saturating_add_signed(rel_ns)
}

fn relative(unix_ns: u64, t0_unix_ns: u64) -> i64 {
    (unix_ns as i128 - t0_unix_ns as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

impl McpPending {
    pub fn stats(&self) -> PairingStats {
        PairingStats { waiting: self.waiting.len() as u64, ..self.stats }
    }

    pub fn bytes(&self) -> usize {
        self.bytes + self.early_bytes
    }

    fn remove(&mut self, key: &Key) -> Option<Waiting> {
        let w = self.waiting.remove(key)?;
        self.bytes -= w.cost;
        if let Some(token) = &w.op.progress_token {
            self.tokens.remove(&(key.0.clone(), token.clone()));
        }
        Some(w)
    }

    fn wait(&mut self, session: &str, op: &McpOperation, t0_unix_ns: u64, request_record: &str) {
        let key = (session.to_string(), id_key(&op.request_id));
        let cost = ENTRY_BYTES
            + 2 * session.len()
            + 2 * key.1.len()
            + op.method.len()
            + op.request_id.len()
            + op.name.as_ref().map_or(0, String::len)
            + op.resource_uri.as_ref().map_or(0, String::len)
            + op.traceparent.as_ref().map_or(0, String::len)
            + 2 * op.progress_token.as_ref().map_or(0, String::len)
            + request_record.len();
        // A request id used again in the session replaces the older request.
        self.remove(&key);
        while self.bytes + cost > MAX_PENDING_BYTES {
            let Some((seq, old, _)) = self.order.pop_front() else { break };
            if self.waiting.get(&old).is_some_and(|w| w.seq == seq) {
                self.remove(&old);
                self.stats.evicted += 1;
            }
        }
        self.compact();
        self.seq += 1;
        let start_unix_ns = at(t0_unix_ns, op.start_ns);
        if let Some(token) = &op.progress_token {
            self.tokens.insert((session.to_string(), token.clone()), key.1.clone());
        }
        self.order.push_back((self.seq, key.clone(), start_unix_ns));
        self.bytes += cost;
        self.waiting.insert(
            key,
            Waiting {
                op: op.clone(),
                start_unix_ns,
                first_progress_unix_ns: op.first_progress_ns.map(|p| at(t0_unix_ns, p)),
                request_record: request_record.to_string(),
                cost,
                seq: self.seq,
            },
        );
    }

    /// Takes one record: its detached requests wait, its foreign messages complete the waiting
    /// ones (added to its operations), and a session it ends drops what still waits. Returns how
    /// many operations it completed.
    pub fn observe(&mut self, record: &mut Record) -> usize {
        let t0 = record.timeline.t0_unix_ns;
        let request_id = record.request_id.clone();
        let Some(exchange) = record.mcp.as_mut() else { return 0 };
        let foreign = std::mem::take(&mut exchange.foreign);
        let Some(session) = exchange.session_id.clone() else { return 0 };
        let detached =
            |o: &&McpOperation| o.direction == McpDirection::ClientToServer && o.status == McpOperationStatus::Detached;
        let mut paired = 0;
        for op in exchange.operations.iter_mut().filter(|o| detached(&&**o)) {
            match self.early.remove(&(session.clone(), id_key(&op.request_id))) {
                Some(answer) => {
                    self.early_bytes -= answer.cost;
                    op.end_ns = Some(relative(answer.end_unix_ns, t0).max(0) as u64);
                    op.status = McpOperationStatus::Answered;
                    op.is_error = answer.is_error;
                    op.error = answer.error;
                    op.result_type = answer.result_type;
                    op.response_bytes = Some(answer.bytes);
                    op.answer_record = Some(answer.answer_record);
                    self.stats.answered_first += 1;
                    paired += 1;
                }
                None => self.wait(&session, op, t0, &request_id),
            }
        }
        for message in foreign {
            match message {
                ForeignMessage::Progress { token, t_ns } => {
                    let Some(id) = self.tokens.get(&(session.clone(), token)) else { continue };
                    if let Some(w) = self.waiting.get_mut(&(session.clone(), id.clone())) {
                        w.first_progress_unix_ns.get_or_insert(t0.saturating_add(t_ns));
                        w.op.progress_notifications += 1;
                    }
                }
                ForeignMessage::Response { request_id: id, t_ns, is_error, error, result_type, bytes } => {
                    let key = (session.clone(), id_key(&id));
                    let Some(w) = self.remove(&key) else {
                        let early = EarlyAnswer {
                            end_unix_ns: t0.saturating_add(t_ns),
                            is_error,
                            error,
                            result_type,
                            bytes,
                            answer_record: request_id.clone(),
                            cost: 0,
                            seq: 0,
                        };
                        self.answer_early(key, early);
                        // Not unmatched: it waits for its request, and is counted in the
                        // pairing's own counters (`answered_first`, or `answers_dropped`).
                        exchange.skipped.unmatched_responses = exchange.skipped.unmatched_responses.saturating_sub(1);
                        continue;
                    };
                    let mut op = w.op;
                    op.start_ns = relative(w.start_unix_ns, t0);
                    op.first_progress_ns = w.first_progress_unix_ns.map(|p| relative(p, t0));
                    op.end_ns = Some(t_ns);
                    op.status = McpOperationStatus::Answered;
                    op.is_error = is_error;
                    op.error = error;
                    op.result_type = result_type;
                    op.response_bytes = Some(bytes);
                    op.request_record = Some(w.request_record);
                    exchange.operations.push(op);
                    exchange.skipped.unmatched_responses = exchange.skipped.unmatched_responses.saturating_sub(1);
                    paired += 1;
                }
            }
        }
        self.stats.paired += paired as u64;
        if exchange.session_ended {
            let gone: Vec<Key> = self.waiting.keys().filter(|(s, _)| *s == session).cloned().collect();
            for key in gone {
                self.remove(&key);
                self.stats.session_ended += 1;
            }
        }
        paired
    }

    /// Keeps an answer whose request has not come yet (bounded in bytes, the oldest dropped).
    fn answer_early(&mut self, key: Key, mut answer: EarlyAnswer) {
        answer.cost = EARLY_ENTRY_BYTES
            + 2 * (key.0.len() + key.1.len())
            + answer.answer_record.len()
            + answer.result_type.as_ref().map_or(0, String::len)
            + answer.error.as_ref().map_or(0, |e| e.message.len());
        if let Some(old) = self.early.remove(&key) {
            self.early_bytes -= old.cost;
            self.stats.answers_dropped += 1;
        }
        while self.early_bytes + answer.cost > MAX_EARLY_ANSWER_BYTES {
            let Some((seq, old, _)) = self.early_order.pop_front() else { break };
            if self.early.get(&old).is_some_and(|a| a.seq == seq) {
                let gone = self.early.remove(&old).expect("present");
                self.early_bytes -= gone.cost;
                self.stats.answers_dropped += 1;
            }
        }
        self.seq += 1;
        answer.seq = self.seq;
        self.early_order.push_back((self.seq, key.clone(), answer.end_unix_ns));
        self.early_bytes += answer.cost;
        self.early.insert(key, answer);
        if self.early_order.len() > 4 * self.early.len() + 1024 {
            let early = &self.early;
            self.early_order.retain(|(seq, key, _)| early.get(key).is_some_and(|a| a.seq == *seq));
        }
    }

    /// Answers waiting for their requests, now.
    pub fn early_answers(&self) -> usize {
        self.early.len()
    }

    /// Drops the requests that started more than [`PENDING_TTL_NS`] before `now_unix_ns`.
    pub fn expire(&mut self, now_unix_ns: u64) {
        let early_cutoff = now_unix_ns.saturating_sub(EARLY_ANSWER_TTL_NS);
        while let Some((seq, key, end)) = self.early_order.front().cloned() {
            if end >= early_cutoff {
                break;
            }
            self.early_order.pop_front();
            if self.early.get(&key).is_some_and(|a| a.seq == seq) {
                let gone = self.early.remove(&key).expect("present");
                self.early_bytes -= gone.cost;
                self.stats.answers_dropped += 1;
            }
        }
        let cutoff = now_unix_ns.saturating_sub(PENDING_TTL_NS);
        while let Some((seq, key, start)) = self.order.front().cloned() {
            if start >= cutoff {
                break;
            }
            self.order.pop_front();
            if self.waiting.get(&key).is_some_and(|w| w.seq == seq) {
                self.remove(&key);
                self.stats.expired += 1;
            }
        }
        self.compact();
    }

    /// Entries paired or dropped stay in `order` until they reach its front: bound that too.
    fn compact(&mut self) {
        if self.order.len() > 4 * self.waiting.len() + 1024 {
            let waiting = &self.waiting;
            self.order.retain(|(seq, key, _)| waiting.get(key).is_some_and(|w| w.seq == *seq));
        }
    }
}

#[cfg(test)]
mod tests;
