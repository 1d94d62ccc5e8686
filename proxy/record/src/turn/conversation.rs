//! The tracker's state of one conversation: the keys a later request can find it by, its open
//! turn, and its memory as the allocator sees it (the bound `max_state_bytes` is in bytes); and the
//! turn record of a turn that closes.

use std::collections::{HashMap, VecDeque};

use super::breakdown::{self, CallSpan, StepSpan};
use super::schema::{TurnRecord, TurnStatus, TURN_RECORD_VERSION};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum LinkKey {
    Call(String),
    Response(String),
    Prefix(u64),
    Trace(String),
    TurnHeader(String),
    ConversationHeader(String),
}

/// What one heap allocation of `n` bytes takes from the allocator: glibc's chunks carry an 8-byte
/// header, are 16-byte aligned and at least 32 bytes.
fn heap(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n + 8).next_multiple_of(16).max(32)
    }
}

fn heap_str(s: &str) -> usize {
    heap(s.len())
}

/// What one entry of a `HashMap<K, V>` takes in its table: the pair and a control byte, at the
/// table's load (7/8 at most; a table doubles, so it is 0.44–0.875 full): counted at half full.
fn table_entry<K, V>() -> usize {
    (std::mem::size_of::<(K, V)>() + 1) * 2
}

impl LinkKey {
    fn text(&self) -> Option<&str> {
        match self {
            LinkKey::Call(s)
            | LinkKey::Response(s)
            | LinkKey::Trace(s)
            | LinkKey::TurnHeader(s)
            | LinkKey::ConversationHeader(s) => Some(s),
            LinkKey::Prefix(_) => None,
        }
    }

    /// A key's memory outside its conversation's key list: its entry in the index (the key
    /// again, its own copy of the text, and the list of conversations it names) and the text of
    /// the copy in the conversation's list.
    pub(super) fn bytes(&self) -> usize {
        let text = self.text().map_or(0, heap_str);
        2 * text + table_entry::<LinkKey, Vec<u64>>() + heap(4 * std::mem::size_of::<u64>())
    }
}

/// Keys remembered per conversation (oldest forgotten first).
pub(super) const MAX_KEYS_PER_CONVERSATION: usize = 2048;
/// Conversations one key may name (a shared first message); more are not indexed.
pub(super) const MAX_SLOTS_PER_KEY: usize = 8;

#[derive(Debug)]
pub(super) struct OpenTurn {
    pub(super) turn_id: String,
    pub(super) trace_id: String,
    pub(super) parent_span_id: Option<String>,
    pub(super) agent_span_id: Option<String>,
    pub(super) started_at: String,
    pub(super) route: String,
    pub(super) t0: u64,
    pub(super) steps: Vec<StepSpan>,
    pub(super) steps_total: u32,
    pub(super) calls: Vec<CallSpan>,
    pub(super) last_failed: bool,
    /// The turn's anchor (prefix up to its user message): a step with another anchor belongs to
    /// another turn, whatever else links it.
    pub(super) anchor: Option<u64>,
    /// The turn's key, when every instance can compute it (fleet ids).
    pub(super) key: Option<(u64, u64)>,
    /// Opened by a step that continues a turn (tool results): its start was not seen here.
    pub(super) fragment: bool,
}

#[derive(Debug)]
pub(super) struct Conversation {
    pub(super) id: String,
    pub(super) turns_done: u32,
    pub(super) open: Option<OpenTurn>,
    pub(super) keys: VecDeque<LinkKey>,
    pub(super) last_seen: u64,
    pub(super) bytes: usize,
}

impl Conversation {
    /// Its memory, as the allocator sees it: its entries in the tracker's tables, its key list
    /// and keys, its open turn's steps and calls with their strings.
    pub(super) fn estimate(&self) -> usize {
        let keys: usize = self.keys.iter().map(LinkKey::bytes).sum::<usize>()
            + heap(self.keys.capacity() * std::mem::size_of::<LinkKey>());
        let turn = self.open.as_ref().map_or(0, |t| {
            let strings = [Some(&t.turn_id), Some(&t.trace_id), t.parent_span_id.as_ref(), t.agent_span_id.as_ref()]
                .into_iter()
                .flatten()
                .chain([&t.started_at, &t.route])
                .map(|s| heap_str(s))
                .sum::<usize>();
            let steps = heap(t.steps.capacity() * std::mem::size_of::<StepSpan>())
                + t.steps
                    .iter()
                    .map(|s| {
                        heap_str(&s.step.request_id)
                            + heap_str(&s.step.span_id)
                            + s.step.model.as_deref().map_or(0, heap_str)
                    })
                    .sum::<usize>();
            let calls = heap(t.calls.capacity() * std::mem::size_of::<CallSpan>())
                + t.calls
                    .iter()
                    .map(|c| c.call_id.as_deref().map_or(0, heap_str) + c.name.as_deref().map_or(0, heap_str))
                    .sum::<usize>();
            // Its entry in `open_by_age` (a B-tree: about twice the pair).
            strings + steps + calls + 2 * std::mem::size_of::<(u64, u64)>()
        });
        // Its entry in `conversations` and in `by_age` (a B-tree: about twice the pair).
        table_entry::<u64, Conversation>() + 2 * std::mem::size_of::<(u64, u64)>() + heap_str(&self.id) + keys + turn
    }
}

pub(super) fn unindex(index: &mut HashMap<LinkKey, Vec<u64>>, key: &LinkKey, slot: u64) {
    if let Some(slots) = index.get_mut(key) {
        slots.retain(|s| *s != slot);
        if slots.is_empty() {
            index.remove(key);
        }
    }
}

/// The turn record of a turn that has just closed; the conversation counts it.
pub(super) fn finish(conv: &mut Conversation, turn: OpenTurn, status: TurnStatus) -> TurnRecord {
    let b = breakdown::compute(turn.t0, &turn.steps, &turn.calls, turn.steps_total);
    let record = TurnRecord {
        record_version: TURN_RECORD_VERSION,
        turn_id: turn.turn_id,
        conversation_id: conv.id.clone(),
        turn_index: conv.turns_done,
        trace_id: turn.trace_id,
        agent_span_id: turn.agent_span_id,
        parent_span_id: turn.parent_span_id,
        started_at: turn.started_at,
        t0_unix_ns: turn.t0,
        route: turn.route,
        status,
        totals: b.totals,
        steps: b.steps,
        tool_runs: b.tool_runs,
        critical_path: b.critical_path,
        fragment: turn.fragment,
        steps_not_listed: (turn.steps_total as usize).saturating_sub(turn.steps.len()) as u32,
        browser: None,
        voice: None,
    };
    conv.turns_done += 1;
    record
}
